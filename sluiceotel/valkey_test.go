package sluiceotel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluiceotel"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeyotel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// valkeySpans makes decisions, a reset and a delete notice through a
// valkeystore.Connect store whose client wrap instruments it, and returns
// the spans recorded.
func valkeySpans(t *testing.T, tel *telemetry, wrap func(valkey.Client) valkey.Client, key string) []sdktrace.ReadOnlySpan {
	t.Helper()
	srv := valkeytest.Start(t)
	lazy, err := valkeystore.Connect(valkey.ClientOption{InitAddress: []string{srv.Addr}}, valkeystore.WithLogger(discard), valkeystore.WithClientWrap(wrap))
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := lazy.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := sluice.New(lazy, sluice.FixedWindow{Limit: 1, Window: time.Minute}, sluice.WithName("api"),
		sluice.WithPrefix("otel:"+t.Name()), sluice.WithObserver(tel.obs), sluice.WithTimeout(5*time.Second), sluice.WithOverrides(true))
	if err != nil {
		t.Fatal(err)
	}
	rctx, parent := tel.tp.Tracer("test").Start(ctx, "request")
	for range 2 {
		if res, err := l.Allow(rctx, key); err != nil || res.Degraded {
			t.Fatalf("Allow: %+v, %v", res, err)
		}
	}
	if err := l.Reset(rctx, key); err != nil {
		t.Fatal(err)
	}
	parent.End()
	return tel.spans.Ended()
}

// TestValkeySpansRedacted: valkeyotel's command spans, on the client
// WrapValkey instruments (through valkeystore.WithClientWrap), carry the
// commands without any key: the key of the decisions and of the reset
// appears in no span, though db.statement is set. The same scenario with
// the statement in full shows the key, so the check can fail.
func TestValkeySpansRedacted(t *testing.T) {
	const key = "user-secret-4242"
	tel := newTelemetry(t)
	spans := valkeySpans(t, tel, tel.obs.WrapValkey, key)
	statements := 0
	for _, s := range spans {
		a := attrs(s)
		if st, ok := a["db.statement"]; ok {
			statements++
			if strings.HasPrefix(st, "EVALSHA") && !strings.Contains(st, "?") {
				t.Errorf("span %s: db.statement %q redacts nothing", s.Name(), st)
			}
		}
	}
	if statements == 0 {
		t.Fatalf("no command span with db.statement among %d spans", len(spans))
	}
	if m := mentions(spans, key); m != "" {
		t.Errorf("the key appears in clear: %s", m)
	}

	// The control: the full statement holds the key.
	full := newTelemetry(t)
	wrapFull := func(c valkey.Client) valkey.Client {
		return valkeyotel.WithClient(c, valkeyotel.WithTracerProvider(full.tp),
			valkeyotel.WithDBStatement(func(tokens []string) string { return strings.Join(tokens, " ") }))
	}
	if m := mentions(valkeySpans(t, full, wrapFull, key), key); m == "" {
		t.Error("the full statements do not show the key either: the check cannot fail")
	}
}

// TestRedactStatement: a script keeps its SHA-1, number of keys and integer
// arguments; keys, a script's source and any other command's arguments
// become "?".
func TestRedactStatement(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"EVALSHA 0123abcd 2 rl:v1:api:k1 rl:v1:api:k2 60000 1", "EVALSHA 0123abcd 2 ? ? 60000 1"},
		{"EVALSHA 0123abcd 0 2 1 rl:v1:api:k1 rl:v1:api:k2 \x01\x02", "EVALSHA 0123abcd 0 2 1 ? ? ?"},
		{"EVAL return_1 1 rl:v1:api:k 5", "EVAL ? 1 ? 5"},
		{"FCALL myfn 1 rl:v1:api:k abc", "FCALL myfn 1 ? ?"},
		{"EVALSHA not-hex! 1 k", "EVALSHA ? 1 ?"},
		{"EVALSHA abc x k 5", "EVALSHA abc ? ? ?"},
		{"DEL rl:v1:api:k", "DEL ?"},
		{"SPUBLISH rl:v1:{del} rl:v1:api:k", "SPUBLISH ? ?"},
		{"PEXPIRE rl:v1:api:k 1000", "PEXPIRE ? ?"},
		{"PING", "PING"},
		{"", ""},
	} {
		var tokens []string
		if c.in != "" {
			tokens = strings.Split(c.in, " ")
		}
		if got := sluiceotel.RedactStatement(tokens); got != c.want {
			t.Errorf("RedactStatement(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
