package server

import (
	"math"
	"unicode/utf8"
)

// POST /v1/check's usual body, one check of plain strings and a cost in
// digits ({"policy":"api","key":"user-1","cost":1}, "plan" too, any JSON
// whitespace), is read here directly; anything else (the multi form, a
// name in another case or escaped, an escape or a control character in a
// string, null, a number written otherwise, a field given twice or
// unknown, bytes that are not UTF-8, anything after the object) is left to
// decodeStrict, which reads it or answers why not. The requests accepted
// and their meaning are decodeStrict's: TestReadCheckDifferential and
// FuzzReadCheck hold the two equal.

// checkShareMax is the largest body whose strings are all slices of one
// copy of it; a larger one's are copied each, so that a key kept after
// the request (the refusals' table) never holds on to more than this
// many bytes of a body.
const checkShareMax = 1024

// readCheck decodes data into req when it has the usual shape; false (req
// partly written) when it leaves data to decodeStrict.
func readCheck(data []byte, req *checkRequest) bool {
	p := checkReader{b: data}
	if len(data) <= checkShareMax {
		p.text = string(data)
	}
	var seen [4]bool
	if !p.next('{') {
		return false
	}
	if !p.next('}') {
		for {
			if !p.member(req, &seen) {
				return false
			}
			if p.next('}') {
				break
			}
			if !p.next(',') {
				return false
			}
		}
	}
	p.space()
	return p.i == len(p.b)
}

// member reads one member of the object into req; seen tells the fields
// read already (policy, key, cost, plan), each of which may come once.
func (p *checkReader) member(req *checkRequest, seen *[4]bool) bool {
	name, ok := p.name()
	if !ok || !p.next(':') {
		return false
	}
	switch {
	case name == "policy" && first(&seen[0]):
		req.Policy, ok = p.str()
	case name == "key" && first(&seen[1]):
		req.Key, ok = p.str()
	case name == "cost" && first(&seen[2]):
		var n int64
		n, ok = p.int()
		req.Cost = &n
	case name == "plan" && first(&seen[3]):
		req.Plan, ok = p.str()
	default:
		return false
	}
	return ok
}

// first reports whether *seen was false, and makes it true.
func first(seen *bool) bool {
	was := *seen
	*seen = true
	return !was
}

// checkReader reads the JSON of the usual shape; every method returns
// false on anything else.
type checkReader struct {
	b []byte
	i int
	// text is b as a string, whose slices str returns; "" when str copies.
	text string
}

func (p *checkReader) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips whitespace and consumes c if it comes next.
func (p *checkReader) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// span reads a string without escapes or control characters, valid
// UTF-8, and returns the offsets of its bytes.
func (p *checkReader) span() (start, end int, ok bool) {
	if !p.next('"') {
		return 0, 0, false
	}
	start = p.i
	ascii := true
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			end = p.i
			p.i++
			return start, end, ascii || utf8.Valid(p.b[start:end])
		case c == '\\' || c < 0x20:
			return 0, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return 0, 0, false
}

// name reads a member's name; only the names of the usual shape are worth
// telling apart, the rest are "".
func (p *checkReader) name() (string, bool) {
	start, end, ok := p.span()
	if !ok {
		return "", false
	}
	switch string(p.b[start:end]) {
	case "policy":
		return "policy", true
	case "key":
		return "key", true
	case "cost":
		return "cost", true
	case "plan":
		return "plan", true
	}
	return "", true
}

func (p *checkReader) str() (string, bool) {
	start, end, ok := p.span()
	if !ok {
		return "", false
	}
	if p.text != "" {
		return p.text[start:end], true
	}
	return string(p.b[start:end]), true
}

// int reads a whole number of digits, without a sign, a leading zero (but
// 0 itself), a fraction or an exponent, within int64's range.
func (p *checkReader) int() (int64, bool) {
	p.space()
	start := p.i
	var n int64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		d := int64(p.b[p.i] - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
		p.i++
	}
	digits := p.i - start
	if digits == 0 || digits > 1 && p.b[start] == '0' {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return n, true
}
