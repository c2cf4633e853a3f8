package waiting

import (
	"sync"
	"sync/atomic"
	"testing"
)

type key struct {
	limit int
	key   string
}

// TestPlacesBounds: Enter takes a place within the total and each key's
// bound, or none at all; Leave gives it back; an entry is held only per
// key with a waiter.
func TestPlacesBounds(t *testing.T) {
	p := NewPlaces[key](3, 2)
	a, b, c := key{0, "a"}, key{0, "b"}, key{1, "a"}
	if !p.Enter([]key{a}) || !p.Enter([]key{a, b}) {
		t.Fatal("within the bounds: refused")
	}
	if p.Enter([]key{a}) || p.Enter([]key{b, a}) {
		t.Fatal("a key past its bound entered")
	}
	if p.Waiting() != 2 || p.Keys() != 2 {
		t.Fatalf("a refused Enter took a place: %d waiting, %d keys", p.Waiting(), p.Keys())
	}
	if !p.Enter([]key{c}) {
		t.Fatal("another limit's key is bounded with the first's")
	}
	if p.Enter([]key{{2, "z"}}) || p.Enter(nil) {
		t.Fatal("past the total: entered")
	}
	p.Leave([]key{a, b})
	if !p.Enter([]key{b}) {
		t.Fatal("a place given back is not free")
	}
	p.Leave([]key{b})
	p.Leave([]key{a})
	p.Leave([]key{c})
	if p.Waiting() != 0 || p.Keys() != 0 {
		t.Fatalf("after all left: %d waiting, %d keys", p.Waiting(), p.Keys())
	}
}

// TestPlacesNoPlace: a bound of 0 or less has no place (the callers
// apply their defaults to 0 and refuse negative bounds before).
func TestPlacesNoPlace(t *testing.T) {
	for _, b := range [][2]int{{0, 10}, {10, 0}, {-1, 10}, {10, -1}, {0, 0}} {
		p := NewPlaces[key](b[0], b[1])
		if p.Enter([]key{{0, "k"}}) {
			t.Errorf("bounds %v: entered", b)
		}
	}
	// A request refused by no key is bounded by the total alone.
	if p := NewPlaces[key](1, 0); !p.Enter(nil) || p.Enter(nil) {
		t.Error("a total of 1, no key: not exactly one place")
	}
}

// TestPlacesSetBounds: new bounds apply to those who enter next; those
// waiting keep their places, and a bound lowered below them admits no one
// until enough have left.
func TestPlacesSetBounds(t *testing.T) {
	p := NewPlaces[key](2, 2)
	k := []key{{0, "k"}}
	p.Enter(k)
	p.Enter(k)
	p.SetBounds(3, 3)
	if !p.Enter(k) {
		t.Fatal("a raised bound refused")
	}
	p.SetBounds(1, 1)
	if p.Waiting() != 3 || p.Enter(k) || p.Enter([]key{{1, "m"}}) {
		t.Fatal("a lowered bound: dropped a waiter or admitted one")
	}
	p.Leave(k)
	p.Leave(k)
	if p.Enter(k) {
		t.Fatal("one still waits: a bound of 1 admitted another")
	}
	p.Leave(k)
	if !p.Enter(k) {
		t.Fatal("none waits: a bound of 1 refused")
	}
}

// TestPlacesConcurrent: however many enter and leave at once, no more
// than the bounds hold a place.
func TestPlacesConcurrent(t *testing.T) {
	const total, perKey = 8, 3
	p := NewPlaces[key](total, perKey)
	var in atomic.Int64
	var perK [4]atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			k := key{0, string(rune('a' + g%4))}
			for range 500 {
				if !p.Enter([]key{k}) {
					continue
				}
				if n := in.Add(1); n > total {
					t.Errorf("%d hold a place, bound %d", n, total)
				}
				if n := perK[g%4].Add(1); n > perKey {
					t.Errorf("%d hold a place of %v, bound %d", n, k, perKey)
				}
				perK[g%4].Add(-1)
				in.Add(-1)
				p.Leave([]key{k})
			}
		})
	}
	wg.Wait()
	if p.Waiting() != 0 || p.Keys() != 0 {
		t.Fatalf("after all left: %d waiting, %d keys", p.Waiting(), p.Keys())
	}
}

// TestPlacesStop: Stop closes Done once, however many call it.
func TestPlacesStop(t *testing.T) {
	p := NewPlaces[key](1, 1)
	if p.Stopped() {
		t.Fatal("stopped before Stop")
	}
	select {
	case <-p.Done():
		t.Fatal("Done closed before Stop")
	default:
	}
	p.Stop()
	p.Stop()
	if !p.Stopped() {
		t.Fatal("not stopped after Stop")
	}
	<-p.Done()
}
