package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/valkeytest/spawn"
	"github.com/sluicehq/sluice/valkeytest/syncbuf"
	"github.com/valkey-io/valkey-go"
)

// Server is a valkey-server process started for a benchmark: standalone, on
// a free loopback port, without persistence. Nothing else uses it, so the
// harness may FLUSHALL it.
type Server struct {
	Addr string

	cmd  *exec.Cmd
	dir  string
	log  *syncbuf.Buffer
	done chan struct{}
}

// StartServer starts valkey-server (looked up on PATH) with extra appended
// to its command line, and waits until it answers PING.
func StartServer(extra ...string) (*Server, error) {
	bin, err := exec.LookPath("valkey-server")
	if err != nil {
		return nil, fmt.Errorf("valkey-server not found on PATH (scripts/install-valkey.sh installs it): %w", err)
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := startOnce(bin, extra)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

func startOnce(bin string, extra []string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "sluice-bench-valkey-")
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--logfile", "",
	}, extra...)
	s := &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		cmd:  exec.Command(bin, args...),
		dir:  dir,
		log:  &syncbuf.Buffer{},
		done: make(chan struct{}),
	}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := spawn.Start(s.cmd); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.done:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("valkey-server on %s exited at start:\n%s", s.Addr, s.log.String())
		default:
		}
		if err := pingPID(s.Addr, s.cmd.Process.Pid); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("valkey-server on %s: no answer within 10s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pingPID checks that addr answers and is served by process pid, not by
// another process that took the port first.
func pingPID(addr string, pid int) error {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "process_id:"+strconv.Itoa(pid)+"\r\n") {
		return errors.New("another server answers on " + addr)
	}
	return nil
}

// Stop kills the server and removes its directory. It is idempotent.
func (s *Server) Stop() {
	s.cmd.Process.Kill()
	<-s.done
	os.RemoveAll(s.dir)
}

// Admin runs the harness's own commands (FLUSHALL, INFO, DBSIZE) on the
// benchmark's Valkey.
type Admin struct{ c valkey.Client }

// NewAdmin connects to addr.
func NewAdmin(addr string) (*Admin, error) {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return nil, err
	}
	return &Admin{c: c}, nil
}

// Close closes the connection.
func (a *Admin) Close() { a.c.Close() }

// FlushAll removes every key, synchronously.
func (a *Admin) FlushAll(ctx context.Context) error {
	return a.c.Do(ctx, a.c.B().Flushall().Sync().Build()).Error()
}

// UsedMemory returns INFO memory's used_memory in bytes.
func (a *Admin) UsedMemory(ctx context.Context) (int64, error) {
	info, err := a.c.Do(ctx, a.c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return 0, err
	}
	return infoField(info, "used_memory")
}

// ServerCPU returns the CPU time (used_cpu_sys + used_cpu_user, main
// thread and I/O threads) the server has used.
func (a *Admin) ServerCPU(ctx context.Context) (time.Duration, error) {
	info, err := a.c.Do(ctx, a.c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, f+":"); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO cpu %s: %w", f, err)
				}
				total += x
			}
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// Info returns INFO section, raw.
func (a *Admin) Info(ctx context.Context, section string) (string, error) {
	return a.c.Do(ctx, a.c.B().Info().Section(section).Build()).ToString()
}

// DBSize returns the number of keys.
func (a *Admin) DBSize(ctx context.Context) (int64, error) {
	return a.c.Do(ctx, a.c.B().Dbsize().Build()).AsInt64()
}

// Version returns the server's valkey_version (or redis_version).
func (a *Admin) Version(ctx context.Context) string {
	info, err := a.c.Do(ctx, a.c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "unknown"
	}
	for _, f := range []string{"valkey_version", "redis_version"} {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, f+":"); ok {
				return v
			}
		}
	}
	return "unknown"
}

func infoField(info, name string) (int64, error) {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no field %s", name)
}
