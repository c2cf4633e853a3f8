package server

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// sameAsStrict checks readCheck against decodeStrict on body: whatever
// readCheck reads, decodeStrict reads too, to the same request. It reports
// whether readCheck read body.
func sameAsStrict(t *testing.T, body []byte) bool {
	t.Helper()
	var got checkRequest
	if !readCheck(body, &got) {
		return false
	}
	var want checkRequest
	if err := decodeStrict(body, &want); err != nil {
		t.Fatalf("%q: read directly as %+v, but decodeStrict refuses it: %v", body, got, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: read directly as %+v (cost %v), decodeStrict reads %+v (cost %v)", body, got, deref(got.Cost), want, deref(want.Cost))
	}
	return true
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// checkBody writes a /v1/check body: mostly of the usual shape, and
// others that decodeStrict reads or refuses (names in another case or
// escaped, fields twice or unknown, escapes, control characters and bytes
// that are not UTF-8 in strings, numbers written otherwise, null, the
// multi form, whitespace JSON has and has not, things after the object).
func checkBody(r *rand.Rand) []byte {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	ws := func() string {
		if r.IntN(3) > 0 {
			return ""
		}
		return pick(" ", "\n", "\t", "\r\n ", "\f", "\u00a0")
	}
	str := func() string {
		if r.IntN(15) == 0 {
			return pick("null", "7", "true", "[]", `"unterminated`)
		}
		return `"` + pick("", "api", "user-1", "é", "日本", "\x7f", "\xff", "\t", `\"`, `\u0041`, `\n`, "a b", "<&>", "\u2028") + `"`
	}
	num := func() string {
		return pick("0", "1", "5", "42", "9223372036854775807", "9223372036854775808", "-1", "05", "1.0", "1e2", "-0", `"1"`, "null", "+1")
	}
	names := []string{"policy", "key", "cost", "plan"}
	var b strings.Builder
	b.WriteString(ws() + "{")
	n := r.IntN(6)
	for i := range n {
		if i > 0 {
			b.WriteString(ws() + ",")
		}
		name := names[r.IntN(len(names))]
		switch r.IntN(20) {
		case 0:
			name = pick("Policy", "KEY", "unknown", "checks", "")
		case 1:
			name = strings.Replace(name, "e", `\u0065`, 1)
		}
		b.WriteString(ws() + `"` + name + `"` + ws() + ":" + ws())
		switch {
		case name == "cost":
			b.WriteString(num())
		case name == "checks":
			b.WriteString(`[{"policy":"a","key":"x"}]`)
		default:
			b.WriteString(str())
		}
	}
	b.WriteString(ws() + "}" + ws())
	if r.IntN(30) == 0 {
		b.WriteString(pick("x", "{}", ","))
	}
	return []byte(b.String())
}

// TestReadCheckDifferential: on bodies of every shape, what readCheck
// reads decodeStrict reads to the same request, and readCheck reads most
// of the usual ones (the test would mean little otherwise).
func TestReadCheckDifferential(t *testing.T) {
	for _, body := range []string{
		`{"policy":"api","key":"user-1","cost":1}`, ` { "policy" : "api" , "key" : "k" , "plan" : "pro" , "cost" : 0 } `,
		`{}`, `{"cost":9223372036854775807}`, `{"key":"é"}`,
	} {
		if !sameAsStrict(t, []byte(body)) {
			t.Errorf("%q: not read directly", body)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 20000
	read := 0
	for range n {
		if sameAsStrict(t, checkBody(r)) {
			read++
		}
	}
	t.Logf("%d bodies: %d read directly", n, read)
	if read < n/10 || read > n-n/10 {
		t.Errorf("the generator's mix is off: %d of %d read directly", read, n)
	}
}

// FuzzReadCheck: whatever the body, readCheck reads it as decodeStrict
// does, or leaves it (see sameAsStrict).
func FuzzReadCheck(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		f.Add(checkBody(r))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sameAsStrict(t, body)
	})
}

// TestReadCheckAllocations: the usual body is read in two allocations
// (one copy of it for its strings, the cost), where decodeStrict's two
// passes of encoding/json took dozens; a body over checkShareMax has its
// strings copied one by one, so that none holds on to the body.
func TestReadCheckAllocations(t *testing.T) {
	body := []byte(`{"policy":"api","key":"user-1","cost":1}`)
	var req checkRequest
	allocs := testing.AllocsPerRun(100, func() {
		req = checkRequest{}
		if err := parseCheck(body, &req); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Errorf("the usual body: %.0f allocations, want at most 2", allocs)
	}
	if req.Policy != "api" || req.Key != "user-1" || *req.Cost != 1 {
		t.Fatalf("read %+v", req)
	}
	large := []byte(`{"policy":"api","key":"k"}` + strings.Repeat(" ", checkShareMax))
	req = checkRequest{}
	if err := parseCheck(large, &req); err != nil {
		t.Fatal(err)
	}
	p, k := unsafe.StringData(req.Policy), unsafe.StringData(req.Key)
	if uintptr(unsafe.Pointer(k))-uintptr(unsafe.Pointer(p)) == uintptr(strings.Index(string(large), `"k"`)-strings.Index(string(large), `"api"`)) {
		t.Errorf("a body of %d bytes: its strings share one copy of it", len(large))
	}
}
