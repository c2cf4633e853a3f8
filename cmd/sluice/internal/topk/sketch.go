// Package topk finds the most frequent items of a stream in bounded memory:
// a Space-Saving summary (Sketch), and a ring of them over sliding
// intervals of time (Window). sluice serve uses it for the most refused
// keys of each policy.
package topk

import "sort"

// Sketch is a Space-Saving summary of at most k items: memory and work per
// Add are bounded whatever the number of distinct items. For every item
// it keeps, Count overestimates the item's true count by at most Err; an
// item it does not keep was seen at most Min() times; Err and Min() are at
// most N()/k. Every item seen more than N()/k times is kept. It is not
// safe for concurrent use.
type Sketch struct {
	k     int
	n     int64
	index map[string]int // item → position in heap
	heap  []Counter      // min-heap by Count
}

// Counter is an item kept by a Sketch: its true count is between
// Count−Err and Count.
type Counter struct {
	Item       string
	Count, Err int64
}

// NewSketch returns a Sketch of k counters (at least 1).
func NewSketch(k int) *Sketch {
	k = max(k, 1)
	return &Sketch{k: k, index: make(map[string]int, k), heap: make([]Counter, 0, k)}
}

// Add counts item w times (w ≥ 1).
func (s *Sketch) Add(item string, w int64) {
	s.n += w
	if i, ok := s.index[item]; ok {
		s.heap[i].Count += w
		s.down(i)
		return
	}
	if len(s.heap) < s.k {
		s.heap = append(s.heap, Counter{Item: item, Count: w})
		s.index[item] = len(s.heap) - 1
		s.up(len(s.heap) - 1)
		return
	}
	// Replace the smallest counter: the newcomer may have been counted
	// there before it was evicted, so its error is the old count.
	min := s.heap[0]
	delete(s.index, min.Item)
	s.heap[0] = Counter{Item: item, Count: min.Count + w, Err: min.Count}
	s.index[item] = 0
	s.down(0)
}

// N is the total weight added.
func (s *Sketch) N() int64 { return s.n }

// Min is the most an item that is not kept may have been seen: the
// smallest count when all k counters are in use, else 0.
func (s *Sketch) Min() int64 {
	if len(s.heap) < s.k {
		return 0
	}
	return s.heap[0].Count
}

// Counters returns the items kept, most frequent first.
func (s *Sketch) Counters() []Counter {
	out := append([]Counter(nil), s.heap...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Item < out[j].Item
	})
	return out
}

func (s *Sketch) less(i, j int) bool { return s.heap[i].Count < s.heap[j].Count }

func (s *Sketch) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.index[s.heap[i].Item] = i
	s.index[s.heap[j].Item] = j
}

func (s *Sketch) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *Sketch) down(i int) {
	for {
		l, small := 2*i+1, i
		if l < len(s.heap) && s.less(l, small) {
			small = l
		}
		if r := l + 1; r < len(s.heap) && s.less(r, small) {
			small = r
		}
		if small == i {
			return
		}
		s.swap(i, small)
		i = small
	}
}
