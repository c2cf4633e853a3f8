package main

// End-to-end tests: the real binary, built once per test run, started as a
// separate process against real valkey-server processes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/valkeytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

// TestMain removes the built binary after the tests. It is not
// valkeytest.Main: these tests start only per-test servers (Start,
// StartCluster), which stop in t.Cleanup, and Main would exit before the
// binary could be removed.
func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// binary builds cmd/sluice once per test run.
func binary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "sluice-e2e-")
		if build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "sluice")
		cmd := exec.Command("go", "build", "-o", build.bin, ".")
		build.out, build.err = cmd.CombinedOutput()
	})
	if build.err != nil {
		t.Fatalf("go build: %v\n%s", build.err, build.out)
	}
	return build.bin
}

// proc is a running sluice serve.
type proc struct {
	t        *testing.T
	cmd      *exec.Cmd
	HTTP     string // base URL
	GRPC     string // host:port
	Debug    string // base URL of the debug port, "" when off
	mu       sync.Mutex
	logs     bytes.Buffer
	exited   chan struct{}
	exitCode int
}

// Logs returns what the process logged so far.
func (p *proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// serve starts sluice serve with args (listening on free ports) and waits
// until it logs "serving".
func serve(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	bin := binary(t)
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = t.TempDir() // any directory: the default config is embedded
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, exited: make(chan struct{})}
	ready := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.logs.Write(line)
			p.logs.WriteByte('\n')
			p.mu.Unlock()
			var m map[string]any
			if json.Unmarshal(line, &m) == nil && m["msg"] == "serving" {
				ready <- m
			}
		}
		cmd.Wait()
		p.exitCode = cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() { p.Stop() })
	select {
	case m := <-ready:
		p.HTTP = "http://" + m["http"].(string)
		p.GRPC = m["grpc"].(string)
		if d, ok := m["debug"].(string); ok && d != "off" {
			p.Debug = "http://" + d
		}
	case <-p.exited:
		t.Fatalf("sluice serve exited with %d before serving:\n%s", p.exitCode, p.Logs())
	case <-time.After(15 * time.Second):
		t.Fatalf("sluice serve did not start:\n%s", p.Logs())
	}
	return p
}

// Stop sends SIGTERM and waits for a graceful exit; it returns the exit code.
func (p *proc) Stop() int {
	select {
	case <-p.exited:
		return p.exitCode
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
		p.t.Errorf("sluice serve ignored SIGTERM for 10s:\n%s", p.Logs())
	}
	if p.t.Failed() {
		p.t.Logf("sluice serve logs:\n%s", p.Logs())
	}
	return p.exitCode
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	return request(t, "POST", url, body, "")
}

func request(t *testing.T, method, url, body, token string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Errorf("%s %s: %d, body not JSON: %s", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// e2eYAML: the concurrency policies have a generous timeout, since they
// test atomicity on a machine that may be loaded (the race detector, other
// jobs); open and closed keep the default 50ms, to test the failure path.
const e2eYAML = `
valkey:
  timeout: 2s
policies:
  - {name: fw, algorithm: fixed_window, limit: 20, window: 1h}
  - {name: sl, algorithm: sliding_log, limit: 20, window: 1h}
  - {name: sw, algorithm: sliding_window, limit: 20, window: 1h}
  - {name: tb, algorithm: token_bucket, burst: 20, rate: 1/h}
  - {name: gcra, algorithm: gcra, burst: 20, rate: 1/h}
  - {name: open, algorithm: gcra, burst: 5, rate: 1/s, on_failure: allow, timeout: 50ms}
  - {name: closed, algorithm: sliding_log, limit: 5, window: 15m, on_failure: deny, timeout: 50ms}
domains:
  - domain: edge
    descriptors:
      - {key: remote_address, policy: fw}
`

// hammer sends n checks for policy/key in parallel and counts the allowed.
func hammer(t *testing.T, base, policy, key string, n int) (allowed int64) {
	t.Helper()
	var wg sync.WaitGroup
	var got atomic.Int64
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, m := post(t, base+"/v1/check", fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key))
			if code != 200 {
				t.Errorf("status %d: %v", code, m)
				return
			}
			if m["degraded"] == true {
				t.Errorf("degraded decision: %v", m)
			}
			if m["allowed"] == true {
				got.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	return got.Load()
}

// TestE2EConcurrency: twice the limit in parallel through the HTTP API, for
// every algorithm, on one Valkey and on a Valkey Cluster: exactly the limit
// is allowed, and every key Sluice wrote expires.
func TestE2EConcurrency(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfg, e2eYAML)
	for _, tc := range []struct {
		name  string
		addrs func(t *testing.T) ([]string, func() map[string]time.Duration)
	}{
		{"standalone", func(t *testing.T) ([]string, func() map[string]time.Duration) {
			v := valkeytest.Start(t)
			c := v.Client(t)
			return []string{v.Addr}, func() map[string]time.Duration {
				ttls, err := valkeytest.TTLs(context.Background(), c, "rl:*")
				if err != nil {
					t.Fatal(err)
				}
				return ttls
			}
		}},
		{"cluster", func(t *testing.T) ([]string, func() map[string]time.Duration) {
			c := valkeytest.StartCluster(t, 3)
			cl := c.Client(t)
			return c.Addrs, func() map[string]time.Duration {
				ttls, err := valkeytest.TTLs(context.Background(), cl, "rl:*")
				if err != nil {
					t.Fatal(err)
				}
				return ttls
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs, ttls := tc.addrs(t)
			p := serve(t, nil, "--config", cfg, "--valkey", strings.Join(addrs, ","))
			waitReady(t, p)
			for _, policy := range []string{"fw", "sl", "sw", "tb", "gcra"} {
				if got := hammer(t, p.HTTP, policy, "user-"+tc.name, 40); got != 20 {
					t.Errorf("%s: %d of 40 parallel requests allowed, want exactly 20", policy, got)
				}
			}
			keys := ttls()
			if len(keys) < 5 {
				t.Errorf("only %d keys in Valkey: %v", len(keys), keys)
			}
			for k, ttl := range keys {
				if ttl <= 0 {
					t.Errorf("key %s has no TTL (%v)", k, ttl)
				}
			}
			// The Envoy protocol, through the binary, on the same counts.
			conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rls := rlsv3.NewRateLimitServiceClient(conn)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{
				{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.1.1.1"}}},
			}, HitsAddend: 20}
			r, err := rls.ShouldRateLimit(t.Context(), req)
			if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
				t.Fatalf("envoy: %v %v", r, err)
			}
			req.HitsAddend = 1
			if r, err = rls.ShouldRateLimit(t.Context(), req); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("envoy over limit: %v %v", r, err)
			}
			if code := p.Stop(); code != 0 {
				t.Errorf("exit code after SIGTERM = %d", code)
			}
			if !strings.Contains(p.Logs(), `"msg":"stopped"`) {
				t.Errorf("no graceful stop in the logs")
			}
		})
	}
}

func waitReady(t *testing.T, p *proc) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get(p.HTTP + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 10s: %v\n%s", err, p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestE2EValkeyUnreachable: with Valkey gone, every decision comes within
// the timeout, open or closed per policy, and /readyz says not ready.
func TestE2EValkeyUnreachable(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfg, e2eYAML)
	check := func(t *testing.T, p *proc) {
		t.Helper()
		for _, tc := range []struct {
			policy  string
			allowed bool
		}{{"open", true}, {"closed", false}} {
			for i := 0; i < 5; i++ {
				start := time.Now()
				code, m := post(t, p.HTTP+"/v1/check", fmt.Sprintf(`{"policy":%q,"key":"k"}`, tc.policy))
				took := time.Since(start)
				if code != 200 || m["allowed"] != tc.allowed || m["degraded"] != true {
					t.Fatalf("%s: %d %v", tc.policy, code, m)
				}
				// 50ms timeout, plus the HTTP round trip on a loaded machine;
				// without the timeout, a hung server holds requests for good.
				if took > 500*time.Millisecond {
					t.Errorf("%s: decided in %v, want within the 50ms timeout", tc.policy, took)
				}
			}
		}
		resp, err := client.Get(p.HTTP + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("readyz = %d with Valkey unreachable", resp.StatusCode)
		}
	}
	t.Run("closed port at start", func(t *testing.T) {
		p := serve(t, nil, "--config", cfg, "--valkey", valkeytest.ClosedAddr(t))
		check(t, p)
	})
	t.Run("killed while serving", func(t *testing.T) {
		v := valkeytest.Start(t)
		p := serve(t, nil, "--config", cfg, "--valkey", v.Addr)
		waitReady(t, p)
		// Valkey decides (a loaded machine may need a few tries within
		// the 50ms timeout).
		for i := 0; ; i++ {
			_, m := post(t, p.HTTP+"/v1/check", `{"policy":"closed","key":"before"}`)
			if m["allowed"] == true && m["degraded"] == false {
				break
			}
			if i == 4 {
				t.Fatalf("before the kill: %v", m)
			}
		}
		v.Kill(t)
		check(t, p)
	})
	t.Run("server that never answers", func(t *testing.T) {
		v := valkeytest.Start(t)
		p := serve(t, nil, "--config", cfg, "--valkey", v.Addr)
		waitReady(t, p)
		v.Pause(t)
		defer v.Resume(t)
		check(t, p)
	})
}

// TestE2EReload: SIGHUP and file changes apply a good file; a bad one is
// logged, counted and the last good configuration keeps serving.
func TestE2EReload(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfg, "policies:\n  - {name: first, algorithm: fixed_window, limit: 5, window: 1m}\n")
	p := serve(t, nil, "--config", cfg)
	hasPolicy := func(name string) bool {
		_, m := request(t, "GET", p.HTTP+"/v1/policies", "", "")
		list, _ := m["policies"].([]any)
		for _, x := range list {
			if x, _ := x.(map[string]any); x["name"] == name {
				return true
			}
		}
		return false
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 10s\n%s", what, p.Logs())
			}
			time.Sleep(25 * time.Millisecond)
		}
	}

	// A good file, applied on SIGHUP (or by the watcher, whichever first).
	writeFile(t, cfg, "policies:\n  - {name: first, algorithm: fixed_window, limit: 5, window: 1m}\n  - {name: second, algorithm: gcra, burst: 2, rate: 1/s}\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	eventually("second policy", func() bool { return hasPolicy("second") })

	// A bad file: rejected with file:line, counted, the old config serves.
	writeFile(t, cfg, "policies:\n  - {name: first, algorithm: fixed_window, limit: 5, window: 1m}\n  - {name: third, algorithm: gcra, burst: 0, rate: 1/s}\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	eventually("rejection logged", func() bool {
		return strings.Contains(p.Logs(), "configuration rejected") && strings.Contains(p.Logs(), "sluice.yaml:3:")
	})
	if code, m := post(t, p.HTTP+"/v1/check", `{"policy":"second","key":"k"}`); code != 200 || m["allowed"] != true {
		t.Fatalf("the last good config stopped serving: %d %v", code, m)
	}
	if hasPolicy("third") {
		t.Fatal("the bad config was applied")
	}
	resp, err := client.Get(p.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(metrics, []byte("sluice_server_config_last_reload_successful 0")) ||
		bytes.Contains(metrics, []byte(`sluice_server_config_reloads_total{result="failure"} 0`)) {
		t.Errorf("the rejection is not in the metrics:\n%s", grepLines(metrics, "config"))
	}

	// A good file again, this time by the file watcher alone (rename into
	// place, as editors and config management do).
	tmp := filepath.Join(dir, "new.tmp")
	writeFile(t, tmp, "policies:\n  - {name: fourth, algorithm: sliding_window, limit: 9, window: 1m}\n")
	if err := os.Rename(tmp, cfg); err != nil {
		t.Fatal(err)
	}
	eventually("fourth policy from the watcher", func() bool { return hasPolicy("fourth") })
	if hasPolicy("first") {
		t.Error("the old policies are still served")
	}
}

func grepLines(b []byte, word string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestE2EAdminAuth: the admin routes with no token, a wrong one, the right
// one.
func TestE2EAdminAuth(t *testing.T) {
	const token = "e2e-admin-token-5f2c9a7d1b3e"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfg, "admin: {token_env: SLUICE_ADMIN_TOKEN}\npolicies:\n  - {name: login, algorithm: sliding_log, limit: 2, window: 15m, on_failure: deny}\n")
	v := valkeytest.Start(t)
	p := serve(t, []string{"SLUICE_ADMIN_TOKEN=" + token}, "--config", cfg, "--valkey", v.Addr)
	waitReady(t, p)
	for i := 0; i < 3; i++ {
		post(t, p.HTTP+"/v1/check", `{"policy":"login","key":"alice"}`)
	}
	key := p.HTTP + "/v1/keys/login/alice"
	for _, tc := range []struct {
		name, token string
		code        int
	}{{"no token", "", 401}, {"wrong token", "e2e-admin-token-5f2c9a7d1b3f", 401}, {"right token", token, 200}} {
		code, m := request(t, "GET", key, "", tc.token)
		if code != tc.code {
			t.Errorf("GET %s: %d %v", tc.name, code, m)
		}
		if tc.code == 200 && (m["allowed"] != false || m["remaining"] != 0.0) {
			t.Errorf("peek: %v", m)
		}
		if tc.code != 200 {
			if code, _ := request(t, "DELETE", key, "", tc.token); code != tc.code {
				t.Errorf("DELETE %s: %d", tc.name, code)
			}
		}
	}
	if _, m := post(t, p.HTTP+"/v1/check", `{"policy":"login","key":"alice"}`); m["allowed"] != false {
		t.Fatalf("a refused admin call unlocked the user: %v", m)
	}
	if code, m := request(t, "DELETE", key, "", token); code != 200 || m["reset"] != true {
		t.Fatalf("reset: %d %v", code, m)
	}
	if _, m := post(t, p.HTTP+"/v1/check", `{"policy":"login","key":"alice"}`); m["allowed"] != true {
		t.Fatalf("after reset: %v", m)
	}
	if strings.Contains(p.Logs(), token) {
		t.Error("the admin token appears in the logs")
	}
}

// TestE2EDefaultConfig: no --config, no Valkey: the embedded example serves
// from any directory, with a warning that limits are per process.
func TestE2EDefaultConfig(t *testing.T) {
	p := serve(t, nil)
	code, m := post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"key_abc","cost":1}`)
	if code != 200 || m["allowed"] != true || m["limit"] != 20.0 || m["remaining"] != 19.0 {
		t.Fatalf("%d %v", code, m)
	}
	if !strings.Contains(p.Logs(), "limits are per process") {
		t.Errorf("no per-process warning:\n%s", p.Logs())
	}
	// The binary answers its API's document, docs/openapi.yaml.
	resp, err := client.Get(p.HTTP + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	want, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/yaml" || !bytes.Equal(got, want) {
		t.Errorf("GET /openapi.yaml: %d %q, %d bytes, want docs/openapi.yaml (%d bytes)",
			resp.StatusCode, resp.Header.Get("Content-Type"), len(got), len(want))
	}
}
