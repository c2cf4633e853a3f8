package memstore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// overrides are the Store's key overrides (driver.OverrideStore), read by
// every decision whose Op names one. As valkeystore keeps them: a record
// is held for Expires - Set of the store's clock (rounded up to the
// millisecond, as Valkey's PEXPIRE), and applies to a decision made before
// its Expires, on the decision's time; GetOverride and ListOverrides return
// the records held, for the limiter to say, by its clock, which are live.
type overrides struct {
	mu    sync.Mutex
	recs  map[string]held
	in    map[string]string          // key → its index
	index map[string]map[string]bool // index → identities
}

// held is a record and when the store drops it, on the store's clock.
type held struct {
	rec  driver.OverrideRecord
	gone time.Time
}

func (o *overrides) init() {
	o.recs = make(map[string]held)
	o.in = make(map[string]string)
	o.index = make(map[string]map[string]bool)
}

// lookup returns the record under key, held at clock (the store's) and
// live at now (the decision's).
func (o *overrides) lookup(key string, now, clock time.Time) (driver.OverrideRecord, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h, ok := o.recs[key]
	if !ok || !clock.Before(h.gone) || !now.Before(h.rec.Expires) {
		return driver.OverrideRecord{}, false
	}
	return h.rec, true
}

// PutOverride implements driver.OverrideStore.
func (s *Store) PutOverride(ctx context.Context, index, key string, rec driver.OverrideRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := driver.CheckRecord(rec); err != nil {
		return fmt.Errorf("memstore: put override: %w", err)
	}
	o := &s.ovs
	o.mu.Lock()
	defer o.mu.Unlock()
	clock := s.clock()
	o.sweep(clock)
	set := rec.Set
	if set.IsZero() {
		set = clock
	}
	life := (rec.Expires.UnixMicro() - set.UnixMicro() + 999) / 1000
	o.recs[key] = held{rec, clock.Add(time.Duration(life) * time.Millisecond)}
	o.in[key] = index
	if o.index[index] == nil {
		o.index[index] = map[string]bool{}
	}
	o.index[index][rec.Identity] = true
	return nil
}

// sweep drops the records due to go at clock and their index entries;
// called with o.mu held, on every put, so the records held are the live
// ones plus those due since the last put.
func (o *overrides) sweep(clock time.Time) {
	for k, h := range o.recs {
		if !clock.Before(h.gone) {
			o.remove(k, h.rec.Identity)
		}
	}
}

// remove drops the record under key and its index entry.
func (o *overrides) remove(key, identity string) {
	if idx, ok := o.in[key]; ok {
		delete(o.index[idx], identity)
		if len(o.index[idx]) == 0 {
			delete(o.index, idx)
		}
	}
	delete(o.recs, key)
	delete(o.in, key)
}

// GetOverride implements driver.OverrideStore.
func (s *Store) GetOverride(ctx context.Context, key string) (driver.OverrideRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return driver.OverrideRecord{}, false, err
	}
	o := &s.ovs
	o.mu.Lock()
	defer o.mu.Unlock()
	h, ok := o.recs[key]
	if !ok || !s.clock().Before(h.gone) {
		return driver.OverrideRecord{}, false, nil
	}
	return h.rec, true, nil
}

// DeleteOverride implements driver.OverrideStore.
func (s *Store) DeleteOverride(ctx context.Context, index, key, identity string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &s.ovs
	o.mu.Lock()
	defer o.mu.Unlock()
	o.remove(key, identity)
	delete(o.index[index], identity)
	return nil
}

// ListOverrides implements driver.OverrideStore.
func (s *Store) ListOverrides(ctx context.Context, index string, keyOf func(string) string) ([]driver.OverrideRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	clock := s.clock()
	o := &s.ovs
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []driver.OverrideRecord
	for id := range o.index[index] {
		h, ok := o.recs[keyOf(id)]
		if !ok || !clock.Before(h.gone) {
			continue
		}
		out = append(out, h.rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Identity < out[j].Identity })
	return out, nil
}

// applyOverride returns the rule op decides under at now: its Rule, or
// the Rule with the key's override held at clock (the store's) and live at
// now; over reports that the override applies, invalid an override that
// is not a valid rule (ignored).
// until is the override's expiry when one applies.
func (s *Store) applyOverride(op *driver.Op, now, clock time.Time) (r sluice.Rule, over, invalid bool, until time.Time) {
	if op.Override == "" {
		return op.Rule, false, false, until
	}
	rec, ok := s.ovs.lookup(op.Override, now, clock)
	if !ok {
		return op.Rule, false, false, until
	}
	eff, err := op.Rule.Overridden(rec.Limit, rec.Param)
	if err != nil {
		return op.Rule, false, true, until
	}
	return eff, true, false, rec.Expires
}
