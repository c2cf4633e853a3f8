package valkeytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/valkeytest/syncbuf"
	"github.com/valkey-io/valkey-go"
)

// SentinelMaster is the master set name StartSentinels monitors.
const SentinelMaster = "mymaster"

// Sentinels are valkey-server processes in Sentinel mode on 127.0.0.1,
// monitoring one primary as SentinelMaster.
type Sentinels struct {
	// Addrs are the Sentinels' addresses.
	Addrs []string
	// Servers are the Sentinel processes.
	Servers []*Server
}

// StartSentinels starts n Sentinels (quorum n/2+1) monitoring primary,
// with down-after-milliseconds 1000 and failover-timeout 5000, and waits
// until each knows the others and wantReplicas replicas (at most 20s).
// They are stopped in t.Cleanup.
func StartSentinels(t testing.TB, primary *Server, n, wantReplicas int) *Sentinels {
	t.Helper()
	Require(t)
	conf := sentinelConf(primary, n)
	ss := &Sentinels{}
	for i := range n {
		s := startSentinel(t, mkdir(t.TempDir(), i), conf)
		ss.Servers = append(ss.Servers, s)
		ss.Addrs = append(ss.Addrs, s.Addr)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range ss.Servers {
		awaitSentinel(t, s, n, wantReplicas, deadline)
	}
	return ss
}

// sentinelConf is the configuration of each of n Sentinels monitoring
// primary.
func sentinelConf(primary *Server, n int) string {
	host, port, _ := strings.Cut(primary.Addr, ":")
	return fmt.Sprintf("sentinel monitor %s %s %s %d\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 1\n", SentinelMaster, host, port, n/2+1)
}

// startSentinel starts a Sentinel in dir with configuration body, on a
// free port, and stops it in t.Cleanup.
func startSentinel(t testing.TB, dir, body string) *Server {
	t.Helper()
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Server{dir: dir, sentinelConf: conf, log: &syncbuf.Buffer{}}
	var err error
	for attempt := 0; attempt < portAttempts; attempt++ {
		if err = s.pickPorts(); err != nil {
			t.Fatal(err)
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("valkeytest: sentinel: %v\n%s", err, s.log.String())
	}
	s.stopInCleanup(t, "sentinel", 2048)
	return s
}

// awaitSentinel waits until Sentinel s, one of n, knows the n-1 others and
// wantReplicas replicas; it fails t after deadline.
func awaitSentinel(t testing.TB, s *Server, n, wantReplicas int, deadline time.Time) {
	t.Helper()
	for {
		v, err := s.Do("SENTINEL", "MASTER", SentinelMaster)
		f := fields(v)
		if err == nil && f["num-other-sentinels"] == strconv.Itoa(n-1) && f["num-slaves"] == strconv.Itoa(wantReplicas) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("valkeytest: sentinel %s does not see %d others and %d replicas after 20s: %v %v", s.Addr, n-1, wantReplicas, f, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fields turns a flat array reply [k1 v1 k2 v2 ...] into a map.
func fields(v any) map[string]string {
	a, _ := v.([]any)
	m := map[string]string{}
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		val, _ := a[i+1].(string)
		m[k] = val
	}
	return m
}

// Master returns the address of the master as the first running Sentinel
// reports it (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (ss *Sentinels) Master() (string, error) {
	for _, s := range ss.Servers {
		if !s.Running() {
			continue
		}
		v, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
		if err != nil {
			return "", err
		}
		a, _ := v.([]any)
		if len(a) != 2 {
			return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: %v", v)
		}
		return a[0].(string) + ":" + a[1].(string), nil
	}
	return "", fmt.Errorf("no sentinel running")
}

// Client returns a valkey-go Sentinel client of SentinelMaster, closed in
// t.Cleanup.
func (ss *Sentinels) Client(t testing.TB, opts ...func(*valkey.ClientOption)) valkey.Client {
	t.Helper()
	o := valkey.ClientOption{InitAddress: ss.Addrs, Sentinel: valkey.SentinelOption{MasterSet: SentinelMaster}}
	for _, f := range opts {
		f(&o)
	}
	c, err := valkey.NewClient(o)
	if err != nil {
		t.Fatalf("valkeytest: sentinel client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
