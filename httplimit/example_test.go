package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// fixedClock stops time for the examples, so their output is exact. Real
// limiters leave the clock to the store.
var fixedClock = sluice.WithClock(func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) })

// Two limits on one route: 3 requests a minute per client address, and a
// global 100 a second. Behind a load balancer in 10.0.0.0/8, the client
// address is read from X-Forwarded-For; from anyone else the header is
// ignored.
func Example() {
	store := memstore.New() // valkeystore.Connect(opt) to share limits between processes
	perClient, _ := sluice.New(store, sluice.SlidingWindow{Limit: 3, Window: time.Minute}, sluice.WithName("per-client"), fixedClock)
	global, _ := sluice.New(store, sluice.GCRA{Rate: 100, Per: time.Second, Burst: 100}, sluice.WithName("global"), fixedClock)

	proxies, _ := clientip.ParsePrefixes("10.0.0.0/8")
	resolver, _ := clientip.New(clientip.Config{TrustedProxies: proxies})

	mw, err := httplimit.New(httplimit.Config{
		Limits: []httplimit.Limit{
			{Limiter: perClient, Key: httplimit.ClientAddr(resolver)},
			{Limiter: global, Key: httplimit.Constant("all"), Hidden: true},
		},
		Exempt: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	get := func(path, peer, xff string) {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = peer
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("X-RateLimit-Remaining"))
	}
	for range 4 {
		get("/", "198.51.100.7:4711", "") // the 4th is refused
	}
	get("/", "198.51.100.7:4711", "203.0.113.9") // spoofed: still 198.51.100.7
	get("/", "10.0.0.2:80", "203.0.113.9")       // via the proxy: a new client
	get("/healthz", "198.51.100.7:4711", "")     // exempt
	// Output:
	// 200 "per-client";q=3;w=60 2
	// 200 "per-client";q=3;w=60 1
	// 200 "per-client";q=3;w=60 0
	// 429 "per-client";q=3;w=60 0
	// 429 "per-client";q=3;w=60 0
	// 200 "per-client";q=3;w=60 2
	// 200
}

// The refusal a client gets.
func ExampleWriteProblem() {
	store := memstore.New()
	l, _ := sluice.New(store, sluice.FixedWindow{Limit: 1, Window: time.Hour}, sluice.WithName("search"), fixedClock)
	mw, _ := httplimit.New(httplimit.Config{Limits: []httplimit.Limit{{Limiter: l, Key: httplimit.Header("X-API-Key")}}})
	h := mw.Handler(http.NotFoundHandler())
	var w *httptest.ResponseRecorder
	for range 2 {
		r := httptest.NewRequest("GET", "/search", nil)
		r.Header.Set("X-API-Key", "k-123")
		w = httptest.NewRecorder()
		h.ServeHTTP(w, r)
	}
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	fmt.Println(w.Body.String())
	// Output:
	// 429 application/problem+json
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Too many requests: retry after 3600 seconds.","violated-policies":["search"]}
}
