package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

// Valkey is a driver.Store on Valkey that connects in the background
// (valkeystore.Lazy): the service starts, and answers by its policies'
// on_failure, while Valkey is still unreachable, then uses it as soon as it
// answers. Once connected it reads the server settings that cost
// decisions (Risks).
type Valkey struct {
	*valkeystore.Lazy
	risks  atomic.Pointer[riskCheck] // the server settings read at connection
	cancel context.CancelFunc
	done   chan struct{}
}

// ClientOption builds valkey-go's options from the configuration. env looks
// up environment variables (nil: the process environment).
func ClientOption(v *config.Valkey, env func(string) (string, bool)) (valkey.ClientOption, error) {
	pw, err := v.Password(env)
	if err != nil {
		return valkey.ClientOption{}, err
	}
	opt := valkey.ClientOption{
		InitAddress:  v.Addresses,
		Username:     v.Username,
		Password:     pw,
		Dialer:       net.Dialer{Timeout: v.ConnectTimeout},
		DisableCache: true, // decisions are scripts; client-side caching has nothing to cache
		ClientName:   "sluice",
		// A decision is never retried (it may have run: a retry would count
		// twice), and a write stuck on a dead peer must not wait for TCP.
		DisableRetry:     true,
		ConnWriteTimeout: max(v.ConnectTimeout, time.Second),
		// Every call is queued on the shared connections. Otherwise
		// valkey-go sends a lone call with the connection's read deadline
		// set to the call's, and a call that times out closes the
		// connection, failing the calls of longer timeouts that share it.
		AlwaysPipelining: true,
	}
	if v.Sentinel != nil {
		if err := sentinelOption(&opt, v, env); err != nil {
			return opt, err
		}
	}
	if v.TLS != nil {
		tc, err := tlsConfig(v.TLS)
		if err != nil {
			return opt, err
		}
		opt.TLSConfig = tc
		if v.Sentinel != nil {
			opt.Sentinel.TLSConfig = tc // the Sentinels too
		}
	}
	return opt, nil
}

// sentinelOption sets opt to find the master through the Sentinels of
// v.Sentinel.
func sentinelOption(opt *valkey.ClientOption, v *config.Valkey, env func(string) (string, bool)) error {
	if len(v.Addresses) > 0 {
		return fmt.Errorf("valkey: addresses %v (from the config or --valkey) and valkey.sentinel are exclusive: with sentinel, the Sentinels name the master", v.Addresses)
	}
	spw, err := v.Sentinel.Password(env)
	if err != nil {
		return err
	}
	opt.InitAddress = v.Sentinel.Addresses
	opt.Sentinel = valkey.SentinelOption{
		MasterSet: v.Sentinel.MasterSet,
		Username:  v.Sentinel.Username,
		Password:  spw,
		Dialer:    opt.Dialer,
	}
	return nil
}

// tlsConfig is the TLS of valkey.tls: TLS 1.2 at least, the CA file's
// roots (else the system's) and the client certificate when given.
func tlsConfig(t *config.TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("valkey.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("valkey.tls.ca_file %s: no PEM certificate found", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("valkey.tls: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ConnectValkey returns a store that connects with opt in the background,
// retrying with backoff (up to 5s between attempts) until it succeeds or
// Close is called (valkeystore.Connect). Several addresses make a cluster
// client (valkey-go detects the mode). explain (nil: none) turns a
// connection error into the one reported, as ExplainAuth names the
// settings that fix an authentication refusal. extra are more options of
// the store (such as valkeystore.WithClientWrap).
func ConnectValkey(opt valkey.ClientOption, log *slog.Logger, explain func(error) error, extra ...valkeystore.Option) (*Valkey, error) {
	lazy, err := valkeystore.Connect(opt, append([]valkeystore.Option{valkeystore.WithLogger(log), valkeystore.WithConnectError(explain)}, extra...)...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Valkey{Lazy: lazy, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if st, err := lazy.Wait(ctx); err == nil {
			s.checkRisks(ctx, st, log)
		}
	}()
	return s, nil
}

// riskCheck is what Store.Risks found when the store connected.
type riskCheck struct {
	risks   []valkeystore.Risk
	checked bool // false: some node's settings could not be read
}

// checkRisks reads the server settings that lose counts or refuse
// decisions (Store.Risks), logs a warning for each, and keeps them for
// the metrics. A server where CONFIG is disabled is said so, not failed.
func (s *Valkey) checkRisks(ctx context.Context, st *valkeystore.Store, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	risks, err := st.Risks(ctx)
	for _, r := range risks {
		log.Warn("valkey setting that costs decisions", "node", r.Node, "setting", r.Setting, "value", r.Value, "cost", r.Cost)
	}
	if err != nil {
		log.Warn("cannot check valkey's settings (is CONFIG disabled?): eviction and cluster coverage unknown", "err", err.Error())
	}
	s.risks.Store(&riskCheck{risks: risks, checked: err == nil})
}

// Risks returns what Store.Risks found when the store connected, and
// whether every node could be read; nothing before the connection.
func (s *Valkey) Risks() ([]valkeystore.Risk, bool) {
	rc := s.risks.Load()
	if rc == nil {
		return nil, false
	}
	return rc.risks, rc.checked
}

// Close stops connecting and closes the client.
func (s *Valkey) Close() {
	s.cancel()
	<-s.done
	s.Lazy.Close()
}

var (
	_ driver.Store         = (*Valkey)(nil)
	_ driver.OverrideStore = (*Valkey)(nil)
)
