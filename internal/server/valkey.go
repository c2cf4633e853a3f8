package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

// ErrNotConnected is the store error while the first connection to Valkey
// has not been made: decisions follow each policy's on_failure.
var ErrNotConnected = errors.New("valkey: not connected yet")

// ValkeyStore is a sluice.Store on Valkey that connects in the background:
// the service starts, and answers by its policies' on_failure, while Valkey
// is still unreachable, then uses it as soon as it answers.
type ValkeyStore struct {
	store  atomic.Pointer[valkeystore.Store]
	risks  atomic.Pointer[riskCheck] // the server settings read at connection
	mu     sync.Mutex
	client valkey.Client
	cancel context.CancelFunc
	done   chan struct{}
	// pending are the delete watchers registered before the connection
	// (under mu): they are not watching until it is made.
	pending map[*pendingWatch]bool
}

type pendingWatch struct {
	prefix string
	w      sluice.DeleteWatcher
	stop   func() // the store's, once connected
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
		if len(v.Addresses) > 0 {
			return opt, fmt.Errorf("valkey: addresses %v (from the config or --valkey) and valkey.sentinel are exclusive: with sentinel, the Sentinels name the master", v.Addresses)
		}
		spw, err := v.Sentinel.Password(env)
		if err != nil {
			return opt, err
		}
		opt.InitAddress = v.Sentinel.Addresses
		opt.Sentinel = valkey.SentinelOption{
			MasterSet: v.Sentinel.MasterSet,
			Username:  v.Sentinel.Username,
			Password:  spw,
			Dialer:    opt.Dialer,
		}
	}
	if v.TLS != nil {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: v.TLS.ServerName}
		if v.TLS.CAFile != "" {
			pem, err := os.ReadFile(v.TLS.CAFile)
			if err != nil {
				return opt, fmt.Errorf("valkey.tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return opt, fmt.Errorf("valkey.tls.ca_file %s: no PEM certificate found", v.TLS.CAFile)
			}
			tc.RootCAs = pool
		}
		if v.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(v.TLS.CertFile, v.TLS.KeyFile)
			if err != nil {
				return opt, fmt.Errorf("valkey.tls: client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opt.TLSConfig = tc
		if v.Sentinel != nil {
			opt.Sentinel.TLSConfig = tc // the Sentinels too
		}
	}
	return opt, nil
}

// ConnectValkey returns a store that connects with opt in the background,
// retrying with backoff (up to 5s between attempts) until it succeeds or
// Close is called. Several addresses make a cluster client (valkey-go
// detects the mode).
func ConnectValkey(opt valkey.ClientOption, log *slog.Logger) *ValkeyStore {
	ctx, cancel := context.WithCancel(context.Background())
	s := &ValkeyStore{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		delay := 100 * time.Millisecond
		for attempt := 1; ; attempt++ {
			client, err := valkey.NewClient(opt)
			if err == nil {
				st, err2 := valkeystore.New(client)
				if err2 == nil {
					s.mu.Lock()
					if ctx.Err() != nil {
						s.mu.Unlock()
						client.Close()
						return
					}
					s.client = client
					s.store.Store(st)
					for pw := range s.pending {
						pw.stop = st.WatchDeletes(pw.prefix, pw.w)
					}
					s.pending = nil
					s.mu.Unlock()
					log.Info("connected to valkey", "addresses", opt.InitAddress, "attempt", attempt)
					s.checkRisks(ctx, st, log)
					return
				}
				client.Close()
				err = err2
			}
			if attempt == 1 || attempt%10 == 0 {
				log.Warn("cannot connect to valkey yet; deciding by each policy's on_failure",
					"addresses", opt.InitAddress, "attempt", attempt, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(delay*2, 5*time.Second)
		}
	}()
	return s
}

// Do implements sluice.Store.
func (s *ValkeyStore) Do(ctx context.Context, batch []sluice.Op) error {
	st := s.store.Load()
	if st == nil {
		return ErrNotConnected
	}
	return st.Do(ctx, batch)
}

// Delete implements sluice.Store.
func (s *ValkeyStore) Delete(ctx context.Context, keys ...string) error {
	st := s.store.Load()
	if st == nil {
		return ErrNotConnected
	}
	return st.Delete(ctx, keys...)
}

// DeleteNotify implements sluice.DeleteNotifier.
func (s *ValkeyStore) DeleteNotify(ctx context.Context, prefix string, keys ...string) (int, error) {
	st := s.store.Load()
	if st == nil {
		return 0, ErrNotConnected
	}
	return st.DeleteNotify(ctx, prefix, keys...)
}

// WatchDeletes implements sluice.DeleteNotifier. Before the connection is
// made the watcher is not watching (its deny cache answers nothing); it is
// registered with the store once connected.
func (s *ValkeyStore) WatchDeletes(prefix string, w sluice.DeleteWatcher) (stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.store.Load(); st != nil {
		return st.WatchDeletes(prefix, w)
	}
	pw := &pendingWatch{prefix: prefix, w: w}
	if s.pending == nil {
		s.pending = map[*pendingWatch]bool{}
	}
	s.pending[pw] = true
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.pending, pw)
		if pw.stop != nil {
			pw.stop()
			pw.stop = nil
		}
	}
}

// Ping reports whether Valkey answers.
func (s *ValkeyStore) Ping(ctx context.Context) error {
	st := s.store.Load()
	if st == nil {
		return ErrNotConnected
	}
	return st.Ping(ctx)
}

// riskCheck is what Store.Risks found when the store connected.
type riskCheck struct {
	risks   []valkeystore.Risk
	checked bool // false: some node's settings could not be read
}

// checkRisks reads the server settings that lose counts or refuse
// decisions (Store.Risks), logs a warning for each, and keeps them for
// the metrics. A server where CONFIG is disabled is said so, not failed.
func (s *ValkeyStore) checkRisks(ctx context.Context, st *valkeystore.Store, log *slog.Logger) {
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
func (s *ValkeyStore) Risks() ([]valkeystore.Risk, bool) {
	rc := s.risks.Load()
	if rc == nil {
		return nil, false
	}
	return rc.risks, rc.checked
}

// Close stops connecting and closes the client.
func (s *ValkeyStore) Close() {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		s.client.Close()
	}
}

// Breakers returns the state of the circuit breaker of each Valkey node
// (valkeystore.Store.Breakers); empty before the first connection.
func (s *ValkeyStore) Breakers() map[string]valkeystore.BreakerState {
	st := s.store.Load()
	if st == nil {
		return map[string]valkeystore.BreakerState{}
	}
	return st.Breakers()
}
