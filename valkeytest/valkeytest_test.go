package valkeytest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

func TestMain(m *testing.M) { valkeytest.Main(m) }

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStandalone(t *testing.T) {
	t.Parallel()
	s := valkeytest.Start(t, "--maxmemory", "64mb")
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Fatalf("Addr = %q", s.Addr)
	}
	c := s.Client(t)
	ctx := ctxT(t, 5*time.Second)
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Do(ctx, c.B().Get().Key("k").Build()).ToString(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v", got, err)
	}
	// No persistence, and the extra args reached the command line.
	cfg, err := c.Do(ctx, c.B().ConfigGet().Parameter("save", "appendonly", "maxmemory").Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["save"] != "" || cfg["appendonly"] != "no" || cfg["maxmemory"] != fmt.Sprint(64<<20) {
		t.Fatalf("config = %v", cfg)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := valkeytest.Start(t)
	c := s.Client(t)
	if err := c.Do(ctxT(t, 5*time.Second), c.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s.Pause(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	err := c.Do(ctx, c.B().Set().Key("p").Value("1").Build()).Error()
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SET on a paused server: err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("SET on a paused server took %v", d)
	}
	s.Resume(t)
	if err := c.Do(ctxT(t, 5*time.Second), c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	s := valkeytest.Start(t)
	addr := s.Addr
	c := s.Client(t)
	if err := c.Do(ctxT(t, 5*time.Second), c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s.Kill(t)
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatal("port still accepts connections after Kill")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := c.Do(ctx, c.B().Get().Key("k").Build()).Error()
	cancel()
	if err == nil {
		t.Fatal("GET on a killed server succeeded")
	}
	s.Kill(t) // idempotent

	s.Restart(t)
	if s.Addr != addr {
		t.Fatalf("Addr after Restart = %s, want %s", s.Addr, addr)
	}
	// The old client reconnects; the data is gone (no persistence).
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.Do(ctxT(t, time.Second), c.B().Get().Key("k").Build()).Error()
		if valkey.IsValkeyNil(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET after Restart: %v, want nil reply", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	s.Stop()
	s.Restart(t) // after Stop too
	if err := s.Client(t).Do(ctxT(t, 5*time.Second), c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("PING after Stop and Restart: %v", err)
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	ft := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		valkeytest.Start(ft, "--no-such-option", "x")
	}()
	<-done
	if !ft.fatal {
		t.Fatal("Start with a bad option did not fail")
	}
	if !strings.Contains(ft.logs.String(), "no-such-option") {
		t.Fatalf("failure log does not show the server's output:\n%s", ft.logs.String())
	}
}

// fakeT records Logf and Fatalf instead of failing the real test.
type fakeT struct {
	testing.TB
	logs  strings.Builder
	fatal bool
}

func (f *fakeT) Helper()                         {}
func (f *fakeT) Logf(format string, args ...any) { fmt.Fprintf(&f.logs, format+"\n", args...) }
func (f *fakeT) Fatalf(format string, args ...any) {
	f.Logf(format, args...)
	f.fatal = true
	runtimeGoexit()
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cl := valkeytest.StartCluster(t, 3)
	t.Logf("3-primary cluster started in %v", time.Since(start))
	if len(cl.Addrs) != 3 || len(cl.Primaries) != 3 || len(cl.Replicas) != 0 {
		t.Fatalf("Addrs = %v, %d primaries, %d replicas", cl.Addrs, len(cl.Primaries), len(cl.Replicas))
	}
	c := cl.Client(t)
	ctx := ctxT(t, 10*time.Second)
	const n = 300
	cmds := make(valkey.Commands, 0, 2*n)
	for i := range n {
		cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("vt:c:%d", i)).Value("x").Px(time.Minute).Build())
		cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("other:%d", i)).Value("x").Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
	// The keys really are spread: every primary holds some.
	for _, p := range cl.Primaries {
		pc := p.Client(t)
		nk, err := pc.Do(ctx, pc.B().Dbsize().Build()).AsInt64()
		if err != nil || nk == 0 {
			t.Fatalf("DBSIZE on %s = %d, %v", p.Addr, nk, err)
		}
	}
	keys, err := valkeytest.Keys(ctx, c, "vt:c:*")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != n {
		t.Fatalf("Keys found %d keys, want %d", len(keys), n)
	}
	if err := c.Do(ctx, c.B().Persist().Key("vt:c:7").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	ttls, err := valkeytest.TTLs(ctx, c, "vt:c:*")
	if err != nil {
		t.Fatal(err)
	}
	if len(ttls) != n {
		t.Fatalf("TTLs has %d keys, want %d", len(ttls), n)
	}
	for k, d := range ttls {
		switch {
		case k == "vt:c:7":
			if d != valkeytest.NoExpiry {
				t.Errorf("TTL of persisted %s = %v, want NoExpiry", k, d)
			}
		case d <= 50*time.Second || d > time.Minute:
			t.Errorf("TTL of %s = %v, want about 1m", k, d)
		}
	}
}

func TestClusterReplicas(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cl := valkeytest.StartCluster(t, 2, valkeytest.WithReplicas(1))
	t.Logf("2-primary cluster with 2 replicas started in %v", time.Since(start))
	if len(cl.Replicas) != 2 {
		t.Fatalf("%d replicas, want 2", len(cl.Replicas))
	}
	c := cl.Client(t)
	ctx := ctxT(t, 10*time.Second)
	for i := range 50 {
		if err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("r:%d", i)).Value("x").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	// Keys skips replicas, so nothing is counted twice.
	keys, err := valkeytest.Keys(ctx, c, "r:*")
	if err != nil || len(keys) != 50 {
		t.Fatalf("Keys = %d keys, %v; want 50", len(keys), err)
	}
}

func TestKeysStandalone(t *testing.T) {
	t.Parallel()
	s := valkeytest.Shared(t)
	c := s.Client(t)
	ctx := ctxT(t, 5*time.Second)
	cmds := make(valkey.Commands, 0, 2500)
	for i := range 2500 { // more than one SCAN page
		cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("ks:%d", i)).Value("x").Ex(time.Hour).Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := valkeytest.Keys(ctx, c, "ks:*")
	if err != nil || len(keys) != 2500 {
		t.Fatalf("Keys = %d keys, %v; want 2500", len(keys), err)
	}
	ttls, err := valkeytest.TTLs(ctx, c, "ks:1*")
	if err != nil || len(ttls) != 1111 {
		t.Fatalf("TTLs = %d keys, %v; want 1111", len(ttls), err)
	}
	if ttls["ks:1"] <= 59*time.Minute {
		t.Fatalf("TTL of ks:1 = %v", ttls["ks:1"])
	}
	if got, _ := valkeytest.TTLs(ctx, c, "nothing:*"); len(got) != 0 {
		t.Fatalf("TTLs of no keys = %v", got)
	}
}

func TestShared(t *testing.T) {
	t.Parallel()
	a, b := valkeytest.Shared(t), valkeytest.Shared(t)
	if a != b {
		t.Fatal("Shared returned two servers")
	}
	ca, cb := valkeytest.SharedCluster(t), valkeytest.SharedCluster(t)
	if ca != cb || len(ca.Addrs) != 3 {
		t.Fatalf("SharedCluster: %p %p, %d primaries", ca, cb, len(ca.Addrs))
	}
	c := ca.Client(t)
	if err := c.Do(ctxT(t, 5*time.Second), c.B().Set().Key("shared:{x}").Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

func TestBlackhole(t *testing.T) {
	t.Parallel()
	addr := valkeytest.Blackhole(t)
	c := valkeytest.ClientTo(t, addr, func(o *valkey.ClientOption) { o.Dialer.Timeout = 200 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Do(ctx, c.B().Ping().Build()).Error()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PING to a blackhole: err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("PING to a blackhole took %v", d)
	}
}

func TestClosedAddr(t *testing.T) {
	t.Parallel()
	addr := valkeytest.ClosedAddr(t)
	_, err := net.DialTimeout("tcp", addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	c := valkeytest.ClientTo(t, addr)
	err = c.Do(ctxT(t, 500*time.Millisecond), c.B().Ping().Build()).Error()
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("PING to a closed port: %v, want connection refused", err)
	}
}

// TestSlot: known slots (from the cluster specification's examples and
// CLUSTER KEYSLOT) and hash tags.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"foo": 12182, "bar": 5061, "123456789": 12739,
		"{user1000}.following": 3443, "{user1000}.followers": 3443, "user1000": 3443,
		"foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061,
	} {
		if got := valkeytest.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}
