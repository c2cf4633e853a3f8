// Package jsonscan reads the usual shapes of small JSON request bodies
// directly, for the service's hot paths (POST /v1/check, Envoy's POST
// /json): whitespace, one expected byte, strings without escapes, whole
// numbers. Whatever it does not read, its callers give to encoding/json.
package jsonscan

import "unicode/utf8"

// A Reader reads B from I on.
type Reader struct {
	B []byte
	I int
	// Text is B as a string, whose slices Str returns; "" when Str copies.
	Text string
}

// Space skips whitespace.
func (p *Reader) Space() {
	for p.I < len(p.B) {
		switch p.B[p.I] {
		case ' ', '\t', '\n', '\r':
			p.I++
		default:
			return
		}
	}
}

// Next skips whitespace and consumes c if it comes next.
func (p *Reader) Next(c byte) bool {
	p.Space()
	if p.I < len(p.B) && p.B[p.I] == c {
		p.I++
		return true
	}
	return false
}

// Span reads a string without escapes or control characters, valid
// UTF-8, and returns the offsets of its bytes.
func (p *Reader) Span() (start, end int, ok bool) {
	if !p.Next('"') {
		return 0, 0, false
	}
	start = p.I
	ascii := true
	for ; p.I < len(p.B); p.I++ {
		switch c := p.B[p.I]; {
		case c == '"':
			end = p.I
			p.I++
			return start, end, ascii || utf8.Valid(p.B[start:end])
		case c == '\\' || c < 0x20:
			return 0, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return 0, 0, false
}

// Str reads a string as Span does: a slice of Text, or a copy.
func (p *Reader) Str() (string, bool) {
	start, end, ok := p.Span()
	if !ok {
		return "", false
	}
	if p.Text != "" {
		return p.Text[start:end], true
	}
	return string(p.B[start:end]), true
}

// Digits reads a whole number in digits, without a sign, a leading zero
// (but 0 itself), a fraction or an exponent, of at most max.
func (p *Reader) Digits(max uint64) (uint64, bool) {
	p.Space()
	start := p.I
	var n uint64
	for p.I < len(p.B) && p.B[p.I] >= '0' && p.B[p.I] <= '9' {
		d := uint64(p.B[p.I] - '0')
		if n > (max-d)/10 {
			return 0, false
		}
		n = n*10 + d
		p.I++
	}
	digits := p.I - start
	if digits == 0 || digits > 1 && p.B[start] == '0' {
		return 0, false
	}
	// What follows must end the number: not a fraction or an exponent.
	if p.I < len(p.B) {
		switch p.B[p.I] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return n, true
}
