package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/valkeytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// freePorts returns n loopback ports free now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// health is what /healthcheck and the gRPC health service say: "OK" and
// SERVING, or the HTTP status and the gRPC status; "down" when the port
// is not open.
func health(t *testing.T, httpAddr, grpcAddr string) (string, string) {
	t.Helper()
	c := http.Client{Timeout: 3 * time.Second}
	httpSays := "down"
	if resp, err := c.Get("http://" + httpAddr + "/healthcheck"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		httpSays = strconv.Itoa(resp.StatusCode) + " " + strings.TrimSpace(string(body))
		if resp.StatusCode == 200 {
			httpSays = strings.TrimSpace(string(body))
		}
	}
	grpcSays := "down"
	if c, err := net.DialTimeout("tcp", grpcAddr, time.Second); err == nil {
		c.Close()
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			grpcSays = err.Error()
		} else {
			grpcSays = resp.Status.String()
		}
	}
	return httpSays, grpcSays
}

// TestEnvoyStartAfterValkey: under envoyproxy/ratelimit's environment no
// port opens before the first connection to Valkey, as upstream's (so a
// pod probed on /healthcheck takes no traffic it cannot count); with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true, /healthcheck and the gRPC
// health service say not serving while Valkey is lost, and serving again
// once it is back.
func TestEnvoyStartAfterValkey(t *testing.T) {
	v := valkeytest.Start(t)
	v.Pause(t) // accepts connections (the kernel's backlog) and never answers
	root := t.TempDir()
	runtimeTree(t, root, "v1", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 5}}\n"})
	ports := freePorts(t, 3)
	httpAddr, grpcAddr := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	cmd := exec.Command(binary(t), "serve")
	cmd.Env = []string{"RUNTIME_ROOT=" + filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + v.Addr, "USE_STATSD=false", "LOG_FORMAT=json", "LOG_LEVEL=info",
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[0]), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]), "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true"}
	exited := startServe(t, cmd)
	waitFor := func(what, wantHTTP, wantGRPC string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			h, g := health(t, httpAddr, grpcAddr)
			if strings.HasPrefix(h, wantHTTP) && g == wantGRPC {
				return
			}
			select {
			case <-exited:
				t.Fatalf("%s: sluice serve exited", what)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /healthcheck says %q, gRPC health %q; want %q and %q", what, h, g, wantHTTP, wantGRPC)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Valkey does not answer: no port is open, for as long as it lasts.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		if h, g := health(t, httpAddr, grpcAddr); h != "down" || g != "down" {
			t.Fatalf("before Valkey answers: /healthcheck says %q, gRPC health %q; want no port open", h, g)
		}
		time.Sleep(100 * time.Millisecond)
	}
	v.Resume(t)
	waitFor("once Valkey answers", "OK", "SERVING", 20*time.Second)
	v.Kill(t)
	waitFor("Valkey lost", "500", "NOT_SERVING", 10*time.Second)
	v.Restart(t)
	waitFor("Valkey back", "OK", "SERVING", 20*time.Second)
}

// TestEnvoyStartupMaxElapsed: REDIS_STARTUP_MAX_ELAPSED_TIME bounds the
// wait for Valkey's first connection: past it sluice serve exits 1, no
// port ever opened.
func TestEnvoyStartupMaxElapsed(t *testing.T) {
	v := valkeytest.Start(t)
	v.Pause(t)
	root := t.TempDir()
	runtimeTree(t, root, "v1", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 5}}\n"})
	ports := freePorts(t, 3)
	cmd := exec.Command(binary(t), "serve")
	cmd.Env = []string{"RUNTIME_ROOT=" + filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + v.Addr, "USE_STATSD=false", "LOG_FORMAT=json",
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[0]), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]), "REDIS_STARTUP_MAX_ELAPSED_TIME=1s"}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("still running 20s after a 1s REDIS_STARTUP_MAX_ELAPSED_TIME:\n%s", logs.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 || time.Since(start) < time.Second {
		t.Errorf("exit %d after %v, want 1 after at least 1s:\n%s", code, time.Since(start), logs.String())
	}
	if !strings.Contains(logs.String(), "REDIS_STARTUP_MAX_ELAPSED_TIME") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(ports[0]), time.Second); err == nil {
		c.Close()
		t.Errorf("something listens on the HTTP port")
	}
}

// TestEnvoyStartAfterPerSecondValkey: with REDIS_PERSECOND, no port opens
// before the per-second Valkey is connected too, as no decision on a
// per-second limit could be counted before (it would be decided by the
// fail mode); with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, losing it makes
// the health checks say not serving.
func TestEnvoyStartAfterPerSecondValkey(t *testing.T) {
	v, perSecond := valkeytest.Start(t), valkeytest.Start(t)
	perSecond.Pause(t)
	root := t.TempDir()
	runtimeTree(t, root, "v1", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 5}}\n"})
	ports := freePorts(t, 3)
	httpAddr, grpcAddr := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	cmd := exec.Command(binary(t), "serve")
	cmd.Env = []string{"RUNTIME_ROOT=" + filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + v.Addr, "REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp",
		"REDIS_PERSECOND_URL=" + perSecond.Addr, "USE_STATSD=false", "LOG_FORMAT=json", "LOG_LEVEL=info",
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[0]), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]), "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true"}
	startServe(t, cmd)
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		if h, g := health(t, httpAddr, grpcAddr); h != "down" || g != "down" {
			t.Fatalf("before the per-second Valkey answers: /healthcheck says %q, gRPC health %q; want no port open", h, g)
		}
		time.Sleep(100 * time.Millisecond)
	}
	perSecond.Resume(t)
	healthBecomes(t, httpAddr, grpcAddr, "once the per-second Valkey answers", "OK", "SERVING")
	perSecond.Kill(t)
	healthBecomes(t, httpAddr, grpcAddr, "the per-second Valkey lost", "500", "NOT_SERVING")
}

// healthBecomes waits (20s at most) until /healthcheck starts with
// wantHTTP and the gRPC health service says wantGRPC.
func healthBecomes(t *testing.T, httpAddr, grpcAddr, what, wantHTTP, wantGRPC string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		h, g := health(t, httpAddr, grpcAddr)
		if strings.HasPrefix(h, wantHTTP) && g == wantGRPC {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /healthcheck says %q, gRPC health %q; want %q and %q", what, h, g, wantHTTP, wantGRPC)
		}
	}
}

// startServe starts cmd (a sluice serve), stops it with SIGTERM when the
// test ends (killing it after 10s) and logs its stderr when the test
// failed; the channel closes when it exits.
func startServe(t *testing.T, cmd *exec.Cmd) <-chan struct{} {
	t.Helper()
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("sluice serve's log:\n%s", logs.String())
		}
	})
	return exited
}
