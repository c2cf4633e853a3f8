package server

import (
	"math"

	"github.com/sluicehq/sluice/cmd/sluice/internal/jsonscan"
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
	p := checkReader{jsonscan.Reader{B: data}}
	if len(data) <= checkShareMax {
		p.Text = string(data)
	}
	var seen [4]bool
	if !p.Next('{') {
		return false
	}
	if !p.Next('}') {
		for {
			if !p.member(req, &seen) {
				return false
			}
			if p.Next('}') {
				break
			}
			if !p.Next(',') {
				return false
			}
		}
	}
	p.Space()
	return p.I == len(p.B)
}

// member reads one member of the object into req; seen tells the fields
// read already (policy, key, cost, plan), each of which may come once.
func (p *checkReader) member(req *checkRequest, seen *[4]bool) bool {
	name, ok := p.name()
	if !ok || !p.Next(':') {
		return false
	}
	switch {
	case name == "policy" && first(&seen[0]):
		req.Policy, ok = p.Str()
	case name == "key" && first(&seen[1]):
		req.Key, ok = p.Str()
	case name == "cost" && first(&seen[2]):
		var u uint64
		u, ok = p.Digits(math.MaxInt64)
		n := int64(u)
		req.Cost = &n
	case name == "plan" && first(&seen[3]):
		req.Plan, ok = p.Str()
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
type checkReader struct{ jsonscan.Reader }

// name reads a member's name; only the names of the usual shape are worth
// telling apart, the rest are "".
func (p *checkReader) name() (string, bool) {
	start, end, ok := p.Span()
	if !ok {
		return "", false
	}
	switch string(p.B[start:end]) {
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
