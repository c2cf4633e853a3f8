package httplimit_test

import (
	"fmt"
	nethttp "net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// The README's HTTP example (TestReadmeHTTPExample keeps them the same): a
// limit per client address, one per API key, and a global one. A request
// without X-API-Key is not unlimited by the per-key limit: its Missing
// counts it by the client's address instead (by default it would be
// refused with 400).
func Example_apiKey() {
	store := memstore.New()
	perClient, _ := sluice.New(store, sluice.FixedWindow{Limit: 100, Window: time.Minute}, sluice.WithName("per-client"), fixedClock)
	perKey, _ := sluice.New(store, sluice.FixedWindow{Limit: 2, Window: time.Minute}, sluice.WithName("per-key"), fixedClock)
	global, _ := sluice.New(store, sluice.GCRA{Rate: 1000, Per: time.Second, Burst: 1000}, sluice.WithName("global"), fixedClock)
	api := nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) { fmt.Fprintln(w, "hello") })
	mux := nethttp.NewServeMux()
	if err := apiRoutes(mux, perClient, perKey, global, api); err != nil {
		panic(err)
	}
	get := func(key string) {
		r := httptest.NewRequest("GET", "/api/x", nil)
		r.RemoteAddr = "198.51.100.7:4711"
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	for range 3 {
		get("") // the 3rd is refused: the address's per-key budget is spent
	}
	get("k-123") // a key has its own budget
	// Output:
	// 200 "per-client";r=99;t=60, "per-key";r=1;t=60
	// 200 "per-client";r=98;t=60, "per-key";r=0;t=60
	// 429 "per-client";r=98;t=60, "per-key";r=0;t=60
	// 200 "per-client";r=97;t=60, "per-key";r=1;t=60
}

// apiRoutes is the README's code; its http is a ServeMux of the example's
// own, so that the example can run more than once in a test binary.
func apiRoutes(http *nethttp.ServeMux, perClient, perKey, global *sluice.Limiter, api nethttp.Handler) error {
	proxies, err := clientip.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		return err
	}
	resolver, err := clientip.New(clientip.Config{TrustedProxies: proxies})
	if err != nil {
		return err
	}
	mw, err := httplimit.New(httplimit.Config{Limits: []httplimit.Limit{
		{Limiter: perClient, Key: httplimit.ClientAddr(resolver)},
		{Limiter: perKey, Key: httplimit.Header("X-API-Key"), // hashed before it becomes a key
			Missing: httplimit.FallBack(httplimit.ClientAddr(resolver))}, // no key: counted by address
		{Limiter: global, Key: httplimit.Constant("all"), Hidden: true},
	}})
	if err != nil {
		return err // a limit without a Limiter or Key, an invalid name
	}
	http.Handle("/api/", mw.Handler(api))
	return nil
}
