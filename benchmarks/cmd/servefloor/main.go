// Command servefloor is the floor of a rate-limit service that decides on
// Valkey: per request it finds the descriptor's value, sends the two
// commands of an exact fixed window on a per-second key in one round
// trip (INCRBY and EXPIRE, envoyproxy/ratelimit's commands, through
// valkey-go, which pipelines the concurrent callers' commands on shared
// connections) and answers POST /json, or Envoy's ShouldRateLimit over
// gRPC, with the count it got. It validates nothing, has no
// configuration, metrics, fail mode or timeout: the least such a service
// does, measured beside sluice serve, envoyproxy/ratelimit and the no-op
// handler (benchmarks/cmd/noopjson) in benchmarks/envoy-bench.sh, which
// starts it as it starts those services:
//
//	REDIS_URL=127.0.0.1:6379 PORT=8080 GRPC_PORT=8081 servefloor serve
//
// Its limit is that of docs/envoy-bench's configuration (1,000,000 per
// second), and its answers have the shape of the no-op handler's.
package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valkey-io/valkey-go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

const limit = 1000000

// floor decides one descriptor value against limit per second.
type floor struct {
	rlsv3.UnimplementedRateLimitServiceServer
	c valkey.Client
}

// count adds one to value's window of the current second and returns the
// window's count and the time to its end.
func (f *floor) count(ctx context.Context, value []byte) (int64, time.Duration, error) {
	now := time.Now()
	sec := now.Unix()
	key := make([]byte, 0, 48)
	key = append(key, "bench_remote_address_"...)
	key = append(key, value...)
	key = append(key, '_')
	key = strconv.AppendInt(key, sec, 10)
	k := valkey.BinaryString(key)
	rs := f.c.DoMulti(ctx,
		f.c.B().Incrby().Key(k).Increment(1).Build(),
		f.c.B().Expire().Key(k).Seconds(1).Build())
	n, err := rs[0].AsInt64()
	if err != nil {
		return 0, 0, err
	}
	if err := rs[1].Error(); err != nil {
		return 0, 0, err
	}
	return n, time.Unix(sec+1, 0).Sub(now), nil
}

var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

var valueField = []byte(`"value":"`)

func (f *floor) handleJSON(w http.ResponseWriter, r *http.Request) {
	bp, op := bodies.Get().(*[]byte), bodies.Get().(*[]byte)
	defer bodies.Put(op)
	defer bodies.Put(bp)
	buf := bytes.NewBuffer((*bp)[:0])
	defer func() { *bp = buf.Bytes()[:0] }()
	if _, err := buf.ReadFrom(r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	body := buf.Bytes()
	i := bytes.Index(body, valueField)
	if i < 0 {
		http.Error(w, "no descriptor value", http.StatusBadRequest)
		return
	}
	v := body[i+len(valueField):]
	j := bytes.IndexByte(v, '"')
	if j < 0 {
		http.Error(w, "no descriptor value", http.StatusBadRequest)
		return
	}
	n, reset, err := f.count(r.Context(), v[:j])
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	code := "OK"
	if n > limit {
		code = "OVER_LIMIT"
	}
	out := (*op)[:0]
	out = append(out, `{"overallCode":"`...)
	out = append(out, code...)
	out = append(out, `","statuses":[{"code":"`...)
	out = append(out, code...)
	out = append(out, `","currentLimit":{"requestsPerUnit":1000000,"unit":"SECOND"},"limitRemaining":`...)
	out = strconv.AppendInt(out, max(limit-n, 0), 10)
	out = append(out, `,"durationUntilReset":"`...)
	out = strconv.AppendFloat(out, reset.Seconds(), 'f', -1, 64)
	out = append(out, `s"}]}`...)
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
	*op = out[:0]
}

func (f *floor) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ds := req.GetDescriptors()
	if len(ds) == 0 || len(ds[0].GetEntries()) == 0 {
		return nil, io.ErrUnexpectedEOF
	}
	n, reset, err := f.count(ctx, []byte(ds[0].GetEntries()[0].GetValue()))
	if err != nil {
		return nil, err
	}
	code := rlsv3.RateLimitResponse_OK
	if n > limit {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{
		OverallCode: code,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code: code,
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{
				RequestsPerUnit: limit, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND,
			},
			LimitRemaining:     uint32(max(limit-n, 0)),
			DurationUntilReset: durationpb.New(reset),
		}},
	}, nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	flag.Usage = func() {
		io.WriteString(flag.CommandLine.Output(), "usage: REDIS_URL=ADDR PORT=N GRPC_PORT=N servefloor serve\n")
	}
	flag.Parse()
	if flag.NArg() != 1 || flag.Arg(0) != "serve" {
		flag.Usage()
		os.Exit(2)
	}
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{env("REDIS_URL", "127.0.0.1:6379")}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	f := &floor{c: c}
	host := env("HOST", "127.0.0.1")
	ln, err := net.Listen("tcp", net.JoinHostPort(env("GRPC_HOST", host), env("GRPC_PORT", "8081")))
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer(grpc.NumStreamWorkers(256))
	rlsv3.RegisterRateLimitServiceServer(s, f)
	go func() { log.Fatal(s.Serve(ln)) }()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", f.handleJSON)
	log.Fatal(http.ListenAndServe(net.JoinHostPort(host, env("PORT", "8080")), mux))
}
