package valkeystore

import (
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/valkeytest"
)

// TestSlotModel: slot agrees with valkeytest's implementation of its own on
// random keys, with and without hash tags.
func TestSlotModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab{}:%x\x00\xff")
	for range 20000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if got, want := int(slot(string(b))), valkeytest.Slot(string(b)); got != want {
			t.Fatalf("slot(%q) = %d, want %d", b, got, want)
		}
	}
}
