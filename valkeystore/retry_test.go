package valkeystore_test

// Safe retries: a script call refused by a reply that proves it did not
// run is sent again once, within the deadline; after a timeout or a broken
// connection (the script may have run) it never is. An injector between
// the client and a real server answers chosen script calls itself, or
// breaks the connection after forwarding one.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// An injector relays commands one at a time from its clients to a server.
// For the n-th script call (EVALSHA or EVAL, counted from 1), act says
// what to do: "" forwards it; a string starting with '-' is answered as
// that error without forwarding; "reset" forwards it, then closes the
// client's connection without the reply; "hang" forwards it and holds the
// reply back for two seconds.
type injector struct {
	addr    string
	scripts atomic.Int64 // script calls received
	act     func(n int64) string
}

func startInjector(t *testing.T, target string, act func(n int64) string) *injector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inj := &injector{addr: ln.Addr().String(), act: act}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	keep := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			keep(in)
			keep(out)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer in.Close()
				defer out.Close()
				inj.relay(in, out)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return inj
}

func (inj *injector) relay(in, out net.Conn) {
	cr, sr := bufio.NewReader(in), bufio.NewReader(out)
	for {
		raw, args, err := readRESP(cr)
		if err != nil {
			return
		}
		act := ""
		if len(args) > 0 && strings.HasPrefix(strings.ToUpper(args[0]), "EVAL") {
			act = inj.act(inj.scripts.Add(1))
		}
		if strings.HasPrefix(act, "-") {
			if _, err := in.Write([]byte(act + "\r\n")); err != nil {
				return
			}
			continue
		}
		if _, err := out.Write(raw); err != nil {
			return
		}
		reply, _, err := readRESP(sr)
		if err != nil {
			return
		}
		switch act {
		case "reset":
			if tc, ok := in.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset, not a clean close
			}
			return
		case "hang":
			time.Sleep(2 * time.Second)
		}
		if _, err := in.Write(reply); err != nil {
			return
		}
	}
}

// readRESP reads one complete RESP2 or RESP3 value and returns its bytes,
// and the strings of an array of blob strings (a command).
func readRESP(r *bufio.Reader) ([]byte, []string, error) {
	var raw []byte
	var args []string
	var one func(top bool) error
	one = func(top bool) error {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return err
		}
		raw = append(raw, line...)
		if len(line) < 3 {
			return fmt.Errorf("short RESP line %q", line)
		}
		body := string(line[1 : len(line)-2])
		switch line[0] {
		case '$', '!', '=': // blob string, blob error, verbatim string
			n, err := strconv.Atoi(body)
			if err != nil || n < 0 {
				return err // a null ($-1) has no body
			}
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return err
			}
			raw = append(raw, buf...)
			if !top {
				args = append(args, string(buf[:n]))
			}
		case '*', '~', '>', '%', '|': // array, set, push, map, attribute
			n, err := strconv.Atoi(body)
			if err != nil || n < 0 {
				return err
			}
			if line[0] == '%' || line[0] == '|' {
				n *= 2
			}
			for range n {
				if err := one(false); err != nil {
					return err
				}
			}
			if line[0] == '|' { // an attribute precedes the value it annotates
				return one(top)
			}
		}
		return nil
	}
	err := one(true)
	return raw, args, err
}

// retryRig is a store through an injector, with one limiter of limit 10.
func retryRig(t *testing.T, act func(n int64) string, timeout time.Duration) (*injector, *sluice.Limiter, *errLog) {
	t.Helper()
	srv := valkeytest.Shared(t)
	inj := startInjector(t, srv.Addr, act)
	s, err := valkeystore.New(valkeytest.ClientTo(t, inj.addr), valkeystore.WithoutBreaker())
	if err != nil {
		t.Fatal(err)
	}
	obs := &errLog{}
	l, err := sluice.New(s, sluice.FixedWindow{Limit: 10, Window: time.Hour}, sluice.WithName("retry"),
		// A prefix of its own per run: the shared server outlives -count.
		sluice.WithPrefix("retry:"+strings.ReplaceAll(t.Name(), "/", ":")+":"+strconv.FormatInt(time.Now().UnixNano(), 36)), sluice.WithTimeout(timeout),
		sluice.WithObserver(obs), sluice.WithLogger(discardLogger))
	if err != nil {
		t.Fatal(err)
	}
	return inj, l, obs
}

// TestRetryNotRun: each refusal that proves a script did not run, on the
// first script call only, costs nothing: the decision is made by Valkey on
// the second call, and counted once.
func TestRetryNotRun(t *testing.T) {
	for _, reply := range []string{
		"-LOADING Valkey is loading the dataset in memory",
		"-TRYAGAIN Multiple keys request during rehashing of slot",
		"-CLUSTERDOWN The cluster is down",
		"-READONLY You can't write against a read only replica.",
		"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
		"-MOVED 3999 127.0.0.1:6381",
		"-ASK 3999 127.0.0.1:6381",
	} {
		name := strings.Fields(reply)[0][1:]
		t.Run(name, func(t *testing.T) {
			var first atomic.Int64 // the script call to refuse: the first EVALSHA of the decision
			inj, l, obs := retryRig(t, func(n int64) string {
				if n == first.Load() {
					return reply
				}
				return ""
			}, time.Second)
			ctx := context.Background()
			// The first script call may be NOSCRIPT then EVAL: load the
			// script with nothing injected.
			if _, err := l.Peek(ctx, "warm"); err != nil {
				t.Fatal(err)
			}
			first.Store(inj.scripts.Load() + 1)
			res, err := l.Allow(ctx, "k")
			if err != nil || res.Degraded || !res.Allowed || res.Remaining != 9 {
				t.Fatalf("after one %s: %+v, %v (errors %v); want allowed by Valkey, 9 left", name, res, err, obs.summary())
			}
			if n := inj.scripts.Load() - first.Load() + 1; n != 2 {
				t.Errorf("%d script calls for one decision refused once, want 2", n)
			}
		})
	}
}

// TestRetryNever: after a broken connection or a timeout the script may
// have run, and it is not sent again; an error reply not in the list is
// not retried either; and a refusal that repeats is retried only once.
func TestRetryNever(t *testing.T) {
	for _, tc := range []struct {
		name    string
		act     string
		always  bool
		counted bool // whether the script ran
	}{
		{"reset", "reset", false, true},
		{"timeout", "hang", false, true},
		{"other-error", "-ERR something else", false, false},
		{"loading-repeated", "-LOADING Valkey is loading the dataset in memory", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first atomic.Int64
			inj, l, obs := retryRig(t, func(n int64) string {
				if n == first.Load() || tc.always && first.Load() > 0 && n > first.Load() {
					return tc.act
				}
				return ""
			}, 500*time.Millisecond) // past a loaded machine's reconnection, short of the held reply
			ctx := context.Background()
			if _, err := l.Peek(ctx, "warm"); err != nil {
				t.Fatal(err)
			}
			first.Store(inj.scripts.Load() + 1)
			begin := time.Now()
			res, err := l.Allow(ctx, "k")
			took := time.Since(begin)
			if err != nil || !res.Degraded {
				t.Fatalf("%+v, %v; want a degraded decision", res, err)
			}
			if took > failBound {
				t.Errorf("decided after %v, want within %v", took, failBound)
			}
			want := int64(1)
			if tc.always {
				want = 2
			}
			if n := inj.scripts.Load() - first.Load() + 1; n != want {
				t.Errorf("%d script calls, want %d", n, want)
			}
			first.Store(-1)
			if tc.act == "hang" {
				time.Sleep(2 * time.Second) // the held reply is gone
			}
			// How many units the failed decision took: one if the script ran.
			var res2 sluice.Result
			for range 20 { // the connection may take a moment to come back
				if res2, err = l.Peek(ctx, "k"); err == nil && !res2.Degraded {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			wantLeft := int64(10)
			if tc.counted {
				wantLeft = 9
			}
			if res2.Degraded || res2.Remaining != wantLeft {
				t.Errorf("after the failed decision: %+v; want %d left", res2, wantLeft)
			}
			t.Logf("%s: degraded in %v; errors %v", tc.name, took, obs.summary())
		})
	}
}
