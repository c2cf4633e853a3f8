package httplimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// A strict parser of RFC 9651 (Structured Field Values) Lists, following
// the parsing algorithms of its section 4.2, to check that the fields the
// Middleware writes are well formed.

type sfToken string

type sfBytes string

type sfItem struct {
	Value  any // int64, float64, string, sfToken, sfBytes, bool, or []sfItem (inner list)
	Params []sfParam
}

type sfParam struct {
	Key   string
	Value any
}

func (it sfItem) param(key string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

type sfParser struct {
	s string
	i int
}

var errSF = errors.New("structured field")

func (p *sfParser) fail(format string, args ...any) error {
	return fmt.Errorf("%w: at %d of %q: %s", errSF, p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *sfParser) eof() bool  { return p.i >= len(p.s) }
func (p *sfParser) peek() byte { return p.s[p.i] }

func (p *sfParser) skipSP() {
	for !p.eof() && p.peek() == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

// parseSFList parses a whole List field value.
func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: s}
	p.skipSP()
	var items []sfItem
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

func (p *sfParser) itemOrInnerList() (sfItem, error) {
	if !p.eof() && p.peek() == '(' {
		p.i++
		var inner []sfItem
		for {
			p.skipSP()
			if p.eof() {
				return sfItem{}, p.fail("unterminated inner list")
			}
			if p.peek() == ')' {
				p.i++
				params, err := p.params()
				return sfItem{Value: inner, Params: params}, err
			}
			it, err := p.item()
			if err != nil {
				return sfItem{}, err
			}
			inner = append(inner, it)
			if p.eof() || (p.peek() != ' ' && p.peek() != ')') {
				return sfItem{}, p.fail("want ' ' or ')' in inner list")
			}
		}
	}
	return p.item()
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	params, err := p.params()
	return sfItem{Value: v, Params: params}, err
}

func (p *sfParser) params() ([]sfParam, error) {
	var ps []sfParam
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
			ps = append(ps, sfParam{k, v})
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

func (p *sfParser) key() (string, error) {
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

func (p *sfParser) bareItem() (any, error) {
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
		return sfToken(p.s[start:p.i]), nil
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
		return sfBytes(b), nil
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

func (p *sfParser) number() (any, error) {
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

func (p *sfParser) str() (string, error) {
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

func TestSFParser(t *testing.T) {
	good := map[string]int{
		`"api";q=100;w=60`:                  1,
		`"a";r=1;t=2, "b";r=0;t=17`:         2,
		`  tok, 1.5, ?1, :aGk=:, ("x" y);p`: 5,
		`"es\"c\\"`:                         1,
		`-999999999999999`:                  1,
		`a;b;c=?0`:                          1,
	}
	for s, n := range good {
		items, err := parseSFList(s)
		if err != nil || len(items) != n {
			t.Errorf("parseSFList(%q) = %d items, %v; want %d", s, len(items), err, n)
		}
	}
	for _, s := range []string{
		`"api";q=100,`, `"api" "x"`, `"unterminated`, `"bad\e"`, `api;Q=1`, `1234567890123456`,
		`1.2345`, `1.`, `"a",,"b"`, `"tab	"`, `;q=1`, `"a";q=`, "\"\x7f\"", `(a b`, `?2`,
	} {
		if _, err := parseSFList(s); err == nil {
			t.Errorf("parseSFList(%q) succeeded", s)
		}
	}
}
