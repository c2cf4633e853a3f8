package envoy

import (
	"context"
	"fmt"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// Options tune Envoy's rate-limit protocol. The zero value is
// envoyproxy/ratelimit's default behaviour.
type Options struct {
	// MaxDescriptors bounds the descriptors of one call (default
	// DefaultMaxDescriptors); a call with more is answered
	// INVALID_ARGUMENT. It bounds the work one call can ask of the store.
	MaxDescriptors int
	// StopIncrementWhenOverLimit: when a descriptor of a call would go over
	// its limit, the others do not count the call's hits
	// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	StopIncrementWhenOverLimit bool
	// ShadowMode answers OK to every call (SHADOW_MODE), the descriptors'
	// statuses and metrics still telling what would have been refused.
	ShadowMode bool
	// NearLimitRatio is the share of a limit past which hits count as
	// near_limit (default 0.8, NEAR_LIMIT_RATIO).
	NearLimitRatio float64
	// MaxOverrides bounds the limiters the server caches for per-request
	// overrides (State.Override; default server.DefaultMaxOverrides), least
	// recently used evicted first.
	MaxOverrides int
	// MaxMetricSeries bounds the metric label sets made from request values
	// (default DefaultMaxMetricSeries).
	MaxMetricSeries int
	// QuotaMode puts every descriptor in quota mode (QUOTA_MODE).
	QuotaMode bool
	// ResponseDynamicMetadata adds the request and the metadata of the
	// passing descriptors to answers (RESPONSE_DYNAMIC_METADATA).
	ResponseDynamicMetadata bool
	// Now is the clock for durations until reset computed without the store
	// (default time.Now).
	Now func() time.Time
	// MaxConnectionAge and MaxConnectionAgeGrace bound a gRPC connection's
	// life (GRPC_MAX_CONNECTION_AGE, _GRACE; 0: unbounded), as gRPC's
	// keepalive.ServerParameters do.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// LocalCacheBytes, when positive, turns on envoyproxy/ratelimit's
	// local cache of counters over their limit, of about that size
	// (LOCAL_CACHE_SIZE_IN_BYTES; at least 512 KiB, as upstream's).
	LocalCacheBytes int64
	// ExtraLabels are labels added to every ratelimit_* metric (EXTRA_TAGS).
	ExtraLabels map[string]string
	// StoreHealth, when set, is asked by /healthcheck and the gRPC health
	// service's Check: an error answers not serving
	// (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
	StoreHealth func(context.Context) error
}

// DefaultMaxDescriptors is the default bound on descriptors per call.
const DefaultMaxDescriptors = 1024

const rlsService = "envoy.service.ratelimit.v3.RateLimitService"

// streamWorkers is how many goroutines serve gRPC calls, kept from call to
// call. Without them gRPC starts a goroutine per call, whose stack grows
// (is copied) through gRPC's and the handler's frames on every call: about
// an eighth of the service's CPU under load. Calls beyond this many at once
// get a goroutine of their own, as without workers; idle workers cost only
// their stacks.
const streamWorkers = 256

// NewGRPCServer returns a gRPC server with Envoy's RateLimitService, the
// standard health service and server reflection registered, requests
// capped at 1 MiB, and a panic in a handler turned into an Internal error
// instead of a crash.
func (s *Service) NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	if s.opts.MaxConnectionAge > 0 || s.opts.MaxConnectionAgeGrace > 0 {
		opts = append([]grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge: s.opts.MaxConnectionAge, MaxConnectionAgeGrace: s.opts.MaxConnectionAgeGrace})}, opts...)
	}
	opts = append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(1 << 20),
		grpc.MaxConcurrentStreams(1024),
		grpc.NumStreamWorkers(streamWorkers),
		grpc.UnaryInterceptor(s.unary),
		grpc.ForceServerCodecV2(lenientCodec{encoding.GetCodecV2(protoenc.Name)}),
	}, opts...)
	g := grpc.NewServer(opts...)
	s.RegisterGRPC(g)
	healthpb.RegisterHealthServer(g, &healthServer{Server: health.NewServer(), check: s.opts.StoreHealth})
	reflection.Register(g)
	return g
}

// unary is the server's one interceptor: it counts each call and its
// latency (envoyStats.observe) and turns a panic in its handler into an
// Internal error (recoverUnary). One interceptor rather than a chain of
// two: gRPC calls it directly, without the closures a chain makes per call.
func (s *Service) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := s.recoverUnary(ctx, req, info, h)
	s.stats.observe(info.FullMethod, start)
	return resp, err
}

func (s *Service) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("panic in gRPC handler", "method", info.FullMethod, "panic", fmt.Sprint(v))
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	return h(ctx, req)
}

// RegisterGRPC registers Envoy's RateLimitService
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on g. A
// request that does not decode (such as a string that is not UTF-8) is
// answered INVALID_ARGUMENT, where gRPC's generated handler would answer
// INTERNAL.
func (s *Service) RegisterGRPC(g grpc.ServiceRegistrar) {
	r := &rls{s: s}
	// One UnaryServerInfo for every call: the interceptors only read it.
	info := &grpc.UnaryServerInfo{Server: r, FullMethod: "/" + rlsService + "/ShouldRateLimit"}
	// One handler value for every call, not a closure made per call.
	handler := func(ctx context.Context, req any) (any, error) {
		return r.ShouldRateLimit(ctx, req.(*rlsv3.RateLimitRequest))
	}
	desc := grpc.ServiceDesc{
		ServiceName: rlsService,
		HandlerType: (*rlsv3.RateLimitServiceServer)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "ShouldRateLimit",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				raw := new(undecoded)
				if err := dec(raw); err != nil {
					return nil, err
				}
				in := &raw.req
				if raw.err != nil {
					r.s.stats.callErrors.WithLabelValues("service_error").Inc()
					return nil, status.Errorf(codes.InvalidArgument, "malformed RateLimitRequest: %v", raw.err)
				}
				if ic == nil {
					return r.ShouldRateLimit(ctx, in)
				}
				return ic(ctx, in, info, handler)
			},
		}},
		Streams:  []grpc.StreamDesc{},
		Metadata: "envoy/service/ratelimit/v3/rls.proto",
	}
	g.RegisterService(&desc, r)
}

// undecoded is a RateLimitRequest as lenientCodec decodes it: the request,
// or why it does not decode, and the room its usual descriptor is read
// into: a call's request is one allocation, its strings another.
type undecoded struct {
	req  rlsv3.RateLimitRequest
	err  error
	room wireRoom
}

// lenientCodec is gRPC's protobuf codec, except that a RateLimitRequest
// that does not decode is handed to the handler with its error (answered
// INVALID_ARGUMENT) instead of failing in gRPC (answered INTERNAL).
type lenientCodec struct{ encoding.CodecV2 }

// It reads and writes ShouldRateLimit's usual messages itself (wire.go),
// leaving the others to protobuf's codec.
func (c lenientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if u, ok := v.(*undecoded); ok {
		if len(data) == 1 && readWireRequest(data[0].ReadOnlyData(), &u.req, &u.room) {
			return nil
		}
		u.req.Reset()
		u.err = c.CodecV2.Unmarshal(data, &u.req)
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

func (c lenientCodec) Marshal(v any) (mem.BufferSlice, error) {
	if resp, ok := v.(*rlsv3.RateLimitResponse); ok {
		a := new(wireAnswer)
		b := a.room[:0]
		if n := 16 + 48*len(resp.Statuses); n > len(a.room) {
			b = make([]byte, 0, n)
		}
		if b, ok := appendWireResponse(b, resp); ok {
			a.bytes = b
			a.list[0] = &a.bytes // a SliceBuffer's methods are its pointer's too: no copy boxed
			return a.list[:], nil
		}
	}
	return c.CodecV2.Marshal(v)
}

// wireAnswer is an answer encoded in one allocation: the list of one
// buffer gRPC takes, the buffer, and room for the bytes of a usual answer
// (one descriptor's status). Nothing is pooled: gRPC's Free of a
// SliceBuffer does nothing, and the collector takes the block once gRPC
// has written it.
type wireAnswer struct {
	list  [1]mem.Buffer
	bytes mem.SliceBuffer
	room  [64]byte
}

type rls struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Service
}

// ShouldRateLimit decides every descriptor of the request as
// envoyproxy/ratelimit does: each is resolved to its limit (the domain's
// tree, or the request's own override), then the limits are decided (each
// counting its own hits, or all or nothing as the domain says), and the
// overall code is OVER_LIMIT when any descriptor is (quota-mode ones only
// when all of them are).
func (r *rls) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := r.s.shouldRateLimit(ctx, req, nil)
	switch {
	case err != nil:
		r.s.stats.grpcRequests.WithLabelValues("error_" + status.Code(err).String()).Inc()
	case resp.OverallCode == rlsv3.RateLimitResponse_OK:
		r.s.stats.callsOK.Inc()
	default:
		r.s.stats.grpcRequests.WithLabelValues(resp.OverallCode.String()).Inc()
	}
	return resp, err
}

// shouldRateLimit answers req; reuse, when not nil, is where the answer of
// a call of one descriptor is written instead of a new one.
func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest, reuse *oneAnswer) (*rlsv3.RateLimitResponse, error) {
	if err := s.checkRequest(req); err != nil {
		s.stats.callErrors.WithLabelValues("service_error").Inc()
		return nil, err
	}
	st := s.srv.Current()
	if st == nil {
		return nil, status.Error(codes.Unavailable, "no configuration loaded")
	}
	var resp *rlsv3.RateLimitResponse
	var blocks []statusBlock
	if n := len(req.GetDescriptors()); reuse != nil && n == 1 {
		resp, blocks = reuse.start()
	} else {
		resp, blocks = newAnswer(n)
	}
	dom := st.Config().Domain(req.GetDomain())
	if dom == nil {
		// An unknown domain limits nothing, as in envoyproxy/ratelimit.
		for i := range resp.Statuses {
			blocks[i].status.Code = rlsv3.RateLimitResponse_OK
			resp.Statuses[i] = &blocks[i].status
		}
		return resp, nil
	}
	// A call of up to smallCall descriptors resolves into this buffer
	// instead of allocating one.
	var rsBuf [smallCall]resolved
	rs, err := s.resolve(st, dom, req, rsBuf[:0])
	if err != nil {
		s.stats.callErrors.WithLabelValues("service_error").Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.decide(ctx, dom, rs, resp, blocks); err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		s.stats.callErrors.WithLabelValues("redis_error").Inc()
		return nil, status.Errorf(codes.Unavailable, "deciding: %v", err)
	}
	resp.OverallCode = s.overallCode(rs, resp.Statuses)
	if s.opts.ResponseDynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, rs, resp.Statuses)
	}
	return resp, nil
}

// checkRequest refuses what cannot be decided: no domain, no descriptors,
// more descriptors than the bound.
func (s *Service) checkRequest(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	n := len(req.GetDescriptors())
	if n == 0 {
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if max := s.maxDescriptors(); n > max {
		return status.Errorf(codes.InvalidArgument, "at most %d descriptors per call (--max-descriptors), got %d", max, n)
	}
	return nil
}

func (s *Service) maxDescriptors() int {
	if s.opts.MaxDescriptors > 0 {
		return s.opts.MaxDescriptors
	}
	return DefaultMaxDescriptors
}

func (s *Service) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}

// Decide answers req as ShouldRateLimit does (POST /json's path), without
// counting the call in the gRPC metrics.
func (s *Service) Decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return s.shouldRateLimit(ctx, req, nil)
}

// healthServer is gRPC's health service, whose Check of the server ("")
// or of the rate-limit service asks check first, when set: an error
// answers NOT_SERVING (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
type healthServer struct {
	*health.Server
	check func(context.Context) error
}

func (h *healthServer) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if h.check != nil && (req.GetService() == "" || req.GetService() == rlsService) {
		if err := h.check(ctx); err != nil {
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
		}
	}
	return h.Server.Check(ctx, req)
}
