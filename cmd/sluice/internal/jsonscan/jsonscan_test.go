package jsonscan

import (
	"math"
	"testing"
)

// TestDigits: whole numbers up to max and no further, without a leading
// zero, a sign, a fraction or an exponent.
func TestDigits(t *testing.T) {
	for _, tc := range []struct {
		in  string
		max uint64
		n   uint64
		ok  bool
	}{
		{"0", math.MaxUint32, 0, true},
		{" 42,", math.MaxUint32, 42, true},
		{"4294967295", math.MaxUint32, math.MaxUint32, true},
		{"4294967296", math.MaxUint32, 0, false},
		{"9223372036854775807", math.MaxInt64, math.MaxInt64, true},
		{"9223372036854775808", math.MaxInt64, 0, false},
		{"01", math.MaxInt64, 0, false},
		{"-1", math.MaxInt64, 0, false},
		{"1.5", math.MaxInt64, 0, false},
		{"1e3", math.MaxInt64, 0, false},
		{"", math.MaxInt64, 0, false},
	} {
		p := Reader{B: []byte(tc.in)}
		if n, ok := p.Digits(tc.max); ok != tc.ok || ok && n != tc.n {
			t.Errorf("%q (max %d): %d %v, want %d %v", tc.in, tc.max, n, ok, tc.n, tc.ok)
		}
	}
}

// TestStr: strings without escapes, as a slice of Text or a copy; an
// escape, a control character or invalid UTF-8 is left to encoding/json.
func TestStr(t *testing.T) {
	for in, want := range map[string]bool{`"api"`: true, ` "é"`: true, `"a\"b"`: false, "\"a\tb\"": false, "\"\xff\"": false, `"open`: false} {
		for _, text := range []bool{false, true} {
			p := Reader{B: []byte(in)}
			if text {
				p.Text = in
			}
			if _, ok := p.Str(); ok != want {
				t.Errorf("%q (text %v): %v, want %v", in, text, ok, want)
			}
		}
	}
}
