package main

import (
	"bufio"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/sluicehq/sluice/valkeytest"
)

// scrapeGrantDecisions reads sluice_grant_decisions_total of limiter from
// /metrics, by where (local, valkey, failed).
func scrapeGrantDecisions(t *testing.T, base, limiter string) map[string]int64 {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	prefix := `sluice_grant_decisions_total{limiter="` + limiter + `",where="`
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			where, num, _ := strings.Cut(rest, `"} `)
			n, _ := strconv.ParseFloat(num, 64)
			out[where] = int64(n)
		}
	}
	return out
}

// TestDashboardGrants: with a policy with grants under traffic, the
// dashboard's grants card shows its decisions made locally and on Valkey,
// settling on the service's own counters, most of them local; a policy
// without grants has no row there.
func TestDashboardGrants(t *testing.T) {
	v := valkeytest.Start(t)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, "policies:\n  - {name: hot, algorithm: gcra, burst: 1000, rate: 200/s, grants: auto}\n  - {name: api, algorithm: token_bucket, burst: 20, rate: 1/m}\n")
	p := serve(t, nil, "--config", cfg, "--valkey", v.Addr)
	waitReady(t, p)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			default:
			}
			post(t, p.HTTP+"/v1/check", `{"policy":"hot","key":"all"}`)
			if i%10 == 0 {
				post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"k"}`)
			}
		}
	}()
	ctx, cancel := browser(t)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(p.HTTP+"/ui?refresh=300"),
		chromedp.WaitVisible(chromedp.CSS(`#grants tr[data-policy="hot"]`)),
	); err != nil {
		close(quit)
		<-done
		t.Fatalf("loading /ui: %v", err)
	}
	time.Sleep(1500 * time.Millisecond)
	if s := textOf(t, ctx, `#grants tr[data-policy="hot"] td[data-field="local_rate"]`); s == "–" || s == "0.00" {
		t.Errorf("local/s under traffic: %q", s)
	}
	close(quit)
	<-done
	want := scrapeGrantDecisions(t, p.HTTP, "hot.gcra")
	deadline := time.Now().Add(20 * time.Second)
	for {
		local := textOf(t, ctx, `#grants tr[data-policy="hot"] td[data-field="local"]`)
		onValkey := textOf(t, ctx, `#grants tr[data-policy="hot"] td[data-field="valkey"]`)
		if local == fmt.Sprint(want["local"]) && onValkey == fmt.Sprint(want["valkey"]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the grants card shows local %s, on Valkey %s; /metrics %v", local, onValkey, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if want["local"] < 2*want["valkey"] || want["local"] == 0 {
		t.Errorf("decisions %v: want most local", want)
	}
	share := textOf(t, ctx, `#grants tr[data-policy="hot"] td[data-field="local_share"]`)
	if pct, err := strconv.ParseFloat(strings.TrimSuffix(share, "%"), 64); err != nil || pct < 60 {
		t.Errorf("local share %q", share)
	}
	if s := textOf(t, ctx, `#grants tr[data-policy="api"]`); s != "(missing)" {
		t.Errorf("a policy without grants in the grants card: %q", s)
	}
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("grants-card").hidden`)); err != nil || hidden {
		t.Errorf("grants card hidden %v %v", hidden, err)
	}
}
