package topk

import (
	"sort"
	"sync"
	"time"
)

// Window counts items over sliding intervals of time: a ring of Sketches,
// one per slot of time. Top merges the slots of the span asked for.
// Memory is bounded by slots × k counters. It is safe for concurrent use.
type Window struct {
	mu    sync.Mutex
	k     int
	slot  time.Duration
	ring  []*Sketch
	epoch []int64 // the slot number each ring entry counts; -1 unused
}

// NewWindow returns a Window of slots slots of width slot, each a Sketch
// of k counters: it answers for spans of up to slots × slot.
func NewWindow(k, slots int, slot time.Duration) *Window {
	w := &Window{k: k, slot: slot, ring: make([]*Sketch, slots), epoch: make([]int64, slots)}
	for i := range w.ring {
		w.ring[i] = NewSketch(k)
		w.epoch[i] = -1
	}
	return w
}

// Span is the longest span Top answers for.
func (w *Window) Span() time.Duration { return w.slot * time.Duration(len(w.ring)) }

func (w *Window) slotOf(t time.Time) int64 { return t.UnixNano() / int64(w.slot) }

// Add counts item once at time now.
func (w *Window) Add(now time.Time, item string) {
	e := w.slotOf(now)
	i := int(e % int64(len(w.ring)))
	w.mu.Lock()
	if w.epoch[i] != e {
		w.ring[i] = NewSketch(w.k)
		w.epoch[i] = e
	}
	w.ring[i].Add(item, 1)
	w.mu.Unlock()
}

// Entry is an item's count over a span: the true count is between
// Count−Error and Count.
type Entry struct {
	Item  string `json:"key"`
	Count int64  `json:"count"`
	Error int64  `json:"error"`
}

// Top returns up to n items with the highest counts over the span that
// ends at now (whole slots: the current one and those before it, up to
// span), and the total counted over it. Each Entry's Count is an upper
// bound and Count−Error a lower bound of the item's true count; every item
// counted more than total/k times over the span is among the candidates.
func (w *Window) Top(now time.Time, span time.Duration, n int) (entries []Entry, total int64) {
	slots := int((span + w.slot - 1) / w.slot)
	slots = min(max(slots, 1), len(w.ring))
	cur := w.slotOf(now)
	w.mu.Lock()
	var live []*Sketch
	for e := cur - int64(slots) + 1; e <= cur; e++ {
		i := int(((e % int64(len(w.ring))) + int64(len(w.ring))) % int64(len(w.ring)))
		if w.epoch[i] == e {
			sk := w.ring[i]
			cp := &Sketch{k: sk.k, n: sk.n, heap: append([]Counter(nil), sk.heap...)}
			live = append(live, cp)
		}
	}
	w.mu.Unlock()
	type acc struct{ count, err, presentMin int64 }
	merged := map[string]*acc{}
	var allMin int64
	for _, sk := range live {
		total += sk.n
		m := sk.Min()
		allMin += m
		for _, c := range sk.heap {
			a := merged[c.Item]
			if a == nil {
				a = &acc{}
				merged[c.Item] = a
			}
			a.count += c.Count
			a.err += c.Err
			a.presentMin += m
		}
	}
	for item, a := range merged {
		// A slot that does not keep the item may still have seen it, up
		// to its Min.
		missing := allMin - a.presentMin
		entries = append(entries, Entry{Item: item, Count: a.count + missing, Error: a.err + missing})
	}
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].Count != entries[j].Count {
			return entries[i].Count > entries[j].Count
		}
		return entries[i].Item < entries[j].Item
	})
	if len(entries) > n {
		entries = entries[:n]
	}
	return entries, total
}
