package valkeystore_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

// countingClient counts the calls that reach it.
type countingClient struct {
	valkey.Client
	calls *atomic.Int64
}

func (c countingClient) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	c.calls.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingClient) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.calls.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

// TestConnectClientWrap: the client Connect builds is wrapped by
// WithClientWrap before the store uses it, so that decisions go through
// the wrapper; New refuses the option.
func TestConnectClientWrap(t *testing.T) {
	srv := valkeytest.Start(t)
	var calls atomic.Int64
	lazy, err := valkeystore.Connect(valkey.ClientOption{InitAddress: []string{srv.Addr}}, valkeystore.WithLogger(discardLogger),
		valkeystore.WithClientWrap(func(c valkey.Client) valkey.Client { return countingClient{c, &calls} }))
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := lazy.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := sluice.New(lazy, sluice.FixedWindow{Limit: 2, Window: time.Hour}, sluice.WithPrefix("wrap:"+t.Name()), sluice.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before := calls.Load()
	if res, err := l.Allow(ctx, "k"); err != nil || res.Degraded || !res.Allowed {
		t.Fatalf("Allow: %+v, %v", res, err)
	}
	if calls.Load() == before {
		t.Error("a decision did not go through the wrapped client")
	}
	if _, err := valkeystore.New(srv.Client(t), valkeystore.WithClientWrap(func(c valkey.Client) valkey.Client { return c })); err == nil || !strings.Contains(err.Error(), "Connect") {
		t.Errorf("New with WithClientWrap: %v, want an error saying it is Connect's", err)
	}
}
