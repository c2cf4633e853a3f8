package store

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/valkeyops"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// TestClientOption: every client built from a valkey section queues each
// call on the shared connections (AlwaysPipelining: a call that times out
// does not close a connection other calls use), never retries a call that
// may have run, and refuses what it cannot honour.
func TestClientOption(t *testing.T) {
	opt, err := ClientOption(&config.Valkey{Addresses: []string{"127.0.0.1:1"}, ConnectTimeout: 3 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !opt.AlwaysPipelining || !opt.DisableRetry || !opt.DisableCache || opt.ClientName != "sluice" || opt.Dialer.Timeout != 3*time.Second {
		t.Errorf("options %+v", opt)
	}
	sentinel := &config.Sentinel{MasterSet: "m", Addresses: []string{"127.0.0.1:2"}}
	if _, err := ClientOption(&config.Valkey{Addresses: []string{"127.0.0.1:1"}, Sentinel: sentinel}, nil); err == nil || !strings.Contains(err.Error(), "exclusive") {
		t.Errorf("addresses with sentinel: %v", err)
	}
	if _, err := ClientOption(&config.Valkey{Addresses: []string{"127.0.0.1:1"}, TLS: &config.TLS{CAFile: t.TempDir() + "/none.pem"}}, nil); err == nil || !strings.Contains(err.Error(), "valkey.tls.ca_file") {
		t.Errorf("a missing CA file: %v", err)
	}
	if _, err := ClientOption(&config.Valkey{Addresses: []string{"127.0.0.1:1"}, PasswordEnv: "NOT_SET"}, func(string) (string, bool) { return "", false }); err == nil ||
		!strings.Contains(err.Error(), "NOT_SET") {
		t.Errorf("an unset password variable: %v", err)
	}
}

// TestOpen: Open connects as serve does, with the command's own client
// name and adjustments; Dial refuses no Valkey at all, and an unreachable
// one is reported through the command's explanation.
func TestOpen(t *testing.T) {
	srv := valkeytest.Start(t)
	ctx := context.Background()
	v := &config.Valkey{Addresses: []string{srv.Addr}, ConnectTimeout: time.Second}
	adjusted := false
	conn, err := Open(ctx, v, nil, WithClientName("sluice-test"), WithClientOption(func(o *valkey.ClientOption) {
		adjusted = o.AlwaysPipelining && o.ClientName == "sluice-test"
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !adjusted {
		t.Error("the adjustment did not see serve's options with the client name")
	}
	if err := conn.Store.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if name, err := conn.Client.Do(ctx, conn.Client.B().ClientGetname().Build()).ToString(); err != nil || name != "sluice-test" {
		t.Errorf("client name %q, %v", name, err)
	}
	if _, err := Dial(ctx, &config.Valkey{}, nil); !errors.Is(err, valkeyops.ErrNoValkey) {
		t.Errorf("no Valkey: %v", err)
	}
	explained := errors.New("explained")
	_, err = Dial(ctx, &config.Valkey{Addresses: []string{valkeytest.ClosedAddr(t)}, ConnectTimeout: time.Second}, nil,
		WithExplain(func(error) error { return explained }))
	if !errors.Is(err, explained) {
		t.Errorf("unreachable: %v, want the command's explanation", err)
	}
}

// TestServe: without a valkey section serve decides in process; with one
// it gets the background-connecting store, named for /readyz.
func TestServe(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	st, name, closeFn, err := Serve(&config.Config{}, nil, quiet)
	if err != nil || name != "memory" || st == nil {
		t.Fatalf("no valkey: %v %q %v", st, name, err)
	}
	closeFn()
	srv := valkeytest.Start(t)
	st, name, closeFn, err = Serve(&config.Config{Valkey: &config.Valkey{Addresses: []string{srv.Addr}, ConnectTimeout: time.Second}}, nil, quiet)
	if err != nil || name != "valkey" {
		t.Fatalf("valkey: %q %v", name, err)
	}
	defer closeFn()
	if _, ok := st.(*Valkey); !ok {
		t.Errorf("store %T, want *Valkey", st)
	}
}
