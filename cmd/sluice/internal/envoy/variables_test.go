package envoy

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// upstreamSettings is upstream's src/settings/settings.go at the commit
// the compatibility harness pins (compat/envoy/testdata/upstream).
var upstreamSettings = filepath.Join("..", "..", "..", "..", "compat", "envoy", "testdata", "upstream", "src", "settings", "settings.go")

// upstreamVariables are the variables of upstream's Settings struct.
func upstreamVariables(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile(upstreamSettings)
	if err != nil {
		t.Fatalf("upstream's settings (vendored for the compatibility harness): %v", err)
	}
	var out []string
	for _, m := range regexp.MustCompile("envconfig:\"([A-Z0-9_]+)\"").FindAllStringSubmatch(string(src), -1) {
		out = append(out, m[1])
	}
	if len(out) < 100 {
		t.Fatalf("found %d variables in %s: the file is not upstream's settings", len(out), upstreamSettings)
	}
	return out
}

// TestVariablesClassified: every variable of upstream's settings is
// classified, the table holds no other, and each class behaves as it
// says: a refused one set to another value than its default stops the
// start naming it, a noted one is logged by name, a honoured or dependent
// one is accepted, and a dependent one needs a switch that is refused. The
// migration guide names every one.
func TestVariablesClassified(t *testing.T) {
	up := upstreamVariables(t)
	seen := map[string]bool{}
	for _, k := range up {
		seen[k] = true
		if _, ok := Variables[k]; !ok {
			t.Errorf("upstream's %s is not classified (envoy.Variables): honour it, refuse it, or note it and document the difference", k)
		}
	}
	for k := range Variables {
		if !seen[k] {
			t.Errorf("envoy.Variables has %s, which upstream's settings do not", k)
		}
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "migrating-from-envoy-ratelimit.md"))
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"RUNTIME_ROOT": "/rt", "RUNTIME_SUBDIRECTORY": "ratelimit", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "USE_STATSD": "false"}
	read := func(k, v string, with []string) (*Env, error) {
		m := map[string]string{}
		for bk, bv := range base {
			m[bk] = bv
		}
		for i := 0; i+1 < len(with); i += 2 {
			m[with[i]] = with[i+1]
		}
		m[k] = v
		return ReadEnv(mapEnv(m))
	}
	for k, v := range Variables {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("docs/migrating-from-envoy-ratelimit.md does not name %s", k)
		}
		if v.Sample == "" {
			t.Errorf("%s has no sample value", k)
			continue
		}
		e, err := read(k, v.Sample, v.With)
		switch v.Class {
		case Refused:
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%s=%s: %v, want a refusal naming it", k, v.Sample, err)
			}
		case Noted:
			if err != nil || !strings.Contains(strings.Join(e.Notes, "\n"), k+"=") {
				t.Errorf("%s=%s: %v, notes %q: want it noted", k, v.Sample, err, noteList(e))
			}
		case Honoured:
			if err != nil {
				t.Errorf("%s=%s: %v, want it accepted", k, v.Sample, err)
			}
		case Dependent:
			if err != nil {
				t.Errorf("%s=%s: %v, want it accepted (unused without %s)", k, v.Sample, err, v.Needs)
			}
			if Variables[v.Needs].Class != Refused {
				t.Errorf("%s depends on %s, which is not refused", k, v.Needs)
			}
		}
	}
}

func noteList(e *Env) []string {
	if e == nil {
		return nil
	}
	return e.Notes
}

// TestHonouredVariables: the variables this change honours are read into
// what acts on them.
func TestHonouredVariables(t *testing.T) {
	e, err := ReadEnv(mapEnv(map[string]string{"RUNTIME_ROOT": "/rt", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379",
		"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true", "REDIS_STARTUP_MAX_ELAPSED_TIME": "1m",
		"GRPC_MAX_CONNECTION_AGE": "5m", "GRPC_MAX_CONNECTION_AGE_GRACE": "10s", "EXTRA_TAGS": "env:prod, team:edge"}))
	if err != nil {
		t.Fatal(err)
	}
	if !e.HealthCheckActiveConnection || e.StartupMaxElapsed.String() != "1m0s" || e.Options.MaxConnectionAge.String() != "5m0s" ||
		e.Options.MaxConnectionAgeGrace.String() != "10s" || e.Options.ExtraLabels["env"] != "prod" || e.Options.ExtraLabels["team"] != "edge" {
		t.Errorf("read: %+v %+v", e, e.Options)
	}
	d, err := ReadEnv(mapEnv(map[string]string{"RUNTIME_ROOT": "/rt", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379"}))
	if err != nil {
		t.Fatal(err)
	}
	// Upstream's defaults: 24h and 1h.
	if d.Options.MaxConnectionAge.String() != "24h0m0s" || d.Options.MaxConnectionAgeGrace.String() != "1h0m0s" || d.HealthCheckActiveConnection {
		t.Errorf("defaults: %+v", d.Options)
	}
	for _, bad := range []string{"domain:x", "nocolon", "1x:y", "__a:b"} {
		if _, err := ReadEnv(mapEnv(map[string]string{"RUNTIME_ROOT": "/rt", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "EXTRA_TAGS": bad})); err == nil {
			t.Errorf("EXTRA_TAGS=%s accepted", bad)
		}
	}
}

// TestExtraLabels: EXTRA_TAGS are labels of the ratelimit_* metrics.
func TestExtraLabels(t *testing.T) {
	f := newFake(t, "domains:\n  - domain: edge\n    descriptors:\n      - {key: k, rate_limit: {unit: minute, requests_per_unit: 5}}\n")
	reg := prometheus.NewRegistry()
	s := New(f, reg, slog.New(slog.DiscardHandler), 1<<10, Options{ExtraLabels: map[string]string{"env": "prod"}})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{{
		Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	if _, err := s.Decide(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_service_rate_limit_total_hits" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == "env" && l.GetValue() == "prod"
			}
		}
	}
	if !found {
		t.Errorf("ratelimit_service_rate_limit_total_hits has no env=\"prod\" label")
	}
}
