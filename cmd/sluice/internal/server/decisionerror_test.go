package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestDecisionErrorReason: a cost the library refuses reaches the client
// as "invalid cost: <reason>", the reason read from the *PolicyError, with
// no "sluice: " prefix.
func TestDecisionErrorReason(t *testing.T) {
	l, err := sluice.New(memstore.New(), sluice.FixedWindow{Limit: 5, Window: time.Minute}, sluice.WithName("x"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.AllowN(context.Background(), "k", 6)
	var br *badRequest
	if !errors.As((&Server{}).decisionError(err, nil), &br) || br.msg != "invalid cost: cost 6 exceeds the limit 5 of x and could never be allowed" {
		t.Fatalf("decisionError(%v) = %+v", err, br)
	}
}
