package deploytest

// End-to-end: real nginx and Caddy processes with the configurations in
// deploy/nginx and deploy/caddy (only their addresses moved to free ports),
// in front of a test application, asking a real sluice serve with
// deploy/forward-auth.yaml on a real Valkey.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/valkeytest"
	"github.com/sluicehq/sluice/valkeytest/syncbuf"
)

const installProxies = "run scripts/install-proxies.sh (apt-get install nginx caddy)"

// lookTool finds a proxy's executable on PATH or in /usr/sbin, failing t
// (never skipping) when it is missing.
func lookTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	t.Fatalf("%s is missing: %s", name, installProxies)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// replaceAll replaces each old string of a shipped file, failing t when one
// is not there (the file and the test would have drifted apart).
func replaceAll(t *testing.T, file, text string, pairs ...string) string {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(text, pairs[i]) {
			t.Fatalf("%s no longer contains %q", file, pairs[i])
		}
		text = strings.ReplaceAll(text, pairs[i], pairs[i+1])
	}
	return text
}

// stack is Valkey, sluice serve with deploy/forward-auth.yaml and the
// application behind the proxy.
type stack struct {
	sluice   *proc
	sluiceHP string // host:port
	app      *httptest.Server
	appHP    string
	mu       sync.Mutex
	appSeen  []http.Header // request headers the application received
}

func (s *stack) seen() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.appSeen...)
}

func startStack(t *testing.T) *stack {
	t.Helper()
	return startStackEdited(t, nil)
}

// startStackEdited is startStack with deploy/forward-auth.yaml changed by
// edit (nil: as shipped).
func startStackEdited(t *testing.T, edit func(string) string) *stack {
	t.Helper()
	v := valkeytest.Start(t)
	s := &stack{}
	s.app = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.appSeen = append(s.appSeen, r.Header.Clone())
		s.mu.Unlock()
		io.WriteString(w, "app")
	}))
	t.Cleanup(s.app.Close)
	s.appHP = strings.TrimPrefix(s.app.URL, "http://")
	cfg, err := filepath.Abs("forward-auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg = filepath.Join(t.TempDir(), "forward-auth.yaml")
		if err := os.WriteFile(cfg, []byte(edit(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.sluice = start(t, binary(t), nil, nil, "serve", "--config", cfg, "--valkey", v.Addr,
		"--listen", "127.0.0.1:0", "--grpc-listen", "off")
	s.sluiceHP = strings.TrimPrefix(s.sluice.HTTP, "http://")
	waitReady(t, s.sluice)
	return s
}

// runProxy starts a proxy process and waits until port accepts connections.
func runProxy(t *testing.T, name string, port int, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			t.Fatalf("%s exited:\n%s", name, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %d after 30s:\n%s", name, port, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startCaddy runs caddy with deploy/caddy/Caddyfile, returning its URL.
func startCaddy(t *testing.T, s *stack) string {
	t.Helper()
	bin := lookTool(t, "caddy")
	dir := t.TempDir()
	port := freePort(t)
	b, err := os.ReadFile("caddy/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	conf := replaceAll(t, "caddy/Caddyfile", string(b),
		":80 {", fmt.Sprintf(":%d {", port),
		"forward_auth 127.0.0.1:8080", "forward_auth "+s.sluiceHP,
		"reverse_proxy 127.0.0.1:3000", "reverse_proxy "+s.appHP)
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir + "/data", "XDG_CONFIG_HOME=" + dir + "/config"}
	runProxy(t, "caddy", port, env, bin, "run", "--config", file, "--adapter", "caddyfile")
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

type answer struct {
	code   int
	header http.Header
	body   string
}

func send(t *testing.T, method, url string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// proxyScenarios drives real HTTP through a proxy at base.
// clientHeaders: the proxy adds the rate-limit headers to the client's
// response.
func proxyScenarios(t *testing.T, s *stack, base string, clientHeaders bool) {
	// Allowed: the application answers and receives the rate-limit headers.
	a := send(t, "GET", base+"/items")
	if a.code != 200 || a.body != "app" {
		t.Fatalf("GET /items: %d %q", a.code, a.body)
	}
	seen := s.seen()
	if len(seen) == 0 || seen[len(seen)-1].Get("X-Ratelimit-Limit") != "20" {
		t.Errorf("the application did not receive X-RateLimit-Limit: 20 (got %v)", seen)
	}
	if clientHeaders && a.header.Get("X-Ratelimit-Limit") != "20" {
		t.Errorf("the client did not receive X-RateLimit-Limit: 20 (got %v)", a.header)
	}

	// Refused, with X-Forwarded-For spoofed by the client each time: the
	// proxy's own view of the client counts, so the sixth login is refused.
	for i := 1; i <= 6; i++ {
		a := send(t, "POST", base+"/login", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i), "X-Real-IP", "198.51.100.1")
		if i <= 5 {
			if a.code != 200 {
				t.Fatalf("login %d: %d %q, want 200", i, a.code, a.body)
			}
			continue
		}
		ra, err := strconv.Atoi(a.header.Get("Retry-After"))
		if a.code != http.StatusTooManyRequests || err != nil || ra < 1 || ra > 15*60 {
			t.Fatalf("login %d: %d Retry-After %q, want 429 with Retry-After in 1..900 (headers %v, body %q)",
				i, a.code, a.header.Get("Retry-After"), a.header, a.body)
		}
	}
	var problem map[string]any
	if a := send(t, "POST", base+"/login"); a.code != 429 || json.Unmarshal([]byte(a.body), &problem) != nil || problem["status"] != float64(429) {
		t.Errorf("refusal body %d %q: want problem+json with status 429", a.code, a.body)
	}
	// Every spelling of /login a backend may serve as /login is counted by
	// the login route (refused now), not let through by the looser api
	// route; /login%00 is refused by the proxy or by Sluice.
	for _, p := range []string{"/LOGIN", "/Login", "/%4Cogin", "/login;jsessionid=1", "/login%00"} {
		n := len(s.seen())
		a := send(t, "POST", base+p)
		if a.code != http.StatusTooManyRequests && !(p == "/login%00" && a.code == http.StatusBadRequest) {
			t.Errorf("POST %s after the login refusals: %d %q, want 429 (the login route)", p, a.code, a.body)
		}
		if len(s.seen()) != n {
			t.Errorf("POST %s reached the application", p)
		}
	}
	// Other routes are not affected by the login limit.
	if a := send(t, "GET", base+"/items"); a.code != 200 {
		t.Errorf("GET /items after the login refusals: %d", a.code)
	}

	// A client that sends a new X-API-Key on every request is still counted
	// by its address: refused once the address's burst of 20 (and 5/s) is
	// spent, whatever key it makes up.
	start := time.Now()
	allowed := 0
	for i := 0; i < 40; i++ {
		a := send(t, "GET", base+"/items", "X-API-Key", fmt.Sprintf("random-%d-%d", i, time.Now().UnixNano()))
		switch a.code {
		case 200:
			allowed++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("GET /items with a new X-API-Key: %d %q", a.code, a.body)
		}
	}
	// At most the burst of 20 (the bucket may have refilled since the GETs
	// above) and 5/s meanwhile, one more for rounding.
	t.Logf("a new X-API-Key on each of 40 requests: %d allowed in %v", allowed, time.Since(start).Round(time.Millisecond))
	if most := 20 + int(5*time.Since(start).Seconds()) + 1; allowed > most {
		t.Errorf("a new X-API-Key on each of 40 requests: %d allowed, want at most %d (the address's limit)", allowed, most)
	}

	// Sluice down: "/" fails open, "/login" fails closed.
	s.sluice.Stop()
	if a := send(t, "GET", base+"/items"); a.code != 200 || a.body != "app" {
		t.Errorf("Sluice down, GET /items: %d %q, want 200 from the application (fail open)", a.code, a.body)
	}
	n := len(s.seen())
	a = send(t, "POST", base+"/login")
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Errorf("Sluice down, POST /login: %d Retry-After %q, want 503 with Retry-After (fail closed)", a.code, a.header.Get("Retry-After"))
	}
	if len(s.seen()) != n {
		t.Error("Sluice down: a fail-closed request reached the application")
	}
	for _, p := range []string{"/LOGIN", "/%4Cogin", "/login;jsessionid=1", "/login/x"} {
		if a := send(t, "POST", base+p); a.code != http.StatusServiceUnavailable {
			t.Errorf("Sluice down, POST %s: %d, want 503 (fail closed like /login)", p, a.code)
		}
		if m := len(s.seen()); m != n {
			t.Errorf("Sluice down, POST %s reached the application", p)
			n = m
		}
	}
}

func TestNginx(t *testing.T) {
	s := startStack(t)
	proxyScenarios(t, s, startNginx(t, s), true)
}

func TestCaddy(t *testing.T) {
	s := startStack(t)
	proxyScenarios(t, s, startCaddy(t, s), false)
}
