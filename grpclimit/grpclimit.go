// Package grpclimit limits gRPC servers: unary and stream server
// interceptors that decide each call with Sluice limiters, keyed by the
// peer's address, a metadata value, the method, or any function of the call.
//
// A refused call fails with status RESOURCE_EXHAUSTED (or the refusing
// limit's Limit.DenyCode) carrying a
// google.rpc.RetryInfo detail (the delay after which the same call will be
// allowed, as sluice.Result.RetryAfter) and a google.rpc.QuotaFailure
// naming the limits that refused (a violation whose description begins
// "blocked by the limit's penalty" when a limit's penalty blocks the key,
// sluice.WithPenalty: the retry is then the block's end). A stream is decided once, when it opens;
// its messages are not counted.
//
//	lim, _ := sluice.New(store, sluice.GCRA{Rate: 10, Per: time.Second, Burst: 20}, sluice.WithName("rpc"))
//	in, _ := grpclimit.New(grpclimit.Config{Limits: []grpclimit.Limit{
//		{Limiter: lim, Key: grpclimit.PeerAddr()},
//	}})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
//
// A Limit whose Limiter enforces sluice.InFlight (at most N calls at once
// per key) takes a lease for each allowed call and holds it while the call
// runs: a unary call until its handler returns, a stream until it ends. A
// call that outlives the Lease has it renewed (sluice.Hold); when a
// renewal finds the lease ended, the call's context is canceled with the
// error (wrapping sluice.ErrLeaseLost) as its cause.
//
// When the store cannot decide, each limiter's fail mode does (sluice's
// Degraded results); a degraded refusal is RESOURCE_EXHAUSTED too.
//
// A [Config] configures an Interceptor: it is data (what a configuration file or a
// flag set fills in, and a zero field its default), not the functional
// options (Option) with which package sluice and the stores configure
// what their constructors build; the Limiters in it carry those.
package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/waiting"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A KeyFunc returns the identity a limit counts a call against. An empty
// identity means it found none: the Limit's Missing says whether the call
// is then refused (the default), counted by a fallback KeyFunc, or skipped
// by the limit. fullMethod is "/package.Service/Method".
type KeyFunc func(ctx context.Context, fullMethod string) string

// PeerAddr keys calls by the peer's IP address ("ip:<address>"), IPv6
// grouped by /64 as package clientip groups it; the same identity as
// httplimit.ClientAddr, so HTTP and gRPC traffic of one client share a
// count when they share a limiter. Calls over a connection without an IP
// peer (a Unix socket) are keyed "ip:unknown". Behind a proxy the peer is
// the proxy: key by metadata the proxy sets instead.
func PeerAddr() KeyFunc {
	res := clientip.MustNew(clientip.Config{})
	return func(ctx context.Context, _ string) string {
		key := clientip.Unknown
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			if a, ok := clientip.ParseAddr(p.Addr.String()); ok {
				key = res.KeyOf(a)
			}
		}
		return sluice.Identity("ip", key)
	}
}

// Metadata keys calls by the first value of the named incoming metadata
// key (such as "x-api-key"), hashed with SHA-256 so that credentials never
// reach the store in clear: "metadata:<name>:<hex digest>". It finds no
// key for a call without it: Limit.Missing says what happens to the call
// (by default it is refused). Any client can send any value: pair it with a
// limit by PeerAddr, or authenticate first.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		vals := md.Get(name)
		if len(vals) == 0 || vals[0] == "" {
			return ""
		}
		sum := sha256.Sum256([]byte(vals[0]))
		return sluice.Identity("metadata", name, hex.EncodeToString(sum[:]))
	}
}

// Method keys calls by their full method name ("method:/pkg.Svc/Method"):
// a budget per method shared by all clients.
func Method() KeyFunc {
	return func(_ context.Context, fullMethod string) string {
		return sluice.Identity("method", fullMethod)
	}
}

// Limit is one limit the interceptors check.
type Limit struct {
	// Limiter decides. Required.
	Limiter *sluice.Limiter
	// Key says what the call counts against. Required.
	Key KeyFunc
	// Missing is what happens to a call Key finds no key for: Refuse (the
	// zero value: INVALID_ARGUMENT), Skip (the limit does not apply to it)
	// or FallBack (it is counted by another KeyFunc's key).
	Missing Missing
	// Methods, when not empty, restricts the limit to these full method
	// names ("/pkg.Svc/Method"); other calls are not limited by it.
	Methods []string
	// DenyCode is the status code of the calls this limit refuses
	// (default, the zero value: RESOURCE_EXHAUSTED; for example
	// UNAVAILABLE for a limit that protects capacity rather than
	// fairness). When several limits refuse a call, the one refused
	// longest chooses. New refuses it on a limiter in shadow mode (it
	// never refuses).
	DenyCode codes.Code
	// Wait is the longest a call this limit refuses may wait for
	// admission, all told, instead of failing (default 0: it fails at
	// once). A waiting call sleeps the refusal's RetryAfter and is decided
	// again, as sluice.Limiter.Wait does; it fails at once when the wait
	// would exceed the least Wait of the limits refusing it, or when
	// Config.MaxWaiting or MaxWaitingPerKey calls already wait. It takes
	// nothing while it waits, and a call whose client cancels leaves at
	// once. New refuses Wait on a limiter with CountRejected or in shadow
	// mode. An
	// in-flight limit's RetryAfter is only an upper bound (a release may
	// free a slot sooner): a call it refuses tries again after 5ms, then
	// each time twice as long (at most 100ms, and never past the
	// RetryAfter), and fails once the least Wait has passed.
	Wait time.Duration
}

// Config configures the interceptors.
type Config struct {
	// Limits are checked together on each call (sluice.AllowAll): the call
	// proceeds only if all that apply allow it, and a refusal takes nothing
	// from the others. At least one.
	Limits []Limit
	// Skip, when set and true for a call, lets it through unchecked (health
	// checks, reflection).
	Skip func(ctx context.Context, fullMethod string) bool
	// MaxWaiting bounds the calls waiting for admission at once
	// (Limit.Wait; default DefaultMaxWaiting), MaxWaitingPerKey those
	// waiting for one key of one limit (default DefaultMaxWaitingPerKey):
	// past them a call fails at once.
	MaxWaiting, MaxWaitingPerKey int
}

// Interceptor holds the checked configuration.
type Interceptor struct {
	cfg     Config
	methods []map[string]bool
	waits   bool // some limit has a Wait
	waiters *waiting.Places[waitKey]
}

// ErrInvalidConfig is returned by New for a Config it cannot honour.
var ErrInvalidConfig = errors.New("grpclimit: invalid config")

// New checks cfg and returns the interceptors' holder.
func New(cfg Config) (*Interceptor, error) {
	if len(cfg.Limits) == 0 {
		return nil, fmt.Errorf("%w: no limits", ErrInvalidConfig)
	}
	if err := checkWait(&cfg); err != nil {
		return nil, err
	}
	in := &Interceptor{cfg: cfg, waiters: waiting.NewPlaces[waitKey](cfg.MaxWaiting, cfg.MaxWaitingPerKey)}
	for i, l := range cfg.Limits {
		in.waits = in.waits || l.Wait > 0
		if err := l.check(i); err != nil {
			return nil, err
		}
		m, err := methodSet(i, l.Methods)
		if err != nil {
			return nil, err
		}
		in.methods = append(in.methods, m)
	}
	return in, nil
}

// check refuses the i-th Limit l without a Limiter or Key, or with a
// FallBack without a KeyFunc.
func (l *Limit) check(i int) error {
	switch {
	case l.Limiter == nil:
		return fmt.Errorf("%w: Limits[%d].Limiter is nil", ErrInvalidConfig, i)
	case l.Key == nil:
		return fmt.Errorf("%w: Limits[%d].Key is nil", ErrInvalidConfig, i)
	case l.Missing.kind == fallBack && l.Missing.fallback == nil:
		return fmt.Errorf("%w: Limits[%d].Missing: FallBack needs a KeyFunc", ErrInvalidConfig, i)
	case l.DenyCode > codes.Unauthenticated:
		return fmt.Errorf("%w: Limits[%d].DenyCode: %d is not a gRPC status code", ErrInvalidConfig, i, l.DenyCode)
	}
	return nil
}

// methodSet is the set of the i-th Limit's full method names (nil when it
// names none: every method), refusing a name that is not one.
func methodSet(i int, names []string) (map[string]bool, error) {
	var m map[string]bool
	for _, name := range names {
		if !strings.HasPrefix(name, "/") || strings.Count(name, "/") != 2 {
			return nil, fmt.Errorf("%w: Limits[%d].Methods: %q is not a full method name (/package.Service/Method)", ErrInvalidConfig, i, name)
		}
		if m == nil {
			m = map[string]bool{}
		}
		m[name] = true
	}
	return m, nil
}

// Unary returns the unary server interceptor.
func (in *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		leases, err := in.check(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if leases != nil {
			var stop func()
			ctx, stop = sluice.Hold(ctx, leases...)
			defer stop()
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor: a stream is decided once,
// when it opens.
func (in *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		leases, err := in.check(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		if leases != nil {
			ctx, stop := sluice.Hold(ss.Context(), leases...)
			defer stop()
			ss = &heldStream{ServerStream: ss, ctx: ctx}
		}
		return handler(srv, ss)
	}
}

// check decides a call: nil to proceed, with the leases of its in-flight
// limits, or the status error to return.
func (in *Interceptor) check(ctx context.Context, fullMethod string) ([]*sluice.Lease, error) {
	if in.cfg.Skip != nil && in.cfg.Skip(ctx, fullMethod) {
		return nil, nil
	}
	checks, denyCodes, limits, err := in.checks(ctx, fullMethod)
	if err != nil {
		return nil, err
	}
	if len(checks) == 0 {
		return nil, nil
	}
	d, err := in.decideWaiting(ctx, checks, limits)
	if err != nil {
		return nil, failure(ctx, err)
	}
	if d.Allowed {
		return d.Leases, nil
	}
	return nil, refusal(checks, denyCodes, d)
}

// checks are the checks of the limits that apply to a call of fullMethod,
// with their keys.
func (in *Interceptor) checks(ctx context.Context, fullMethod string) (checks []sluice.Check, denyCodes []codes.Code, limits []int, err error) {
	checks = make([]sluice.Check, 0, len(in.cfg.Limits))
	denyCodes = make([]codes.Code, 0, len(in.cfg.Limits))
	limits = make([]int, 0, len(in.cfg.Limits))
	for i := range in.cfg.Limits {
		l := &in.cfg.Limits[i]
		if m := in.methods[i]; m != nil && !m[fullMethod] {
			continue
		}
		key, err := l.keyOf(ctx, fullMethod)
		if err != nil {
			return nil, nil, nil, err
		}
		if key == "" { // Skip
			continue
		}
		checks = append(checks, sluice.Check{Limiter: l.Limiter, Key: key, Cost: 1})
		denyCodes = append(denyCodes, l.DenyCode)
		limits = append(limits, i)
	}
	return checks, denyCodes, limits, nil
}

// failure is the status of a decision that failed with err: a status the
// wait returned (the call's context ended while it waited), the call's
// own context error, or UNAVAILABLE.
func failure(ctx context.Context, err error) error {
	if _, ok := status.FromError(err); ok {
		return err // the call's context ended while it waited
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "rate limit decision failed: %v", err)
}

// heldStream is a stream whose context is the one its leases are held
// for (sluice.Hold): canceled, with the cause, when a renewal is lost.
type heldStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *heldStream) Context() context.Context { return s.ctx }

// refusal is the status of a refused decision: RESOURCE_EXHAUSTED, or
// the DenyCode (denyCodes[i] for checks[i]) of the limit refused longest.
func refusal(checks []sluice.Check, denyCodes []codes.Code, d sluice.Decision) error {
	qf := &errdetails.QuotaFailure{}
	var names []string
	code, longest := codes.ResourceExhausted, time.Duration(-1)
	for i, res := range d.Results {
		if res.Allowed {
			continue
		}
		if res.RetryAfter > longest {
			longest, code = res.RetryAfter, codes.ResourceExhausted
			if c := denyCodes[i]; c != codes.OK {
				code = c
			}
		}
		name := checks[i].Limiter.Name()
		names = append(names, name)
		desc := fmt.Sprintf("limit %d; retry after %v", res.Limit, res.RetryAfter)
		if res.Blocked {
			desc = fmt.Sprintf("blocked by the limit's penalty; retry after %v", res.RetryAfter)
		}
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{Subject: name, Description: desc})
	}
	st := status.New(code, "rate limited by "+strings.Join(names, ", "))
	withDetails, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter())}, qf)
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}
