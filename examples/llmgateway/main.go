// Command llmgateway is a reverse proxy in front of an LLM API, limiting
// each tenant's requests per minute and tokens per minute with Sluice's
// reservations: before a call goes upstream it reserves the call's
// estimate (its max_tokens plus its prompt's length / 4) from both limits
// together, and once the upstream has answered it settles the tokens the
// upstream reports, giving back what the estimate overshot or charging
// what it missed. Calls in flight hold their estimates, so many
// concurrent calls cannot overshoot the tokens per minute, and responses
// carry the x-ratelimit-*-requests and -tokens headers OpenAI's SDKs read.
//
// The upstream reports a call's tokens in a response header or trailer,
// X-Usage-Total-Tokens (USAGE_HEADER): put a small filter in front of an
// upstream that reports usage only in its JSON body.
//
//	UPSTREAM=http://127.0.0.1:9000 go run ./examples/llmgateway
//	curl -i -H 'Authorization: Bearer tenant-42' -d '{"max_tokens":500,"messages":[]}' localhost:8080/v1/chat/completions
//
// Environment:
//
//	ADDR          listen address (default localhost:8080)
//	UPSTREAM      the LLM API's base URL (required)
//	VALKEY_ADDR   Valkey address(es), so that every replica shares the
//	              limits; unset: in-process store
//	RPM, TPM      requests and tokens per minute per tenant (default 60
//	              and 40000)
//	USAGE_HEADER  the upstream's usage header (default X-Usage-Total-Tokens)
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, nil); err != nil {
		fmt.Fprintln(os.Stderr, "llmgateway:", err)
		os.Exit(1)
	}
}

// Config is the gateway's configuration.
type Config struct {
	Upstream    *url.URL
	Store       driver.Store
	RPM, TPM    int64
	UsageHeader string
}

// Gateway returns the gateway's handler.
func Gateway(cfg Config) (http.Handler, error) {
	opts := []sluice.Option{sluice.WithReservations(sluice.ReserveOptions{})}
	// Requests per minute: a fixed window. Tokens per minute: a token
	// bucket refilling the minute's tokens, whose debt (by default, one
	// minute's tokens) an upstream's surprise can reach.
	rpm, err := sluice.New(cfg.Store, sluice.FixedWindow{Limit: cfg.RPM, Window: time.Minute}, append(opts, sluice.WithName("llm-rpm"))...)
	if err != nil {
		return nil, err
	}
	tpm, err := sluice.New(cfg.Store, sluice.TokenBucket{Capacity: cfg.TPM, Rate: float64(cfg.TPM), Per: time.Minute}, append(opts, sluice.WithName("llm-tpm"))...)
	if err != nil {
		return nil, err
	}
	m, err := httplimit.NewMetered(httplimit.MeteredConfig{
		Requests: rpm,
		Tokens:   tpm,
		Key:      tenant,
		Estimate: httplimit.MaxTokens(1024, 1<<20),
		Actual:   httplimit.HeaderActual(cfg.UsageHeader),
		// A call the upstream failed without a usage figure costs nothing
		// when it was refused outright (4xx), its estimate otherwise.
		OnMissing: func(_ *http.Request, status int, est int64) int64 {
			if status >= 400 && status < 500 {
				return 0
			}
			return est
		},
		Headers: true,
	})
	if err != nil {
		return nil, err
	}
	return m.Handler(httputil.NewSingleHostReverseProxy(cfg.Upstream)), nil
}

// tenant is the bearer token's tenant ("" without one: refused with 400).
func tenant(r *http.Request) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" || len(tok) > 256 {
		return ""
	}
	return tok
}

// run serves until ctx ends; ready, when not nil, receives the address.
func run(ctx context.Context, getenv func(string) string, ready chan<- string) error {
	cfg, err := configFromEnv(getenv)
	if err != nil {
		return err
	}
	cfg.Store = memstore.New()
	if addr := getenv("VALKEY_ADDR"); addr != "" {
		lazy, err := valkeystore.Connect(valkey.ClientOption{InitAddress: strings.Split(addr, ",")})
		if err != nil {
			return err
		}
		defer lazy.Close()
		cfg.Store = lazy
	}
	h, err := Gateway(cfg)
	if err != nil {
		return err
	}
	addr := getenv("ADDR")
	if addr == "" {
		addr = "localhost:8080"
	}
	return serve(ctx, h, addr, cfg.Upstream, ready)
}

// configFromEnv reads UPSTREAM (required), RPM, TPM and USAGE_HEADER.
func configFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{RPM: 60, TPM: 40000, UsageHeader: "X-Usage-Total-Tokens"}
	up := getenv("UPSTREAM")
	if up == "" {
		return cfg, errors.New("UPSTREAM is required (the LLM API's base URL)")
	}
	u, err := url.Parse(up)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return cfg, fmt.Errorf("UPSTREAM %q is not an absolute URL", up)
	}
	cfg.Upstream = u
	for _, v := range []struct {
		name string
		dst  *int64
	}{{"RPM", &cfg.RPM}, {"TPM", &cfg.TPM}} {
		if s := getenv(v.name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 1 {
				return cfg, fmt.Errorf("%s %q is not a positive whole number", v.name, s)
			}
			*v.dst = n
		}
	}
	if h := getenv("USAGE_HEADER"); h != "" {
		cfg.UsageHeader = h
	}
	return cfg, nil
}

// serve serves h on addr until ctx ends (then shuts down within 5s),
// sending the address listened on to ready (when not nil).
func serve(ctx context.Context, h http.Handler, addr string, upstream *url.URL, ready chan<- string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	slog.Info("llmgateway listening", "addr", ln.Addr().String(), "upstream", upstream.String())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
