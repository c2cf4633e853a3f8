package verify

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"github.com/valkey-io/valkey-go"
)

// faultProxy is a local TCP proxy to a Valkey server that can fail on
// command: stop listening and drop its connections (a server gone: nothing
// listens), or keep them open and never answer again (a server hung).
type faultProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	hung   bool
	closed bool
	wg     sync.WaitGroup
}

func startFaultProxy(target string) (*faultProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &faultProxy{l: l, target: target}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *faultProxy) Addr() string { return p.l.Addr().String() }

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		p.conns = append(p.conns, c, up)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies from src to dst until the proxy hangs; then it reads and
// discards src, answering nothing.
func (p *faultProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if werr := p.pass(dst, buf[:n]); werr != nil {
			return
		}
		if err != nil {
			return
		}
	}
}

// pass writes b to dst, unless the proxy hangs.
func (p *faultProxy) pass(dst net.Conn, b []byte) error {
	if len(b) == 0 || p.isHung() {
		return nil
	}
	_, err := dst.Write(b)
	return err
}

// isHung reports whether the proxy hangs.
func (p *faultProxy) isHung() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hung
}

// Hang makes the proxy a black hole: connections stay open, nothing is
// answered.
func (p *faultProxy) Hang() {
	p.mu.Lock()
	p.hung = true
	p.mu.Unlock()
}

// Close stops listening and closes every connection: the port then
// refuses connections.
func (p *faultProxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.l.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// failure points the policy, with its own timeout and on_failure, at a
// local proxy to the deployment's first Valkey address, makes sure it
// answers, then makes the proxy fail: first by hanging (a listener that
// never answers), then by closing (nothing listening). Each decision must
// come within the policy's timeout plus the margin, and within the
// black-hole wait, degraded and decided as on_failure says.
func (r *run) failure(ctx context.Context, p *config.Policy, chk *Check) {
	timeout := r.timeout(p)
	bound := min(timeout+r.opts.Margin, r.opts.BlackholeWait)
	chk.fig("timeout_ms", ms(timeout))
	chk.fig("bound_ms", ms(bound))
	if timeout > r.opts.BlackholeWait {
		chk.fail("the policy's timeout %v is longer than the black-hole wait %v: while Valkey hangs, every request would wait %v",
			timeout, r.opts.BlackholeWait, timeout)
	}
	want := p.FailMode == sluice.FailOpen
	verb := map[bool]string{true: "allowed", false: "refused"}[want]
	var parts []string
	for _, fault := range []string{"never answers", "nothing listening"} {
		slowest, n, err := r.fault(ctx, p, fault, want, bound, chk)
		if err != nil {
			chk.fail("%s: %v", fault, err)
			continue
		}
		key := map[string]string{"never answers": "blackhole", "nothing listening": "refused"}[fault]
		chk.fig(key+"_slowest_ms", ms(slowest))
		chk.fig(key+"_decisions", float64(n))
		parts = append(parts, fmt.Sprintf("%s: %d decisions %s (on_failure %s), slowest %v", fault, n, verb, p.FailMode, slowest.Round(time.Millisecond/10)))
	}
	chk.Detail = fmt.Sprintf("%s; bound %v", join(parts, "; "), bound)
}

// failDecisions is how many decisions each fault gets: enough to see the
// circuit breaker open (after 5 failures) and decide at once.
const failDecisions = 8

// fault puts a proxy before the primary, connects p's limiter through it,
// brings about the fault (the proxy hangs, or closes), and checks the
// decisions made during it.
func (r *run) fault(ctx context.Context, p *config.Policy, fault string, want bool, bound time.Duration, chk *Check) (slowest time.Duration, n int, err error) {
	v := *r.cfg.Valkey
	px, err := startFaultProxy(r.primary)
	if err != nil {
		return 0, 0, err
	}
	defer px.Close()
	v.Addresses, v.Sentinel = []string{px.Addr()}, nil
	// One server behind the proxy, whatever the topology: the check is
	// about the client's timeout and fail mode.
	conn, err := store.Open(ctx, &v, r.opts.Env, store.WithClientName("sluice"), store.WithClientOption(r.throughProxy))
	if err != nil {
		return 0, 0, fmt.Errorf("connecting through the proxy, before the fault: %w", err)
	}
	// The proxy goes first: a client closing over a hung connection waits.
	defer func() {
		px.Close()
		conn.Close()
	}()
	l, err := sluice.New(conn.Store, p.Policy, sluice.WithName(p.Limiter), sluice.WithPrefix(r.prefix),
		sluice.WithTimeout(r.timeout(p)), sluice.WithFailMode(p.FailMode), sluice.WithDenyCache(false),
		sluice.WithLogger(r.log))
	if err != nil {
		return 0, 0, err
	}
	if fault == "never answers" {
		px.Hang()
	} else {
		px.Close()
	}
	return r.faultDecisions(ctx, l, p, fault, want, bound, chk)
}

// throughProxy sets the client options of a connection to the primary
// through the proxy: one server, and TLS that checks the primary's name.
func (r *run) throughProxy(opt *valkey.ClientOption) {
	opt.ForceSingleClient = true
	if opt.TLSConfig != nil && opt.TLSConfig.ServerName == "" {
		host, _, _ := net.SplitHostPort(r.primary)
		opt.TLSConfig.ServerName = host
	}
}

// faultAnswer is a decision made during a fault.
type faultAnswer struct {
	res sluice.Result
	err error
}

// judgeFaultDecision fails chk unless decision i, a, made during fault
// and taking took, was degraded, decided as on_failure says (want), and
// within bound.
func judgeFaultDecision(chk *Check, p *config.Policy, fault string, i int, a faultAnswer, took time.Duration, want bool, bound time.Duration) {
	switch {
	case a.err != nil:
		chk.fail("%s: decision %d: %v", fault, i+1, a.err)
	case !a.res.Degraded:
		chk.fail("%s: decision %d was not degraded: %+v", fault, i+1, a.res)
	case a.res.Allowed != want:
		chk.fail("%s: decision %d: allowed %v, but on_failure is %s", fault, i+1, a.res.Allowed, p.FailMode)
	}
	if took > bound {
		chk.fail("%s: decision %d took %v, longer than %v", fault, i+1, took.Round(time.Millisecond), bound)
	}
}

// faultDecisions makes failDecisions decisions on l during the fault and
// checks each is degraded, decided as on_failure says, within bound; it
// returns the slowest and how many were made.
func (r *run) faultDecisions(ctx context.Context, l *sluice.Limiter, p *config.Policy, fault string, want bool, bound time.Duration, chk *Check) (slowest time.Duration, n int, err error) {
	for i := range failDecisions {
		done := make(chan faultAnswer, 1)
		start := time.Now()
		go func() {
			res, err := decideOnce(ctx, l, p)
			done <- faultAnswer{res, err}
		}()
		select {
		case a := <-done:
			took := time.Since(start)
			slowest = max(slowest, took)
			n++
			judgeFaultDecision(chk, p, fault, i, a, took, want, bound)
		case <-time.After(r.opts.BlackholeWait):
			slowest = max(slowest, r.opts.BlackholeWait)
			chk.fail("%s: no decision within the black-hole wait of %v (the policy's timeout is %v)", fault, r.opts.BlackholeWait, r.timeout(p))
			return slowest, n, nil
		case <-ctx.Done():
			return slowest, n, ctx.Err()
		}
	}
	return slowest, n, nil
}

// decideOnce makes one decision of p on l: an Allow, or for an in_flight
// policy an Acquire whose lease (a degraded one under fail open) is
// released at once.
func decideOnce(ctx context.Context, l *sluice.Limiter, p *config.Policy) (sluice.Result, error) {
	if _, ok := p.Policy.(sluice.InFlight); !ok {
		return l.Allow(ctx, "failure")
	}
	ls, res, err := l.Acquire(ctx, "failure")
	if ls != nil {
		if _, rerr := ls.Release(ctx); rerr != nil && err == nil {
			err = fmt.Errorf("releasing a degraded lease: %w", rerr)
		}
	}
	return res, err
}

func join(parts []string, sep string) string {
	out := ""
	for i, s := range parts {
		if i > 0 {
			out += sep
		}
		out += s
	}
	return out
}
