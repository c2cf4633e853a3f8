package valkeystore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// TestConnectWhileValkeyIsDown: a store built by Connect while nothing
// listens on its address starts without error, decides by each limiter's
// fail mode within its timeout meanwhile, and decides normally once a
// valkey-server starts on that address.
func TestConnectWhileValkeyIsDown(t *testing.T) {
	noLeak(t)
	srv := valkeytest.Start(t)
	srv.Kill(t) // the address now refuses connections
	lazy, err := valkeystore.Connect(valkey.ClientOption{InitAddress: []string{srv.Addr}}, valkeystore.WithLogger(discardLogger))
	if err != nil {
		t.Fatalf("Connect with Valkey down: %v", err)
	}
	defer lazy.Close()
	const timeout = 250 * time.Millisecond
	mk := func(name string, mode sluice.FailMode) *sluice.Limiter {
		l, err := sluice.New(lazy, sluice.FixedWindow{Limit: 2, Window: time.Hour}, sluice.WithName(name),
			sluice.WithPrefix("connect:"+t.Name()), sluice.WithTimeout(timeout), sluice.WithFailMode(mode),
			sluice.WithLogger(discardLogger))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	open, closed := mk("open", sluice.FailOpen), mk("closed", sluice.FailClosed)
	ctx := context.Background()
	for range 3 {
		for _, c := range []struct {
			l    *sluice.Limiter
			want bool
		}{{open, true}, {closed, false}} {
			begin := time.Now()
			res, err := c.l.Allow(ctx, "k")
			took := time.Since(begin)
			if err != nil || !res.Degraded || res.Allowed != c.want {
				t.Fatalf("%s with Valkey down: %+v, %v; want degraded, allowed %v", c.l.Name(), res, err, c.want)
			}
			if took > timeout+time.Second { // a generous margin for a loaded machine
				t.Errorf("%s decided in %v with Valkey down, want within its timeout %v", c.l.Name(), took, timeout)
			}
		}
	}
	if err := lazy.Ping(ctx); !errors.Is(err, valkeystore.ErrNotConnected) {
		t.Errorf("Ping before the first connection: %v, want ErrNotConnected", err)
	}
	if lazy.Store() != nil {
		t.Error("Store() is not nil before the first connection")
	}

	srv.Restart(t)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := lazy.Wait(wctx); err != nil {
		t.Fatalf("not connected 30s after Valkey started: %v", err)
	}
	for _, l := range []*sluice.Limiter{open, closed} {
		for i, want := range []bool{true, true, false} {
			res, err := l.Allow(ctx, "k")
			if err != nil || res.Degraded || res.Allowed != want {
				t.Fatalf("%s decision %d with Valkey up: %+v, %v; want decided by Valkey, allowed %v", l.Name(), i, res, err, want)
			}
		}
	}
}

// TestConnectRefuses: what Connect cannot honour is an error at once, and
// New refuses Connect's option.
func TestConnectRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  valkey.ClientOption
		opts []valkeystore.Option
		want string
	}{
		{"no address", valkey.ClientOption{}, nil, "no address"},
		{"no pipelining", valkey.ClientOption{InitAddress: []string{"127.0.0.1:1"}, DisableAutoPipelining: true}, nil, "DisableAutoPipelining"},
		{"bad option", valkey.ClientOption{InitAddress: []string{"127.0.0.1:1"}}, []valkeystore.Option{valkeystore.WithMaxKeysPerCall(0)}, "max keys per call"},
	} {
		l, err := valkeystore.Connect(c.opt, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			if l != nil {
				l.Close()
			}
			t.Errorf("%s: Connect error %v, want one saying %q", c.name, err, c.want)
		}
	}
	srv := valkeytest.Start(t)
	if _, err := valkeystore.New(srv.Client(t), valkeystore.WithLogger(discardLogger)); err == nil || !strings.Contains(err.Error(), "Connect") {
		t.Errorf("New with WithLogger: %v, want an error saying it is Connect's", err)
	}
}

// TestConnectClosedWhileDown: Close ends the connecting goroutine while
// Valkey is still down, and Wait then says so.
func TestConnectClosedWhileDown(t *testing.T) {
	noLeak(t)
	lazy, err := valkeystore.Connect(valkey.ClientOption{InitAddress: []string{valkeytest.ClosedAddr(t)}}, valkeystore.WithLogger(discardLogger))
	if err != nil {
		t.Fatal(err)
	}
	lazy.Close()
	if _, err := lazy.Wait(context.Background()); !errors.Is(err, valkeystore.ErrClosed) {
		t.Errorf("Wait after Close: %v, want ErrClosed", err)
	}
}

// TestConnectTimeoutKeepsSharedConnection: the failure AlwaysPipelining
// prevents, on a store built by Connect from options that do not mention
// it. With the server stalled, a 50ms decision is sent first and a 3s
// decisions after it; the server answers again after 300ms. The 50ms
// decision times out (degraded), and the 3s ones must still be decided by
// Valkey: without AlwaysPipelining, valkey-go sends the lone 50ms call with
// the connection's read deadline set to its own, and its timeout closes the
// connection, failing the 3s calls that wait on it. valkey-go picks one of
// its connections to a node at random for each call, so there are 8 3s
// calls (without batching, each its own call): that none shares the 50ms
// call's connection is a chance of 1 in 2^8 on two cores, 1 in 4^8 on more.
func TestConnectTimeoutKeepsSharedConnection(t *testing.T) {
	srv := valkeytest.Start(t)
	lazy, err := valkeystore.Connect(valkey.ClientOption{InitAddress: []string{srv.Addr}},
		valkeystore.WithLogger(discardLogger), valkeystore.WithBatching(0))
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	ctx := context.Background()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := lazy.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	prefix := "connect:" + t.Name()
	short, err := sluice.New(lazy, sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1e6}, sluice.WithName("short"),
		sluice.WithPrefix(prefix), sluice.WithTimeout(50*time.Millisecond), sluice.WithFailMode(sluice.FailOpen), sluice.WithLogger(discardLogger))
	if err != nil {
		t.Fatal(err)
	}
	long, err := sluice.New(lazy, sluice.FixedWindow{Limit: 1e6, Window: time.Hour}, sluice.WithName("long"),
		sluice.WithPrefix(prefix), sluice.WithTimeout(3*time.Second), sluice.WithFailMode(sluice.FailClosed), sluice.WithLogger(discardLogger))
	if err != nil {
		t.Fatal(err)
	}
	// Scripts loaded and every connection open: valkey-go opens a node's
	// connections on first use, each call picking one at random, and a call
	// that opens one during the stall fails the calls that wait for it with
	// its own deadline (the path the deadline layer documents), which is
	// not what this test is about. 200 calls leave one of 8 connections
	// unopened with a chance of 8 in (8/7)^200, about 2e-11.
	for _, l := range []*sluice.Limiter{short, long} {
		for range 200 {
			if res, err := l.Allow(ctx, "k"); err != nil || res.Degraded {
				t.Fatalf("%s before the stall: %+v, %v", l.Name(), res, err)
			}
		}
	}
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	const longs = 8
	shortRes, longRes := make(chan sluice.Result, 1), make(chan sluice.Result, longs)
	go func() {
		res, _ := short.Allow(ctx, "k")
		shortRes <- res
	}()
	time.Sleep(10 * time.Millisecond) // the 50ms call is on its connection first
	for range longs {
		go func() {
			res, _ := long.Allow(ctx, "k")
			longRes <- res
		}()
	}
	time.Sleep(300 * time.Millisecond)
	srv.Resume(t)
	resumed = true
	if res := <-shortRes; !res.Degraded {
		t.Errorf("the 50ms decision with the server stalled 300ms: %+v, want degraded (is the server paused?)", res)
	}
	for range longs {
		if res := <-longRes; res.Degraded || !res.Allowed {
			t.Errorf("a 3s decision with the server stalled 300ms: %+v, want decided by Valkey: the 50ms call's timeout closed the connection they shared", res)
		}
	}
}
