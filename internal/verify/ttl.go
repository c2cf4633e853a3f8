package verify

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// ttlBound is the longest time to live a key of rule may have.
func ttlBound(rule sluice.Rule) time.Duration { return sluicetest.TTLBound(rule) }
