package envoy

import (
	"log/slog"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// TestLocalCache: with LOCAL_CACHE_SIZE_IN_BYTES, a descriptor found over
// its limit is refused from the local cache for the rest of its window,
// without the store counting it, and upstream's statistics count exactly
// that: every look-up a hit or a miss, and the hits so refused as
// over_limit and over_limit_with_local_cache.
func TestLocalCache(t *testing.T) {
	if left := time.Hour - time.Duration(time.Now().UnixNano())%time.Hour; left < 10*time.Second {
		time.Sleep(left + time.Second)
	}
	f := newFake(t, envoyYAML) // k: 2 per hour
	reg := prometheus.NewRegistry()
	s := New(f, reg, slog.New(slog.DiscardHandler), 1<<10, Options{LocalCacheBytes: 1000})
	call := func(kv ...string) *rlsv3.RateLimitResponse {
		t.Helper()
		req := &rlsv3.RateLimitRequest{Domain: "d"}
		for i := 0; i+1 < len(kv); i += 2 {
			req.Descriptors = append(req.Descriptors, &commonrl.RateLimitDescriptor{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}}})
		}
		resp, err := s.Decide(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for i, want := range []rlsv3.RateLimitResponse_Code{OK, OK, OVER, OVER, OVER} {
		if got := call("k", "v").OverallCode; got != want {
			t.Errorf("call %d: %v, want %v", i, got, want)
		}
	}
	call("other", "x") // no limit: not looked up
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue() + mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Errorf("no metric %s", name)
		return -1
	}
	// Three look-ups missed (the third found the counter over its limit in
	// the store and remembered it), two hit.
	if h, m := gauge("ratelimit_localcache_hitCount"), gauge("ratelimit_localcache_missCount"); h != 2 || m != 3 {
		t.Errorf("hitCount %v, missCount %v; want 2 and 3", h, m)
	}
	if n := gauge("ratelimit_service_rate_limit_d_k_over_limit_with_local_cache"); n != 2 {
		t.Errorf("over_limit_with_local_cache %v, want 2", n)
	}
	labels := []string{"d", "k", ""}
	if tot, over := testutil.ToFloat64(s.stats.totalHits.WithLabelValues(labels...)), testutil.ToFloat64(s.stats.overLimit.WithLabelValues(labels...)); tot != 5 || over != 3 {
		t.Errorf("total_hits %v, over_limit %v; want 5 and 3", tot, over)
	}
	// The store counted the first three hits only: a limit of 10 on the same
	// counter has 7 left.
	p, err := f.st.Override(10, time.Hour, config.CountEach)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Limiter().Peek(t.Context(), identity("d", []config.Entry{{Key: "k", Value: "v"}}))
	if err != nil || res.Remaining != 7 {
		t.Errorf("the store's count: %+v %v, want 7 remaining of 10 (3 counted)", res, err)
	}
}
