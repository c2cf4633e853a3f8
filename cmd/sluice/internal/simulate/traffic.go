package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// Kind is a kind of synthetic traffic.
type Kind uint8

// The kinds of synthetic traffic.
const (
	// Steady sends at a constant rate: one request every 1/Rate.
	Steady Kind = iota + 1
	// Poisson sends at random, with exponential gaps of mean 1/Rate.
	Poisson
	// Burst sends N requests at one instant, At.
	Burst
	// OnOff sends steadily at Rate for On, then nothing for Off, repeated.
	OnOff
	// Retry is one client that wants to send at Rate and honours
	// Retry-After: after a refusal it waits the advertised RetryAfter
	// before its next attempt.
	Retry
)

var kindNames = map[string]Kind{"steady": Steady, "poisson": Poisson, "burst": Burst, "on-off": OnOff, "retry": Retry}

// String returns the kind's name in --traffic, such as "on-off".
func (k Kind) String() string {
	for name, v := range kindNames {
		if v == k {
			return name
		}
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Traffic is one source of synthetic requests, parsed from a --traffic
// value such as "steady:12/s", "poisson:1000/s,keys=100", "burst:10@990ms",
// "on-off:50/s,on=2s,off=3s" or "retry:20/s,key=mobile".
type Traffic struct {
	Kind Kind
	// Spec is the text it was parsed from, for messages and legends.
	Spec string
	// Rate is requests per second (all kinds but Burst).
	Rate float64
	// N and At: a Burst's size and instant (from the simulation's start).
	N  int64
	At time.Duration
	// On and Off: an OnOff source's periods.
	On, Off time.Duration
	// From and Until bound the source in time (Until 0: the end of the
	// simulation).
	From, Until time.Duration
	// Key is the key the requests are made under (default "client": all
	// sources are one client unless they say otherwise); with Keys > 1
	// they are spread over
	// Key-0 ... Key-(Keys-1): in turn for steady and on-off traffic, at
	// random for Poisson traffic and bursts.
	Key  string
	Keys int
	// Cost is the units each request takes (default 1).
	Cost int64
	// Hold is how long each request an in_flight policy allows holds its
	// lease before releasing it (hold=); Crash the fraction of those
	// holders that crash instead, never releasing (crash=).
	Hold  Hold
	Crash float64
}

// MaxKeysPerSource bounds keys=N.
const MaxKeysPerSource = 1_000_000

// DefaultKey is the key of traffic that names none.
const DefaultKey = "client"

// ParseTraffic parses one --traffic value.
func ParseTraffic(s string) (Traffic, error) {
	t := Traffic{Spec: s, Key: DefaultKey, Keys: 1, Cost: 1}
	kind, rest, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return t, fmt.Errorf("traffic %q: want KIND:ARGS, such as steady:12/s, poisson:100/s, burst:10@990ms, on-off:50/s,on=2s,off=3s or retry:20/s", s)
	}
	t.Kind = kindNames[kind]
	if t.Kind == 0 {
		return t, fmt.Errorf("traffic %q: unknown kind %q (want steady, poisson, burst, on-off or retry)", s, kind)
	}
	parts := strings.Split(rest, ",")
	if err := t.parseArg(strings.TrimSpace(parts[0])); err != nil {
		return t, fmt.Errorf("traffic %q: %w", s, err)
	}
	seen, err := t.parseOptions(parts[1:])
	if err == nil {
		err = t.check(seen)
	}
	if err != nil {
		return t, fmt.Errorf("traffic %q: %w", s, err)
	}
	return t, nil
}

// parseArg parses the argument of the kind: N@TIME for a burst, else a
// rate.
func (t *Traffic) parseArg(arg string) error {
	if t.Kind != Burst {
		var err error
		t.Rate, err = parseRate(arg)
		return err
	}
	n, at, ok := strings.Cut(arg, "@")
	if !ok {
		return errors.New("a burst is burst:N@TIME, such as burst:10@990ms")
	}
	var err error
	t.N, err = strconv.ParseInt(n, 10, 64)
	if err != nil || t.N < 1 || t.N > 1<<32 {
		return fmt.Errorf("burst size %q must be a whole number from 1 to %d", n, int64(1<<32))
	}
	t.At, err = offset(at)
	return err
}

// parseOptions parses the name=value options, each at most once, and
// returns the names given.
func (t *Traffic) parseOptions(opts []string) (map[string]bool, error) {
	seen := map[string]bool{}
	for _, p := range opts {
		name, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			return seen, fmt.Errorf("option %q must be name=value", p)
		}
		if seen[name] {
			return seen, fmt.Errorf("option %s given twice", name)
		}
		seen[name] = true
		set := trafficOptions[name]
		if set == nil {
			return seen, fmt.Errorf("unknown option %q (want key, keys, cost, from, until, hold, crash; on and off for on-off)", name)
		}
		if err := set(t, val); err != nil {
			return seen, err
		}
	}
	return seen, nil
}

// trafficOptions sets each option of a --traffic value from its text.
var trafficOptions = map[string]func(t *Traffic, val string) error{
	"key": func(t *Traffic, val string) error {
		if val == "" {
			return errors.New("key must not be empty")
		}
		t.Key = val
		return nil
	},
	"keys": func(t *Traffic, val string) error {
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > MaxKeysPerSource {
			return fmt.Errorf("keys must be a whole number from 1 to %d, got %q", MaxKeysPerSource, val)
		}
		if t.Kind == Retry && n > 1 {
			return fmt.Errorf("a retry client is one client on one key; give several retry sources instead of keys=%d", n)
		}
		t.Keys = n
		return nil
	},
	"cost": func(t *Traffic, val string) error {
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("cost must be a positive whole number, got %q", val)
		}
		t.Cost = n
		return nil
	},
	"hold":  func(t *Traffic, val string) (err error) { t.Hold, err = ParseHold(val); return err },
	"crash": func(t *Traffic, val string) (err error) { t.Crash, err = parseCrash(val); return err },
	"from":  offsetOption("from", func(t *Traffic) *time.Duration { return &t.From }),
	"until": offsetOption("until", func(t *Traffic) *time.Duration { return &t.Until }),
	"on":    onOffOption("on", func(t *Traffic) *time.Duration { return &t.On }),
	"off":   onOffOption("off", func(t *Traffic) *time.Duration { return &t.Off }),
}

// offsetOption is an option that takes a time from the simulation's start
// into the field dst returns.
func offsetOption(name string, dst func(*Traffic) *time.Duration) func(*Traffic, string) error {
	return func(t *Traffic, val string) error {
		d, err := offset(val)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		*dst(t) = d
		return nil
	}
}

// onOffOption is on= or off= of on-off traffic: a positive duration.
func onOffOption(name string, dst func(*Traffic) *time.Duration) func(*Traffic, string) error {
	return func(t *Traffic, val string) error {
		d, err := offset(val)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if t.Kind != OnOff {
			return fmt.Errorf("%s applies only to on-off traffic", name)
		}
		if d <= 0 {
			return fmt.Errorf("%s must be positive", name)
		}
		*dst(t) = d
		return nil
	}
}

// check refuses what the options say together that cannot be: on-off
// without on and off, a burst with from or until, until before from.
func (t *Traffic) check(seen map[string]bool) error {
	if t.Kind == OnOff && !t.hasOnOff() {
		return errors.New("on-off needs on=DURATION and off=DURATION, such as on-off:50/s,on=2s,off=3s")
	}
	if t.Kind == Burst && (seen["from"] || seen["until"]) {
		return errors.New("a burst has its instant after @; from and until do not apply")
	}
	if seen["crash"] && !seen["hold"] {
		return errors.New("crash needs hold= (how long the holders that do not crash hold their leases)")
	}
	if t.Until != 0 && t.Until <= t.From {
		return fmt.Errorf("until (%v) must be after from (%v)", t.Until, t.From)
	}
	return nil
}

// hasOnOff reports whether both the on and the off periods are given.
func (t *Traffic) hasOnOff() bool { return t.On != 0 && t.Off != 0 }

// parseRate reads a rate in the configuration's notation (12/s, 100/m) as
// requests per second.
func parseRate(s string) (float64, error) {
	n, per, err := config.ParseRate(s)
	if err != nil {
		return 0, err
	}
	r := n / per.Seconds()
	if r > 1e6 {
		return 0, fmt.Errorf("rate %q is more than one request per microsecond, the simulation's resolution", s)
	}
	return r, nil
}

// offset reads a time from the simulation's start, such as 990ms or 2h.
func offset(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	d, err := config.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("time %q is before the start", s)
	}
	return d, nil
}

// span returns when the source starts and stops within a run of duration
// d, in microseconds.
func (t *Traffic) span(d time.Duration) (from, until int64) {
	from, until = t.From.Microseconds(), d.Microseconds()
	if t.Until != 0 && t.Until < d {
		until = t.Until.Microseconds()
	}
	return from, until
}

// Expected returns about how many requests the source makes in a run of
// duration d: exactly for steady traffic and bursts, on average for
// Poisson traffic, at most for a retry client.
func (t *Traffic) Expected(d time.Duration) float64 {
	from, until := t.span(d)
	if until <= from {
		return 0
	}
	secs := float64(until-from) / 1e6
	switch t.Kind {
	case Burst:
		if t.At < d {
			return float64(t.N)
		}
		return 0
	case OnOff:
		cycle := (t.On + t.Off).Seconds()
		return t.Rate * secs * t.On.Seconds() / cycle
	}
	return t.Rate * secs
}

// event is one request: at microseconds from the start, under key (an
// index into the plan's key table; -1 for a trace's key, then in name), of
// cost units.
type event struct {
	at   int64
	key  int32
	name string
	cost int64
	// hold is how long the request holds its lease, in microseconds, if an
	// in_flight policy allows it; crash, that its holder crashes instead.
	hold  int64
	crash bool
}

// source yields a stream of events in time order. observe is told the
// decision on the event last popped (closed-loop clients react to it).
type source interface {
	// peek returns the time of the next event, false when there is none.
	peek() (int64, bool)
	pop() event
	observe(sluice.Result)
}

// synthetic generates the events of one Traffic. keys[i] is the key table
// index of its i-th key.
type synthetic struct {
	t    Traffic
	keys []int32
	rng  *rand.Rand
	// holdRng draws each event's hold and crash (for every event, allowed
	// or not, so that every policy sees the same ones).
	holdRng *rand.Rand
	period  float64 // microseconds between requests
	until   int64
	next    int64 // time of the next event
	last    int64 // time of the event last popped
	base    int64 // steady, retry: the schedule's origin; on-off: the cycle's start
	i       int64 // steady, on-off, retry: events since base; burst: events left
	done    bool
}

func newSynthetic(t Traffic, keys []int32, seed uint64, index int, d time.Duration) *synthetic {
	s := &synthetic{t: t, keys: keys, rng: rand.New(rand.NewPCG(seed, uint64(index))),
		holdRng: rand.New(rand.NewPCG(seed, uint64(index)|1<<32))}
	from, until := t.span(d)
	s.until = until
	s.period = 1e6 / t.Rate
	switch t.Kind {
	case Burst:
		s.next, s.i = t.At.Microseconds(), t.N
		s.until = d.Microseconds()
	case Poisson:
		s.next = from + int64(math.Round(s.rng.ExpFloat64()*s.period))
	default:
		s.next, s.base = from, from
	}
	s.done = s.next >= s.until
	return s
}

func (s *synthetic) peek() (int64, bool) { return s.next, !s.done }

func (s *synthetic) pop() event {
	ev := event{at: s.next, cost: s.t.Cost, key: s.pickKey()}
	if !s.t.Hold.IsZero() {
		ev.hold = s.t.Hold.draw(s.holdRng)
		ev.crash = s.t.Crash > 0 && s.holdRng.Float64() < s.t.Crash
	}
	s.last = s.next
	if s.t.Kind == Burst {
		s.i--
		s.done = s.i == 0
		return ev
	}
	s.advance()
	s.done = s.next >= s.until
	return ev
}

// pickKey is the key of the event at s.next: the source's only key, or
// one of its keys in turn (steady and on-off traffic) or at random.
func (s *synthetic) pickKey() int32 {
	if len(s.keys) <= 1 {
		return s.keys[0]
	}
	switch s.t.Kind {
	case Steady, OnOff:
		return s.keys[s.i%int64(len(s.keys))]
	}
	return s.keys[s.rng.IntN(len(s.keys))]
}

// advance moves s.next to the time of the event after the one popped, for
// every kind but a burst, whose events are all at its instant.
func (s *synthetic) advance() {
	switch s.t.Kind {
	case Poisson:
		s.next += int64(math.Round(s.rng.ExpFloat64() * s.period))
	case Steady, Retry:
		s.i++
		// From the origin, not from the last event, so rounding does not
		// drift.
		s.next = s.base + int64(math.Round(float64(s.i)*s.period))
	case OnOff:
		s.i++
		s.next = s.base + int64(math.Round(float64(s.i)*s.period))
		if on := s.t.On.Microseconds(); s.next >= s.base+on {
			s.base += on + s.t.Off.Microseconds()
			s.next, s.i = s.base, 0
		}
	}
}

// observe makes a retry client honour Retry-After: after a refusal its
// next attempt comes no earlier than the advertised RetryAfter, and its
// steady schedule resumes from there.
func (s *synthetic) observe(res sluice.Result) {
	if s.t.Kind != Retry || res.Allowed {
		return
	}
	wait := s.last + int64((res.RetryAfter+time.Microsecond-1)/time.Microsecond)
	if wait > s.next {
		s.base, s.i, s.next = wait, 0, wait
		s.done = s.next >= s.until
	}
}
