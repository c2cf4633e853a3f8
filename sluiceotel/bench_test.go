package sluiceotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluiceotel"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// discardExporter is a span exporter that drops what it is given, so that
// the benchmark measures making and batching the spans, not exporting them.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// limiters are a limiter on store per mode: "none" (no observer), "off"
// (sluiceotel with a no-op tracer provider: the metrics only) and "on"
// (every decision sampled, a span each through a batch span processor),
// with the context each decides in (for "on", one holding the caller's
// span).
func limiters(b *testing.B, store driver.Store) (ls [3]*sluice.Limiter, ctxs [3]context.Context) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	off, err := sluiceotel.New(sluiceotel.WithMeterProvider(mp), sluiceotel.WithTracerProvider(noop.NewTracerProvider()))
	if err != nil {
		b.Fatal(err)
	}
	on, err := sluiceotel.New(sluiceotel.WithMeterProvider(mp), sluiceotel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	for i, opts := range [][]sluice.Option{nil, {sluice.WithObserver(off)}, {sluice.WithObserver(on)}} {
		ls[i], err = sluice.New(store, sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1e6},
			append(opts, sluice.WithName(fmt.Sprint("bench", i)), sluice.WithTimeout(time.Second))...)
		if err != nil {
			b.Fatal(err)
		}
		ctxs[i] = context.Background()
	}
	ctxs[2], _ = tp.Tracer("bench").Start(context.Background(), "request") // the caller's span
	return ls, ctxs
}

// BenchmarkTracingCost measures, in one run, the cost of a decision (one
// Allow) with no observer, with tracing off (sluiceotel's metrics only) and
// with tracing on (a span per decision), interleaved decision by decision
// so that the machine's load weighs on the three alike; it reports each
// (ns/none, ns/off, ns/on) and the ratio on/off, on memstore (the limiter's
// own cost) and on a real Valkey (a decision as a service makes it):
//
//	go test -run '^$' -bench BenchmarkTracingCost ./sluiceotel
func BenchmarkTracingCost(b *testing.B) {
	for _, s := range []struct {
		name string
		open func(b *testing.B) driver.Store
	}{
		{"memstore", func(*testing.B) driver.Store { return memstore.New() }},
		{"valkey", func(b *testing.B) driver.Store {
			st, err := valkeystore.New(valkeytest.Start(b).Client(b))
			if err != nil {
				b.Fatal(err)
			}
			return st
		}},
	} {
		b.Run(s.name, func(b *testing.B) {
			ls, ctxs := limiters(b, s.open(b))
			var total [3]time.Duration
			n := 0
			for b.Loop() {
				for i, l := range ls {
					start := time.Now()
					if _, err := l.Allow(ctxs[i], "k"); err != nil {
						b.Fatal(err)
					}
					total[i] += time.Since(start)
				}
				n++
			}
			for i, unit := range []string{"ns/none", "ns/off", "ns/on"} {
				b.ReportMetric(float64(total[i].Nanoseconds())/float64(n), unit)
			}
			b.ReportMetric(float64(total[2])/float64(total[1]), "on/off")
			b.ReportMetric(0, "ns/op") // the three together: not a cost of its own
		})
	}
}

// BenchmarkDecision is each mode of BenchmarkTracingCost on its own.
func BenchmarkDecision(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) driver.Store
	}{
		{"memstore", func(*testing.B) driver.Store { return memstore.New() }},
		{"valkey", func(b *testing.B) driver.Store {
			st, err := valkeystore.New(valkeytest.Start(b).Client(b))
			if err != nil {
				b.Fatal(err)
			}
			return st
		}},
	}
	for _, s := range stores {
		store := s.open(b)
		for _, mode := range []string{"observer=none", "tracing=off", "tracing=on"} {
			b.Run(s.name+"/"+mode, func(b *testing.B) {
				ctx := context.Background()
				var opts []sluice.Option
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				switch mode {
				case "tracing=off":
					o, err := sluiceotel.New(sluiceotel.WithMeterProvider(mp), sluiceotel.WithTracerProvider(noop.NewTracerProvider()))
					if err != nil {
						b.Fatal(err)
					}
					opts = append(opts, sluice.WithObserver(o))
				case "tracing=on":
					tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
					defer tp.Shutdown(context.Background())
					o, err := sluiceotel.New(sluiceotel.WithMeterProvider(mp), sluiceotel.WithTracerProvider(tp))
					if err != nil {
						b.Fatal(err)
					}
					opts = append(opts, sluice.WithObserver(o))
					ctx, _ = tp.Tracer("bench").Start(ctx, "request") // the caller's span
				}
				l, err := sluice.New(store, sluice.GCRA{Rate: 1e6, Per: time.Second, Burst: 1e6},
					append(opts, sluice.WithName("bench"), sluice.WithPrefix("bench:"+mode), sluice.WithTimeout(time.Second))...)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := l.Allow(ctx, "k"); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
