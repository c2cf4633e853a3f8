// Package sfvtest is a strict parser of RFC 9651 (Structured Field Values
// for HTTP), written from the parsing algorithms of its section 4.2 and
// sharing no code with the writers it checks, and a checker of every
// rate-limit header Sluice sends (see CheckHeaders). It is for tests of
// package httplimit and of sluice serve.
package sfvtest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Token is a parsed Token bare item.
type Token string

// Bytes is a parsed Byte Sequence, still in base64.
type Bytes string

// An Item is a bare item with its parameters; an inner list is an Item
// whose Value is []Item.
type Item struct {
	Value  any // int64, float64, string, Token, Bytes, bool, or []Item (inner list)
	Params []Param
}

// A Param is one parameter of an Item.
type Param struct {
	Key   string
	Value any
}

// Param returns the value of the parameter key.
func (it Item) Param(key string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

type parser struct {
	s string
	i int
}

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("structured field")

func (p *parser) fail(format string, args ...any) error {
	return fmt.Errorf("%w: at %d of %q: %s", ErrSyntax, p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *parser) eof() bool  { return p.i >= len(p.s) }
func (p *parser) peek() byte { return p.s[p.i] }

func (p *parser) skipSP() {
	for !p.eof() && p.peek() == ' ' {
		p.i++
	}
}

func (p *parser) skipOWS() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

// ParseList parses a whole List field value (RFC 9651, section 4.2.1).
func ParseList(s string) ([]Item, error) {
	p := &parser{s: s}
	p.skipSP()
	var items []Item
	for !p.eof() {
		it, err := p.itemOrInnerList()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.skipOWS()
		if p.eof() {
			return items, nil
		}
		if p.peek() != ',' {
			return nil, p.fail("want ','")
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, p.fail("trailing comma")
		}
	}
	return items, nil
}

func (p *parser) itemOrInnerList() (Item, error) {
	if !p.eof() && p.peek() == '(' {
		p.i++
		var inner []Item
		for {
			p.skipSP()
			if p.eof() {
				return Item{}, p.fail("unterminated inner list")
			}
			if p.peek() == ')' {
				p.i++
				params, err := p.params()
				return Item{Value: inner, Params: params}, err
			}
			it, err := p.item()
			if err != nil {
				return Item{}, err
			}
			inner = append(inner, it)
			if p.eof() || (p.peek() != ' ' && p.peek() != ')') {
				return Item{}, p.fail("want ' ' or ')' in inner list")
			}
		}
	}
	return p.item()
}

func (p *parser) item() (Item, error) {
	v, err := p.bareItem()
	if err != nil {
		return Item{}, err
	}
	params, err := p.params()
	return Item{Value: v, Params: params}, err
}

func (p *parser) params() ([]Param, error) {
	var ps []Param
	for !p.eof() && p.peek() == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if !p.eof() && p.peek() == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for j := range ps {
			if ps[j].Key == k {
				ps[j].Value, replaced = v, true
			}
		}
		if !replaced {
			ps = append(ps, Param{k, v})
		}
	}
	return ps, nil
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *parser) key() (string, error) {
	if p.eof() || !(isLCAlpha(p.peek()) || p.peek() == '*') {
		return "", p.fail("bad key start")
	}
	start := p.i
	for !p.eof() {
		c := p.peek()
		if !(isLCAlpha(c) || isDigit(c) || strings.IndexByte("_-.*", c) >= 0) {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *parser) bareItem() (any, error) {
	if p.eof() {
		return nil, p.fail("missing bare item")
	}
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		start := p.i
		p.i++
		for !p.eof() && (isTChar(p.peek()) || p.peek() == ':' || p.peek() == '/') {
			p.i++
		}
		return Token(p.s[start:p.i]), nil
	case c == ':':
		p.i++
		end := strings.IndexByte(p.s[p.i:], ':')
		if end < 0 {
			return nil, p.fail("unterminated byte sequence")
		}
		b := p.s[p.i : p.i+end]
		for j := 0; j < len(b); j++ {
			if !(isAlpha(b[j]) || isDigit(b[j]) || strings.IndexByte("+/=", b[j]) >= 0) {
				return nil, p.fail("bad base64")
			}
		}
		p.i += end + 1
		return Bytes(b), nil
	case c == '?':
		p.i++
		if p.eof() || (p.peek() != '0' && p.peek() != '1') {
			return nil, p.fail("bad boolean")
		}
		p.i++
		return p.s[p.i-1] == '1', nil
	case c == '@':
		p.i++
		v, err := p.number()
		if _, ok := v.(int64); err == nil && !ok {
			return nil, p.fail("date must be an integer")
		}
		return v, err
	}
	return nil, p.fail("unknown bare item")
}

func (p *parser) number() (any, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	if p.eof() || !isDigit(p.peek()) {
		return nil, p.fail("want digit")
	}
	digits, dot := 0, -1
	for !p.eof() {
		c := p.peek()
		if isDigit(c) {
			digits++
		} else if c == '.' && dot < 0 {
			if digits > 12 {
				return nil, p.fail("decimal integer part too long")
			}
			dot = digits
		} else {
			break
		}
		p.i++
		if dot < 0 && digits > 15 || dot >= 0 && digits > 15 {
			return nil, p.fail("number too long")
		}
	}
	num := p.s[start:p.i]
	if dot < 0 {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return nil, p.fail("%v", err)
		}
		return n, nil
	}
	if strings.HasSuffix(num, ".") || digits-dot > 3 {
		return nil, p.fail("bad decimal fraction")
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return nil, p.fail("%v", err)
	}
	return f, nil
}

func (p *parser) str() (string, error) {
	p.i++ // opening quote
	var b strings.Builder
	for !p.eof() {
		c := p.peek()
		p.i++
		switch {
		case c == '\\':
			if p.eof() || (p.peek() != '"' && p.peek() != '\\') {
				return "", p.fail("bad escape")
			}
			b.WriteByte(p.peek())
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", p.fail("bad string character %q", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", p.fail("unterminated string")
}
