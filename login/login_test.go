package login

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// clock is sluicetest's fake clock.
type clock = sluicetest.Clock

func newGuard(t testing.TB, store driver.Store, cfg Config) (*Guard, *clock) {
	t.Helper()
	c := sluicetest.NewClockAt(time.Unix(1_700_000_000, 0))
	cfg.Store = store
	if cfg.Secret == nil {
		cfg.Secret = secret
	}
	cfg.Options = append(cfg.Options, sluice.WithClock(c.Now), sluice.WithLogger(slog.New(slog.DiscardHandler)))
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, c
}

func TestPerUsernameAndPerAddress(t *testing.T) {
	g, c := newGuard(t, memstore.New(), Config{
		PerUsername: sluice.SlidingLog{Limit: 3, Window: time.Minute},
		PerAddress:  sluice.SlidingLog{Limit: 5, Window: time.Minute},
	})
	ctx := context.Background()
	type step struct {
		user, addr string
		allowed    bool
		tripped    Tripped
	}
	steps := []step{
		// A distributed attack on alice: each address tries once.
		{"alice", "192.0.2.1", true, 0},
		{"Alice ", "192.0.2.2", true, 0}, // same user after normalisation
		{"ALICE", "192.0.2.3", true, 0},
		{"alice", "192.0.2.4", false, TrippedUsername},
		// Bob is unaffected, even from an address that tried alice.
		{"bob", "192.0.2.1", true, 0},
		// One address trying many users.
		{"u1", "198.51.100.9", true, 0},
		{"u2", "198.51.100.9", true, 0},
		{"u3", "198.51.100.9", true, 0},
		{"u4", "198.51.100.9", true, 0},
		{"u5", "198.51.100.9", true, 0},
		{"u6", "198.51.100.9", false, TrippedAddress},
		// Both at once.
		{"alice", "198.51.100.9", false, TrippedUsername | TrippedAddress},
	}
	for i, s := range steps {
		v, err := g.Attempt(ctx, s.user, ip(s.addr))
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed != s.allowed || v.Tripped != s.tripped {
			t.Fatalf("step %d %+v: got allowed=%v tripped=%v", i, s, v.Allowed, v.Tripped)
		}
		if v.Allowed != (v.RetryAfter == 0) {
			t.Fatalf("step %d: RetryAfter %v with allowed=%v", i, v.RetryAfter, v.Allowed)
		}
	}
	// The refused attempt of u6 took nothing from u6's own count.
	v, _ := g.Attempt(ctx, "u6", ip("192.0.2.200"))
	if !v.Allowed || v.Username.Remaining != 2 {
		t.Fatalf("u6 from elsewhere: %+v", v)
	}
	// Success clears alice's count; the addresses keep theirs.
	if err := g.Success(ctx, "  alice"); err != nil {
		t.Fatal(err)
	}
	if v, _ := g.Attempt(ctx, "alice", ip("192.0.2.5")); !v.Allowed || v.Username.Remaining != 2 {
		t.Fatalf("after success: %+v", v)
	}
	if v, _ := g.Attempt(ctx, "zed", ip("198.51.100.9")); v.Tripped != TrippedAddress {
		t.Fatalf("address count cleared by a username success: %+v", v)
	}
	if err := g.ResetAddress(ctx, ip("198.51.100.9")); err != nil {
		t.Fatal(err)
	}
	if v, _ := g.Attempt(ctx, "zed", ip("198.51.100.9")); !v.Allowed {
		t.Fatalf("after ResetAddress: %+v", v)
	}
	// The window passes.
	c.Advance(time.Minute)
	for i := range 3 {
		if v, _ := g.Attempt(ctx, "mallory", ip("192.0.2.9")); !v.Allowed {
			t.Fatalf("after the window, attempt %d refused: %+v", i, v)
		}
	}
}

// The guard's answers do not depend on whether an account exists: it never
// looks. Two usernames, one real and one not, get identical verdicts.
func TestSameAnswerForUnknownAccounts(t *testing.T) {
	store := memstore.New()
	g, _ := newGuard(t, store, Config{})
	ctx := context.Background()
	for i := range 8 {
		real, err := g.Attempt(ctx, "alice@example.com", ip("192.0.2.1"))
		if err != nil {
			t.Fatal(err)
		}
		ghost, err := g.Attempt(ctx, "nobody@example.com", ip("192.0.2.2"))
		if err != nil {
			t.Fatal(err)
		}
		if real != ghost {
			t.Fatalf("attempt %d: existing %+v, unknown %+v", i, real, ghost)
		}
	}
}

func TestKeysHideUsernames(t *testing.T) {
	store := memstore.New()
	g, _ := newGuard(t, store, Config{})
	ctx := context.Background()
	if _, err := g.Attempt(ctx, "Alice@Example.com", ip("2001:db8::1")); err != nil {
		t.Fatal(err)
	}
	keys := store.TTLs("rl:")
	if len(keys) != 2 {
		t.Fatalf("keys %v", keys)
	}
	for k, ttl := range keys {
		if strings.Contains(strings.ToLower(k), "alice") || strings.Contains(k, "example") {
			t.Errorf("key %q holds the username", k)
		}
		if ttl <= 0 || ttl > 16*time.Minute {
			t.Errorf("key %q TTL %v", k, ttl)
		}
	}
	// Another secret, another key.
	g2, _ := newGuard(t, store, Config{Secret: []byte("another secret of 32 bytes......")})
	if g.UsernameKey("alice") == g2.UsernameKey("alice") {
		t.Error("the key does not depend on the secret")
	}
}

func TestNormalize(t *testing.T) {
	same := [][]string{
		{"alice@example.com", "Alice@Example.COM", "  alice@example.com\t", "\u00a0alice@example.com\u3000"},
		{"admin", "ＡＤＭＩＮ", "Admin"}, // full-width
		{"strasse", "Straße", "STRASSE"},
		{"café", "cafe\u0301", "CAFÉ"}, // composed and decomposed
	}
	for _, group := range same {
		for _, s := range group[1:] {
			if Normalize(s) != Normalize(group[0]) {
				t.Errorf("Normalize(%q) = %q, Normalize(%q) = %q", s, Normalize(s), group[0], Normalize(group[0]))
			}
		}
	}
	if Normalize("alice") == Normalize("alice2") || Normalize("a b") == Normalize("ab") {
		t.Error("distinct usernames normalise alike")
	}
}

// failing is a store that is always unavailable.
type failing struct{}

func (failing) Do(ctx context.Context, batch []driver.Op) error {
	for i := range batch {
		batch[i].Err = errors.New("connection refused")
	}
	return nil
}

func (failing) Delete(context.Context, ...string) error { return errors.New("connection refused") }

func TestFailClosedByDefault(t *testing.T) {
	ctx := context.Background()
	g, _ := newGuard(t, failing{}, Config{})
	v, err := g.Attempt(ctx, "alice", ip("192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Allowed || !v.Degraded || v.Tripped != TrippedUsername|TrippedAddress || v.RetryAfter <= 0 {
		t.Fatalf("fail closed: %+v", v)
	}
	if err := g.Success(ctx, "alice"); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("Success on a dead store: %v", err)
	}
	g, _ = newGuard(t, failing{}, Config{FailOpen: true})
	if v, _ := g.Attempt(ctx, "alice", ip("192.0.2.1")); !v.Allowed || !v.Degraded {
		t.Fatalf("fail open: %+v", v)
	}
}

func TestConfigErrors(t *testing.T) {
	store := memstore.New()
	for _, cfg := range []Config{
		{Secret: secret},
		{Store: store},
		{Store: store, Secret: []byte("short")},
		{Store: store, Secret: secret, PerUsername: sluice.SlidingLog{Limit: 0, Window: time.Minute}},
		{Store: store, Secret: secret, PerAddress: sluice.FixedWindow{Limit: 1}},
		{Store: store, Secret: secret, Name: "bad name"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	g, _ := newGuard(t, store, Config{})
	if _, err := g.Attempt(context.Background(), "alice", netip.Addr{}); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("zero address: %v", err)
	}
	if err := g.ResetAddress(context.Background(), netip.Addr{}); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("ResetAddress of the zero address: %v", err)
	}
	if u, a := g.Limiters(); u.Name() != "login-user" || a.Name() != "login-addr" || u.FailMode() != sluice.FailClosed {
		t.Errorf("limiters %s %s %v", u.Name(), a.Name(), u.FailMode())
	}
	if TrippedAddress.String() != "address" || Tripped(0).String() != "none" || (TrippedUsername|TrippedAddress).String() != "username+address" {
		t.Error("Tripped.String")
	}
}

// FuzzUsernameKey checks that usernames with distinct canonical forms get
// distinct keys, equal forms equal keys, and that a key never shows the
// username: it is always "user:" and 64 hex digits.
func FuzzUsernameKey(f *testing.F) {
	for _, s := range [][2]string{
		{"alice", "Alice"}, {"alice", "alice "}, {"a:b", "a\\:b"}, {"", " "}, {"ß", "ss"},
		{"ＡＤＭＩＮ", "admin"}, {"\xff", "\xfe"}, {"user:x", "x"},
	} {
		f.Add(s[0], s[1])
	}
	g, err := New(Config{Store: memstore.New(), Secret: secret})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := g.UsernameKey(a), g.UsernameKey(b)
		for _, k := range []string{ka, kb} {
			if len(k) != len("user:")+64 || !strings.HasPrefix(k, "user:") || strings.Trim(k[5:], "0123456789abcdef") != "" {
				t.Fatalf("key %q", k)
			}
		}
		if (Normalize(a) == Normalize(b)) != (ka == kb) {
			t.Fatalf("%q→%q and %q→%q: keys equal %v", a, Normalize(a), b, Normalize(b), ka == kb)
		}
		if n := Normalize(a); Normalize(n) != n {
			t.Fatalf("Normalize is not idempotent on %q: %q then %q", a, n, Normalize(n))
		}
	})
}
