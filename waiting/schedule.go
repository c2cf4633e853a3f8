package waiting

import (
	"time"

	"github.com/sluicehq/sluice/driver"
)

// The pauses of a request waiting for an in-flight slot: FirstPoll
// first, each next pause doubling it, up to MaxPoll.
const (
	FirstPoll = 5 * time.Millisecond
	MaxPoll   = 100 * time.Millisecond
)

// MinPause is the shortest pause between two decisions of a waiting
// request, as sluice.Limiter.Wait's: a refusal without RetryAfter waits
// this long.
const MinPause = time.Millisecond

// Schedule is when a refused request decides again. Add each limit
// refusing its last decision with Refused, then ask Next; a new decision
// takes a new Schedule. The zero Schedule has no refusal (Next then
// reports false).
type Schedule struct {
	// bound is the least wait of the refusing limits: how long the
	// request may wait, all told (valid when refused).
	bound time.Duration
	// rate is the longest RetryAfter of the refusing rate limits (0 for
	// none), lease that of the refusing in-flight limits (valid when
	// inFlight).
	rate, lease       time.Duration
	refused, inFlight bool
}

// Refused adds a limit refusing the last decision: wait is how long that
// limit lets a request wait for admission, all told (0 or less: not at
// all), retryAfter its refusal's RetryAfter, algorithm its algorithm. A
// rate limit's RetryAfter is exact; an in-flight limit's
// ([driver.AlgorithmInFlight]) is only an upper bound, since a release
// may free a slot sooner.
func (s *Schedule) Refused(wait, retryAfter time.Duration, algorithm driver.Algorithm) {
	wait = max(wait, 0)
	if !s.refused || wait < s.bound {
		s.bound = wait
	}
	s.refused = true
	if algorithm == driver.AlgorithmInFlight {
		if !s.inFlight || retryAfter > s.lease {
			s.lease = retryAfter
		}
		s.inFlight = true
		return
	}
	s.rate = max(s.rate, retryAfter)
}

// Next returns how long the request, having waited elapsed so far and
// paused tries times before, pauses before it decides again, and false
// when it must not wait but be refused at once.
//
// The pause is the longest RetryAfter of the refusing rate limits, at
// least MinPause. While an in-flight limit refuses, the request polls
// instead: FirstPoll doubling with each try up to MaxPoll, never past
// that limit's RetryAfter (at least MinPause) nor the time left, and
// never shorter than the rate limits' pause. The request waits only if
// time is left (the least wait of the refusing limits, less elapsed) and
// the pause ends within it, the bound included: a wait that would pass
// it is refused at once.
func (s Schedule) Next(elapsed time.Duration, tries int) (time.Duration, bool) {
	left := s.bound - elapsed
	if !s.refused {
		left = 0
	}
	return pause(s.rate, s.lease, s.inFlight, left, tries)
}

// pause is Next's arithmetic, left the time left of the request's wait.
func pause(rate, lease time.Duration, inFlight bool, left time.Duration, tries int) (time.Duration, bool) {
	delay := max(rate, MinPause)
	if inFlight {
		poll := min(FirstPoll<<min(max(tries, 0), 5), MaxPoll, max(lease, MinPause), left)
		delay = max(rate, poll)
	}
	return delay, left > 0 && delay <= left
}
