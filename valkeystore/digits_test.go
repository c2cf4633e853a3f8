package valkeystore

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestDigits: digits is the length strconv formats (the command's buffer
// of digits is sized by it), on the edges and random numbers of every
// magnitude.
func TestDigits(t *testing.T) {
	vs := []int64{0, 1, 9, 10, 99, 100, -1, -9, -10, -100, math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	for range 10000 {
		v := rand.Int64() >> rand.IntN(64)
		if rand.IntN(2) == 0 {
			v = -v
		}
		vs = append(vs, v)
	}
	for _, v := range vs {
		if got, want := digits(v), len(strconv.FormatInt(v, 10)); got != want {
			t.Fatalf("digits(%d) = %d, want %d", v, got, want)
		}
	}
}
