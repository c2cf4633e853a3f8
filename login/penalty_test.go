package login

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestAddressPenalty: an address that keeps being refused is blocked,
// for longer each time; the victim whose username it tries is not
// locked out, from another address, beyond what it tried; ResetAddress
// lifts the block.
func TestAddressPenalty(t *testing.T) {
	g, c := newGuard(t, memstore.New(), Config{
		PerUsername:    sluice.SlidingLog{Limit: 5, Window: 15 * time.Minute},
		PerAddress:     sluice.SlidingLog{Limit: 3, Window: 15 * time.Minute},
		AddressPenalty: sluice.Penalty{After: 2, Within: time.Minute, Block: time.Minute, MaxBlock: 4 * time.Minute, Forgive: time.Hour},
	})
	ctx := context.Background()
	attempt := func(user, addr string) Verdict {
		t.Helper()
		v, err := g.Attempt(ctx, user, ip(addr))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const attacker, home = "198.51.100.9", "192.0.2.7"
	for range 3 {
		if v := attempt("victim", attacker); !v.Allowed {
			t.Fatalf("an attempt within the address's limit: %+v", v)
		}
	}
	if v := attempt("victim", attacker); v.Allowed || v.Blocked {
		t.Fatalf("the address's limit refuses first: %+v", v)
	}
	v := attempt("victim", attacker)
	if v.Allowed || !v.Blocked || !v.Address.BlockStarted || v.RetryAfter != time.Minute || v.Tripped != TrippedAddress {
		t.Fatalf("the second refusal blocks the address for a minute: %+v", v)
	}
	// The victim logs in from home: the address's refusals took nothing
	// from the username.
	if v := attempt("victim", home); !v.Allowed || v.Username.Remaining != 1 {
		t.Fatalf("the victim from home: %+v", v)
	}
	c.Advance(time.Minute - time.Microsecond)
	if v := attempt("other", attacker); !v.Blocked || v.RetryAfter != time.Microsecond {
		t.Fatalf("blocked until the minute's last microsecond: %+v", v)
	}
	c.Advance(time.Microsecond)
	attempt("other", attacker) // refused by the address's window, counted
	if v := attempt("other", attacker); !v.Address.BlockStarted || v.RetryAfter != 2*time.Minute {
		t.Fatalf("the second block doubles: %+v", v)
	}
	if err := g.ResetAddress(ctx, ip(attacker)); err != nil {
		t.Fatal(err)
	}
	if v := attempt("other", attacker); !v.Allowed {
		t.Fatalf("ResetAddress lifts the block: %+v", v)
	}
}

// TestAddressPenaltyRefused: an invalid AddressPenalty fails New, naming
// the field.
func TestAddressPenaltyRefused(t *testing.T) {
	_, err := New(Config{Store: memstore.New(), Secret: secret, AddressPenalty: sluice.Penalty{After: 0, Within: time.Minute, Block: time.Minute}})
	if err == nil || !strings.Contains(err.Error(), "Penalty.After") {
		t.Fatalf("got %v, want an error naming Penalty.After", err)
	}
}
