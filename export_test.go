package sluice

import "github.com/sluicehq/sluice/driver"

// DefaultName is defaultName, for the tests of package sluice_test.
var DefaultName = defaultName

// SetGrantHooks makes the limiters New makes until restore run their
// background grant calls through spawn and start no sweeper (tests drive
// them on a simulated clock).
func SetGrantHooks(spawn func(func()), drain func()) (restore func()) {
	old := grantHooks
	grantHooks.spawn, grantHooks.drain, grantHooks.noSweeper = spawn, drain, true
	return func() { grantHooks = old }
}

// GrantSweep runs one round of the limiter's grant sweeper.
func (l *Limiter) GrantSweep() { l.gr.sweep() }

// GrantHolder is the limiter's holder id.
func (l *Limiter) GrantHolder() driver.HolderID { return l.gr.holder }

// GrantUnspent is the units the limiter holds, over all keys, valid or
// not yet voided.
func (l *Limiter) GrantUnspent() int64 {
	var n int64
	for i := range l.gr.shards {
		sh := &l.gr.shards[i]
		sh.mu.Lock()
		for _, gk := range sh.m {
			gk.mu.Lock()
			if l.mono() < gk.until {
				n += gk.unspent
			}
			gk.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	return n
}
