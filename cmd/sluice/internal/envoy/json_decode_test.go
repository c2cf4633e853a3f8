package envoy

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// sameAsProtojson checks decodeRequest against protojson.Unmarshal on
// body: both accept it and decode the same message, or both refuse it
// with the same reason. It reports whether the direct reader decoded body
// (rather than leaving it to protojson), whose result must then equal
// protojson's too.
func sameAsProtojson(t *testing.T, body []byte) bool {
	t.Helper()
	var want rlsv3.RateLimitRequest
	werr := protojson.Unmarshal(body, &want)

	var direct requestBlock
	read := readRequest(body, &direct)
	if read && werr != nil {
		t.Fatalf("%q: read directly, but protojson refuses it: %v", body, werr)
	}
	if read && !proto.Equal(&direct.req, &want) {
		t.Fatalf("%q: read directly as %v, protojson reads %v", body, &direct.req, &want)
	}

	got, gerr := decodeRequest(body)
	switch {
	case (gerr == nil) != (werr == nil):
		t.Fatalf("%q: decodeRequest error %v, protojson error %v", body, gerr, werr)
	case gerr != nil && gerr.Error() != werr.Error():
		t.Fatalf("%q: decodeRequest refuses with %q, protojson with %q", body, gerr, werr)
	case gerr == nil && !proto.Equal(got, &want):
		t.Fatalf("%q: decodeRequest reads %v, protojson reads %v", body, got, &want)
	}
	return read
}

// jsonGen writes RateLimitRequests in JSON of every shape protojson may
// meet: the usual one, and others (overrides, nulls, escapes, bytes that
// are not UTF-8, numbers written otherwise, fields twice or unknown,
// whitespace JSON has and has not, things after the object).
type jsonGen struct {
	r *rand.Rand
	b strings.Builder
	// clean: only valid JSON of valid values this request (in other
	// shapes than the usual one too).
	clean bool
}

func (g *jsonGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

// junk reports, one time in n, that something invalid is written here
// (never in a clean request).
func (g *jsonGen) junk(n int) bool { return !g.clean && g.r.IntN(n) == 0 }

// ws is whitespace, mostly JSON's, rarely what JSON does not allow.
func (g *jsonGen) ws() {
	switch {
	case g.junk(10):
		g.b.WriteString(g.pick("\f", "\v", "\u00a0", "\x00"))
	case g.r.IntN(3) == 0:
		g.b.WriteString(g.pick(" ", "\n", "\t ", "\r\n  ", "  "))
	}
}

func (g *jsonGen) str() {
	switch {
	case g.r.IntN(30) == 0:
		g.b.WriteString("null") // protojson: the field's default
		return
	case g.junk(20):
		g.b.WriteString(g.pick("7", "true", "[]", "{}", `'x'`, `"unterminated`))
		return
	}
	g.b.WriteString(`"`)
	if g.junk(6) {
		g.b.WriteString(g.pick("\t", "\x01", "\xff", "\xc3", "\xed\xa0\x80", `\ud800`, `\x`, `\u12`))
	} else {
		g.b.WriteString(g.pick("", "a", "remote_address", "10.0.0.1", "/v1/*/action", "bench", "é", "日本", "x y",
			"\x7f", "\u2028", "\U0001F600", `\"`, `\\`, `\u0041`, `\n`, `\/`, `\ud83d\ude00`))
	}
	g.b.WriteString(`"`)
}

func (g *jsonGen) number() {
	if g.junk(3) {
		g.b.WriteString(g.pick("4294967296", "18446744073709551616", "05", "00", "-1", "0.5", `""`, "true", "+1", "0x10",
			"1_0", "99999999999999999999", "1e", "-"))
		return
	}
	g.b.WriteString(g.pick("0", "1", "5", "42", "4294967295", "0", "7", "-0", "1.0", "1e2", "1E0", `"3"`, `"0"`, "null"))
}

func (g *jsonGen) name(usual ...string) {
	n := g.pick(usual...)
	if g.junk(25) {
		n = g.pick("unknown", "Domain", "DOMAIN", "hitsaddend", "", "limit", "entries", "isNegativeHits")
	} else if g.r.IntN(40) == 0 {
		n = strings.Replace(n, "a", `\u0061`, 1) // the same name, escaped
	}
	g.b.WriteString(`"` + n + `"`)
}

// object writes an object of members drawn from usual (names written by
// member), sometimes one of them twice.
func (g *jsonGen) object(names []string, member func(name string)) {
	g.ws()
	g.b.WriteString("{")
	n := g.r.IntN(len(names) + 2)
	for i := range n {
		if i >= len(names) && g.clean {
			break
		}
		if i > 0 {
			g.ws()
			if g.junk(10) {
				g.b.WriteString(g.pick(",,", ";", ""))
			} else {
				g.b.WriteString(",")
			}
		}
		g.ws()
		name := names[g.r.IntN(len(names))]
		if i < len(names) && (g.clean || g.r.IntN(8) > 0) {
			name = names[(i+n)%len(names)] // each once, in some order
		}
		g.name(name)
		g.ws()
		if g.junk(20) {
			g.b.WriteString(g.pick("=", "::", ""))
		} else {
			g.b.WriteString(":")
		}
		g.ws()
		member(name)
		g.ws()
	}
	if g.junk(20) {
		g.b.WriteString(g.pick("", "]", "}}"))
	} else {
		g.b.WriteString("}")
	}
}

func (g *jsonGen) array(elem func()) {
	switch {
	case g.r.IntN(30) == 0:
		g.b.WriteString("null") // protojson: empty
		return
	case g.junk(20):
		g.b.WriteString(g.pick("{}", `"x"`, "1"))
		return
	}
	g.b.WriteString("[")
	n := g.r.IntN(4)
	for i := range n {
		if i > 0 {
			g.ws()
			if g.junk(15) {
				g.b.WriteString(g.pick(",,", ""))
			} else {
				g.b.WriteString(",")
			}
		}
		g.ws()
		if g.junk(30) {
			g.b.WriteString(g.pick("null", "1", `"x"`, "[]"))
		} else {
			elem()
		}
		g.ws()
	}
	if g.junk(20) {
		g.b.WriteString(g.pick("", ",]"))
	} else {
		g.b.WriteString("]")
	}
}

func (g *jsonGen) entry() {
	g.object([]string{"key", "value"}, func(string) { g.str() })
}

func (g *jsonGen) descriptor() {
	names := []string{"entries"}
	if g.r.IntN(5) == 0 {
		names = append(names, g.pick("limit", "hitsAddend", "hits_addend", "isNegativeHits"))
	}
	g.object(names, func(name string) {
		switch name {
		case "entries":
			g.array(g.entry)
		case "limit":
			g.object([]string{"requestsPerUnit", "unit"}, func(n string) {
				if n == "unit" {
					if g.junk(4) {
						g.b.WriteString(g.pick(`"hour"`, `"FORTNIGHT"`, "true"))
					} else {
						g.b.WriteString(g.pick(`"HOUR"`, `"SECOND"`, "3", "null", `"UNKNOWN"`, "9"))
					}
				} else {
					g.number()
				}
			})
		case "isNegativeHits":
			if g.junk(4) {
				g.b.WriteString(g.pick(`"true"`, "1", "True"))
			} else {
				g.b.WriteString(g.pick("true", "false", "null"))
			}
		default:
			g.number()
		}
	})
}

func (g *jsonGen) request() []byte {
	g.b.Reset()
	g.clean = g.r.IntN(2) == 0
	if g.junk(40) {
		g.b.WriteString(g.pick("", "null", "[]", "\ufeff", `"x"`, "1"))
	}
	g.object([]string{"domain", "descriptors", g.pick("hitsAddend", "hits_addend")}, func(name string) {
		switch name {
		case "domain":
			g.str()
		case "descriptors":
			g.array(g.descriptor)
		default:
			g.number()
		}
	})
	g.ws()
	if g.junk(20) {
		g.b.WriteString(g.pick("x", "{}", "\x00", ",", "}"))
	}
	b := []byte(g.b.String())
	if g.junk(10) && len(b) > 0 { // a byte changed or the end cut
		if g.r.IntN(2) == 0 {
			b[g.r.IntN(len(b))] = byte(g.r.IntN(256))
		} else {
			b = b[:g.r.IntN(len(b))]
		}
	}
	return b
}

// TestDecodeRequestDifferential: on requests of every shape, decodeRequest
// accepts exactly what protojson accepts, decodes it to the same message,
// and refuses the rest with protojson's reason; the direct reader takes a
// good share of them (the test would mean little otherwise).
func TestDecodeRequestDifferential(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"domain":"bench","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`,
		` { "domain" : "d" , "descriptors" : [ { "entries" : [ { "key" : "k" , "value" : "v" } , {"key":"a"} ] } , { } ] , "hitsAddend" : 3 } `,
		`{"hits_addend":0,"domain":"d","descriptors":[]}`,
		`{}`, `{"domain":""}`, `{"descriptors":[{"entries":[]}]}`,
		`{"domain":"d","domain":"e"}`, `{"hitsAddend":1,"hits_addend":2}`,
		`{"domain":"d\u0041"}`, `{"domain":null}`, `{"hitsAddend":"3"}`, `{"hitsAddend":1e0}`,
		`{"hitsAddend":4294967296}`, `{"hitsAddend":-0}`, `{"hitsAddend":01}`, `{"domain":"\xff"}`,
		`{"descriptors":[{"entries":[{"key":"k","key":"k"}]}]}`,
		`{"descriptors":[{"limit":{"requestsPerUnit":1,"unit":"HOUR"},"entries":[{"key":"k","value":"v"}]}]}`,
		`{"domain":"d"} x`, `{"domain":"d"}{}`, "{\"domain\":\"d\"}\n", `{"domain":"d",}`, `[`, ``,
	} {
		sameAsProtojson(t, []byte(body))
	}
	r := rand.New(rand.NewPCG(1, 2))
	g := &jsonGen{r: r}
	const n = 20000
	read, accepted := 0, 0
	for range n {
		body := g.request()
		if sameAsProtojson(t, body) {
			read++
		}
		if protojson.Unmarshal(body, &rlsv3.RateLimitRequest{}) == nil {
			accepted++
		}
	}
	t.Logf("%d requests: %d read directly, %d accepted by protojson", n, read, accepted)
	if read < n/10 || accepted-read < n/50 || n-accepted < n/10 {
		t.Errorf("the generator's mix is off: %d read directly, %d accepted only through protojson, %d refused (of %d)",
			read, accepted-read, n-accepted, n)
	}
}

// FuzzDecodeRequest: whatever the body, decodeRequest and protojson agree
// (see sameAsProtojson).
func FuzzDecodeRequest(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	g := &jsonGen{r: r}
	for range 50 {
		f.Add(g.request())
	}
	f.Add([]byte(`{"domain":"bench","descriptors":[{"entries":[{"key":"remote_address","value":"1"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		sameAsProtojson(t, body)
	})
}

// TestDecodeRequestAllocations: the usual request (a domain, one
// descriptor of one entry) decodes in one allocation (the request with its
// descriptor and entry), its strings slices of the body; a body in a
// larger array than shareMax has one copy of it besides, for its strings,
// and a body over shareMax has its strings copied one by one instead, so
// that none of them holds on to the body.
func TestDecodeRequestAllocations(t *testing.T) {
	const usual = `{"domain":"bench","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`
	for _, c := range []struct {
		name string
		body []byte
		want float64
	}{
		{"a body in its own array", []byte(usual), 1},
		{"a body in a larger array", append(make([]byte, 0, shareMax+1), usual...), 2},
	} {
		var req *rlsv3.RateLimitRequest
		allocs := testing.AllocsPerRun(100, func() {
			var err error
			if req, err = decodeRequest(c.body); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != c.want {
			t.Errorf("decoding the usual request, %s: %.0f allocations, want %.0f", c.name, allocs, c.want)
		}
		e := req.Descriptors[0].Entries[0]
		if req.Domain != "bench" || e.Key != "remote_address" || e.Value != "10.0.0.1" {
			t.Fatalf("decoded %v", req)
		}
		inBody := unsafe.StringData(req.Domain) == &c.body[strings.Index(usual, "bench")]
		if want := cap(c.body) <= shareMax; inBody != want {
			t.Errorf("%s: the strings are slices of the body: %t, want %t", c.name, inBody, want)
		}
	}

	large := []byte(`{"domain":"bench","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}` + strings.Repeat(" ", shareMax))
	req, err := decodeRequest(large)
	if err != nil {
		t.Fatal(err)
	}
	// Strings sliced from one copy of the body lie at their offsets in it.
	d, v := unsafe.StringData(req.Domain), unsafe.StringData(req.Descriptors[0].Entries[0].Value)
	if uintptr(unsafe.Pointer(v))-uintptr(unsafe.Pointer(d)) == uintptr(strings.Index(string(large), `"v"`)-strings.Index(string(large), `"bench"`)) {
		t.Errorf("a body of %d bytes: its strings share one copy of it", len(large))
	}
}
