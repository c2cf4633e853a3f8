// Command httpservice is an HTTP service protected by Sluice: per-client and
// per-API-key limits on its API, a tighter per-action limit on search, a
// global capacity limit, and a login endpoint guarded per username and per
// address.
//
// It uses the in-process store, or a real Valkey when VALKEY_ADDR is set
// (several comma-separated addresses mean a cluster), so that all replicas
// of the service share their limits.
//
//	go run ./examples/httpservice
//	VALKEY_ADDR=127.0.0.1:6379 go run ./examples/httpservice
//
// Then:
//
//	curl -i localhost:8080/api/hello                 # 10 a minute per address
//	curl -i -H 'X-API-Key: k1' localhost:8080/api/hello  # 20 burst, 5/s per key
//	curl -i localhost:8080/api/search?q=x            # 3 a minute
//	curl -i -d username=demo -d password=wrong localhost:8080/login
//
// Environment:
//
//	ADDR             listen address (default localhost:8080)
//	VALKEY_ADDR      Valkey address(es); unset: in-process store
//	TRUSTED_PROXIES  comma-separated CIDRs of the proxies in front of the
//	                 service; X-Forwarded-For is read only from them
//	LOGIN_SECRET     key of the username hash, at least 16 bytes (default:
//	                 random per start, which forgets login counts on restart
//	                 and differs between replicas)
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/login"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "httpservice:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	store, where, closeStore, err := openStore(getenv("VALKEY_ADDR"), stdout)
	if err != nil {
		return err
	}
	defer closeStore()
	resolver, proxies, err := newResolver(getenv("TRUSTED_PROXIES"))
	if err != nil {
		return err
	}
	secret := loginSecret(getenv("LOGIN_SECRET"), stdout)
	h, err := newHandler(store, resolver, secret, map[string]string{"demo": "demo-password"})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cmp.Or(getenv("ADDR"), "localhost:8080"))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "listening on http://%s (%s, %d trusted proxy networks)\n", ln.Addr(), where, proxies)
	return serve(ctx, ln, h)
}

// newResolver is the client address resolver that trusts the proxies in
// the comma-separated list trusted, and how many networks that list holds.
func newResolver(trusted string) (*clientip.Resolver, int, error) {
	proxies, err := clientip.ParsePrefixes(strings.Split(trusted, ",")...)
	if err != nil {
		return nil, 0, fmt.Errorf("TRUSTED_PROXIES: %w", err)
	}
	resolver, err := clientip.New(clientip.Config{TrustedProxies: proxies})
	return resolver, len(proxies), err
}

// loginSecret is the secret the login guard keys its records with: secret,
// or a random one (said on log) when it is empty.
func loginSecret(secret string, log io.Writer) []byte {
	if secret != "" {
		return []byte(secret)
	}
	fmt.Fprintln(log, "LOGIN_SECRET unset: using a random one")
	return []byte(rand.Text())
}

// openStore is the in-process store, or the Valkey at addr when set.
// Connect starts while Valkey is down (decisions follow each limiter's
// fail mode until it answers), so a restart during an outage is no crash
// loop, and sets what the store needs of the client.
func openStore(addr string, log io.Writer) (store driver.Store, where string, closeStore func(), err error) {
	if addr == "" {
		return memstore.New(), "in-process store", func() {}, nil
	}
	lazy, err := valkeystore.Connect(valkey.ClientOption{InitAddress: strings.Split(addr, ",")},
		valkeystore.WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	if err != nil {
		return nil, "", nil, fmt.Errorf("VALKEY_ADDR: %w", err)
	}
	return lazy, "Valkey at " + addr, func() { lazy.Close() }, nil
}

// serve serves h on ln until ctx ends, then shuts down, giving requests
// in flight 5s to finish.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// limiters are the service's limiters.
type limiters struct {
	perClient, perKey, search, global *sluice.Limiter
}

func newLimiters(store driver.Store) (*limiters, error) {
	var l limiters
	for _, d := range []struct {
		dst  **sluice.Limiter
		name string
		p    sluice.Policy
	}{
		// Anonymous clients: by address. Clients with an API key: by key
		// (in a real service, check the key first and key by the account).
		{&l.perClient, "per-client", sluice.SlidingWindow{Limit: 10, Window: time.Minute}},
		{&l.perKey, "per-key", sluice.TokenBucket{Capacity: 20, Rate: 5, Per: time.Second}},
		{&l.search, "search", sluice.GCRA{Rate: 3, Per: time.Minute, Burst: 3}},
		// The backend's capacity, shared by everyone; it fails open, so
		// an outage of Valkey does not become an outage of the service.
		{&l.global, "global", sluice.GCRA{Rate: 1000, Per: time.Second, Burst: 2000}},
	} {
		var err error
		if *d.dst, err = sluice.New(store, d.p, sluice.WithName(d.name)); err != nil {
			return nil, err
		}
	}
	return &l, nil
}

// newHandler wires the routes and their limits on store.
func newHandler(store driver.Store, resolver *clientip.Resolver, secret []byte, users map[string]string) (http.Handler, error) {
	lim, err := newLimiters(store)
	if err != nil {
		return nil, err
	}
	anonymous := anonymousKey(resolver)
	byKey := httplimit.Header("X-API-Key")
	client := firstKey(byKey, anonymous)
	api, err := httplimit.New(httplimit.Config{Limits: []httplimit.Limit{
		// Each of the two applies to its kind of request only: the other
		// kind skips it, as said (a key function that finds nothing
		// refuses the request unless told otherwise).
		{Limiter: lim.perClient, Key: anonymous, Missing: httplimit.Skip()},
		{Limiter: lim.perKey, Key: byKey, Missing: httplimit.Skip()},
		{Limiter: lim.global, Key: httplimit.Constant("all"), Hidden: true},
	}})
	if err != nil {
		return nil, err
	}
	searchMW, err := httplimit.New(httplimit.Config{Limits: []httplimit.Limit{
		{Limiter: lim.search, Key: client},
		{Limiter: lim.global, Key: httplimit.Constant("all"), Hidden: true},
	}})
	if err != nil {
		return nil, err
	}
	guard, err := login.New(login.Config{Store: store, Secret: secret, ClientIP: resolver})
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /api/hello", api.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})))
	mux.Handle("GET /api/search", searchMW.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "no results for %q\n", r.URL.Query().Get("q"))
	})))
	mux.Handle("POST /login", loginHandler(guard, users))
	return mux, nil
}

// anonymousKey keys a request without an API key by its client's address,
// and finds no key in a request with one.
func anonymousKey(resolver *clientip.Resolver) httplimit.KeyFunc {
	byAddr := httplimit.ClientAddr(resolver)
	return func(r *http.Request) string {
		if r.Header.Get("X-API-Key") != "" {
			return ""
		}
		return byAddr(r)
	}
}

// firstKey keys a request by the first of keys that finds a key in it.
func firstKey(keys ...httplimit.KeyFunc) httplimit.KeyFunc {
	return func(r *http.Request) string {
		for _, key := range keys {
			if k := key(r); k != "" {
				return k
			}
		}
		return ""
	}
}

// loginHandler checks the guard before the password, and answers a wrong
// password and an unknown user alike.
func loginHandler(guard *login.Guard, users map[string]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass := r.PostFormValue("username"), r.PostFormValue("password")
		v, err := guard.AttemptRequest(r, user)
		if err != nil {
			http.Error(w, "try again later", http.StatusServiceUnavailable)
			return
		}
		if !v.Allowed {
			w.Header().Set("Retry-After", fmt.Sprint(httplimit.RetryAfterSeconds(v.RetryAfter)))
			http.Error(w, refusal(v), http.StatusTooManyRequests)
			return
		}
		// A real service compares password hashes, and hashes a dummy
		// when the user does not exist, so both take the same time.
		want, ok := users[login.Normalize(user)]
		if !ok || pass != want {
			http.Error(w, "wrong username or password", http.StatusUnauthorized)
			return
		}
		guard.Success(r.Context(), user)
		io.WriteString(w, "welcome\n")
	})
}

// refusal is what a refused sign-in attempt is told: which limit it hit,
// or that the guard's store is unavailable.
func refusal(v login.Verdict) string {
	switch {
	case v.Degraded:
		return "sign-in is unavailable, try again later"
	case v.Tripped&login.TrippedUsername == 0:
		return "too many attempts from your address"
	}
	return "too many attempts for this account"
}
