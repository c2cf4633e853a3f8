package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/sluicehq/sluice/driver"
)

// ErrNotConnected is the error of a Lazy's calls until its first
// connection to Valkey: limiters decide by their fail mode meanwhile.
var ErrNotConnected = errors.New("valkeystore: not connected to valkey yet")

// ErrClosed is the error of Lazy.Wait once the Lazy is closed.
var ErrClosed = errors.New("valkeystore: closed")

// WithLogger is where Connect reports its connection attempts (default
// slog.Default()): the first failure and every tenth after it, as
// warnings, and the connection. It is an option of Connect only: New
// refuses it.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(e *engine) {
		if l == nil {
			l = slog.Default()
		}
		e.connectLog = l
	})
}

// WithConnectError gives Connect a function that turns a failed connection
// attempt's error into the one reported (nil: the error as it is), such as
// one naming the setting that fixes a refused password. It is an option of
// Connect only: New refuses it.
func WithConnectError(explain func(error) error) Option {
	return optionFunc(func(e *engine) { e.connectExplain = explain })
}

// A Lazy is a driver.Store on Valkey that connects in the background, so
// that a service starts, and decides by its limiters' fail modes, while
// Valkey is unreachable (a restart during an outage is then no crash loop).
// Until the first connection every call fails at once with an error
// matching ErrNotConnected (which, when Valkey answered the last attempt
// with a refusal, such as NOAUTH or WRONGPASS, says so: retrying alone
// will not connect); from then on it is the Store that connection made. It
// owns its client: Close closes it. It is safe for concurrent use.
type Lazy struct {
	store atomic.Pointer[Store]
	// refused is the error of the calls before the first connection when
	// Valkey refused the last attempt (a reply, not a network error); nil
	// otherwise (ErrNotConnected).
	refused atomic.Pointer[error]
	ready   chan struct{} // closed when store is set
	mu      sync.Mutex
	client  valkey.Client
	// pending are the delete watchers registered before the connection
	// (under mu): they are not watching until it is made.
	pending map[*pendingWatch]bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the connecting goroutine ends
}

// Connect returns a Lazy that builds a valkey-go client from opt (a
// standalone server, Sentinels, or a cluster: valkey-go detects which) and
// a Store on it with opts, retrying in the background with backoff (from
// 100ms to 5s between attempts) until it succeeds or Close is called.
//
// Connect sets what the store needs of the client: AlwaysPipelining, so
// that every call is queued on the shared connections and a call whose
// deadline passes does not close a connection other calls use. It refuses
// (with an error, at once) what it cannot honour: no address,
// DisableAutoPipelining (which turns AlwaysPipelining off), and invalid
// opts. It never fails because Valkey is down.
func Connect(opt valkey.ClientOption, opts ...Option) (*Lazy, error) {
	if len(opt.InitAddress) == 0 {
		return nil, errors.New("valkeystore: no address to connect to (ClientOption.InitAddress)")
	}
	if opt.DisableAutoPipelining {
		return nil, errors.New("valkeystore: DisableAutoPipelining turns off AlwaysPipelining, without which a call that times out closes a connection other calls share")
	}
	e, err := configure(opts)
	if err != nil {
		return nil, err
	}
	log := e.connectLog
	if log == nil {
		log = slog.Default()
	}
	opt.AlwaysPipelining = true
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lazy{ready: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go l.connect(ctx, opt, opts, log)
	return l, nil
}

// connect is the connecting goroutine of Connect.
func (l *Lazy) connect(ctx context.Context, opt valkey.ClientOption, opts []Option, log *slog.Logger) {
	defer close(l.done)
	e0, _ := configure(opts) // checked by Connect
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		client, err := valkey.NewClient(opt)
		if err == nil && e0.wrapClient != nil {
			client = e0.wrapClient(client)
		}
		if err == nil {
			e, _ := configure(opts) // checked by Connect
			st := e.start(client)
			l.mu.Lock()
			if ctx.Err() != nil {
				l.mu.Unlock()
				client.Close()
				return
			}
			l.client = client
			l.store.Store(st)
			for pw := range l.pending {
				pw.stop = st.WatchDeletes(pw.prefix, pw.w)
			}
			l.pending = nil
			close(l.ready)
			l.mu.Unlock()
			log.Info("connected to valkey", "addresses", opt.InitAddress, "attempt", attempt)
			return
		}
		l.failed(err, e0.connectExplain, opt.InitAddress, attempt, log)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// failed records and reports a failed connection attempt: logged on the
// first attempt and every tenth, as an error when Valkey refused it (a
// reply: its settings must change), as a warning otherwise.
func (l *Lazy) failed(err error, explain func(error) error, addrs []string, attempt int, log *slog.Logger) {
	ve, reply := valkey.IsValkeyErr(err)
	auth := reply && (strings.HasPrefix(ve.Error(), "NOAUTH") || strings.HasPrefix(ve.Error(), "WRONGPASS"))
	if explain != nil {
		err = explain(err)
	}
	l.noteRefusal(err, reply)
	if attempt != 1 && attempt%10 != 0 {
		return
	}
	switch {
	case auth:
		log.Error("valkey refused to authenticate; deciding by each limiter's fail mode until the credentials are fixed",
			"addresses", addrs, "attempt", attempt, "err", err.Error())
	case reply:
		log.Error("valkey refused the connection; deciding by each limiter's fail mode until its settings are fixed",
			"addresses", addrs, "attempt", attempt, "err", err.Error())
	default:
		log.Warn("cannot connect to valkey yet; deciding by each limiter's fail mode",
			"addresses", addrs, "attempt", attempt, "err", err)
	}
}

// noteRefusal keeps err as the calls' error when Valkey refused the
// connection (a reply), and forgets the last refusal otherwise.
func (l *Lazy) noteRefusal(err error, reply bool) {
	if !reply {
		l.refused.Store(nil)
		return
	}
	e := fmt.Errorf("%w: %w", ErrNotConnected, err)
	l.refused.Store(&e)
}

// notConnected is the calls' error before the first connection.
func (l *Lazy) notConnected() error {
	if e := l.refused.Load(); e != nil {
		return *e
	}
	return ErrNotConnected
}

// Store returns the Store of the first connection, or nil before it.
func (l *Lazy) Store() *Store { return l.store.Load() }

// Wait returns the Store once connected, or ctx's error, or ErrClosed
// after Close.
func (l *Lazy) Wait(ctx context.Context) (*Store, error) {
	select {
	case <-l.ready:
		return l.store.Load(), nil
	default:
	}
	select {
	case <-l.ready:
		return l.store.Load(), nil
	case <-l.done:
		if st := l.store.Load(); st != nil {
			return st, nil
		}
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Do implements driver.Store.
func (l *Lazy) Do(ctx context.Context, batch []driver.Op) error {
	st := l.store.Load()
	if st == nil {
		return l.notConnected()
	}
	return st.Do(ctx, batch)
}

// TransientKeys implements driver.TransientKeys: before the connection
// Do keeps nothing, and after it Do is the Store's, which copies the keys
// (Store.TransientKeys). A type embedding a *Lazy inherits it, as it
// inherits Store's.
func (l *Lazy) TransientKeys() {}

var _ driver.TransientKeys = (*Lazy)(nil)

// Delete implements driver.Store.
func (l *Lazy) Delete(ctx context.Context, keys ...string) error {
	st := l.store.Load()
	if st == nil {
		return l.notConnected()
	}
	return st.Delete(ctx, keys...)
}

// Ping is Store.Ping once connected, and ErrNotConnected before.
func (l *Lazy) Ping(ctx context.Context) error {
	st := l.store.Load()
	if st == nil {
		return l.notConnected()
	}
	return st.Ping(ctx)
}

// Breakers is Store.Breakers once connected; empty before.
func (l *Lazy) Breakers() map[string]BreakerState {
	st := l.store.Load()
	if st == nil {
		return map[string]BreakerState{}
	}
	return st.Breakers()
}

// DeleteNotify implements driver.DeleteNotifier.
func (l *Lazy) DeleteNotify(ctx context.Context, prefix string, keys ...string) (int, error) {
	st := l.store.Load()
	if st == nil {
		return 0, l.notConnected()
	}
	return st.DeleteNotify(ctx, prefix, keys...)
}

type pendingWatch struct {
	prefix string
	w      driver.DeleteWatcher
	stop   func() // the store's, once connected
}

// WatchDeletes implements driver.DeleteNotifier. Before the connection is
// made the watcher is not watching (a deny cache answers nothing); it is
// registered with the store once connected.
func (l *Lazy) WatchDeletes(prefix string, w driver.DeleteWatcher) (stop func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.store.Load(); st != nil {
		return st.WatchDeletes(prefix, w)
	}
	pw := &pendingWatch{prefix: prefix, w: w}
	if l.pending == nil {
		l.pending = map[*pendingWatch]bool{}
	}
	l.pending[pw] = true
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.pending, pw)
		if pw.stop != nil {
			pw.stop()
			pw.stop = nil
		}
	}
}

// Penalties implements driver.Penalizer, as the Store it connects to does.
func (l *Lazy) Penalties() bool { return true }

// PutOverride implements driver.OverrideStore.
func (l *Lazy) PutOverride(ctx context.Context, index, key string, rec driver.OverrideRecord) error {
	st := l.store.Load()
	if st == nil {
		return l.notConnected()
	}
	return st.PutOverride(ctx, index, key, rec)
}

// GetOverride implements driver.OverrideStore.
func (l *Lazy) GetOverride(ctx context.Context, key string) (driver.OverrideRecord, bool, error) {
	st := l.store.Load()
	if st == nil {
		return driver.OverrideRecord{}, false, l.notConnected()
	}
	return st.GetOverride(ctx, key)
}

// DeleteOverride implements driver.OverrideStore.
func (l *Lazy) DeleteOverride(ctx context.Context, index, key, identity string) error {
	st := l.store.Load()
	if st == nil {
		return l.notConnected()
	}
	return st.DeleteOverride(ctx, index, key, identity)
}

// ListOverrides implements driver.OverrideStore.
func (l *Lazy) ListOverrides(ctx context.Context, index string, keyOf func(string) string) ([]driver.OverrideRecord, error) {
	st := l.store.Load()
	if st == nil {
		return nil, l.notConnected()
	}
	return st.ListOverrides(ctx, index, keyOf)
}

// Close stops connecting and closes the client. Calls after it fail with
// ErrNotConnected, or with valkey-go's error for a closed client.
func (l *Lazy) Close() {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.client != nil {
		l.client.Close()
	}
}

var (
	_ driver.Store          = (*Lazy)(nil)
	_ driver.OverrideStore  = (*Lazy)(nil)
	_ driver.DeleteNotifier = (*Lazy)(nil)
	_ driver.Penalizer      = (*Lazy)(nil)
)
