// Package valkeytest starts real valkey-server processes for tests: a
// standalone server or a small Valkey Cluster per test, or one of each shared
// by a whole test binary, on free loopback ports, with no persistence.
//
// Every test of a store runs against a real Valkey, because atomicity is what
// the server provides and a mock does not. valkey-server must be on PATH;
// Require fails the test with instructions when it is not.
//
// Typical use:
//
//	func TestMain(m *testing.M) { valkeytest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		srv := valkeytest.Start(t)        // a fresh server for this test
//		c := srv.Client(t)                // closed in t.Cleanup
//		...
//		shared := valkeytest.Shared(t)    // one server per test binary: use a distinct key prefix
//	}
//
// Processes are killed when the test (or, for shared ones, Main) ends. On
// Linux they are also killed by the kernel if the test binary dies
// (Pdeathsig), so an interrupted or timed-out test leaks no servers.
package valkeytest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/valkeytest/spawn"
	"github.com/sluicehq/sluice/valkeytest/syncbuf"
	"github.com/valkey-io/valkey-go"
)

// Binary is the name of the server executable looked up on PATH.
const Binary = "valkey-server"

const installHint = "valkey-server not found: run scripts/install-valkey.sh (as root), or apt-get install -t bookworm-backports valkey-server valkey-tools"

const (
	// readyTimeout bounds the wait for a started server to answer PING.
	readyTimeout = 10 * time.Second
	// portAttempts is how often Start picks a new port when valkey-server
	// could not bind the one it was given (another process took it).
	portAttempts = 5
)

// Require fails t (never skips) when valkey-server is not on PATH, saying how
// to install it. Start and StartCluster call it themselves.
func Require(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatalf("%s (%v)", installHint, err)
	}
}

// A Server is one valkey-server process bound to 127.0.0.1. Its methods are
// safe for concurrent use.
type Server struct {
	// Addr is "127.0.0.1:port". It stays the same across Restart.
	Addr string

	port         int
	busPort      int // cluster bus port; 0 for a standalone server
	dir          string
	extra        []string
	cluster      bool
	sentinelConf string // a Sentinel's configuration file; "" for a server
	log          *syncbuf.Buffer

	mu   sync.Mutex
	proc *process // nil when not running
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's error, valid after done
}

// Start starts a fresh standalone valkey-server with no persistence
// (--save "" --appendonly no), bound to 127.0.0.1 on a free port, in its own
// temporary directory, and stops it in t.Cleanup. extra is appended to the
// command line, such as "--maxmemory", "1mb", "--maxmemory-policy",
// "noeviction". Start fails t, with the server's output, when the server does
// not answer PING within 10s.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	Require(t)
	s, err := startServer(t.TempDir(), false, extra)
	if err != nil {
		if s != nil {
			t.Logf("valkey-server output:\n%s", s.log.String())
		}
		t.Fatalf("valkeytest: %v", err)
	}
	s.stopInCleanup(t, "valkey-server", 4096)
	return s
}

// startServer starts a server in dir, picking a new free port when
// valkey-server cannot bind the one it was given. On error the returned
// Server, if not nil, holds the output for the caller to log.
func startServer(dir string, cluster bool, extra []string) (*Server, error) {
	s := &Server{dir: dir, extra: append([]string(nil), extra...), cluster: cluster, log: &syncbuf.Buffer{}}
	var err error
	for attempt := 0; attempt < portAttempts; attempt++ {
		if err = s.pickPorts(); err != nil {
			return nil, err
		}
		err = s.start()
		if err == nil || !errors.Is(err, errPortInUse) {
			break
		}
	}
	return s, err
}

// pickPorts gives s a free port and, for a cluster node, a free bus port.
func (s *Server) pickPorts() error {
	var err error
	if s.port, err = freePort(); err != nil {
		return err
	}
	if s.cluster {
		if s.busPort, err = freePort(); err != nil {
			return err
		}
	}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	return nil
}

// start launches s's process, holding s.mu.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.launch()
}

// stopInCleanup stops s in t.Cleanup, first logging the tail bytes of its
// output, labelled what, when t failed.
func (s *Server) stopInCleanup(t testing.TB, what string, tail int) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s %s output (tail):\n%s", what, s.Addr, s.log.Tail(tail))
		}
		s.Stop()
	})
}

var errPortInUse = errors.New("port in use")

func (s *Server) argv() []string {
	if s.sentinelConf != "" {
		return append([]string{s.sentinelConf, "--sentinel",
			"--port", strconv.Itoa(s.port),
			"--bind", "127.0.0.1",
			"--dir", s.dir,
			"--daemonize", "no",
			"--logfile", "",
		}, s.extra...)
	}
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
		// A new replica syncs at once instead of after the default 5s.
		"--repl-diskless-sync-delay", "0",
	}
	if s.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", s.dir+"/nodes.conf",
			"--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(s.busPort),
		)
	}
	return append(args, s.extra...)
}

// launch starts the process and waits until it answers PING. s.mu is held.
func (s *Server) launch() error {
	mark := s.log.Len()
	if mark > 0 {
		fmt.Fprintf(s.log, "\n--- valkeytest: starting again on %s ---\n", s.Addr)
	}
	cmd := exec.Command(Binary, s.argv()...)
	cmd.Dir = s.dir
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	if err := spawn.Start(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", Binary, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p
	if err := waitReady(s.Addr, p, readyTimeout); err != nil {
		s.killLocked()
		if strings.Contains(s.log.From(mark), "in use") {
			err = fmt.Errorf("%w: %v", errPortInUse, err)
		}
		return fmt.Errorf("valkey-server on %s: %w", s.Addr, err)
	}
	return nil
}

// waitReady polls addr with PING until it answers PONG from process p, p
// exits, or timeout passes.
func waitReady(addr string, p *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited before answering PING: %v", p.err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING within %v: %v", timeout, last)
		}
		last = ping(addr, p.cmd.Process.Pid)
		if last == nil {
			return nil
		}
		if errors.Is(last, errPortInUse) {
			return last
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping checks that addr answers PING and is served by process pid (and not
// by another test's server that took the port first).
func ping(addr string, pid int) error {
	c, err := dialRESP(addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := c.Do("PING")
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("PING answered %v", r)
	}
	info, err := c.Do("INFO", "server")
	if err != nil {
		return err
	}
	str, _ := info.(string)
	want := "process_id:" + strconv.Itoa(pid) + "\r\n"
	if !strings.Contains(str, want) {
		return fmt.Errorf("%w: another server answers on %s", errPortInUse, addr)
	}
	return nil
}

// Client returns a standalone valkey-go client of s (ForceSingleClient),
// closed in t.Cleanup. opts adjust the options, such as ConnWriteTimeout or
// DisableRetry. It fails t when the server cannot be reached.
func (s *Server) Client(t testing.TB, opts ...func(*valkey.ClientOption)) valkey.Client {
	t.Helper()
	c, err := newClient([]string{s.Addr}, true, opts)
	if err != nil {
		if c != nil {
			c.Close()
		}
		t.Fatalf("valkeytest: client of %s: %v", s.Addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// ClientTo returns a standalone valkey-go client of addr, closed in
// t.Cleanup, without requiring that anything answers there: use it with
// ClosedAddr and Blackhole. The dial timeout defaults to one second (the
// client dials once when it is made, so against a Blackhole ClientTo takes
// that long); opts may change it.
func ClientTo(t testing.TB, addr string, opts ...func(*valkey.ClientOption)) valkey.Client {
	t.Helper()
	opts = append([]func(*valkey.ClientOption){func(o *valkey.ClientOption) { o.Dialer.Timeout = time.Second }}, opts...)
	c, _ := newClient([]string{addr}, true, opts) // unreachable is expected
	if c == nil {
		t.Fatalf("valkeytest: no client for %s", addr)
	}
	t.Cleanup(c.Close)
	return c
}

// newClient makes a valkey-go client. With single (ForceSingleClient) it
// returns a usable client even when the first dial fails, with the error.
func newClient(addrs []string, single bool, opts []func(*valkey.ClientOption)) (valkey.Client, error) {
	o := valkey.ClientOption{InitAddress: addrs, ForceSingleClient: single}
	for _, f := range opts {
		f(&o)
	}
	return valkey.NewClient(o)
}

// Pause stops the process with SIGSTOP: connections stay open and commands
// get no answer until Resume.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP)
	waitState(s.pid(), 'T')
}

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT)
}

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		t.Fatalf("valkeytest: %s: server %s is not running", sig, s.Addr)
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("valkeytest: %s to server %s: %v", sig, s.Addr, err)
	}
}

func (s *Server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Kill kills the process with SIGKILL and waits until it has exited; the
// port then refuses connections. It does nothing when the server is not
// running.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.Stop()
}

// Restart starts the server again on the same port and directory, after
// Kill or Stop (a running server is killed first), and waits until it
// answers PING. The data is gone (there is no persistence), except a cluster
// node's nodes.conf, so a restarted cluster node rejoins its cluster with its
// slots (empty), answering CLUSTERDOWN for about 2s first. Clients made
// before keep working once they reconnect.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	// The port was ours a moment ago; retry briefly in case the kernel
	// still holds it.
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		if err = s.launch(); err == nil || !errors.Is(err, errPortInUse) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Logf("valkey-server output:\n%s", s.log.String())
		t.Fatalf("valkeytest: restart: %v", err)
	}
}

// Stop kills the process (SIGKILL: there is nothing to save) and waits until
// it has exited. It is idempotent and safe on a paused server.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.proc == nil {
		return
	}
	_ = s.proc.cmd.Process.Kill()
	<-s.proc.done
	s.proc = nil
}

// Running reports whether the process is running (possibly paused).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return false
	}
	select {
	case <-s.proc.done:
		return false
	default:
		return true
	}
}

// Log returns everything the process has written to stdout and stderr, over
// all restarts.
func (s *Server) Log() string { return s.log.String() }

// Shared servers: one standalone and one cluster per test binary.
var shared struct {
	mu         sync.Mutex
	server     *Server
	serverErr  error
	serverLog  string
	serverDone bool
	cluster    *Cluster
	clusterErr error
	clusterLog string
	clusDone   bool
	dirs       []string
}

// Shared returns a standalone server shared by every test of the binary,
// started on first use. Tests that share it must use distinct key prefixes
// and must not Pause, Kill, flush or reconfigure it. Main stops it; without
// Main the process dies with the test binary (on Linux) but its temporary
// directory stays.
func Shared(t testing.TB) *Server {
	t.Helper()
	Require(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.serverDone {
		shared.serverDone = true
		shared.server, shared.serverErr = startShared("valkeytest-shared-", startSharedServer)
	}
	if shared.serverErr != nil {
		failShared(t, "server", shared.serverLog, shared.serverErr)
	}
	return shared.server
}

// startShared makes a temporary directory named after pattern, which
// Main removes, and starts a shared server or cluster in it. shared.mu is
// held.
func startShared[T any](pattern string, start func(dir string) (T, error)) (T, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		var none T
		return none, err
	}
	shared.dirs = append(shared.dirs, dir)
	return start(dir)
}

// startSharedServer starts the shared server in dir, keeping its output
// for the tests when it fails.
func startSharedServer(dir string) (*Server, error) {
	s, err := startServer(dir, false, nil)
	if err != nil && s != nil {
		shared.serverLog = s.log.String()
	}
	return s, err
}

// startSharedCluster starts the shared cluster in dir, keeping its output
// for the tests, and stopping it, when it fails.
func startSharedCluster(dir string) (*Cluster, error) {
	c, err := startCluster(dir, 3, clusterConfig{})
	if err != nil && c != nil {
		shared.clusterLog = c.logs()
		c.Stop()
	}
	return c, err
}

// failShared fails t for the shared what that did not start, with its
// output log when there is one.
func failShared(t testing.TB, what, log string, err error) {
	t.Helper()
	if log != "" {
		t.Logf("valkey-server output:\n%s", log)
	}
	t.Fatalf("valkeytest: shared %s: %v", what, err)
}

// SharedCluster returns a 3-primary cluster shared by every test of the
// binary, started on first use, with the same rules as Shared.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	Require(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.clusDone {
		shared.clusDone = true
		shared.cluster, shared.clusterErr = startShared("valkeytest-shared-cluster-", startSharedCluster)
	}
	if shared.clusterErr != nil {
		failShared(t, "cluster", shared.clusterLog, shared.clusterErr)
	}
	return shared.cluster
}

// Main runs the tests, stops the shared servers and exits with the tests'
// exit code. Call it from TestMain:
//
//	func TestMain(m *testing.M) { valkeytest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	stopShared()
	os.Exit(code)
}

func stopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.server != nil {
		shared.server.Stop()
	}
	if shared.cluster != nil {
		shared.cluster.Stop()
	}
	for _, d := range shared.dirs {
		os.RemoveAll(d)
	}
	shared.dirs = nil
}
