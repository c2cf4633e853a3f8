package server

import (
	"strings"
	"testing"
)

// TestStrictJSON: the bodies of /v1/check and of an override's PUT refuse
// what encoding/json would let pass and change: bytes that are not UTF-8
// and escapes of lone surrogates (both would become U+FFFD, two keys of
// different bytes then sharing one count), and a field given twice, in
// any case (the last would win); and take what is well formed, a
// surrogate pair and a field name repeated in another object included.
func TestStrictJSON(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"{\"policy\":\"api\",\"key\":\"a\xff\"}", "not valid UTF-8"},
		{"{\"policy\":\"api\",\"key\":\"a\xc3\"}", "not valid UTF-8"},
		{`{"policy":"api","key":"\ud800"}`, "lone UTF-16 surrogate at byte 23"},
		{`{"policy":"api","key":"\uDBFFx"}`, "lone UTF-16 surrogate"},
		{`{"policy":"api","key":"\udc00"}`, "lone UTF-16 surrogate"},
		{`{"policy":"api","key":"\ud800\u0041"}`, "lone UTF-16 surrogate"},
		{`{"policy":"api","key":"\ud83d\ude00\udc00"}`, "lone UTF-16 surrogate"},
		{`{"policy":"api","key":"a","key":"b"}`, `field "key" is given twice`},
		{`{"policy":"api","key":"a","KEY":"b"}`, `field "KEY" is given twice`},
		{`{"policy":"api","key":"a","cost":1,"cost":2}`, `field "cost" is given twice`},
		{`{"checks":[{"policy":"a","key":"x"},{"policy":"a","key":"y","polic\u0079":"b"}]}`, `field "policy" is given twice`},
		{`{"checks":[],"checks":[{"policy":"a","key":"x"}]}`, `field "checks" is given twice`},
	} {
		var req checkRequest
		err := parseCheck([]byte(tc.body), &req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
	for body, key := range map[string]string{
		`{"policy":"api","key":"\ud83d\ude00"}`:         "\U0001F600",
		`{"policy":"api","key":"\\ud800"}`:              `\ud800`,
		`{"policy":"api","key":"\ufffd"}`:               "\uFFFD",
		`{"policy":"api","key":"é\"\\\u00e9","cost":1}`: "é\"\\é",
	} {
		var req checkRequest
		if err := parseCheck([]byte(body), &req); err != nil || req.Key != key {
			t.Errorf("%q: key %q, %v; want %q", body, req.Key, err, key)
		}
	}
	var req checkRequest
	if err := parseCheck([]byte(`{"checks":[{"policy":"a","key":"x"},{"policy":"a","key":"y"}]}`), &req); err != nil || len(req.Checks) != 2 {
		t.Errorf("two checks: %+v %v", req, err)
	}
	for _, body := range []string{
		`{"limit":5,"limit":50,"expires":"2030-01-01T00:00:00Z"}`,
		`{"limit":5,"expires":"2030-01-01T00:00:00Z","Expires":"2040-01-01T00:00:00Z"}`,
		"{\"limit\":5,\"expires\":\"2030-01-01T00:00:00Z\",\"reason\":\"\xfe\"}",
	} {
		if _, err := parseOverride([]byte(body)); err == nil {
			t.Errorf("override %q accepted", body)
		}
	}
	if o, err := parseOverride([]byte(`{"limit":5,"expires":"2030-01-01T00:00:00Z","reason":"\ud83d\ude00"}`)); err != nil || o.Limit != 5 {
		t.Errorf("override: %+v %v", o, err)
	}
}
