package sfvtest

import (
	"net/http"
	"testing"
)

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
		items, err := ParseList(s)
		if err != nil || len(items) != n {
			t.Errorf("ParseList(%q) = %d items, %v; want %d", s, len(items), err, n)
		}
	}
	for _, s := range []string{
		`"api";q=100,`, `"api" "x"`, `"unterminated`, `"bad\e"`, `api;Q=1`, `1234567890123456`,
		`1.2345`, `1.`, `"a",,"b"`, `"tab	"`, `;q=1`, `"a";q=`, "\"\x7f\"", `(a b`, `?2`,
	} {
		if _, err := ParseList(s); err == nil {
			t.Errorf("ParseList(%q) succeeded", s)
		}
	}
}

func TestCheckHeaders(t *testing.T) {
	good := []http.Header{
		{},
		{"Ratelimit-Policy": {`"a";q=10;w=60`, `"b";q=5`}, "Ratelimit": {`"a";r=3;t=7, "b";r=0;t=2`}, "Retry-After": {"2"}},
		{"X-RateLimit-Limit": {"10"}, "X-RateLimit-Remaining": {"0"}, "X-RateLimit-Reset": {"1800000000"}},
		{"RateLimit": {`"a";r=9`}},
	}
	for _, h := range good {
		if _, err := CheckHeaders(h); err != nil {
			t.Errorf("CheckHeaders(%v): %v", h, err)
		}
	}
	h, err := CheckHeaders(good[1])
	if l, ok := h.Limit("b"); err != nil || !ok || l.R != 0 || l.T != 2 || !l.HasT || len(h.Policies) != 2 || h.RetryAfter != 2 {
		t.Errorf("parsed %+v, %v", h, err)
	}
	for _, h := range []http.Header{
		{"Ratelimit-Policy": {`"a";q=10;w=60, "a";q=5;w=1`}},
		{"Ratelimit-Policy": {`a;q=10;w=60`}},
		{"Ratelimit-Policy": {`"a";w=60`}},
		{"Ratelimit-Policy": {`"a";q=1;w=0`}},
		{"Ratelimit-Policy": {`"a";q=-1`}},
		{"Ratelimit-Policy": {`"a";q=1.5`}},
		{"Ratelimit-Policy": {`"a";q=1;x=2`}},
		{"Ratelimit": {`"a";t=1`}},
		{"Ratelimit": {`"a";r=1;t=-1`}},
		{"Ratelimit": {`"a";r=1, "a";r=2`}},
		{"Ratelimit": {`"a";r=1`}, "Ratelimit-Policy": {`"b";q=1`}},
		{"X-RateLimit-Limit": {"10"}, "X-RateLimit-Remaining": {"0"}},
		{"X-RateLimit-Limit": {"10"}, "X-RateLimit-Remaining": {"11"}, "X-RateLimit-Reset": {"1"}},
		{"X-RateLimit-Limit": {"10"}, "X-RateLimit-Remaining": {"-1"}, "X-RateLimit-Reset": {"1"}},
		{"X-RateLimit-Limit": {"10", "11"}, "X-RateLimit-Remaining": {"1"}, "X-RateLimit-Reset": {"1"}},
		{"Retry-After": {"0"}},
		{"Retry-After": {"1.5"}},
		{"Retry-After": {"Wed, 21 Oct 2015 07:28:00 GMT"}},
		{"Ratelimit": {`"a";r=0;t=10`}, "Retry-After": {"1"}},
	} {
		if _, err := CheckHeaders(h); err == nil {
			t.Errorf("CheckHeaders(%v) accepted it", h)
		}
	}
}
