package deploytest

// deploy/prometheus (alert rules) and deploy/grafana (dashboard), checked
// with promtool (Debian's prometheus package, installed by
// scripts/install-promtool.sh from scripts/test.sh) and against the
// metrics a running sluice serve exposes.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/valkeytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is missing: run scripts/install-promtool.sh (apt-get install prometheus); the alert rules and metrics are checked with it")
	}
	return p
}

func runPromtool(t *testing.T, dir string, stdin []byte, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAlertRules: the rules load, and each alert fires on the series it is
// meant for and not on a healthy service (sluice-alerts.test.yaml).
func TestAlertRules(t *testing.T) {
	for _, args := range [][]string{{"check", "rules", "sluice-alerts.yaml"}, {"test", "rules", "sluice-alerts.test.yaml"}} {
		if out, err := runPromtool(t, "prometheus", nil, args...); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The five alerts the rules promise, each with a unit test.
	rules, _ := os.ReadFile("prometheus/sluice-alerts.yaml")
	tests, _ := os.ReadFile("prometheus/sluice-alerts.test.yaml")
	for _, a := range []string{"SluiceDegraded", "SluiceDecisionLatencyOverTimeout", "SluiceConfigReloadFailing", "SluiceRefusedRatioSpiking", "SluiceRefusedRatioDroppedToZero"} {
		if !bytes.Contains(rules, []byte("alert: "+a+"\n")) || !bytes.Contains(tests, []byte("alertname: "+a+"\n")) {
			t.Errorf("alert %s: missing from the rules or their tests", a)
		}
	}
}

const monitoringYAML = `
policies:
  - {name: api, algorithm: token_bucket, burst: 3, rate: 1/m}
  - {name: dark, algorithm: gcra, burst: 1, rate: 1/h, shadow: true}
  - {name: hot, algorithm: gcra, burst: 100, rate: 10/s, grants: auto}
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {unit: minute, requests_per_unit: 5}
      - key: path
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
`

// scrapeLive starts sluice serve on a Valkey, sends HTTP and Envoy gRPC traffic, and
// returns its /metrics.
func scrapeLive(t *testing.T) []byte {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(monitoringYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	// An evicting Valkey, so that the settings risk is reported too.
	v := valkeytest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	p := start(t, binary(t), nil, nil, "serve", "--config", cfg, "--valkey", v.Addr, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0")
	waitReady(t, p)
	for range 5 {
		post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"k"}`)
		post(t, p.HTTP+"/v1/check", `{"policy":"dark","key":"k"}`)
		post(t, p.HTTP+"/v1/check", `{"policy":"hot","key":"k"}`)
	}
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 7 { // within, near and over the limits (the second in shadow mode)
		_, err := rl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{
			{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
			{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "path", Value: "/x"}}},
		}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
	}
	code, body := get(t, p.HTTP+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	return []byte(body)
}

// compatLint is the one promtool finding accepted: counters named as
// envoyproxy/ratelimit names them (no _total suffix), so that its users'
// dashboards and alerts work unchanged.
var compatLint = regexp.MustCompile(`^ratelimit_service_[a-z_]+ counter metrics should have "_total" suffix$`)

// TestLiveMetrics: `promtool check metrics` on a live scrape finds nothing
// but the envoyproxy/ratelimit-compatible names, every metric the alert
// rules and the Grafana dashboard use is exposed, and every sluice_* metric
// exposed is in docs/metrics.md with its labels.
func TestLiveMetrics(t *testing.T) {
	scrape := scrapeLive(t)
	out, err := runPromtool(t, ".", scrape, "check", "metrics")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !compatLint.MatchString(line) {
			t.Errorf("promtool check metrics: %s", line)
		}
	}
	if err != nil && t.Failed() {
		t.Logf("promtool: %v", err)
	}
	exposed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllSubmatch(scrape, -1) {
		exposed[string(m[1])] = true
	}
	rules, _ := os.ReadFile("prometheus/sluice-alerts.yaml")
	for file, data := range map[string][]byte{"sluice-alerts.yaml": rules, "sluice-dashboard.json": dashboardQueries(t)} {
		used := metricNames(data)
		if len(used) < 4 {
			t.Errorf("%s uses %d metrics", file, len(used))
		}
		for _, name := range used {
			if !exposed[name] {
				t.Errorf("%s uses %s, which sluice serve does not expose", file, name)
			}
		}
	}
	checkMetricsDoc(t, scrape)
}

// checkMetricsDoc: every sluice_* family a live scrape exposes is a row of
// docs/metrics.md's table, with the labels the scrape shows.
func checkMetricsDoc(t *testing.T, scrape []byte) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string][]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(sluice_[a-z0-9_]+)` \\| [a-z]+ \\| ([^|]*)\\|").FindAllSubmatch(doc, -1) {
		var labels []string
		for _, l := range strings.Split(string(m[2]), ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		documented[string(m[1])] = labels
	}
	if len(documented) < 10 {
		t.Fatalf("docs/metrics.md's table lists %d metrics", len(documented))
	}
	exposed := map[string]map[string]bool{}
	for _, line := range strings.Split(string(scrape), "\n") {
		if !strings.HasPrefix(line, "sluice_") {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if strings.HasSuffix(name, "_seconds"+suffix) {
				name = strings.TrimSuffix(name, suffix)
			}
		}
		if exposed[name] == nil {
			exposed[name] = map[string]bool{}
		}
		labels, _, _ := strings.Cut(rest, "}")
		for _, m := range regexp.MustCompile(`([a-z_]+)="`).FindAllStringSubmatch(labels, -1) {
			if m[1] != "le" {
				exposed[name][m[1]] = true
			}
		}
	}
	for name, set := range exposed {
		want, ok := documented[name]
		if !ok {
			t.Errorf("sluice serve exposes %s, which docs/metrics.md does not list", name)
			continue
		}
		var got []string
		for l := range set {
			got = append(got, l)
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: labels %q exposed, docs/metrics.md says %q", name, got, want)
		}
	}
}

// metricNames lists the Sluice metric families an expression text uses.
func metricNames(data []byte) []string {
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b(?:sluice|ratelimit)_[a-z0-9_]+`).FindAll(data, -1) {
		name := string(m)
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if strings.HasSuffix(name, "_seconds"+suffix) {
				name = strings.TrimSuffix(name, suffix)
			}
		}
		seen[name] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// dashboardQueries returns the PromQL of the Grafana dashboard's panels
// and variables, one per line.
func dashboardQueries(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("grafana/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Query any }
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			fmt.Fprintln(&b, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			fmt.Fprintln(&b, q["query"])
		}
	}
	return b.Bytes()
}

// TestGrafanaDashboard: the dashboard is Grafana JSON whose every query is
// valid PromQL (checked by promtool as recording rules, with the
// dashboard's variables filled in).
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("grafana/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID, Title    string
		SchemaVersion int
		Panels        []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
		t.Errorf("uid %q title %q schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	fill := strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$job", ".*", "$instance", ".*", "$limiter", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			q, _ := json.Marshal(fill.Replace(tg.Expr))
			fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", n, q)
			n++
		}
	}
	// The variables' queries: label_values(<selector>, label).
	for _, v := range d.Templating.List {
		q, ok := v.Query.(map[string]any)
		if !ok {
			continue
		}
		m := regexp.MustCompile(`^label_values\((.*), *[a-z_]+\)$`).FindStringSubmatch(fmt.Sprint(q["query"]))
		if m == nil {
			t.Errorf("variable %s: query %v", v.Name, q["query"])
			continue
		}
		sel, _ := json.Marshal(fill.Replace(m[1]))
		fmt.Fprintf(&rules, "      - record: dashboard:variable_%s\n        expr: %s\n", v.Name, sel)
	}
	if n < 10 {
		t.Errorf("%d queries", n)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runPromtool(t, ".", nil, "check", "rules", file); err != nil {
		t.Errorf("the dashboard's queries: %v\n%s", err, out)
	}
}
