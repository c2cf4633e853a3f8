// Command noopjson answers POST /json with a fixed RateLimitResponse in
// protobuf's JSON form, and, with -grpc, Envoy's ShouldRateLimit with the
// same fixed response, deciding nothing: the ceiling a rate-limit service
// can reach on a machine over each protocol, measured beside the real ones
// in docs/envoy-bench.md.
//
//	noopjson -listen 127.0.0.1:18099 -grpc 127.0.0.1:18098
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"net"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

const answer = `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":1000000,"unit":"SECOND"},"limitRemaining":999999,"durationUntilReset":"1s"}]}`

// noop answers every ShouldRateLimit with the response of answer.
type noop struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (noop) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code: rlsv3.RateLimitResponse_OK,
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{
				RequestsPerUnit: 1000000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND,
			},
			LimitRemaining:     999999,
			DurationUntilReset: durationpb.New(1e9),
		}},
	}, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:18099", "HTTP `address`")
	grpcAddr := flag.String("grpc", "", "gRPC `address` (none when empty); served as sluice serve serves gRPC, on 256 kept goroutines")
	flag.Parse()
	if *grpcAddr != "" {
		ln, err := net.Listen("tcp", *grpcAddr)
		if err != nil {
			log.Fatal(err)
		}
		s := grpc.NewServer(grpc.NumStreamWorkers(256))
		rlsv3.RegisterRateLimitServiceServer(s, noop{})
		go func() { log.Fatal(s.Serve(ln)) }()
	}
	http.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	})
	log.Fatal(http.ListenAndServe(*listen, nil))
}
