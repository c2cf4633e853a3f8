package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// keysYAML's windows are long enough that no key expires during the test.
const keysYAML = `
policies:
  - {name: api, algorithm: token_bucket, burst: 20, rate: 20/h}
  - {name: login, algorithm: sliding_log, limit: 5, window: 15m, count_rejected: true, on_failure: deny}
  - {name: daily, algorithm: fixed_window, limit: 1000, window: 24h}
`

// fill makes decisions as sluice serve would (same limiter names and
// prefix), so that the key commands have state to show.
func fill(t *testing.T, cfgPath string, c valkey.Client, policy, key string, n int64) {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := valkeystore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy(policy)
	l, err := sluice.New(st, p.Policy, sluice.WithName(p.Limiter), sluice.WithPrefix(cfg.Prefix), sluice.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := l.Allow(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
}

// TestE2EKeys: keys, inspect and reset through the binary, on one Valkey
// and on a Cluster.
func TestE2EKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfg, keysYAML)
	srv := valkeytest.Start(t)
	cl := valkeytest.StartCluster(t, 3)
	for _, tc := range []struct {
		name   string
		addrs  string
		client valkey.Client
	}{
		{"standalone", srv.Addr, srv.Client(t)},
		{"cluster", strings.Join(cl.Addrs, ","), cl.Client(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 30 {
				fill(t, cfg, tc.client, "api", "user:"+string(rune('a'+i%26))+string(rune('a'+i/26)), 1)
			}
			fill(t, cfg, tc.client, "login", "alice", 6)
			fill(t, cfg, tc.client, "daily", "acct-1", 3)
			// A key of a limiter no longer configured.
			if err := tc.client.Do(context.Background(), tc.client.B().Set().Key("rl:v1:old.gcra:gcra:{x}").Value("1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			base := []string{"--config", cfg, "--valkey", tc.addrs}
			run := func(args ...string) (int, string, string) {
				t.Helper()
				code, stdout, stderr := sluiceCmd(t, append(args[:1:1], append(base, args[1:]...)...)...)
				noStackTrace(t, strings.Join(args, " "), stderr)
				return code, stdout, stderr
			}

			code, stdout, stderr := run("keys")
			if code != 0 {
				t.Fatalf("keys: exit %d\n%s%s", code, stdout, stderr)
			}
			for _, want := range []string{"api.token_bucket:tb3", "login.sliding_log:sl", "daily.fixed_window:fw2", "(not configured)", "1 keys never expire"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("keys lacks %q:\n%s", want, stdout)
				}
			}
			code, stdout, _ = run("keys", "--json", "--policy", "api")
			var kj struct {
				Groups []struct {
					Policy string
					Keys   int
					Bytes  int64   `json:"memory_bytes"`
					TTLMax float64 `json:"ttl_max_ms"`
				}
			}
			if err := json.Unmarshal([]byte(stdout), &kj); err != nil || code != 0 || len(kj.Groups) != 1 || kj.Groups[0].Keys != 30 ||
				kj.Groups[0].Bytes <= 0 || kj.Groups[0].TTLMax <= 0 || kj.Groups[0].TTLMax > 3601000 {
				t.Errorf("keys --json --policy api: exit %d, %v, %+v\n%s", code, err, kj, stdout)
			}
			if code, stdout, _ := run("keys", "--limit", "5", "--policy", "api"); code != 0 || !strings.Contains(stdout, "stopped after 5 keys") {
				t.Errorf("keys --limit 5: exit %d\n%s", code, stdout)
			}

			code, stdout, _ = run("inspect", "login", "alice")
			for _, want := range []string{"store key  rl:v1:login.sliding_log:sl:{alice}", "next       refused, retry after", "remaining  0 of 5", "raw        zset 5 entries"} {
				if code != 0 || !strings.Contains(stdout, want) {
					t.Errorf("inspect login alice: exit %d, lacks %q:\n%s", code, want, stdout)
				}
			}
			// A token bucket's packed state, decoded: one take of a full
			// bucket of 20 tokens, one per 180s, left 19×180s of credit.
			code, stdout, _ = run("inspect", "api", "user:aa")
			if !regexp.MustCompile(`(?m)^raw +string ts=\d{16} u=3420000000$`).MatchString(stdout) || code != 0 {
				t.Errorf("inspect api user:aa: exit %d, no decoded state:\n%s", code, stdout)
			}
			code, stdout, _ = run("inspect", "--json", "daily", "acct-1")
			var st struct {
				Remaining int64
				Exists    bool
				TTLMS     float64 `json:"ttl_ms"`
				Fields    map[string]string
			}
			if err := json.Unmarshal([]byte(stdout), &st); err != nil || code != 0 || !st.Exists || st.Remaining != 997 || st.Fields["c"] != "3" || st.TTLMS <= 0 {
				t.Errorf("inspect --json daily acct-1: exit %d, %v, %+v", code, err, st)
			}

			audit := filepath.Join(dir, tc.name+"-audit.log")
			code, stdout, stderr = run("reset", "--audit-log", audit, "login", "alice")
			if code != 0 || !strings.Contains(stdout, `reset login "alice"`) || !strings.Contains(stderr, `"msg":"sluice reset"`) || !strings.Contains(stderr, `"had_state":true`) {
				t.Errorf("reset: exit %d\n%s%s", code, stdout, stderr)
			}
			if b, err := os.ReadFile(audit); err != nil || !strings.Contains(string(b), `"store_key":"rl:v1:login.sliding_log:sl:{alice}"`) || !strings.Contains(string(b), `"user":`) {
				t.Errorf("audit log: %v %s", err, b)
			}
			if code, _, stderr := run("inspect", "login", "alice"); code != 1 || !strings.Contains(stderr, `no state for key "alice" of policy login`) {
				t.Errorf("inspect after reset: exit %d, %q", code, stderr)
			}
			if code, _, stderr := run("reset", "login", "alice"); code != 1 || !strings.Contains(stderr, "nothing to reset") || !strings.Contains(stderr, `"had_state":false`) {
				t.Errorf("second reset: exit %d, %q", code, stderr)
			}
			for _, args := range [][]string{{"inspect", "nope", "x"}, {"reset", "nope", "x"}, {"keys", "--policy", "nope"}} {
				if code, _, stderr := run(args...); code != 2 || !strings.Contains(stderr, `unknown policy "nope"`) {
					t.Errorf("%v: exit %d, %q", args, code, stderr)
				}
			}
		})
	}
	closed := valkeytest.ClosedAddr(t)
	for _, args := range [][]string{{"keys"}, {"inspect", "api", "x"}, {"reset", "api", "x"}} {
		code, _, stderr := sluiceCmd(t, append(args[:1:1], append([]string{"--config", cfg, "--valkey", closed}, args[1:]...)...)...)
		if code != 1 || !strings.Contains(stderr, "cannot connect to valkey") {
			t.Errorf("%v unreachable: exit %d, %q", args, code, stderr)
		}
		noStackTrace(t, strings.Join(args, " "), stderr)
	}
	for _, args := range [][]string{{"inspect", "api"}, {"reset"}, {"inspect", "a", "b", "c"}, {"inspect", "api", ""}, {"reset", "api", ""}} {
		if code, _, stderr := sluiceCmd(t, args...); code != 2 || !strings.Contains(stderr, "want POLICY and a non-empty KEY") {
			t.Errorf("%v: exit %d, %q", args, code, stderr)
		}
	}
}

const explainYAML = `
policies:
  - {name: api, algorithm: gcra, burst: 20, rate: 5/s}
  - {name: login, algorithm: sliding_log, limit: 5, window: 15m}
  - {name: hot, algorithm: gcra, burst: 100, rate: 50/s, grants: auto}
domains:
  - domain: edge
    descriptors:
      - key: path
        value: /api/login
        policy: login
      - key: path
        value: /api/*
        policy: api
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 100}
      - key: tenant
        value: "team-*"
        share_threshold: true
        rate_limit: {unit: hour, requests_per_unit: 1000}
      - key: remote_address
        descriptors:
          - {key: path, value: /healthz, rate_limit: {unlimited: true}}
  - domain: fleet
    counting: each
    descriptors:
      - {key: region, policy: hot}
`

// TestE2EExplain: which entry matches and why, most specific first, and
// what applies; the matching is the config package's.
func TestE2EExplain(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, explainYAML)
	for _, tc := range []struct {
		entries []string
		code    int
		want    []string
	}{
		{[]string{"path=/api/login"}, 0, []string{"matched path=/api/login (exact value, line 9)", "not chosen: path=/api/*, path",
			"applies: policy login: sliding_log(limit=5, window=15m0s)", "counted as: path=/api/login",
			"key: edge:path:/api/login (sluice inspect login edge:path:/api/login)"}},
		{[]string{"path=/api/users"}, 0, []string{"matched path=/api/* (wildcard value, line 12)", "applies: policy api: gcra"}},
		{[]string{"path=/other"}, 0, []string{"matched path (key only: any value, line 15)", "applies: policy edge.path: fixed_window(limit=100, window=1m0s) (rate_limit 100 per 1 minute)"}},
		{[]string{"tenant=team-red"}, 0, []string{"wildcard value", "counted as: tenant=team-*", "key: edge:tenant:team-*", "note: share_threshold"}},
		{[]string{"remote_address=1.2.3.4", "path=/healthz"}, 0, []string{"1. remote_address=1.2.3.4", "matched remote_address (key only", "2. path=/healthz", "applies: unlimited: always allowed"}},
		{[]string{"remote_address=1.2.3.4"}, 0, []string{"applies: no limit at this descriptor (it only groups deeper ones)"}},
		{[]string{"remote_address=1.2.3.4", "path=/x"}, 1, []string{"no match: no descriptor for path=/x under remote_address (its keys: path=/healthz)"}},
		{[]string{"path=/api/login", "extra=1"}, 1, []string{"no match: path=/api/login has no deeper descriptors"}},
		{[]string{"user=bob"}, 1, []string{`no match: no descriptor with key "user" at the top of domain edge`, "applies: nothing"}},
	} {
		code, stdout, stderr := sluiceCmd(t, append([]string{"explain", "--config", cfg, "edge"}, tc.entries...)...)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s%s", tc.entries, code, tc.code, stdout, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("%v: stdout lacks %q:\n%s", tc.entries, w, stdout)
			}
		}
	}
	// A policy with grants: the note says whose refusal it is.
	code, stdout, _ := sluiceCmd(t, "explain", "--config", cfg, "fleet", "region=eu")
	for _, w := range []string{"applies: policy hot: gcra", "note: grants: auto: each sluice serve instance decides against its own grant",
		"a refusal is that instance's, and other instances may hold units they have not used", "sluice inspect shows the key's grants"} {
		if code != 0 || !strings.Contains(stdout, w) {
			t.Errorf("fleet region=eu: exit %d, stdout lacks %q:\n%s", code, w, stdout)
		}
	}
	if code, stdout, _ := sluiceCmd(t, "explain", "--config", cfg, "edge", "path=/api/users"); code != 0 || strings.Contains(stdout, "grants") {
		t.Errorf("a policy without grants: exit %d, a note of grants:\n%s", code, stdout)
	}
	code, stdout, _ = sluiceCmd(t, "explain", "--config", cfg, "--json", "edge", "path=/api/login")
	var ex struct {
		Matched bool
		Policy  string
		Levels  []struct{ Why string }
	}
	if err := json.Unmarshal([]byte(stdout), &ex); err != nil || code != 0 || !ex.Matched || ex.Policy != "login" || ex.Levels[0].Why != "exact value" {
		t.Errorf("--json: exit %d, %v, %+v", code, err, ex)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nodomain", "a=b"}, `unknown domain "nodomain"`},
		{[]string{"edge", "novalue"}, `entry "novalue": want KEY=VALUE`},
		{[]string{"edge"}, "want a DOMAIN and at least one KEY=VALUE entry"},
	} {
		code, _, stderr := sluiceCmd(t, append([]string{"explain", "--config", cfg}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q", tc.args, code, stderr)
		}
	}
}
