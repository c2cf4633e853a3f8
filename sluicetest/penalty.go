package sluicetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// RunPenalties checks a store's penalties (sluice.WithPenalty,
// driver.Penalizer) on every algorithm: the After-th refusal starts a
// block, which refuses to its last microsecond and no further, the next
// block doubles, Reset lifts a block and forgets the escalation, and the
// penalty key lives no longer than its use. A store that does not decide
// penalties must make New refuse WithPenalty.
func RunPenalties(t *testing.T, h Harness) {
	pen := sluice.Penalty{After: 2, Within: time.Second, Block: 2 * time.Second, MaxBlock: 8 * time.Second, Forgive: time.Minute}
	if p, ok := h.Store.(driver.Penalizer); !ok || !p.Penalties() {
		if _, err := sluice.New(h.Store, sluice.FixedWindow{Limit: 1, Window: time.Second}, sluice.WithPenalty(pen)); err == nil {
			t.Fatalf("New accepted WithPenalty on %T, which does not decide penalties", h.Store)
		}
		return
	}
	for _, p := range Policies() {
		t.Run(fmt.Sprintf("%T", p), func(t *testing.T) { h.runPenalty(t, p, pen) })
	}
}

func (h Harness) runPenalty(t *testing.T, p sluice.Policy, pen sluice.Penalty) {
	clock, prefix, ctx := NewClock(), Prefix(t), context.Background()
	l, err := sluice.New(h.Store, p, sluice.WithPrefix(prefix), sluice.WithTimeout(5*time.Second), sluice.WithDenyCache(false),
		sluice.WithClock(clock.Now), sluice.WithPenalty(pen))
	if err != nil {
		t.Fatal(err)
	}
	ask := func(what string, cost int64, wantBlocked bool, wantRetry time.Duration) {
		t.Helper()
		res, err := l.AllowN(ctx, "k", cost)
		if err != nil {
			t.Fatal(err)
		}
		if res.Blocked != wantBlocked || (wantBlocked && (res.Allowed || res.RetryAfter != wantRetry || res.Remaining != 0)) {
			t.Fatalf("%s at +%v: %+v, want blocked %v for %v", what, clock.Now().Sub(Epoch), res, wantBlocked, wantRetry)
		}
	}
	offend := func(block time.Duration) {
		t.Helper()
		ask("the take of the limit", l.Rule().Limit, false, 0)
		ask("the first refusal", 1, false, 0)
		ask("the second refusal", 1, true, block)
	}
	offend(2 * time.Second)
	ask("a peek while blocked", 0, true, 2*time.Second)
	clock.Advance(2*time.Second - time.Microsecond)
	ask("the block's last microsecond", 1, true, time.Microsecond)
	clock.Advance(time.Microsecond)
	ask("the block's end", 0, false, 0)
	clock.Advance(2 * time.Second) // every algorithm's limit back
	offend(4 * time.Second)
	h.checkPenaltyTTL(t, prefix, pen)
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	offend(2 * time.Second)
}

// checkPenaltyTTL checks the time to live of the keys under prefix: at
// most the longest a penalty's state is needed (its longest block and
// forgiveness, or its window) and the margin.
func (h Harness) checkPenaltyTTL(t *testing.T, prefix string, pen sluice.Penalty) {
	t.Helper()
	if h.TTLs == nil {
		return
	}
	bound := max(pen.Longest()+pen.Forgive, pen.Within) + driver.KeyTTLMargin + time.Millisecond
	n := 0
	for k, ttl := range h.TTLs(t, prefix+":") {
		if ttl <= 0 || ttl > bound {
			t.Errorf("key %s has TTL %v, want in (0, %v]", k, ttl, bound)
		}
		n++
	}
	if n == 0 {
		t.Errorf("no key under %s", prefix)
	}
}
