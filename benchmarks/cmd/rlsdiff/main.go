// Command rlsdiff sends the same sequence of ShouldRateLimit calls to two
// implementations of Envoy's rate-limit protocol, one call to each in turn,
// and prints every call whose answers differ (overall code, and per
// descriptor: code, current limit's name, requests per unit and unit,
// limit_remaining, duration_until_reset in seconds). Both services load
// docs/envoy-diff/ratelimit/config; see docs/envoy-bench.md.
//
//	rlsdiff 127.0.0.1:28081 127.0.0.1:38081
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func d(kv ...string) *commonrl.RateLimitDescriptor {
	out := &commonrl.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &commonrl.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}
func ov(rpu uint32, u typev3.RateLimitUnit, x *commonrl.RateLimitDescriptor) *commonrl.RateLimitDescriptor {
	x.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: u}
	return x
}
func h(n uint64, x *commonrl.RateLimitDescriptor) *commonrl.RateLimitDescriptor {
	x.HitsAddend = wrapperspb.UInt64(n)
	return x
}

type req struct {
	domain string
	hits   uint32
	ds     func() []*commonrl.RateLimitDescriptor
}

func r(domain string, hits uint32, ds ...func() *commonrl.RateLimitDescriptor) req {
	return req{domain, hits, func() []*commonrl.RateLimitDescriptor {
		out := make([]*commonrl.RateLimitDescriptor, len(ds))
		for i, f := range ds {
			out[i] = f()
		}
		return out
	}}
}
func D(kv ...string) func() *commonrl.RateLimitDescriptor {
	return func() *commonrl.RateLimitDescriptor { return d(kv...) }
}

func show(resp *rlsv3.RateLimitResponse, err error) string {
	if err != nil {
		return "ERR"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%v [", resp.OverallCode)
	for _, s := range resp.Statuses {
		cl := s.CurrentLimit
		lim := "-"
		if cl != nil {
			lim = fmt.Sprintf("%s/%d/%v", cl.Name, cl.RequestsPerUnit, cl.Unit)
		}
		reset := int64(-1)
		if s.DurationUntilReset != nil {
			reset = s.DurationUntilReset.Seconds
		}
		fmt.Fprintf(&b, "{%v %s rem=%d reset=%d}", s.Code, lim, s.LimitRemaining, reset)
	}
	return b.String() + "]"
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: rlsdiff REFERENCE_ADDR OTHER_ADDR")
		os.Exit(2)
	}
	a, err := grpc.NewClient(os.Args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b, err := grpc.NewClient(os.Args[2], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ca, cb := rlsv3.NewRateLimitServiceClient(a), rlsv3.NewRateLimitServiceClient(b)
	reqs := []req{}
	add := func(n int, x req) {
		for range n {
			reqs = append(reqs, x)
		}
	}
	add(3, r("basic", 0, D("one_per_minute", "a")))
	add(55, r("basic", 0, D("key1", "foo")))
	add(4, r("rl", 0, D("remote_address", "1.1.1.1")))
	add(2, r("rl", 5, D("remote_address", "1.1.1.2")))
	add(3, r("rl", 0, D("path", "/v1/u/action")))
	add(2, r("rl", 0, D("path", "/v1/u/other")))
	add(2, r("rl", 0, D("path", "/files/a")))
	add(2, r("rl", 0, D("path", "/files/b")))
	add(2, r("rl", 0, D("blocked", "x")))
	add(2, r("rl", 0, D("remote_address", "1.1.1.3"), D("blocked", "y")))
	add(2, r("rl", 0, D("remote_address", "1.1.1.3")))
	add(2, r("rl", 0, D("internal", "x")))
	add(2, r("rl", 0, D("yearly", "x")))
	add(3, r("rl", 0, D("quota", "q")))
	add(2, r("rl", 0, D("quota", "q1"), D("quota", "q2")))
	add(2, r("rl", 0, D("quota", "q3"), D("remote_address", "1.1.1.4")))
	add(3, r("rl", 0, D("shadowed", "s")))
	add(2, r("rl", 0, D("api", "k"), D("api_user", "u")))
	add(4, r("rl", 0, D("nested", "n", "sub", "x")))
	add(3, r("rl", 0, D("nested", "n", "sub", "y")))
	add(6, r("rl", 0, D("nested", "n")))
	add(2, r("rl", 0, D("nested", "n", "sub", "x", "deeper", "z")))
	add(3, r("rl", 0, func() *commonrl.RateLimitDescriptor { return ov(2, typev3.RateLimitUnit_HOUR, d("nomatch", "x")) }))
	add(3, r("rl", 0, func() *commonrl.RateLimitDescriptor { return ov(1, typev3.RateLimitUnit_MONTH, d("internal", "o")) }))
	add(2, r("rl", 0, func() *commonrl.RateLimitDescriptor { return ov(0, typev3.RateLimitUnit_DAY, d("remote_address", "9")) }))
	add(2, r("rl", 0, func() *commonrl.RateLimitDescriptor { return ov(1, typev3.RateLimitUnit_HOUR, d("shadowed", "o")) }))
	add(2, r("rl", 0, func() *commonrl.RateLimitDescriptor { return h(0, d("yearly", "z")) }))
	add(2, r("rl", 0, func() *commonrl.RateLimitDescriptor { return h(2, d("yearly", "z")) }))
	add(12, r("share-threshold-test", 0, D("files", "files/a.txt")))
	add(2, r("share-threshold-test", 0, D("files", "files/b.txt")))
	add(2, r("nope", 0, D("a", "b")))
	same, diff := 0, 0
	for i, q := range reqs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ra, ea := ca.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: q.domain, HitsAddend: q.hits, Descriptors: q.ds()})
		rb, eb := cb.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: q.domain, HitsAddend: q.hits, Descriptors: q.ds()})
		cancel()
		sa, sb := show(ra, ea), show(rb, eb)
		if sa == sb {
			same++
			continue
		}
		diff++
		fmt.Printf("#%d %s %v\n  first:  %s\n  second: %s\n", i, q.domain, q.ds(), sa, sb)
	}
	fmt.Printf("identical %d of %d, differing %d\n", same, len(reqs), diff)
}
