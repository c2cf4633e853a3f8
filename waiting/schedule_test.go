package waiting

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
)

const ms = time.Millisecond

// TestScheduleRate: a refusing rate limit's RetryAfter is exact (at least
// MinPause); the request waits only if the pause ends within the least
// wait of the refusing limits, to the nanosecond.
func TestScheduleRate(t *testing.T) {
	gcra := driver.AlgorithmGCRA
	one := func(wait, retryAfter time.Duration) Schedule {
		var s Schedule
		s.Refused(wait, retryAfter, gcra)
		return s
	}
	for _, c := range []struct {
		name    string
		s       Schedule
		elapsed time.Duration
		want    time.Duration
		wantOK  bool
	}{
		{"RetryAfter within the wait", one(time.Second, 300*ms), 0, 300 * ms, true},
		{"ends at the bound", one(time.Second, 300*ms), 700 * ms, 300 * ms, true},
		{"a nanosecond past the bound", one(time.Second, 300*ms), 700*ms + 1, 300 * ms, false},
		{"RetryAfter past the wait", one(time.Second, 2*time.Second), 0, 2 * time.Second, false},
		{"no RetryAfter", one(time.Second, 0), 0, MinPause, true},
		{"left = 0", one(time.Second, 0), time.Second, MinPause, false},
		{"left < 0", one(time.Second, 0), 2 * time.Second, MinPause, false},
		{"wait 0", one(0, 0), 0, MinPause, false},
		{"wait < 0", one(-time.Second, 0), 0, MinPause, false},
		{"no refusal", Schedule{}, 0, MinPause, false},
	} {
		got, ok := c.s.Next(c.elapsed, 0)
		if got != c.want || ok != c.wantOK {
			t.Errorf("%s: Next(%v) = %v %v, want %v %v", c.name, c.elapsed, got, ok, c.want, c.wantOK)
		}
	}
	// The least wait and the longest RetryAfter of the refusing limits.
	var s Schedule
	s.Refused(time.Minute, 100*ms, gcra)
	s.Refused(500*ms, 400*ms, driver.AlgorithmFixedWindow)
	s.Refused(time.Second, 200*ms, gcra)
	if d, ok := s.Next(100*ms, 0); d != 400*ms || !ok {
		t.Errorf("three refusals: %v %v, want 400ms true", d, ok)
	}
	if d, ok := s.Next(100*ms+1, 0); d != 400*ms || ok {
		t.Errorf("three refusals, past the least wait: %v %v, want 400ms false", d, ok)
	}
	s.Refused(0, 0, gcra) // a limit that does not wait
	if _, ok := s.Next(0, 0); ok {
		t.Error("a refusing limit without wait: waits")
	}
}

// TestScheduleInFlight: while an in-flight limit refuses, the request
// polls from FirstPoll, doubling with each try up to MaxPoll, capped by
// that limit's RetryAfter (at least MinPause) and the time left, never
// shorter than the rate limits' pause.
func TestScheduleInFlight(t *testing.T) {
	inflight := driver.AlgorithmInFlight
	var s Schedule
	s.Refused(time.Minute, 30*time.Second, inflight)
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 100 * ms, 100 * ms, 100 * ms}
	for tries, w := range want {
		if d, ok := s.Next(0, tries); d != w || !ok {
			t.Errorf("try %d: %v %v, want %v true", tries, d, ok, w)
		}
	}
	if d, _ := s.Next(0, 1<<40); d != MaxPoll {
		t.Errorf("after many tries: %v, want MaxPoll", d)
	}
	if d, ok := s.Next(time.Minute-3*ms, 4); d != 3*ms || !ok {
		t.Errorf("3ms left: %v %v, want 3ms true (the poll ends at the bound)", d, ok)
	}
	if _, ok := s.Next(time.Minute, 0); ok {
		t.Error("left = 0: waits")
	}
	if _, ok := s.Next(2*time.Minute, 0); ok {
		t.Error("left < 0: waits")
	}

	var short Schedule
	short.Refused(time.Minute, 7*ms, inflight)
	short.Refused(time.Minute, 2*ms, inflight)
	if d, _ := short.Next(0, 3); d != 7*ms {
		t.Errorf("the longest lease RetryAfter 7ms caps the poll: %v", d)
	}
	var zero Schedule
	zero.Refused(time.Minute, 0, inflight)
	if d, ok := zero.Next(0, 3); d != MinPause || !ok {
		t.Errorf("a lease RetryAfter of 0: %v %v, want MinPause true", d, ok)
	}

	var mixed Schedule
	mixed.Refused(time.Minute, time.Second, inflight)
	mixed.Refused(time.Minute, 50*ms, driver.AlgorithmGCRA)
	if d, _ := mixed.Next(0, 0); d != 50*ms {
		t.Errorf("a rate limit's 50ms and a poll of 5ms: %v, want 50ms", d)
	}
	if d, _ := mixed.Next(0, 5); d != 100*ms {
		t.Errorf("a rate limit's 50ms and a poll of 100ms: %v, want 100ms", d)
	}
	mixed.Refused(80*ms, 0, driver.AlgorithmGCRA)
	if d, ok := mixed.Next(0, 5); d != 80*ms || !ok {
		t.Errorf("80ms left, a poll of 100ms: %v %v, want 80ms true", d, ok)
	}
}

// TestScheduleProperty compares Next, on random refusals of rate and
// in-flight limits after a random time waited and number of tries, with
// a plain reference of the schedule.
func TestScheduleProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	waits := []time.Duration{0, ms, 50 * ms, time.Second, time.Minute}
	for range 50000 {
		var s Schedule
		least := time.Duration(1 << 62)
		var rate, lease time.Duration
		inFlight := false
		for range 1 + rng.IntN(4) {
			wait := waits[rng.IntN(len(waits))]
			retry := time.Duration(rng.Int64N(int64(2 * time.Second)))
			alg := driver.AlgorithmGCRA
			if rng.IntN(3) == 0 {
				alg, inFlight = driver.AlgorithmInFlight, true
				lease = max(lease, retry)
			} else {
				rate = max(rate, retry)
			}
			least = min(least, wait)
			s.Refused(wait, retry, alg)
		}
		elapsed := time.Duration(rng.Int64N(int64(2 * time.Second)))
		tries := rng.IntN(10)
		// The reference.
		left := least - elapsed
		want := rate
		if inFlight {
			poll := FirstPoll
			for range tries {
				poll *= 2
			}
			if poll > MaxPoll {
				poll = MaxPoll
			}
			if lease < MinPause {
				lease = MinPause
			}
			if poll > lease {
				poll = lease
			}
			if poll > left {
				poll = left
			}
			if poll > want {
				want = poll
			}
		} else if want < MinPause {
			want = MinPause
		}
		wantOK := left > 0 && want <= left
		d, ok := s.Next(elapsed, tries)
		if d != want || ok != wantOK {
			t.Fatalf("least wait %v, rate %v, lease %v (in flight %v), elapsed %v, tries %d: Next %v %v, want %v %v",
				least, rate, lease, inFlight, elapsed, tries, d, ok, want, wantOK)
		}
	}
}
