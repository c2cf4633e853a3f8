package sluicetest

import (
	"sync"
	"time"
)

// Epoch is where fake clocks start: a Unix time aligned to whole hours, so
// every window up to an hour starts there.
var Epoch = time.Unix(1_800_000_000, 0)

// Clock is a fake clock for deterministic timelines. It is safe for
// concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at Epoch.
func NewClock() *Clock { return &Clock{now: Epoch} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to Epoch + d.
func (c *Clock) Set(d time.Duration) {
	c.mu.Lock()
	c.now = Epoch.Add(d)
	c.mu.Unlock()
}

// NewClockAt returns a Clock at t.
func NewClockAt(t time.Time) *Clock { return &Clock{now: t} }

// SetTime moves the clock to t.
func (c *Clock) SetTime(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}
