package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// decodeStrict decodes the JSON object in data into v, refusing with a 400
// what encoding/json would let pass and change the request: a field not in
// v, data after the object, a field given twice (encoding/json keeps the
// last, matching names without regard to case, so "key" and "Key" are the
// same field), bytes that are not UTF-8 and \u escapes of lone UTF-16
// surrogates (encoding/json turns both into U+FFFD, so that keys of
// different bytes would share one count).
func decodeStrict(data []byte, v any) error {
	if !utf8.Valid(data) {
		return bad(http.StatusBadRequest, "malformed JSON body: not valid UTF-8")
	}
	if off, ok := loneSurrogate(data); !ok {
		return bad(http.StatusBadRequest, "malformed JSON body: a \\u escape of a lone UTF-16 surrogate at byte %d (not a character)", off)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bad(http.StatusBadRequest, "malformed JSON body: %s", jsonError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad(http.StatusBadRequest, "malformed JSON body: data after the object")
	}
	if err := duplicateField(data); err != nil {
		return bad(http.StatusBadRequest, "malformed JSON body: %v", err)
	}
	return nil
}

// loneSurrogate scans the strings of data for a \u escape of a UTF-16
// surrogate that is not the first half of a pair followed by the second;
// ok is false with the escape's offset when there is one. Malformed
// escapes are left for the decoder to report.
func loneSurrogate(data []byte) (offset int, ok bool) {
	in := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\':
			last, lone := escapeEnd(data, i)
			if lone {
				return i, false
			}
			i = last
		}
	}
	return 0, true
}

// escapeEnd reads the escape at data[i:]: last is the offset of its last
// byte (see unicodeEscape), or len(data) after a malformed \u escape,
// which ends the scan; lone says it is a surrogate without its other half.
func escapeEnd(data []byte, i int) (last int, lone bool) {
	if i+1 >= len(data) || data[i+1] != 'u' {
		return i + 1, false // the escaped byte
	}
	last, lone, malformed := unicodeEscape(data, i)
	if malformed {
		return len(data), false
	}
	return last, lone
}

// unicodeEscape reads the \u escape at data[i:]: last is the offset of its
// last byte, or of the second escape's when it is the first half of a
// surrogate pair; lone says it is a surrogate without its other half;
// malformed says its four hex digits are not there.
func unicodeEscape(data []byte, i int) (last int, lone, malformed bool) {
	r, good := hex4(data, i+2)
	if !good {
		return 0, false, true
	}
	switch {
	case inRange(r, 0xD800, 0xDC00):
		if !lowSurrogateAt(data, i+6) {
			return 0, true, false
		}
		return i + 11, false, false
	case inRange(r, 0xDC00, 0xE000):
		return 0, true, false
	}
	return i + 5, false, false
}

// lowSurrogateAt reports whether a \u escape of the second half of a
// surrogate pair is at data[j:].
func lowSurrogateAt(data []byte, j int) bool {
	if j+1 >= len(data) || data[j] != '\\' || data[j+1] != 'u' {
		return false
	}
	lo, good := hex4(data, j+2)
	return good && inRange(lo, 0xDC00, 0xE000)
}

// inRange reports whether lo <= r < hi.
func inRange(r, lo, hi rune) bool { return r >= lo && r < hi }

// hex4 reads four hex digits at data[i:].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(data[i:i+4]), 16, 16)
	return rune(n), err == nil
}

// duplicateField reports an object of data, at any depth, that gives one
// field twice, names compared as encoding/json matches them (without
// regard to case). data has decoded once already.
func duplicateField(data []byte) error {
	var stack jsonFrames
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if stack.expectsName() {
			if err := stack.name(tok); err != nil {
				return err
			}
			continue
		}
		stack.value(tok)
	}
}

// jsonFrame is an object or array duplicateField is inside.
type jsonFrame struct {
	object bool
	key    bool // the next token of an object is a field name
	names  map[string]bool
}

// jsonFrames is duplicateField's stack of the objects and arrays it is
// inside, the innermost last.
type jsonFrames []jsonFrame

// expectsName reports whether the innermost frame is an object whose next
// token is a field name (or its end).
func (st jsonFrames) expectsName() bool {
	n := len(st)
	return n > 0 && st[n-1].object && st[n-1].key
}

// name takes the token where an object expects a field name: the
// object's end, or a name, refused when the object gave it already.
func (st *jsonFrames) name(tok json.Token) error {
	n := len(*st)
	if tok == json.Delim('}') {
		*st = (*st)[:n-1]
		return nil
	}
	top := &(*st)[n-1]
	name, _ := tok.(string)
	f := fold(name)
	if top.names[f] {
		return fmt.Errorf("field %q is given twice", name)
	}
	top.names[f], top.key = true, false
	return nil
}

// value takes a value token: the object holding it expects a name next;
// '{' and '[' open a frame, ']' closes one.
func (st *jsonFrames) value(tok json.Token) {
	if n := len(*st); n > 0 && (*st)[n-1].object {
		(*st)[n-1].key = true
	}
	switch tok {
	case json.Delim('{'):
		*st = append(*st, jsonFrame{object: true, key: true, names: map[string]bool{}})
	case json.Delim('['):
		*st = append(*st, jsonFrame{})
	case json.Delim(']'):
		*st = (*st)[:len(*st)-1]
	}
}

// fold maps s to one string for all the strings strings.EqualFold takes
// for equal: each rune to the least of its case folding orbit.
func fold(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}
