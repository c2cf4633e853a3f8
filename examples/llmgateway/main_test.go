package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeUpstream answers like an LLM API that reports its usage in a
// trailer: the tokens are the request's X-Fake-Usage (absent: a 400
// without usage). Calls with X-Fake-Hold wait until hold is closed.
func fakeUpstream(t *testing.T, hold chan struct{}) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Fake-Hold") != "" {
			<-hold
		}
		usage := r.Header.Get("X-Fake-Usage")
		if usage == "" {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Trailer", "X-Usage-Total-Tokens")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}]}`)
		w.Header().Set("X-Usage-Total-Tokens", usage)
	}))
	t.Cleanup(up.Close)
	return up
}

// startGateway runs the command on a free port in front of upstream.
func startGateway(t *testing.T, upstream string, env map[string]string) string {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	env["UPSTREAM"], env["ADDR"] = upstream, "127.0.0.1:0"
	go func() { done <- run(ctx, func(k string) string { return env[k] }, ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case addr := <-ready:
		return "http://" + addr
	case err := <-done:
		t.Fatal(err)
	}
	return ""
}

type answer struct {
	code int
	h    http.Header
	body string
}

func call(t *testing.T, gw, tenant string, maxTokens int, hdr ...string) answer {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[]}`, maxTokens) // 44 bytes for 3 digits: 11 tokens of prompt
	req, _ := http.NewRequest("POST", gw+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tenant)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func num(t *testing.T, a answer, name string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(a.h.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("%s: %q (%v)", name, a.h.Get(name), err)
	}
	return n
}

// TestGatewayEndToEnd: real HTTP through the gateway to a fake upstream.
func TestGatewayEndToEnd(t *testing.T) {
	hold := make(chan struct{})
	up := fakeUpstream(t, hold)
	gw := startGateway(t, up.URL, map[string]string{"RPM": "50", "TPM": "1000"})

	// The estimate (300 + 11 of prompt) is reserved; the headers say so.
	a := call(t, gw, "t1", 300, "X-Fake-Usage", "100")
	if a.code != 200 || num(t, a, "X-Ratelimit-Limit-Tokens") != 1000 || num(t, a, "X-Ratelimit-Remaining-Tokens") != 689 ||
		num(t, a, "X-Ratelimit-Limit-Requests") != 50 || num(t, a, "X-Ratelimit-Remaining-Requests") != 49 {
		t.Fatalf("first call: %d %v %s", a.code, a.h, a.body)
	}
	for _, h := range []string{"X-Ratelimit-Reset-Tokens", "X-Ratelimit-Reset-Requests"} {
		if d, err := time.ParseDuration(a.h.Get(h)); err != nil || d <= 0 || d > time.Minute {
			t.Errorf("%s = %q, want a duration such as 6m0s", h, a.h.Get(h))
		}
	}
	// Settled at the upstream's 100: the next call sees 900 left, less its own.
	a = call(t, gw, "t1", 300, "X-Fake-Usage", "300")
	if rem := num(t, a, "X-Ratelimit-Remaining-Tokens"); rem < 589 || rem > 595 {
		t.Errorf("after a call settled at 100 of 311: %d left, want 589 (and a few tokens earned)", rem)
	}

	// Concurrent calls in flight hold their estimates: of ten calls of 311
	// held upstream, only those that fit in what is left (600) pass.
	var wg sync.WaitGroup
	codes := make(chan int, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- call(t, gw, "t1", 300, "X-Fake-Usage", "310", "X-Fake-Hold", "1").code
		}()
	}
	time.Sleep(300 * time.Millisecond) // the admitted ones are upstream, the others answered
	close(hold)
	wg.Wait()
	close(codes)
	n200, n429 := 0, 0
	for c := range codes {
		switch c {
		case 200:
			n200++
		case 429:
			n429++
		}
	}
	if n200 != 1 || n429 != 9 {
		t.Errorf("ten concurrent calls of 311 with 600 left: %d passed, %d refused; want 1 and 9", n200, n429)
	}

	// Above the estimate: the upstream used 2000 of 311: the tenant goes
	// into debt and is refused, with Retry-After, until it is earned back.
	a = call(t, gw, "t2", 300, "X-Fake-Usage", "2000")
	if a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	a = call(t, gw, "t2", 10, "X-Fake-Usage", "1")
	if ra, _ := strconv.Atoi(a.h.Get("Retry-After")); a.code != 429 || ra < 55 || !strings.Contains(a.body, "llm-tpm") {
		t.Errorf("in debt: %d Retry-After %q %s", a.code, a.h.Get("Retry-After"), a.body)
	}
	// A call the upstream refuses (400, no usage) costs no tokens.
	a = call(t, gw, "t3", 300)
	b := call(t, gw, "t3", 0, "X-Fake-Usage", "0")
	if a.code != 400 || num(t, b, "X-Ratelimit-Remaining-Tokens") < 989 {
		t.Errorf("after a 400 without usage: %d, then %v", a.code, b.h)
	}
	// No tenant: 400, nothing taken.
	req, _ := http.NewRequest("POST", gw+"/v1/chat/completions", strings.NewReader(`{}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 400 {
		t.Errorf("no tenant: %v %v", resp, err)
	}
}
