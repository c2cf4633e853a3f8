package envoy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	yaml "go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// CONFIG_TYPE=GRPC_XDS_SOTW: the configuration comes from an xDS
// management server instead of the directory, as envoyproxy/ratelimit
// takes it (and Envoy Gateway serves it): the resources of type
// ratelimit.config.ratelimit.v3.RateLimitConfig, state of the world, over
// the aggregated discovery service. Each response is the whole
// configuration, one domain a resource, decoded as the files of a
// directory are (MERGE_DOMAIN_CONFIG applies); one that does not decode or
// build is refused (NACK) and the last good one keeps serving, one that
// does is applied and acknowledged (ACK).

// XDS is the management server to take the configuration from.
type XDS struct {
	ServerURL string
	Node      *corev3.Node
	// Headers are sent with the stream (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers map[string]string
	// TLS is nil for plain text (CONFIG_GRPC_XDS_SERVER_USE_TLS=false).
	TLS *XDSTLS
	// RetryInterval is gRPC's wait between attempts to connect
	// (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL, jittered by half).
	RetryInterval time.Duration
	// Backoff is the wait before connecting again after a stream broke
	// (XDS_CLIENT_BACKOFF_*).
	Backoff Backoff
	// MaxMsgSize bounds a response, 0 for gRPC's default
	// (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES).
	MaxMsgSize int
}

// XDSTLS is the TLS to the management server.
type XDSTLS struct {
	CAFile, CertFile, KeyFile string
	// ServerName is the name checked in the server's certificate
	// (CONFIG_GRPC_XDS_SERVER_TLS_SAN), "" for the URL's host.
	ServerName string
}

// Backoff is the wait before each attempt after a failure, as
// envoyproxy/ratelimit's: doubling from Initial up to Max, randomized by
// up to Factor around it when Jitter; back to Initial after a response.
type Backoff struct {
	Initial, Max time.Duration
	Factor       float64
	Jitter       bool
}

// wait is the attempt-th wait (from 0).
func (b Backoff) wait(attempt int) time.Duration {
	d := b.Initial << min(attempt, 30)
	if d <= 0 || d > b.Max {
		d = b.Max
	}
	if b.Jitter && b.Factor > 0 {
		d = time.Duration(float64(d) * (1 - b.Factor/2 + b.Factor*rand.Float64()))
	}
	return d
}

// xdsVariables are the xDS variables, unused unless CONFIG_TYPE=GRPC_XDS_SOTW.
var xdsVariables = []string{"CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL",
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "CONFIG_GRPC_XDS_SERVER_USE_TLS",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"}

// readConfigType reads CONFIG_TYPE: FILE, or GRPC_XDS_SOTW with its
// variables into e.XDS.
func (e *Env) readConfigType(get func(k, def string) string, boolean func(string, bool) bool, bad func(string, ...any)) {
	switch t := strings.ToUpper(get("CONFIG_TYPE", "FILE")); t {
	case "FILE":
		e.noteUnusedXDS(get)
	case "GRPC_XDS_SOTW":
		e.XDS = readXDS(get, boolean, bad)
	default:
		bad("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", t)
	}
}

// noteUnusedXDS notes each xDS variable that is set while CONFIG_TYPE is
// FILE: it is not used.
func (e *Env) noteUnusedXDS(get func(k, def string) string) {
	for _, k := range xdsVariables {
		if v := get(k, ""); v != "" {
			e.Notes = append(e.Notes, k+"="+v+" is not used: CONFIG_TYPE is FILE (as upstream)")
		}
	}
}

// readXDS reads the xDS variables of CONFIG_TYPE=GRPC_XDS_SOTW, reporting
// each bad one to bad.
func readXDS(get func(k, def string) string, boolean func(string, bool) bool, bad func(string, ...any)) *XDS {
	duration := func(k, def string) time.Duration {
		v := get(k, def)
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad("%s=%q: want a positive duration", k, v)
		}
		return d
	}
	x := &XDS{ServerURL: get("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
		Node:          &corev3.Node{Id: get("CONFIG_GRPC_XDS_NODE_ID", "default"), Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{}}},
		RetryInterval: duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s"),
		Backoff: Backoff{Initial: duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s"), Max: duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s"),
			Jitter: boolean("XDS_CLIENT_BACKOFF_JITTER", true)},
	}
	x.readLimits(get, bad)
	x.readNodeMetadata(get, bad)
	x.readHeaders(get, bad)
	x.readTLS(get, boolean, bad)
	return x
}

// readLimits reads the backoff's random factor and the largest response.
func (x *XDS) readLimits(get func(k, def string) string, bad func(string, ...any)) {
	if f, err := strconv.ParseFloat(get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5"), 64); err != nil || f < 0 || f > 1 {
		bad("XDS_CLIENT_BACKOFF_RANDOM_FACTOR=%q: want a number from 0 to 1", get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", ""))
	} else {
		x.Backoff.Factor = f
	}
	if v := get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			bad("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=%q: want a number of bytes", v)
		}
		x.MaxMsgSize = n
	}
}

// readNodeMetadata reads the node's metadata: "key1=value1,key2=value2",
// as upstream splits it.
func (x *XDS) readNodeMetadata(get func(k, def string) string, bad func(string, ...any)) {
	for _, kv := range splitList(get("CONFIG_GRPC_XDS_NODE_METADATA", "")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			bad("CONFIG_GRPC_XDS_NODE_METADATA: %q is not key=value", kv)
			continue
		}
		x.Node.Metadata.Fields[k] = structpb.NewStringValue(v)
	}
}

// readHeaders reads the stream's headers: "key1:value1,key2:value2", as
// envconfig reads a map.
func (x *XDS) readHeaders(get func(k, def string) string, bad func(string, ...any)) {
	for _, kv := range splitList(get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "")) {
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			bad("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: %q is not key:value", kv)
			continue
		}
		if x.Headers == nil {
			x.Headers = map[string]string{}
		}
		x.Headers[strings.ToLower(strings.TrimSpace(k))] = v
	}
}

// readTLS reads the TLS to the management server, nil unless
// CONFIG_GRPC_XDS_SERVER_USE_TLS is true.
func (x *XDS) readTLS(get func(k, def string) string, boolean func(string, bool) bool, bad func(string, ...any)) {
	if boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
		x.TLS = &XDSTLS{CAFile: get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""), CertFile: get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""),
			KeyFile: get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""), ServerName: get("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "")}
		if (x.TLS.CertFile == "") != (x.TLS.KeyFile == "") {
			bad("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together")
		}
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// dialOptions are the gRPC options of the connection to the management
// server; an error when a TLS file does not load.
func (x *XDS) dialOptions() ([]grpc.DialOption, error) {
	opts := []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: x.RetryInterval, Multiplier: 1, Jitter: 0.5, MaxDelay: x.RetryInterval},
		MinConnectTimeout: 20 * time.Second,
	})}
	if x.MaxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(x.MaxMsgSize)))
	}
	if x.TLS == nil {
		return append(opts, grpc.WithTransportCredentials(insecure.NewCredentials())), nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.TLS.ServerName}
	if x.TLS.CAFile != "" {
		pem, err := os.ReadFile(x.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT %s: no PEM certificate found", x.TLS.CAFile)
		}
		tc.RootCAs = pool
	}
	if x.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(x.TLS.CertFile, x.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and _KEY: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tc))), nil
}

// Source is the name configurations from x are known by (logs, the
// dashboard, error messages).
func (x *XDS) Source() string { return "xds:" + x.ServerURL }

// Watch takes the configuration from the management server until ctx
// ends: each response is decoded (DecodeXDS, merging domains as merge
// says) and given to apply; a response that does not decode, or that apply
// refuses, is refused (NACK) with the error, and told to refused; one
// apply takes is acknowledged. A stream that fails or breaks is opened
// again after the backoff. It returns an error only when the TLS files do not load,
// before connecting.
func (x *XDS) Watch(ctx context.Context, log *slog.Logger, merge bool, apply func(*config.Config) error, refused func(error)) error {
	opts, err := x.dialOptions()
	if err != nil {
		return err
	}
	go func() {
		for failures := 0; ; failures++ {
			got, err := x.stream(ctx, log, opts, merge, apply, refused)
			if ctx.Err() != nil {
				return
			}
			if got {
				failures = 0
			}
			wait := x.Backoff.wait(failures)
			log.Warn("xDS configuration stream failed; connecting again", "server", x.ServerURL, "in", wait.String(), "err", errString(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
	return nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// stream runs one stream to the management server until it breaks; got
// says whether it brought a response.
func (x *XDS) stream(ctx context.Context, log *slog.Logger, opts []grpc.DialOption, merge bool, apply func(*config.Config) error, refused func(error)) (got bool, err error) {
	conn, err := grpc.NewClient(x.ServerURL, opts...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.New(x.Headers)))
	defer cancel()
	ads := sotw.NewADSClient(sctx, x.Node, resource.RateLimitConfigType)
	if err := ads.InitConnect(conn); err != nil {
		return false, err
	}
	var refusedSum [32]byte
	var refusedMsg string
	repeats := 0
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return got, err
		}
		got = true
		sum := resourcesSum(resp.Resources)
		if repeats > 0 && sum == refusedSum {
			// The server sends a refused configuration again (a snapshot
			// cache answers every request of another version than its
			// own, NACKs included): refused again, without applying,
			// logging or counting it again, and after a wait growing up
			// to 10s, so that the exchange does not spin.
			select {
			case <-ctx.Done():
				return got, ctx.Err()
			case <-time.After(min(50*time.Millisecond<<min(repeats, 8), 10*time.Second)):
			}
			repeats++
			if err := ads.Nack(refusedMsg); err != nil {
				return got, err
			}
			continue
		}
		cfg, err := DecodeXDS(x.Source(), resp.Resources, merge)
		if err == nil {
			err = apply(cfg)
		}
		if err != nil {
			refused(err)
			refusedSum, refusedMsg, repeats = sum, err.Error(), 1
			log.Error("xDS configuration refused (NACK); the last good configuration keeps serving", "server", x.ServerURL, "err", err.Error())
			if err := ads.Nack(err.Error()); err != nil {
				return got, err
			}
			continue
		}
		repeats = 0
		log.Info("xDS configuration applied (ACK)", "server", x.ServerURL, "domains", len(cfg.Domains), "policies", len(cfg.Policies))
		if err := ads.Ack(); err != nil {
			return got, err
		}
	}
}

// resourcesSum is the SHA-256 of resources, to know a response sent again.
func resourcesSum(resources []*anypb.Any) [32]byte {
	h := sha256.New()
	for _, r := range resources {
		fmt.Fprintf(h, "%d:%s%d:", len(r.GetTypeUrl()), r.GetTypeUrl(), len(r.GetValue()))
		h.Write(r.GetValue())
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// DecodeXDS decodes the RateLimitConfig resources of one xDS response as
// the files of a configuration directory (one domain each, merged when
// merge is set), under source.
func DecodeXDS(source string, resources []*anypb.Any, merge bool) (*config.Config, error) {
	files := make([]config.NamedFile, 0, len(resources))
	for i, res := range resources {
		var rc rlsconf.RateLimitConfig
		if err := res.UnmarshalTo(&rc); err != nil {
			return nil, fmt.Errorf("%s: resource %d: %w", source, i, err)
		}
		data, err := yaml.Marshal(xdsDomain(&rc))
		if err != nil {
			return nil, fmt.Errorf("%s: resource %q: %w", source, rc.GetName(), err)
		}
		name := rc.GetName()
		if name == "" {
			name = strconv.Itoa(i)
		}
		files = append(files, config.NamedFile{Path: source + "/" + name, Data: data})
	}
	if len(files) == 0 {
		return nil, errors.New(source + ": no RateLimitConfig resources: nothing to limit")
	}
	return config.LoadFiles(source, files, merge)
}

// xdsDomain is rc in envoyproxy/ratelimit's YAML form, as upstream maps
// it: a rate_limit's unit only when it has one (an unlimited limit has
// none).
func xdsDomain(rc *rlsconf.RateLimitConfig) map[string]any {
	return map[string]any{"domain": rc.GetDomain(), "descriptors": xdsDescriptors(rc.GetDescriptors())}
}

func xdsDescriptors(ds []*rlsconf.RateLimitDescriptor) []any {
	out := make([]any, 0, len(ds))
	for _, d := range ds {
		m := map[string]any{"key": d.GetKey()}
		if d.GetValue() != "" {
			m["value"] = d.GetValue()
		}
		if rl := d.GetRateLimit(); rl != nil {
			m["rate_limit"] = xdsRateLimit(rl)
		}
		if len(d.GetDescriptors()) > 0 {
			m["descriptors"] = xdsDescriptors(d.GetDescriptors())
		}
		for k, v := range map[string]bool{"shadow_mode": d.GetShadowMode(), "detailed_metric": d.GetDetailedMetric(), "quota_mode": d.GetQuotaMode()} {
			if v {
				m[k] = true
			}
		}
		if md := d.GetMetadata(); md != nil {
			m["metadata"] = md.AsMap()
		}
		out = append(out, m)
	}
	return out
}

func xdsRateLimit(rl *rlsconf.RateLimitPolicy) map[string]any {
	m := map[string]any{}
	if rl.GetUnlimited() {
		m["unlimited"] = true
	} else {
		m["requests_per_unit"] = rl.GetRequestsPerUnit()
	}
	if rl.GetUnit() != rlsconf.RateLimitUnit_UNKNOWN {
		m["unit"] = rl.GetUnit().String()
	}
	if rl.GetName() != "" {
		m["name"] = rl.GetName()
	}
	if len(rl.GetReplaces()) > 0 {
		var rs []any
		for _, r := range rl.GetReplaces() {
			rs = append(rs, map[string]any{"name": r.GetName()})
		}
		m["replaces"] = rs
	}
	return m
}
