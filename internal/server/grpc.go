package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Limits on an Envoy request, so one call cannot make unbounded work.
const (
	maxDescriptors = 64
	maxEntries     = 32
)

// NewGRPCServer returns a gRPC server with Envoy's RateLimitService and the
// standard health service registered, requests capped at 1 MiB, and a
// panic in a handler turned into an Internal error instead of a crash.
func (s *Server) NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(1 << 20),
		grpc.MaxConcurrentStreams(1024),
		grpc.ChainUnaryInterceptor(s.recoverUnary),
	}, opts...)
	g := grpc.NewServer(opts...)
	s.RegisterGRPC(g)
	healthpb.RegisterHealthServer(g, health.NewServer())
	return g
}

func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("panic in gRPC handler", "method", info.FullMethod, "panic", fmt.Sprint(v))
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	return h(ctx, req)
}

// RegisterGRPC registers Envoy's RateLimitService
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on g.
func (s *Server) RegisterGRPC(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, &rls{s: s})
}

type rls struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit decides every descriptor of the request, as
// envoyproxy/ratelimit does: each descriptor is matched against the
// domain's tree; one that matches no limit, or an unlimited one, is OK; the
// overall code is OVER_LIMIT when any descriptor is. The limited
// descriptors are decided together (sluice.AllowAll): units taken by the
// allowed ones are given back when another refuses. hits_addend is the cost
// (0 means 1); a descriptor's own hits_addend overrides it.
func (r *rls) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := r.s.shouldRateLimit(ctx, req)
	code := "error_" + status.Code(err).String()
	if err == nil {
		code = resp.OverallCode.String()
	}
	r.s.metrics.grpcRequests.WithLabelValues(code).Inc()
	return resp, err
}

func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if len(descs) > maxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d descriptors per request, got %d", maxDescriptors, len(descs))
	}
	st := s.state.Load()
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs)),
	}
	dom := st.cfg.Domain(req.GetDomain())
	var checks []sluice.Check
	var idx []int
	for i, d := range descs {
		ds := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = ds
		if dom == nil {
			continue // an unknown domain limits nothing, as in envoyproxy/ratelimit
		}
		if len(d.GetEntries()) > maxEntries {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: at most %d entries, got %d", i, maxEntries, len(d.GetEntries()))
		}
		if d.GetIsNegativeHits() {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: is_negative_hits is not supported", i)
		}
		entries := make([]config.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = config.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		node, matched := dom.Match(entries)
		if node == nil {
			continue
		}
		if node.Unlimited {
			ds.LimitRemaining = math.MaxUint32
			continue
		}
		if node.Deny {
			ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			ds.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: "deny", RequestsPerUnit: 0, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
			if node.Shadow {
				ds.Code = rlsv3.RateLimitResponse_OK
			}
			continue
		}
		p := st.policies[node.Policy]
		if p == nil {
			continue
		}
		if ov := d.GetLimit(); ov != nil {
			op, err := st.overrides.get(s, st, p, ov)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override: %v", i, err)
			}
			p = op
		}
		lim := p.limiter
		if node.Shadow {
			lim = p.shadow
		}
		cost := int64(req.GetHitsAddend())
		if cost == 0 {
			cost = 1
		}
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(h.GetValue(), math.MaxInt64))
		}
		ds.CurrentLimit = currentLimit(p.cfg)
		if cost > p.cfg.Limit {
			// Could never be allowed: over the limit, as envoyproxy/ratelimit
			// answers, without touching the counts.
			if !node.Shadow && !p.cfg.Shadow {
				ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			continue
		}
		checks = append(checks, sluice.Check{Limiter: lim, Key: identity(req.GetDomain(), matched), Cost: cost})
		idx = append(idx, i)
	}
	if len(checks) > 0 {
		for _, ds := range resp.Statuses {
			if ds.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
				// Already refused (requests_per_unit: 0, or more hits than the
				// limit): the others only look, so the refusal costs nothing.
				for k := range checks {
					checks[k].Cost = 0
				}
				break
			}
		}
		dec, err := sluice.AllowAll(ctx, checks)
		if err != nil {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return nil, status.Errorf(codes.Unavailable, "deciding: %v", err)
		}
		for k, res := range dec.Results {
			ds := resp.Statuses[idx[k]]
			if !res.Allowed {
				ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			ds.LimitRemaining = uint32(min(res.Remaining, math.MaxUint32))
			ds.DurationUntilReset = durationpb.New(res.ResetAfter)
			if !res.Allowed && res.RetryAfter > 0 {
				ds.DurationUntilReset = durationpb.New(max(res.RetryAfter, res.ResetAfter))
			}
		}
	}
	for _, ds := range resp.Statuses {
		if ds.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	return resp, nil
}

// identity is the key a descriptor is counted under: its domain and every
// entry, escaped so distinct descriptors never share a key.
func identity(domain string, entries []config.Entry) string {
	parts := make([]string, 0, 1+2*len(entries))
	parts = append(parts, domain)
	for _, e := range entries {
		parts = append(parts, e.Key, e.Value)
	}
	return sluice.Identity(parts...)
}

// currentLimit describes a policy in Envoy's terms: requests per unit when
// its window is one unit, else its limit per its window in seconds.
func currentLimit(p *config.Policy) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: p.Name, RequestsPerUnit: uint32(min(p.Limit, math.MaxUint32))}
	switch w := p.Window(); w {
	case time.Second:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	case time.Minute:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_MINUTE
	case time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_HOUR
	case 24 * time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_DAY
	case 7 * 24 * time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_WEEK
	default:
		// A window of several units: Envoy's unit_multiplier expresses it
		// for whole seconds.
		if w >= time.Second && w%time.Second == 0 && w/time.Second <= math.MaxUint32 {
			rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
			rl.UnitMultiplier = wrapperspb.UInt32(uint32(w / time.Second))
		}
	}
	return rl
}

// overrideCache holds limiters built for Envoy's per-request limit
// overrides (RateLimitDescriptor.limit), bounded so that clients cannot
// make the server build limiters without end.
type overrideCache struct {
	mu sync.Mutex
	m  map[string]*policy
}

const maxOverrides = 1024

func newOverrideCache() *overrideCache { return &overrideCache{m: make(map[string]*policy)} }

var overrideUnits = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second, typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR: time.Hour, typev3.RateLimitUnit_DAY: 24 * time.Hour,
	typev3.RateLimitUnit_MONTH: 30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:  365 * 24 * time.Hour,
}

// get returns a fixed-window policy for the override: the same descriptor
// and override always get the same limiter name, so the state is shared
// across calls and servers.
func (c *overrideCache) get(s *Server, st *state, base *policy, ov *commonrl.RateLimitDescriptor_RateLimitOverride) (*policy, error) {
	unit, ok := overrideUnits[ov.GetUnit()]
	if !ok {
		return nil, fmt.Errorf("unknown unit %v", ov.GetUnit())
	}
	mult := uint32(1)
	if m := ov.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	if ov.GetRequestsPerUnit() == 0 {
		return nil, errors.New("requests_per_unit must be positive")
	}
	window := unit * time.Duration(mult)
	id := base.cfg.Name + "\x00" + strconv.FormatUint(uint64(ov.GetRequestsPerUnit()), 10) + "\x00" + window.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.m[id]; p != nil {
		return p, nil
	}
	if len(c.m) >= maxOverrides {
		return nil, fmt.Errorf("more than %d distinct overrides", maxOverrides)
	}
	sum := sha256.Sum256([]byte(id))
	cp := *base.cfg
	cp.Name = base.cfg.Name + "~" + strconv.FormatUint(uint64(ov.GetRequestsPerUnit()), 10) + "/" + window.String()
	cp.Limiter = "override-" + hex.EncodeToString(sum[:12]) + ".fixed_window"
	cp.Algorithm = sluice.AlgorithmFixedWindow
	cp.Policy = sluice.FixedWindow{Limit: int64(ov.GetRequestsPerUnit()), Window: window}
	cp.Params = sluice.Params{Limit: int64(ov.GetRequestsPerUnit()), Window: window}
	cp.Limit = int64(ov.GetRequestsPerUnit())
	opts := []sluice.Option{
		sluice.WithName(cp.Limiter), sluice.WithPrefix(st.cfg.Prefix), sluice.WithFailMode(cp.FailMode),
		sluice.WithLogger(s.log), sluice.WithObserver(s.obs),
	}
	if cp.Timeout > 0 {
		opts = append(opts, sluice.WithTimeout(cp.Timeout))
	}
	lim, err := sluice.New(s.opts.Store, cp.Policy, append(opts, sluice.WithShadow(cp.Shadow))...)
	if err != nil {
		return nil, err
	}
	shadow, err := sluice.New(s.opts.Store, cp.Policy, append(opts, sluice.WithShadow(true))...)
	if err != nil {
		return nil, err
	}
	p := &policy{cfg: &cp, limiter: lim, shadow: shadow}
	c.m[id] = p
	return p, nil
}
