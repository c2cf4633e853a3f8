package main

// The dashboard at /ui, in a real headless Chromium (Debian's, installed by
// scripts/install-chromium.sh from scripts/test.sh), against a running
// sluice serve on a real Valkey.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/sluicehq/sluice/valkeytest"
)

const dashToken = "dashboard-token-0123456789abcdef"

const dashYAML = `
admin:
  token_env: SLUICE_ADMIN_TOKEN
valkey:
  timeout: 2s
policies:
  - {name: api, algorithm: token_bucket, burst: 20, rate: 1/m, description: per API key, show_keys: raw, wait: 1s}
  - {name: login, algorithm: sliding_log, limit: 5, window: 15m, on_failure: deny, description: per username}
  - {name: search, algorithm: sliding_window, limit: 100, window: 1m, show_keys: truncated, warn_at: 1}
  - {name: exports, algorithm: in_flight, limit: 2, lease: 30s, description: exports running per tenant}
  - {name: jobs, algorithm: in_flight, limit: 2, lease: 2s, description: jobs running per tenant}
  - {name: signup, algorithm: fixed_window, limit: 2, window: 720h, penalty: {after: 3, within: 1h, block: 1h}, description: blocks repeat offenders}
`

// browser starts Debian's Chromium headless with a fresh profile.
func browser(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	exe, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is missing: run scripts/install-chromium.sh (apt-get install chromium); the dashboard is tested in a real browser")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	return ctx, func() { tcancel(); cancel(); acancel() }
}

// scrape reads sluice_decisions_total from /metrics: by limiter, then
// outcome; and sluice_blocks_total as the outcome "blocks".
func scrape(t *testing.T, base string) map[string]map[string]int64 {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		blocks := strings.HasPrefix(line, "sluice_blocks_total{")
		if !strings.HasPrefix(line, "sluice_decisions_total{") && !blocks {
			continue
		}
		var limiter, outcome string
		if blocks {
			outcome = "blocks"
		}
		labels := line[strings.Index(line, "{")+1 : strings.Index(line, "}")]
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "limiter":
				limiter = v
			case "outcome":
				outcome = v
			}
		}
		n, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if out[limiter] == nil {
			out[limiter] = map[string]int64{}
		}
		out[limiter][outcome] = int64(n)
	}
	return out
}

// textOf returns the text of the first element sel selects, read in one
// step (the page redraws its tables on every poll).
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	js, _ := json.Marshal(sel)
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%s) || {textContent: "(missing)"}).textContent`, js)))
	if err != nil {
		t.Fatalf("%s: %v", sel, err)
	}
	return s
}

// TestDashboardInBrowser loads /ui with traffic going on, checks that the
// numbers it shows are the service's own counters, takes a screenshot, and
// exercises inspect and reset with and without the admin token.
//
// SLUICE_DASHBOARD_SCREENSHOT=FILE writes the screenshot there (the picture
// in docs/dashboard.md).
func TestDashboardInBrowser(t *testing.T) {
	v := valkeytest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfg, dashYAML)
	p := serve(t, []string{"SLUICE_ADMIN_TOKEN=" + dashToken}, "--config", cfg, "--valkey", v.Addr)

	waitReady(t, p)

	// Traffic while the page loads: an API key over its burst, a login
	// hammered past its limit, a search, and a key that tries to inject
	// markup into the page.
	xss := `<img src=x onerror="window.__xss=1">`
	traffic := func() (stop func()) {
		quit := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				default:
				}
				post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"key_abc"}`)
				if i%3 == 0 {
					post(t, p.HTTP+"/v1/check", `{"policy":"login","key":"user:alice"}`)
				}
				if i%7 == 0 {
					post(t, p.HTTP+"/v1/check", fmt.Sprintf(`{"policy":"api","key":%q}`, xss))
					post(t, p.HTTP+"/v1/check", `{"policy":"search","key":"203.0.113.77"}`)
					post(t, p.HTTP+"/v1/check", `{"policy":"signup","key":"203.0.113.78"}`)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		return func() { close(quit); <-done }
	}
	stop := traffic()

	ctx, cancel := browser(t)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(p.HTTP+"/ui?refresh=300"),
		chromedp.WaitVisible(chromedp.CSS(`#policies tr[data-policy="api"]`)),
	); err != nil {
		t.Fatalf("loading /ui: %v", err)
	}
	time.Sleep(time.Second) // traffic and a few polls
	stop()

	// The numbers shown settle on the service's own counters.
	cellText := func(policy, field string) string {
		return textOf(t, ctx, fmt.Sprintf(`#policies tr[data-policy=%q] td[data-field=%q]`, policy, field))
	}
	want := scrape(t, p.HTTP)
	fields := map[string]string{"allowed": "allowed", "refused": "denied"}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mismatch := ""
		for _, pol := range []struct{ name, limiter string }{{"api", "api.token_bucket"}, {"login", "login.sliding_log"}, {"search", "search.sliding_window"}} {
			for field, outcome := range fields {
				if got, w := cellText(pol.name, field), strconv.FormatInt(want[pol.limiter][outcome], 10); got != w {
					mismatch += fmt.Sprintf("%s %s: page %s, /metrics %s; ", pol.name, field, got, w)
				}
			}
		}
		if mismatch == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page's numbers differ from the service's counters: %s", mismatch)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if want["api.token_bucket"]["allowed"] == 0 || want["api.token_bucket"]["denied"] == 0 || want["login.sliding_log"]["denied"] == 0 {
		t.Fatalf("the traffic should have both allowed and refused: %v", want)
	}
	checkWarningsCard(t, ctx, p.HTTP)
	// The blocks of a policy's penalty: signup's one block, as /metrics says.
	if got, w := cellText("signup", "blocks"), strconv.FormatInt(want["signup.fixed_window"]["blocks"], 10); got != w || w != "1" {
		t.Errorf("signup blocks: page %s, /metrics %s, want 1", got, w)
	}
	for _, f := range []string{"p50", "p99"} {
		if s := cellText("api", f); !strings.HasSuffix(s, "ms") && !strings.HasSuffix(s, "µs") {
			t.Errorf("api %s: %q, want a latency", f, s)
		}
	}
	text := func(sel string) string { t.Helper(); return textOf(t, ctx, sel) }
	node, breaker, reload := text(`#nodes td[data-field="address"]`), text(`#nodes td[data-field="breaker"]`), text(`#cfg-reload`)
	if node != v.Addr || breaker != "closed" || reload != "none since start" {
		t.Errorf("valkey node %q breaker %q, reload %q", node, breaker, reload)
	}
	if d := cellText("api", "degraded"); d != "0" {
		t.Errorf("api degraded %s on a healthy Valkey", d)
	}

	checkQuantiles(t, ctx)
	checkLeases(t, ctx, p.HTTP)

	action := func(policy, key, button string) (status, result string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("key-result").dataset.status = ""`)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.ID("key-policy"), policy),
			chromedp.SetValue(chromedp.ID("key"), key),
			chromedp.Click(chromedp.ID(button)),
			chromedp.WaitVisible(chromedp.CSS(`#key-result[data-status]:not([data-status=""])`)),
		); err != nil {
			t.Fatalf("%s %s/%s: %v", button, policy, key, err)
		}
		attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.ID("key-result"), "data-status"))
		if err != nil {
			t.Fatal(err)
		}
		return attr.Value, text("#key-result")
	}
	peek := func() float64 {
		code, m := request(t, "GET", p.HTTP+"/v1/keys/login/user:alice", "", dashToken)
		if code != 200 {
			t.Fatalf("peek: %d %v", code, m)
		}
		return m["remaining"].(float64)
	}

	// Without the token: refused, and nothing is reset.
	if st, text := action("login", "user:alice", "inspect"); st != "401" || !strings.Contains(text, "token") {
		t.Errorf("inspect without a token: %s %q", st, text)
	}
	if st, _ := action("login", "user:alice", "reset"); st != "401" {
		t.Errorf("reset without a token: %s", st)
	}
	if r := peek(); r != 0 {
		t.Fatalf("login user:alice has %v remaining after a refused reset, want 0", r)
	}
	if top := text("#top"); strings.Contains(top, "key_abc") {
		t.Errorf("top refused keys shown without a token: %q", top)
	}

	// A wrong token: refused too, and not echoed.
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("token"), "wrong-token-0123456789abcdef"), chromedp.Click(chromedp.ID("token-use"))); err != nil {
		t.Fatal(err)
	}
	if st, _ := action("login", "user:alice", "reset"); st != "401" {
		t.Errorf("reset with a wrong token: %s", st)
	}

	// With the token: top refused keys, inspect, reset.
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("token"), dashToken),
		chromedp.Click(chromedp.ID("token-use")),
		chromedp.WaitVisible(chromedp.CSS(`#top div[data-policy="api"] td[data-field="key"]`)),
	); err != nil {
		t.Fatalf("top refused keys with the token: %v", err)
	}
	apiTop, loginTop := text(`#top div[data-policy="api"]`), text(`#top div[data-policy="login"]`)
	if !strings.Contains(apiTop, "key_abc") {
		t.Errorf("api (show_keys: raw) top refused keys: %q", apiTop)
	}
	if loginKey := text(`#top div[data-policy="login"] td[data-field="key"]`); strings.Contains(loginTop, "alice") || !strings.HasPrefix(loginKey, "h:") {
		t.Errorf("login (hashed) top refused keys: %q", loginTop)
	}
	if st, text := action("login", "user:alice", "inspect"); st != "200" || !strings.Contains(text, "remaining 0 of 5") || !strings.Contains(text, "in force: policy sliding_log(limit=5") {
		t.Errorf("inspect with the token: %s %q", st, text)
	}
	if st, text := action("login", "user:alice", "reset"); st != "200" || !strings.Contains(text, "reset login / user:alice") {
		t.Errorf("reset with the token: %s %q", st, text)
	}
	if r := peek(); r != 5 {
		t.Errorf("login user:alice has %v remaining after the reset, want 5", r)
	}

	// The token is never in the page, the key with markup stayed text.
	html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	xssRan, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__xss === 1`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, dashToken) || strings.Contains(html, "wrong-token") {
		t.Error("the admin token appears in the page")
	}
	if xssRan {
		t.Error("a key's markup ran in the page")
	}
	if strings.Contains(p.Logs(), dashToken) {
		t.Error("the admin token appears in the service's logs")
	}

	// The screenshot (PNG), after the admin actions, with the top refused
	// keys and traffic going on.
	stop = traffic()
	time.Sleep(1500 * time.Millisecond)
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	stop()
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 600 {
		t.Fatalf("screenshot of %v", b)
	}
	out := os.Getenv("SLUICE_DASHBOARD_SCREENSHOT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "dashboard.png")
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(shot))
}

// checkWarningsCard: the warnings and waits card shows the service's own
// counters: search's warnings (warn_at: 1, so every allowed search after
// the first warns) and api's waits refused (wait: 1s, a refusal's wait of
// about a minute passes it); login, with neither, is not listed.
func checkWarningsCard(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	cell := func(policy, field string) string {
		return textOf(t, ctx, fmt.Sprintf(`#warnings tr[data-policy=%q] td[data-field=%q]`, policy, field))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		warnings := scrapeValue(t, base, `sluice_warnings_total{limiter="search.sliding_window"}`)
		refused := scrapeValue(t, base, `sluice_server_waits_total{limiter="api.token_bucket",outcome="refused"}`)
		page := [4]string{cell("search", "warnings"), cell("api", "wait_refused"), cell("search", "warn_at"), cell("api", "wait")}
		want := [4]string{warnings, refused, "1%", "1000ms"}
		if page == want && warnings != "0" && refused != "0" && textOf(t, ctx, "#waiting") == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the warnings card shows %q, /metrics %q (both nonzero), waiting %q", page, want, textOf(t, ctx, "#waiting"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := textOf(t, ctx, `#warnings tr[data-policy="login"]`); got != "(missing)" {
		t.Errorf("login (no warn_at, no wait) is listed: %q", got)
	}
}

// scrapeValue returns the value of series in base's /metrics, "0" when it
// is absent (a counter not yet counted).
func scrapeValue(t *testing.T, base, series string) string {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return v
		}
	}
	return "0"
}

// pageShows waits until the in-flight leases row of policy shows want,
// field by field.
func pageShows(t *testing.T, ctx context.Context, policy string, want map[string]int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mismatch := ""
		for field, n := range want {
			if got := textOf(t, ctx, fmt.Sprintf(`#leases tr[data-policy=%q] td[data-field=%q]`, policy, field)); got != strconv.FormatInt(n, 10) {
				mismatch += fmt.Sprintf("%s: page %s, /metrics %d; ", field, got, n)
			}
		}
		if mismatch == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the in-flight leases row of %s differs from the service's counters: %s", policy, mismatch)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkExpired leaves a lease of jobs (lease 2s) to expire, as a crashed
// holder's, while a second lease of the key is renewed (which keeps the key,
// so that a decision on it reaps the first), until /metrics counts it
// expired; then releases the second, and checks the page's "ended by
// expiry" of jobs is /metrics' count.
func checkExpired(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	acquire := func() string {
		code, m := post(t, base+"/v1/leases/acquire", `{"policy":"jobs","key":"tenant:7"}`)
		if code != 200 {
			t.Fatalf("acquire of jobs: %d %v", code, m)
		}
		return m["lease"].(string)
	}
	acquire() // never released nor renewed
	kept := acquire()
	body := func() string { return fmt.Sprintf(`{"policy":"jobs","key":"tenant:7","lease":%q}`, kept) }
	deadline := time.Now().Add(30 * time.Second)
	for scrapeLeaseEvents(t, base, "jobs.in_flight")["expired"] == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no lease of jobs counted expired 30s after one was left to expire (lease 2s)")
		}
		time.Sleep(300 * time.Millisecond)
		if code, _ := post(t, base+"/v1/leases/renew", body()); code == 410 {
			kept = acquire() // the machine stalled past the lease: take another
		}
	}
	if code, m := post(t, base+"/v1/leases/release", body()); code != 200 {
		t.Fatalf("release of jobs: %d %v", code, m)
	}
	ev := scrapeLeaseEvents(t, base, "jobs.in_flight")
	if ev["expired"] < 1 || ev["released"] != 1 && ev["ended"] != 1 {
		t.Fatalf("jobs /metrics: %v, want at least 1 expired, and the kept lease released (or ended)", ev)
	}
	pageShows(t, ctx, "jobs", map[string]int64{"expired": ev["expired"], "released": ev["released"], "renewed": ev["renewed"]})
	if h := textOf(t, ctx, `#leases thead`); !strings.Contains(h, "ended by expiry") {
		t.Errorf("the in-flight leases header has no \"ended by expiry\": %q", h)
	}
}

// scrapeLeaseEvents reads sluice_lease_events_total of limiter from
// /metrics, by event.
func scrapeLeaseEvents(t *testing.T, base, limiter string) map[string]int64 {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "sluice_lease_events_total{") || !strings.Contains(line, `limiter="`+limiter+`"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `event="`)
		event, _, _ := strings.Cut(rest, `"`)
		n, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		out[event] = int64(n)
	}
	return out
}

// checkLeases drives the in_flight policy exports through every lease
// event (two acquired, one refused; a renewal and a release; after a
// reset of the key, a lost renewal and a release of an ended lease) and
// checks that the page's in-flight leases section shows the service's own
// counters; then a lease of jobs left to expire (checkExpired).
func checkLeases(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	var ids []string
	for i := range 3 {
		code, m := post(t, base+"/v1/leases/acquire", `{"policy":"exports","key":"tenant:42"}`)
		if want := map[bool]int{true: 200, false: 429}[i < 2]; code != want {
			t.Fatalf("acquire %d: %d %v, want %d", i, code, m, want)
		}
		if i < 2 {
			ids = append(ids, m["lease"].(string))
		}
	}
	lease := func(route, id string) int {
		code, _ := post(t, base+"/v1/leases/"+route, fmt.Sprintf(`{"policy":"exports","key":"tenant:42","lease":%q}`, id))
		return code
	}
	if lease("renew", ids[0]) != 200 || lease("release", ids[0]) != 200 {
		t.Fatal("renew and release of a held lease")
	}
	if code, m := request(t, "DELETE", base+"/v1/keys/exports/tenant:42", "", dashToken); code != 200 {
		t.Fatalf("reset: %d %v", code, m)
	}
	if lease("renew", ids[1]) != 410 || lease("release", ids[1]) != 200 {
		t.Fatal("renew (lost) and release (ended) of a lease whose key was reset")
	}
	ev := scrapeLeaseEvents(t, base, "exports.in_flight")
	dec := scrape(t, base)["exports.in_flight"]
	want := map[string]int64{"acquired": dec["allowed"], "refused": dec["denied"], "released": ev["released"], "ended": ev["ended"], "renewed": ev["renewed"], "lost": ev["lost"], "expired": ev["expired"]}
	// A reset key's leases are not expired.
	for field, n := range map[string]int64{"acquired": 2, "refused": 1, "released": 1, "ended": 1, "renewed": 1, "lost": 1, "expired": 0} {
		if want[field] != n {
			t.Fatalf("/metrics: %s %d, want %d (%v, %v)", field, want[field], n, ev, dec)
		}
	}
	pageShows(t, ctx, "exports", want)
	checkExpired(t, ctx, base)
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("leases-section").hidden`))
	if err != nil || hidden {
		t.Errorf("the in-flight leases section is hidden (%v) with an in_flight policy configured", err)
	}
	if limit, lease := textOf(t, ctx, `#leases tr[data-policy="exports"] td[data-field="limit"]`), textOf(t, ctx, `#leases tr[data-policy="exports"] td[data-field="lease"]`); limit != "2" || lease != "30s" {
		t.Errorf("exports: limit %q, lease %q; want 2 and 30s", limit, lease)
	}
	if rows := textOf(t, ctx, `#leases tbody`); strings.Contains(rows, "api") || strings.Contains(rows, "login") {
		t.Errorf("rate policies in the in-flight leases section: %q", rows)
	}
}

// TestDashboardAssets: the page and its files are served from the binary
// with a policy that loads nothing from elsewhere.
func TestDashboardAssets(t *testing.T) {
	p := serve(t, nil)
	for _, path := range []string{"/ui", "/ui/", "/ui/app.js", "/ui/style.css", "/ui/state.json"} {
		resp, err := client.Get(p.HTTP + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if resp.StatusCode != http.StatusOK || !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: %d, CSP %q", path, resp.StatusCode, csp)
		}
	}
	page, _ := os.ReadFile("internal/server/ui/index.html")
	for _, bad := range []string{"http://", "https://", "//cdn"} {
		if bytes.Contains(page, []byte(bad)) {
			t.Errorf("index.html refers to %s: assets must be embedded", bad)
		}
	}
	resp, err := client.Get(p.HTTP + "/ui/nope.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/ui/nope.js: %d", resp.StatusCode)
	}
}

// quantileRef is histogram_quantile's interpolation, plainly: the rank
// q×total falls in the first bucket whose cumulative count reaches it, and
// is placed linearly between the bucket's bounds; past the last finite
// bound it is that bound.
func quantileRef(q float64, les []float64, counts []uint64) (float64, bool) {
	total := float64(counts[len(counts)-1])
	if total == 0 {
		return 0, false
	}
	rank := q * total
	for i, c := range counts {
		if float64(c) < rank {
			continue
		}
		lower, below := 0.0, 0.0
		if i > 0 {
			lower, below = les[i-1], float64(counts[i-1])
		}
		if i == len(counts)-1 { // +Inf
			return lower, true
		}
		if float64(c) == below {
			return les[i], true
		}
		return lower + (les[i]-lower)*(rank-below)/(float64(c)-below), true
	}
	return 0, false
}

// checkQuantiles compares the page's latency quantiles with quantileRef
// on random histograms.
func checkQuantiles(t *testing.T, ctx context.Context) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	les := []float64{5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25}
	for n := 0; n < 200; n++ {
		counts := make([]uint64, len(les)+1)
		var cum uint64
		for i := range counts {
			if rng.IntN(3) > 0 {
				cum += uint64(rng.IntN(50))
			}
			counts[i] = cum
		}
		type bucket struct {
			LE    float64 `json:"le"`
			Count uint64  `json:"count"`
			Inf   bool    `json:"inf,omitempty"`
		}
		var bs []bucket
		for i, c := range counts {
			if i < len(les) {
				bs = append(bs, bucket{LE: les[i], Count: c})
			} else {
				bs = append(bs, bucket{Count: c, Inf: true})
			}
		}
		js, _ := json.Marshal(bs)
		for _, q := range []float64{0.5, 0.99, rng.Float64()} {
			got, err := chromedp.Run(ctx, chromedp.Evaluate[*float64](fmt.Sprintf("window.sluiceQuantile(%v, %s, null)", q, js)))
			if err != nil {
				t.Fatal(err)
			}
			want, ok := quantileRef(q, les, counts)
			if !ok {
				if got != nil {
					t.Fatalf("q %v of %v: page %v, want none", q, counts, *got)
				}
				continue
			}
			if got == nil {
				t.Fatalf("q %v of %v: page none, want %v", q, counts, want)
			}
			if math.Abs(*got-want) > 1e-12 {
				t.Fatalf("q %v of %v: page %v, want %v", q, counts, *got, want)
			}
		}
	}
}
