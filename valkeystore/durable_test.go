package valkeystore_test

import (
	"context"
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

// TestReplicationRollback measures what asynchronous replication can cost
// in a failover: decisions allowed while the replica lagged (here: the
// link from the primary held, what it carries meanwhile lost)
// are lost when the primary dies and the replica is promoted, and given
// again. With WithReplicaAck(1) a decision the replica did not acknowledge
// within its deadline is decided by the fail mode (closed: refused), so
// every admission the store granted survives the promotion.
func TestReplicationRollback(t *testing.T) {
	const before, during = 10, 20
	for _, ack := range []int{0, 1} {
		name := "async"
		var opts []valkeystore.Option
		if ack > 0 {
			name = "replica-ack"
			opts = append(opts, valkeystore.WithReplicaAck(ack))
		}
		t.Run(name, func(t *testing.T) {
			primary := valkeytest.Start(t)
			link := startLink(t, primary.Addr)
			replica := valkeytest.StartReplica(t, link.addr)
			policy := sluice.FixedWindow{Limit: 1000, Window: time.Hour}
			obs := &errLog{}
			// One limiter, with a long timeout while the replica is in
			// sync (a loaded machine may take a while to acknowledge) and
			// a short one while it lags (each decision waits that long).
			limiter := func(s *valkeystore.Store, timeout time.Duration) *sluice.Limiter {
				l, err := sluice.New(s, policy, sluice.WithName("quota"), sluice.WithFailMode(sluice.FailClosed),
					sluice.WithTimeout(timeout), sluice.WithDenyCache(false), sluice.WithLogger(discardLogger), sluice.WithObserver(obs))
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			s, err := valkeystore.New(primary.Client(t), append(opts, valkeystore.WithoutBreaker())...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			granted := 0
			decide := func(l *sluice.Limiter, n int) (degraded int) {
				for range n {
					res, err := l.Allow(ctx, "k")
					if err != nil {
						t.Fatal(err)
					}
					if res.Degraded {
						degraded++
					} else if res.Allowed {
						granted++
					}
				}
				return degraded
			}
			if d := decide(limiter(s, 5*time.Second), before); d != 0 {
				t.Fatalf("%d of %d decisions degraded with the replica in sync (errors %v)", d, before, obs.summary())
			}
			caughtUp(t, primary, replica)
			link.held.Store(true)
			lagging := decide(limiter(s, 100*time.Millisecond), during)
			primary.Kill(t)
			replica.Promote(t)

			s2, err := valkeystore.New(replica.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			res, err := limiter(s2, 5*time.Second).Peek(ctx, "k")
			if err != nil || res.Degraded {
				t.Fatalf("after the promotion: %+v, %v", res, err)
			}
			kept := int(policy.Limit - res.Remaining)
			lost := granted - kept
			t.Logf("%s: %d admissions granted by the store (%d before the lag, %d decisions while the replica lagged, %d of them degraded); the promoted replica counts %d: %d lost",
				name, granted, before, during, lagging, kept, lost)
			if ack == 0 {
				if lost != during {
					t.Errorf("%d admissions lost, want the %d made while the replica lagged", lost, during)
				}
			} else {
				if lost != 0 {
					t.Errorf("%d admissions lost with WithReplicaAck, want none", lost)
				}
				if lagging != during {
					t.Errorf("%d of %d decisions degraded while the replica lagged, want all", lagging, during)
				}
			}
		})
	}
}

// caughtUp waits until replica has everything primary wrote
// (master_repl_offset of both in INFO replication).
func caughtUp(t *testing.T, primary, replica *valkeytest.Server) {
	t.Helper()
	offset := func(s *valkeytest.Server) int64 {
		v, err := s.Do("INFO", "replication")
		info, _ := v.(string)
		for _, line := range strings.Split(info, "\r\n") {
			if x, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				n, _ := strconv.ParseInt(x, 10, 64)
				return n
			}
		}
		t.Fatalf("%s: no master_repl_offset: %v %q", s.Addr, err, info)
		return 0
	}
	want := offset(primary)
	deadline := time.Now().Add(10 * time.Second)
	for offset(replica) < want {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s behind %s after 10s", replica.Addr, primary.Addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// link relays TCP connections to target; while held, what target sends is
// dropped (a replication stream that stops reaching its replica).
type link struct {
	addr string
	held atomic.Bool
}

func startLink(t *testing.T, target string) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{addr: ln.Addr().String()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
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
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				io.Copy(out, in)
				out.Close()
			}()
			go func() {
				defer wg.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := out.Read(buf)
					if n > 0 && !l.held.Load() {
						if _, err := in.Write(buf[:n]); err != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				in.Close()
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
	return l
}
