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

// at reports whether the next byte is c.
func (p *parser) at(c byte) bool { return !p.eof() && p.peek() == c }

// atAny reports whether the next byte is one of set.
func (p *parser) atAny(set string) bool { return !p.eof() && strings.IndexByte(set, p.peek()) >= 0 }

// is reports whether the next byte is one for which ok holds.
func (p *parser) is(ok func(byte) bool) bool { return !p.eof() && ok(p.peek()) }

func (p *parser) skipSP() {
	for p.at(' ') {
		p.i++
	}
}

func (p *parser) skipOWS() {
	for p.atAny(" \t") {
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
		if err := p.listSeparator(); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// listSeparator consumes what follows a List member: optional white space
// and, unless the input ends there, a comma and more white space, after
// which a member must follow.
func (p *parser) listSeparator() error {
	p.skipOWS()
	if p.eof() {
		return nil
	}
	if p.peek() != ',' {
		return p.fail("want ','")
	}
	p.i++
	p.skipOWS()
	if p.eof() {
		return p.fail("trailing comma")
	}
	return nil
}

func (p *parser) itemOrInnerList() (Item, error) {
	if p.at('(') {
		return p.innerList()
	}
	return p.item()
}

// innerList parses an Inner List from its '(' (section 4.2.1.2).
func (p *parser) innerList() (Item, error) {
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
		if !p.atAny(" )") {
			return Item{}, p.fail("want ' ' or ')' in inner list")
		}
	}
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
	for p.at(';') {
		p.i++
		k, v, err := p.param()
		if err != nil {
			return nil, err
		}
		ps = setParam(ps, k, v)
	}
	return ps, nil
}

// param parses one parameter after its ';': its key, and its value.
func (p *parser) param() (string, any, error) {
	p.skipSP()
	k, err := p.key()
	if err != nil {
		return "", nil, err
	}
	v, err := p.paramValue()
	return k, v, err
}

// paramValue parses the "=" and bare item of a parameter, or returns true
// for a parameter without a value.
func (p *parser) paramValue() (any, error) {
	if !p.at('=') {
		return true, nil
	}
	p.i++
	return p.bareItem()
}

// setParam sets parameter k to v in ps: a key given twice keeps its first
// place and takes its last value.
func setParam(ps []Param, k string, v any) []Param {
	for j := range ps {
		if ps[j].Key == k {
			ps[j].Value = v
			return ps
		}
	}
	return append(ps, Param{k, v})
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// isKeyStart reports whether c may begin a parameter key.
func isKeyStart(c byte) bool { return isLCAlpha(c) || c == '*' }

// isKeyChar reports whether c may follow the first character of a key.
func isKeyChar(c byte) bool { return isLCAlpha(c) || isDigit(c) || strings.IndexByte("_-.*", c) >= 0 }

// isNumberStart reports whether c begins an Integer or a Decimal.
func isNumberStart(c byte) bool { return c == '-' || isDigit(c) }

// isTokenStart reports whether c begins a Token.
func isTokenStart(c byte) bool { return c == '*' || isAlpha(c) }

// isTokenChar reports whether c may follow the first character of a Token.
func isTokenChar(c byte) bool { return isTChar(c) || c == ':' || c == '/' }

// isBase64Char reports whether c may appear in a Byte Sequence.
func isBase64Char(c byte) bool { return isAlpha(c) || isDigit(c) || strings.IndexByte("+/=", c) >= 0 }

// allBytes reports whether ok holds for every byte of s.
func allBytes(s string, ok func(byte) bool) bool {
	for j := 0; j < len(s); j++ {
		if !ok(s[j]) {
			return false
		}
	}
	return true
}

func (p *parser) key() (string, error) {
	if !p.is(isKeyStart) {
		return "", p.fail("bad key start")
	}
	start := p.i
	for p.is(isKeyChar) {
		p.i++
	}
	return p.s[start:p.i], nil
}

// bareItemBySigil holds the parsers of the bare items that begin with a
// character of their own (section 4.2.3.1).
var bareItemBySigil = map[byte]func(*parser) (any, error){
	'"': (*parser).stringItem,
	':': (*parser).byteSequence,
	'?': (*parser).boolean,
	'@': (*parser).date,
}

func (p *parser) bareItem() (any, error) {
	if p.eof() {
		return nil, p.fail("missing bare item")
	}
	c := p.peek()
	switch {
	case isNumberStart(c):
		return p.number()
	case isTokenStart(c):
		return p.token()
	}
	if parse, ok := bareItemBySigil[c]; ok {
		return parse(p)
	}
	return nil, p.fail("unknown bare item")
}

// stringItem parses a String as a bare item.
func (p *parser) stringItem() (any, error) { return p.str() }

// token parses a Token (section 4.2.6).
func (p *parser) token() (any, error) {
	start := p.i
	p.i++
	for p.is(isTokenChar) {
		p.i++
	}
	return Token(p.s[start:p.i]), nil
}

// byteSequence parses a Byte Sequence from its opening ':' (section 4.2.7).
func (p *parser) byteSequence() (any, error) {
	p.i++
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, p.fail("unterminated byte sequence")
	}
	b := p.s[p.i : p.i+end]
	if !allBytes(b, isBase64Char) {
		return nil, p.fail("bad base64")
	}
	p.i += end + 1
	return Bytes(b), nil
}

// boolean parses a Boolean from its '?' (section 4.2.8).
func (p *parser) boolean() (any, error) {
	p.i++
	if !p.atAny("01") {
		return nil, p.fail("bad boolean")
	}
	p.i++
	return p.s[p.i-1] == '1', nil
}

// date parses a Date from its '@': an Integer number of seconds.
func (p *parser) date() (any, error) {
	p.i++
	v, err := p.number()
	if _, ok := v.(int64); err == nil && !ok {
		return nil, p.fail("date must be an integer")
	}
	return v, err
}

func (p *parser) number() (any, error) {
	start := p.i
	if p.at('-') {
		p.i++
	}
	if !p.is(isDigit) {
		return nil, p.fail("want digit")
	}
	digits, dot, err := p.numberDigits()
	if err != nil {
		return nil, err
	}
	num := p.s[start:p.i]
	if dot < 0 {
		return p.integer(num)
	}
	return p.decimal(num, digits-dot)
}

// numberDigits consumes the digits of a number and at most one '.',
// returning the count of digits and how many came before the '.' (-1
// without one); it refuses an integer part over 12 digits before a '.'
// and more than 15 digits in all.
func (p *parser) numberDigits() (digits, dot int, err error) {
	dot = -1
	for !p.eof() {
		c := p.peek()
		switch {
		case isDigit(c):
			digits++
		case c == '.' && dot < 0:
			if digits > 12 {
				return 0, 0, p.fail("decimal integer part too long")
			}
			dot = digits
		default:
			return digits, dot, nil
		}
		p.i++
		if digits > 15 {
			return 0, 0, p.fail("number too long")
		}
	}
	return digits, dot, nil
}

// integer converts the text of an Integer.
func (p *parser) integer(num string) (any, error) {
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return nil, p.fail("%v", err)
	}
	return n, nil
}

// decimal converts the text of a Decimal, which has fracDigits digits
// after its '.': at least one and at most three.
func (p *parser) decimal(num string, fracDigits int) (any, error) {
	if strings.HasSuffix(num, ".") || fracDigits > 3 {
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
		if c == '"' {
			return b.String(), nil
		}
		c, err := p.stringChar(c)
		if err != nil {
			return "", err
		}
		b.WriteByte(c)
	}
	return "", p.fail("unterminated string")
}

// stringChar returns the character a String holds for c, the byte just
// read inside it (not its closing quote), reading on through an escape.
func (p *parser) stringChar(c byte) (byte, error) {
	if c == '\\' {
		if !p.atAny(`"\`) {
			return 0, p.fail("bad escape")
		}
		p.i++
		return p.s[p.i-1], nil
	}
	if c < 0x20 || c > 0x7e {
		return 0, p.fail("bad string character %q", c)
	}
	return c, nil
}
