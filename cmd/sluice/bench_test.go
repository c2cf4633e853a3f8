package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/valkeytest"
)

func TestBenchStandalone(t *testing.T) {
	srv := valkeytest.Start(t)
	var out, errb bytes.Buffer
	code := runBench(context.Background(), []string{
		"-valkey", srv.Addr, "-duration", "1s", "-concurrency", "8", "-keys", "100", "-limit", "50", "-window", "1m",
	}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errb)
	}
	for _, want := range []string{"gcra(burst=50", "(standalone)", "decisions ", "allowed ", "denied ", "degraded ", "p99.9 ", " decisions per call, "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, &out)
		}
	}
	if !strings.Contains(errb.String(), "decisions") || !strings.Contains(errb.String(), "/s") {
		t.Errorf("no progress line on stderr:\n%s", &errb)
	}
	// 100 keys of 50 each: at most 5000 allowed in a minute.
	if allowed := benchCount(t, out.String(), "allowed"); allowed == 0 || allowed > 5000 {
		t.Errorf("allowed = %d, want 1 to 5000", allowed)
	}
	keys, err := valkeytest.Keys(context.Background(), srv.Client(t), "*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "sluice-bench:bench-gcra:gcra:{k") {
			t.Errorf("unexpected key %q", k)
		}
	}
}

func TestBenchClusterHotKey(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Valkey Cluster")
	}
	c := valkeytest.StartCluster(t, 3)
	var out, errb bytes.Buffer
	code := runBench(context.Background(), []string{
		"-valkey", strings.Join(c.Addrs, ","), "-algorithm", "token_bucket", "-duration", "1s", "-concurrency", "4", "-keys", "1", "-cost", "2",
	}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errb)
	}
	if !strings.Contains(out.String(), "(cluster, 3 nodes)") || !strings.Contains(out.String(), "token_bucket(") {
		t.Errorf("stdout:\n%s", &out)
	}
}

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{}, // no -valkey
		{"-valkey", "127.0.0.1:1", "-algorithm", "leaky"},
		{"-valkey", "127.0.0.1:1", "-concurrency", "0"},
		{"-valkey", "127.0.0.1:1", "-limit", "0"},
		{"-valkey", "127.0.0.1:1", "-cost", "-1"},
		{"-valkey", "127.0.0.1:1", "-batching", "-1"},
		{"-valkey", "127.0.0.1:1", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := runBench(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("runBench(%q) = %d, want 2; stderr: %s", args, code, &errb)
		}
	}
}

func TestBenchUnreachable(t *testing.T) {
	var out, errb bytes.Buffer
	code := runBench(context.Background(), []string{"-valkey", valkeytest.ClosedAddr(t), "-duration", "1s"}, &out, &errb)
	if code != 1 {
		t.Errorf("exit code %d, want 1; stderr: %s", code, &errb)
	}
}

func benchCount(t *testing.T, out, label string) int64 {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == label {
			var n int64
			for _, c := range f[1] {
				n = n*10 + int64(c-'0')
			}
			return n
		}
	}
	t.Fatalf("no %q line in:\n%s", label, out)
	return 0
}

// TestBenchClusterPerNode: on a 3-primary cluster with 1,000 keys, the
// script calls bench reports decide several keys each (batching per node:
// one call per slot would decide about one).
func TestBenchClusterPerNode(t *testing.T) {
	c := valkeytest.StartCluster(t, 3)
	var out, errb bytes.Buffer
	code := runBench(context.Background(), []string{
		"-valkey", strings.Join(c.Addrs, ","), "-duration", "1s", "-concurrency", "64", "-keys", "1000", "-batching", "1", "-timeout", "2s",
	}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errb)
	}
	_, rest, ok := strings.Cut(out.String(), "calls: ")
	var perCall float64
	if ok {
		_, err := fmt.Sscanf(rest, "%f decisions per call", &perCall)
		ok = err == nil
	}
	if !ok || perCall < 2 {
		t.Errorf("decisions per script call %v, want at least 2:\n%s", perCall, &out)
	}
}

func TestParseScriptStats(t *testing.T) {
	st, err := parseScriptStats("# Commandstats\r\ncmdstat_get:calls=9,usec=9,usec_per_call=1.00\r\n" +
		"cmdstat_evalsha:calls=10,usec=250,usec_per_call=25.00,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_eval:calls=2,usec=40,usec_per_call=20.00\r\n")
	if err != nil || st != (scriptStats{calls: 12, usec: 290}) {
		t.Errorf("got %+v, %v", st, err)
	}
	for _, bad := range []string{"cmdstat_evalsha:calls=x,usec=1", "cmdstat_eval:calls=1", "cmdstat_evalsha:calls=-1,usec=2"} {
		if _, err := parseScriptStats(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
