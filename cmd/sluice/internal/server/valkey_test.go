package server

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"github.com/sluicehq/sluice/valkeytest"
)

// gauges returns the samples of the sluice_valkey_* gauges in reg, as
// "name{label=value,...}" -> value.
func gauges(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sluice_valkey_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestValkeyHealthMetrics: the service warns at connection about a server
// that evicts (log and sluice_valkey_config_risk), and exports the state of
// the node's breaker, which opens while the server is paused.
func TestValkeyHealthMetrics(t *testing.T) {
	srv := valkeytest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	var logs strings.Builder
	var mu sync.Mutex
	logger := slogTo(func(p []byte) {
		mu.Lock()
		defer mu.Unlock()
		logs.Write(p)
	})
	opt, err := store.ClientOption(&config.Valkey{Addresses: []string{srv.Addr}, ConnectTimeout: time.Second}, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := store.ConnectValkey(opt, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	cfg, err := config.Parse("t.yaml", []byte("policies:\n  - {name: a, algorithm: gcra, burst: 1000000, rate: 1000000/s, timeout: 50ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Store: vs, StoreName: "valkey", Logger: logger, Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, checked := vs.Risks(); checked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("settings not checked 5s after start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	g := gauges(t, s.reg)
	for k, want := range map[string]float64{
		"sluice_valkey_config_risk{node=" + srv.Addr + ",setting=maxmemory-policy,value=allkeys-lru}": 1,
		"sluice_valkey_config_checked{}":                                  1,
		"sluice_valkey_breaker_state{node=" + srv.Addr + ",state=closed}": 1,
		"sluice_valkey_breaker_state{node=" + srv.Addr + ",state=open}":   0,
	} {
		if g[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, g[k], want, g)
		}
	}
	mu.Lock()
	if !strings.Contains(logs.String(), "maxmemory-policy") {
		t.Errorf("no warning about maxmemory-policy in the log:\n%s", logs.String())
	}
	mu.Unlock()

	srv.Pause(t)
	defer srv.Resume(t)
	ctx := context.Background()
	p := s.state.Load().policies["a"]
	for range 20 {
		p.limiter.Allow(ctx, "k")
	}
	g = gauges(t, s.reg)
	if k := "sluice_valkey_breaker_state{node=" + srv.Addr + ",state=open}"; g[k] != 1 {
		t.Errorf("%s = %v with the server paused, want 1 (all: %v)", k, g[k], g)
	}
}

// slogTo returns a JSON logger that hands each line to write.
func slogTo(write func([]byte)) *slog.Logger {
	return slog.New(slog.NewJSONHandler(writerFunc(func(p []byte) (int, error) {
		write(p)
		return len(p), nil
	}), nil))
}

// TestValkeySentinel: a valkey.sentinel section connects through the
// Sentinels to their master; addresses besides it are refused.
func TestValkeySentinel(t *testing.T) {
	primary := valkeytest.Start(t)
	valkeytest.StartReplica(t, primary.Addr)
	ss := valkeytest.StartSentinels(t, primary, 1, 1)
	v := &config.Valkey{ConnectTimeout: time.Second,
		Sentinel: &config.Sentinel{MasterSet: valkeytest.SentinelMaster, Addresses: ss.Addrs}}
	opt, err := store.ClientOption(v, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := store.ConnectValkey(opt, quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	cfg, err := config.Parse("t.yaml", []byte("policies:\n  - {name: a, algorithm: fixed_window, limit: 2, window: 1h, timeout: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Store: vs, StoreName: "valkey", Logger: quietLogger(), Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for vs.Ping(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not connected through the Sentinels: %v", vs.Ping(ctx))
		}
		time.Sleep(20 * time.Millisecond)
	}
	l := s.state.Load().policies["a"].limiter
	for i, want := range []bool{true, true, false} {
		res, err := l.Allow(ctx, "k")
		if err != nil || res.Degraded || res.Allowed != want {
			t.Fatalf("decision %d: %+v, %v; want allowed %v by Valkey", i, res, err, want)
		}
	}
	// The count is on the master the Sentinels name.
	keys, err := primary.Do("DBSIZE")
	if err != nil || keys.(int64) != 1 {
		t.Errorf("DBSIZE on the master: %v, %v; want 1", keys, err)
	}

	v.Addresses = []string{"127.0.0.1:1"} // as --valkey would set them
	if _, err := store.ClientOption(v, testEnv); err == nil || !strings.Contains(err.Error(), "exclusive") {
		t.Errorf("addresses with sentinel: %v, want an error", err)
	}
}
