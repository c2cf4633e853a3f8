package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Hold is how long the requests of a source hold their leases: a constant
// (hold=200ms), exponential with a mean (hold=exp:200ms) or uniform
// between two bounds (hold=100ms-500ms).
type Hold struct {
	// Dist is "const", "exp" or "uniform"; "" for no hold.
	Dist string
	// Min is the constant, or the exponential's mean, or the uniform's
	// lower bound; Max the uniform's upper bound.
	Min, Max time.Duration
}

// MaxHold bounds a hold (and an exponential's mean).
const MaxHold = MaxDuration

// mean is the hold's mean.
func (h Hold) mean() time.Duration {
	if h.Dist == "uniform" {
		return (h.Min + h.Max) / 2
	}
	return h.Min
}

// IsZero reports whether no hold was given.
func (h Hold) IsZero() bool { return h.Dist == "" }

// String returns the hold as hold= takes it.
func (h Hold) String() string {
	switch h.Dist {
	case "exp":
		return "exp:" + h.Min.String()
	case "uniform":
		return h.Min.String() + "-" + h.Max.String()
	}
	return h.Min.String()
}

// ParseHold parses the value of hold=.
func ParseHold(s string) (Hold, error) {
	bad := fmt.Errorf("hold %q: want a duration (200ms), exp:MEAN (exp:200ms) or MIN-MAX (100ms-500ms)", s)
	var h Hold
	var err error
	switch lo, hi, uniform := strings.Cut(s, "-"); {
	case strings.HasPrefix(s, "exp:"):
		h.Dist = "exp"
		h.Min, err = holdDuration(strings.TrimPrefix(s, "exp:"))
		if err == nil && h.Min == 0 {
			err = errors.New("an exponential hold's mean must be positive")
		}
	case uniform:
		h.Dist = "uniform"
		if h.Min, err = holdDuration(lo); err == nil {
			h.Max, err = holdDuration(hi)
		}
		if err == nil && h.Max <= h.Min {
			err = fmt.Errorf("%v must be less than %v", h.Min, h.Max)
		}
	default:
		h.Dist = "const"
		h.Min, err = holdDuration(s)
	}
	if err != nil {
		return Hold{}, fmt.Errorf("%w: %v", bad, err)
	}
	return h, nil
}

// holdDuration reads one duration of a hold: from 0 to MaxHold, in whole
// microseconds.
func holdDuration(s string) (time.Duration, error) {
	d, err := offset(s)
	if err != nil {
		return 0, err
	}
	if d > MaxHold || d%time.Microsecond != 0 {
		return 0, fmt.Errorf("%v must be at most %v, in whole microseconds", d, MaxHold)
	}
	return d, nil
}

// draw returns one hold, in microseconds.
func (h Hold) draw(rng *rand.Rand) int64 {
	switch h.Dist {
	case "exp":
		return min(int64(math.Round(rng.ExpFloat64()*float64(h.Min.Microseconds()))), MaxHold.Microseconds())
	case "uniform":
		lo, hi := h.Min.Microseconds(), h.Max.Microseconds()
		return lo + rng.Int64N(hi-lo+1)
	}
	return h.Min.Microseconds()
}

// parseCrash parses the value of crash=: a fraction from 0 to 1 (0.05) or
// a percent (5%).
func parseCrash(s string) (float64, error) {
	v, pct := strings.CutSuffix(s, "%")
	f, err := strconv.ParseFloat(v, 64)
	if pct {
		f /= 100
	}
	if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
		return 0, fmt.Errorf("crash %q: want the fraction of holders that crash, from 0 to 1 (0.05) or a percent (5%%)", s)
	}
	return f, nil
}
