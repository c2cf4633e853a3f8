package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardRateFloor: the page polls every 200ms, but shows no rate
// over a span below its floor (1s): until a state at least 1s old is
// there, the span reads "–" and so do the rates; after, every span shown
// is at least 1s. Before, the rates were over the 0.2s between two polls
// (and a headless browser once showed "rates over the last 0.0s"). The
// baseline choice is checked on its own too, in the page.
func TestDashboardRateFloor(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, "policies:\n  - {name: api, algorithm: gcra, burst: 5, rate: 1/s}\n")
	p := serve(t, nil, "--config", cfg)
	waitReady(t, p)
	ctx, cancel := browser(t)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(p.HTTP+"/ui?refresh=200"),
		chromedp.WaitVisible(chromedp.CSS(`#policies tr[data-policy="api"]`)),
	); err != nil {
		t.Fatalf("loading /ui: %v", err)
	}

	// The baseline: the newest state at least the floor older than now.
	floor, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.sluiceRateFloor`))
	if err != nil || floor != 1 {
		t.Fatalf("rate floor %v (%v), want 1", floor, err)
	}
	at := func(ms int) map[string]string {
		return map[string]string{"now": time.UnixMilli(int64(1_700_000_000_000 + ms)).UTC().Format(time.RFC3339Nano)}
	}
	for _, tc := range []struct {
		states []int
		now    int
		want   int
	}{
		{nil, 1000, -1},
		{[]int{0}, 200, -1},
		{[]int{0}, 999, -1},
		{[]int{0}, 1000, 0},
		{[]int{0, 200, 400, 600, 800, 1000}, 1200, 1},
		{[]int{0, 200, 400, 600, 800, 1000}, 1100, 0},
		{[]int{0, 5000}, 5500, 0},
	} {
		var states []map[string]string
		for _, ms := range tc.states {
			states = append(states, at(ms))
		}
		js, _ := json.Marshal(states)
		if states == nil {
			js = []byte("[]")
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("window.sluiceBaseline(%s, %d, 1)", js, 1_700_000_000_000+tc.now)))
		if err != nil || got != tc.want {
			t.Errorf("baseline of %v at %d: %d (%v), want %d", tc.states, tc.now, got, err, tc.want)
		}
	}

	// The page itself, polled every 200ms for 2.5s.
	sawNone, sawRate := false, false
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		var got struct{ Interval, Allowed string }
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({Interval: document.getElementById("interval").textContent,
			Allowed: (document.querySelector('#policies tr[data-policy="api"] td[data-field="allowed_rate"]') || {textContent: ""}).textContent})`))
		if err != nil {
			t.Fatal(err)
		}
		json.Unmarshal([]byte(s), &got)
		if strings.HasPrefix(got.Interval, "–") {
			sawNone = true
			if got.Allowed != "–" {
				t.Errorf("no span yet (%q) but a rate %q", got.Interval, got.Allowed)
			}
			continue
		}
		span, err := strconv.ParseFloat(strings.TrimSuffix(got.Interval, "s"), 64)
		if err != nil || span < 1 {
			t.Fatalf("rates over %q: want a span of at least 1s", got.Interval)
		}
		if got.Allowed == "–" {
			t.Errorf("a span of %q but no rate", got.Interval)
		}
		sawRate = true
	}
	if !sawNone || !sawRate {
		t.Errorf("saw no-span %v, a rate %v: want both within 2.5s at 200ms polls", sawNone, sawRate)
	}
}
