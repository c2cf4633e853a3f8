package grpclimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestBlockedCall: a call refused because its key is blocked by the
// limit's penalty says so in its QuotaFailure, with the block's end as
// its RetryInfo.
func TestBlockedCall(t *testing.T) {
	clock := sluicetest.NewClock()
	lim := limiter(t, clock, "rpc", 1, sluice.WithPenalty(sluice.Penalty{After: 2, Within: time.Minute, Block: 5 * time.Minute}))
	c := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{{Limiter: lim, Key: grpclimit.PeerAddr()}}})
	if err := call(c); err != nil {
		t.Fatal(err)
	}
	if _, qf := retryInfo(t, call(c)); strings.Contains(qf.Violations[0].Description, "blocked") {
		t.Fatalf("the first refusal blocks nothing: %v", qf)
	}
	delay, qf := retryInfo(t, call(c))
	if delay != 5*time.Minute || !strings.HasPrefix(qf.Violations[0].Description, "blocked by the limit's penalty") {
		t.Fatalf("RetryInfo %v, QuotaFailure %v; want a block of 5m", delay, qf)
	}
}
