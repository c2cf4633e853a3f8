package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeStopAnswersWaiters: on SIGTERM, sluice serve answers a request
// waiting for admission (wait: 1m, about 30s to go) with its refusal at
// once, rather than spend its shutdown grace on it and cut it off.
func TestServeStopAnswersWaiters(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, "policies:\n  - {name: slow, algorithm: gcra, burst: 1, rate: 2/m, wait: 1m}\n")
	p := serve(t, nil, "--config", cfg)
	waitReady(t, p)
	if code, m := post(t, p.HTTP+"/v1/check", `{"policy":"slow","key":"k"}`); code != 200 || m["allowed"] != true {
		t.Fatalf("first: %d %v", code, m)
	}
	type answer struct {
		code int
		body string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		c := &http.Client{Timeout: time.Minute}
		resp, err := c.Post(p.HTTP+"/v1/check", "application/json", strings.NewReader(`{"policy":"slow","key":"k"}`))
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- answer{code: resp.StatusCode, body: string(b)}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(metricsText(t, p.HTTP), "\nsluice_server_waiting 1\n") {
		if time.Now().After(deadline) {
			t.Fatal("the second check never waited")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := p.Stop(); code != 0 {
		t.Errorf("exit code %d", code)
	}
	a := <-done
	if a.err != nil || a.code != 200 || !strings.Contains(a.body, `"allowed":false`) {
		t.Fatalf("the waiter at shutdown: %d %q %v, want its refusal", a.code, a.body, a.err)
	}
}

// metricsText is base's /metrics.
func metricsText(t *testing.T, base string) string {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
