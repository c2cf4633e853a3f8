package server

import (
	"sync/atomic"
	"time"
)

// A logThrottle lets one log line through per interval and counts the
// ones it held back, so that a client repeating a bad request cannot flood
// the log at its request rate.
type logThrottle struct {
	interval   time.Duration
	last       atomic.Int64 // UnixNano of the last line let through
	suppressed atomic.Int64 // lines held back since
}

// allow reports whether a line may be written now, and how many were held
// back since the last one.
func (l *logThrottle) allow() (bool, int64) {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if now-last < int64(l.interval) || !l.last.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}
