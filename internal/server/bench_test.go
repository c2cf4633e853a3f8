package server

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkCheck measures POST /v1/check in process (memory store), on
// 10,000 distinct keys prepared before the timer.
func BenchmarkCheck(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte("policies:\n  - {name: bench, algorithm: token_bucket, burst: 100, rate: 10/s}\n"))
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(cfg, Options{Store: memstore.New(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	bodies := make([]string, 10000)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"policy":"bench","key":"user-%d","cost":1}`, i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(bodies[i%len(bodies)])))
		if w.Code != 200 {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}
