package deploytest

// The sluice binary as the Containerfile builds it, and running it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the repository's root directory (tests run in deploy/).
const repoRoot = ".."

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	// The tests run in deploy/, whose files they read by relative paths.
	if err := os.Chdir(filepath.Join("..", "..", "..", "..", "deploy")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	if kubeSchemas.dir != "" {
		os.RemoveAll(kubeSchemas.dir)
	}
	os.Exit(code)
}

// containerBuild returns the environment assignments and arguments of the
// Containerfile's `RUN ... go build ...` line.
func containerBuild(t *testing.T) (env, args []string) {
	t.Helper()
	for _, in := range parseContainerfile(t) {
		if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		for _, f := range strings.Fields(in.args) {
			switch {
			case len(args) == 0 && strings.Contains(f, "="):
				env = append(env, f)
			default:
				args = append(args, f)
			}
		}
		return env, args
	}
	t.Fatal("Containerfile: no RUN go build line")
	return nil, nil
}

// binary builds cmd/sluice once per test run with the Containerfile's build
// command (its environment and flags; only the output path differs).
func binary(t *testing.T) string {
	t.Helper()
	env, args := containerBuild(t)
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "sluice-deploy-")
		if build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "sluice")
		for i, a := range args {
			if a == "-o" && i+1 < len(args) {
				args[i+1] = build.bin
			}
		}
		if len(args) < 2 || args[0] != "go" || args[1] != "build" {
			build.err = fmt.Errorf("Containerfile build command %q does not start with go build", args)
			return
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), env...)
		build.out, build.err = cmd.CombinedOutput()
	})
	if build.err != nil {
		t.Fatalf("building as the Containerfile does: %v\n%s", build.err, build.out)
	}
	return build.bin
}

// serveFlags returns the flag names `sluice serve -h` lists.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	out, _ := exec.Command(binary(t), "serve", "-h").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["listen"] || !flags["config"] {
		t.Fatalf("sluice serve -h lists no --listen or --config:\n%s", out)
	}
	return flags
}

// serveArgs checks that args is a `sluice serve` command line using only
// flags the binary has, each with a value, and returns the flags' values.
func serveArgs(t *testing.T, where string, args []string) map[string]string {
	t.Helper()
	known := serveFlags(t)
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("%s: command %q is not sluice serve", where, args)
	}
	vals := map[string]string{}
	for i := 1; i < len(args); i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || !known[name] {
			t.Fatalf("%s: %q is not a flag of sluice serve (it has %v)", where, args[i], keys(known))
		}
		if !hasVal {
			if i+1 >= len(args) {
				t.Fatalf("%s: flag %s has no value", where, args[i])
			}
			i++
			val = args[i]
		}
		vals[name] = val
	}
	return vals
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// proc is a running sluice serve.
type proc struct {
	HTTP string // base URL
	GRPC string // host:port
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
}

func (p *proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Stop kills the process and waits for it.
func (p *proc) Stop() {
	p.cmd.Process.Kill()
	<-p.done
}

// start runs bin with args and env (nil: an empty environment) and waits
// until it logs "serving". attr, when not nil, sets chroot and credentials.
func start(t *testing.T, bin string, env []string, attr *syscall.SysProcAttr, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if env == nil {
		env = []string{}
	}
	cmd.Env = env
	if attr == nil {
		attr = &syscall.SysProcAttr{}
		cmd.Dir = t.TempDir()
	}
	attr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr = attr
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	ready := make(chan map[string]any, 1)
	go func() {
		defer close(p.done)
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
		io.Copy(io.Discard, stderr)
		cmd.Wait()
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("sluice logs:\n%s", p.Logs())
		}
	})
	select {
	case m := <-ready:
		p.HTTP = "http://" + m["http"].(string)
		p.GRPC, _ = m["grpc"].(string)
	case <-p.done:
		t.Fatalf("sluice exited before serving:\n%s", p.Logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("sluice did not serve within 60s:\n%s", p.Logs())
	}
	return p
}

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post sends body to url and returns the status and body.
func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// runnable rewrites a deployment's serve command line to run here: the
// listen addresses become free loopback ports, the config path the given
// local file, and --valkey the given address (a test server).
func runnable(t *testing.T, where string, args []string, config, valkey string) []string {
	t.Helper()
	vals := serveArgs(t, where, args)
	out := []string{"serve"}
	for _, name := range []string{"listen", "grpc-listen"} {
		if _, ok := vals[name]; !ok {
			t.Fatalf("%s: no --%s: the default listens on loopback only", where, name)
		}
		out = append(out, "--"+name, "127.0.0.1:0")
	}
	for name, v := range vals {
		switch name {
		case "listen", "grpc-listen", "valkey":
		case "config":
			if !filepath.IsAbs(config) && !strings.HasPrefix(config, "/") {
				abs, err := filepath.Abs(config)
				if err != nil {
					t.Fatal(err)
				}
				config = abs
			}
			out = append(out, "--config", config)
		default:
			out = append(out, "--"+name, v)
		}
	}
	if valkey != "" {
		out = append(out, "--valkey", valkey)
	}
	return out
}

// waitFor polls cond for up to 30s (a loaded machine), failing t with what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReady waits until /readyz answers 200 (the service connects to Valkey
// in the background) and returns its body.
func waitReady(t *testing.T, p *proc) string {
	t.Helper()
	var code int
	var body string
	waitFor(t, "/readyz 200", func() bool {
		code, body = get(t, p.HTTP+"/readyz")
		return code == 200
	})
	return body
}
