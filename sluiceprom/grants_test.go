package sluiceprom_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluiceprom"
)

// grantMetrics are the grant series of limiter, from s.
func grantMetrics(limiter string, s sluice.GrantStats) map[string]float64 {
	l := "limiter=" + limiter
	return map[string]float64{
		"sluice_grant_calls_total{" + l + "}":                  float64(s.Calls),
		"sluice_grants_total{event=taken," + l + "}":           float64(s.Taken),
		"sluice_grants_total{event=renewed," + l + "}":         float64(s.Renewed),
		"sluice_grant_units_total{event=granted," + l + "}":    float64(s.Granted),
		"sluice_grant_units_total{event=returned," + l + "}":   float64(s.Returned),
		"sluice_grant_units_total{event=expired," + l + "}":    float64(s.Expired),
		"sluice_grant_decisions_total{" + l + ",where=local}":  float64(s.Local),
		"sluice_grant_decisions_total{" + l + ",where=valkey}": float64(s.Store),
		"sluice_grant_decisions_total{" + l + ",where=failed}": float64(s.Failed),
		"sluice_grant_mixed_total{" + l + "}":                  float64(s.Mixed),
		"sluice_grant_keys{" + l + "}":                         float64(s.Keys),
	}
}

// TestGrants: the grant counters of real limiters with grants, read at
// scrape: those of one name summed, a GrantsFunc source added to them, and
// every value Limiter.GrantStats's.
func TestGrants(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := sluiceprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	grants := sluice.WithGrants(sluice.GrantOptions{})
	pol := sluice.GCRA{Rate: 1, Per: 3600e9, Burst: 40}
	mk := func(name string) *sluice.Limiter {
		l, err := sluice.New(st, pol, sluice.WithName(name), grants, sluice.WithObserver(m))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b, c := mk("hot"), mk("hot"), mk("other")
	m.Grants(a, b, c)
	carried := sluice.GrantStats{Calls: 7, Granted: 5, Returned: 5} // a limiter "other" replaced
	m.GrantsFunc(func() map[string]sluice.GrantStats { return map[string]sluice.GrantStats{"other": carried} })
	ctx := context.Background()
	for i := range 60 {
		for _, l := range []*sluice.Limiter{a, b, c} {
			l.Allow(ctx, "k"+string(rune('a'+i%3)))
		}
	}
	for _, l := range []*sluice.Limiter{a, b, c} {
		l.Close() // waits for the calls in flight: the counters stay put
	}
	hot, other := a.GrantStats().Add(b.GrantStats()), c.GrantStats().Add(carried)
	if hot.Local == 0 || hot.Store == 0 || hot.Taken == 0 || hot.Keys != 6 {
		t.Fatalf("the limiters did not use their grants: %+v", hot)
	}
	got := values(t, reg)
	check(t, got, grantMetrics("hot", hot))
	check(t, got, grantMetrics("other", other))
	// The decisions themselves are in decisions_total as ever.
	if n := got[decisions("hot", "allowed")] + got[decisions("hot", "denied")]; n != float64(hot.Local+hot.Store) {
		t.Errorf("decisions_total of hot: %v, grant decisions %d", n, hot.Local+hot.Store)
	}
}

// TestGrantsPromtool: promtool check metrics finds nothing to say of the
// grant metrics (names, types, help), under a namespace and constant
// labels too.
func TestGrantsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is missing: run scripts/install-promtool.sh (apt-get install prometheus)")
	}
	for _, opts := range [][]sluiceprom.Option{nil, {sluiceprom.WithNamespace("edge"), sluiceprom.WithConstLabels(prometheus.Labels{"service": "api"})}} {
		reg := prometheus.NewRegistry()
		m, err := sluiceprom.New(reg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := sluice.New(memstore.New(), sluice.GCRA{Rate: 100, Per: 1e9, Burst: 100}, sluice.WithName("hot"),
			sluice.WithGrants(sluice.GrantOptions{}), sluice.WithObserver(m))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		m.Grants(l)
		l.Allow(context.Background(), "k")
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body := rec.Body.Bytes()
		prefix := "sluice_grant_"
		if opts != nil {
			prefix = "edge_grant_"
		}
		if !bytes.Contains(body, []byte("# TYPE "+prefix+"keys gauge")) || !bytes.Contains(body, []byte(prefix+"calls_total{")) {
			t.Fatalf("no %s* in the scrape:\n%s", prefix, body)
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
}
