package sluiceprom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluiceprom"
)

// The tests read the registry with Gather rather than prometheus/testutil,
// which would add a module (kylelemons/godebug) to go.sum.

// values returns every sample of reg as "name{label=value,...}" -> value
// (labels in order of name), with histograms as their _count and _sum.
func values(t testing.TB, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			id := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[id] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[id] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[strings.Replace(id, "{", "_count{", 1)] = float64(h.GetSampleCount())
				out[strings.Replace(id, "{", "_sum{", 1)] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[strings.Replace(id, "}", fmt.Sprintf(",le=%g}", b.GetUpperBound()), 1)] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

func decisions(limiter, outcome string) string {
	return "sluice_decisions_total{limiter=" + limiter + ",outcome=" + outcome + "}"
}

func storeErrors(limiter, reason string) string {
	return "sluice_store_errors_total{limiter=" + limiter + ",reason=" + reason + "}"
}

// check fails t unless each of want has its value in got.
func check(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present: %v), want %v", k, g, ok, v)
		}
	}
}

// failing is a Store that fails every decision with err.
type failing struct{ err error }

func (f failing) Do(_ context.Context, batch []driver.Op) error {
	for i := range batch {
		batch[i].Err = f.err
	}
	return nil
}

func (f failing) Delete(context.Context, ...string) error { return f.err }

var quiet = sluice.WithLogger(slog.New(slog.DiscardHandler))

// TestOutcomes drives real limiters through every outcome.
func TestOutcomes(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := sluiceprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	policy := sluice.FixedWindow{Limit: 2, Window: time.Hour}
	newLimiter := func(s driver.Store, name string, opts ...sluice.Option) *sluice.Limiter {
		l, err := sluice.New(s, policy, append([]sluice.Option{sluice.WithName(name), sluice.WithObserver(m), quiet}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	mem := memstore.New()
	gone := failing{context.DeadlineExceeded}
	for _, tc := range []struct {
		l *sluice.Limiter
		n int
	}{
		{newLimiter(mem, "enforced"), 5},                                                               // 2 allowed, 3 denied
		{newLimiter(mem, "shadow", sluice.WithShadow(true)), 5},                                        // 2 allowed, 3 shadow_denied
		{newLimiter(gone, "open"), 4},                                                                  // degraded_allowed
		{newLimiter(gone, "closed", sluice.WithFailMode(sluice.FailClosed)), 3},                        // degraded_denied
		{newLimiter(gone, "dark", sluice.WithFailMode(sluice.FailClosed), sluice.WithShadow(true)), 2}, // degraded_shadow_denied
	} {
		for range tc.n {
			if _, err := tc.l.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An open breaker's error wraps sluice.ErrStoreUnavailable and the
	// failure that opened it, often a timeout: the decision is refused
	// without trying, so its reason is unavailable.
	unavailable := newLimiter(failing{fmt.Errorf("circuit open: %w: after: %w", sluice.ErrStoreUnavailable, context.DeadlineExceeded)}, "breaker")
	broken := newLimiter(failing{errors.New("connection refused")}, "refused")
	for range 2 {
		unavailable.Allow(ctx, "k")
		broken.Allow(ctx, "k")
	}

	got := values(t, reg)
	check(t, got, map[string]float64{
		decisions("enforced", "allowed"):                           2,
		decisions("enforced", "denied"):                            3,
		decisions("enforced", "shadow_denied"):                     0,
		decisions("shadow", "allowed"):                             2,
		decisions("shadow", "shadow_denied"):                       3,
		decisions("shadow", "denied"):                              0,
		decisions("open", "degraded_allowed"):                      4,
		decisions("closed", "degraded_denied"):                     3,
		decisions("dark", "degraded_shadow_denied"):                2,
		decisions("dark", "degraded_allowed"):                      0,
		storeErrors("enforced", "timeout"):                         0,
		storeErrors("open", "timeout"):                             4,
		storeErrors("closed", "timeout"):                           3,
		storeErrors("dark", "timeout"):                             2,
		storeErrors("breaker", "unavailable"):                      2,
		storeErrors("refused", "error"):                            2,
		"sluice_decision_duration_seconds_count{limiter=enforced}": 5,
		"sluice_decision_duration_seconds_count{limiter=open}":     4,
	})
	// Every series of a limiter exists once it has decided: 6 outcomes, 3
	// reasons, the warnings, the blocks and blocked refusals, the histogram.
	n := 0
	for k := range got {
		if strings.Contains(k, "limiter=enforced}") || strings.Contains(k, "limiter=enforced,outcome") || strings.Contains(k, "limiter=enforced,reason") {
			n++
		}
	}
	if n != 6+3+1+2+2 { // histogram: _count and _sum
		t.Errorf("%d series for one limiter, want 14", n)
	}
}

// TestLatency checks the histogram's buckets: sub-millisecond to 100ms and
// beyond.
func TestLatency(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := sluiceprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{30 * time.Microsecond, 200 * time.Microsecond, 3 * time.Millisecond, 50 * time.Millisecond, time.Second} {
		m.ObserveDecision("api", sluice.Result{Allowed: true}, nil, d)
	}
	got := values(t, reg)
	h := "sluice_decision_duration_seconds{limiter=api,le=%g}"
	check(t, got, map[string]float64{
		fmt.Sprintf(h, 0.00005):                               1,
		fmt.Sprintf(h, 0.00025):                               2,
		fmt.Sprintf(h, 0.005):                                 3,
		fmt.Sprintf(h, 0.05):                                  4,
		fmt.Sprintf(h, 0.25):                                  4,
		"sluice_decision_duration_seconds_count{limiter=api}": 5,
	})
	if sum := got["sluice_decision_duration_seconds_sum{limiter=api}"]; sum < 1.05 || sum > 1.06 {
		t.Errorf("sum %v s, want 1.05323", sum)
	}
}

// TestOptions: namespace, buckets, constant labels, Limiter pre-creating
// series, and registration.
func TestOptions(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := sluiceprom.New(reg, sluiceprom.WithNamespace("edge"), sluiceprom.WithBuckets([]float64{0.001, 0.01}),
		sluiceprom.WithConstLabels(prometheus.Labels{"service": "login"}))
	if err != nil {
		t.Fatal(err)
	}
	m.Limiter("password")
	got := values(t, reg)
	check(t, got, map[string]float64{
		"edge_decisions_total{limiter=password,outcome=denied,service=login}":    0,
		"edge_store_errors_total{limiter=password,reason=timeout,service=login}": 0,
		"edge_decision_duration_seconds{limiter=password,service=login,le=0.01}": 0,
		"edge_decision_duration_seconds_count{limiter=password,service=login}":   0,
	})
	if _, ok := got["edge_decision_duration_seconds{limiter=password,service=login,le=0.005}"]; ok {
		t.Error("default buckets in use despite WithBuckets")
	}

	// A second Metrics on the same registry collides.
	if _, err := sluiceprom.New(reg, sluiceprom.WithNamespace("edge")); err == nil {
		t.Error("second Metrics on one registry: no error")
	}
	// Without a registry, the caller registers it.
	m2, err := sluiceprom.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	reg2 := prometheus.NewRegistry()
	if err := reg2.Register(m2); err != nil {
		t.Fatal(err)
	}
}

// TestObserveAllocs: once a limiter is known, observing allocates nothing.
func TestObserveAllocs(t *testing.T) {
	m, err := sluiceprom.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	res := sluice.Result{Allowed: false, RetryAfter: time.Second}
	m.ObserveDecision("api", res, nil, time.Millisecond)
	if n := testing.AllocsPerRun(1000, func() { m.ObserveDecision("api", res, nil, time.Millisecond) }); n != 0 {
		t.Errorf("%v allocations per decision, want 0", n)
	}
}

func BenchmarkObserveDecision(b *testing.B) {
	m, err := sluiceprom.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	names := []string{"api", "login", "reset", "otp"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.ObserveDecision(names[i%len(names)], sluice.Result{Allowed: i%3 != 0}, nil, 300*time.Microsecond)
			i++
		}
	})
}

// Example wires Metrics into a limiter and reads the counters back.
func Example() {
	reg := prometheus.NewRegistry()
	m, err := sluiceprom.New(reg)
	if err != nil {
		panic(err)
	}
	login, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 3, Window: time.Minute},
		sluice.WithName("login"), sluice.WithObserver(m), sluice.WithFailMode(sluice.FailClosed))
	if err != nil {
		panic(err)
	}
	for range 5 {
		login.Allow(context.Background(), "user@example.com")
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			if v := s.GetCounter().GetValue(); v > 0 {
				fmt.Println(s.GetLabel()[1].GetValue(), v)
			}
		}
	}
	// Output:
	// allowed 3
	// denied 2
}
