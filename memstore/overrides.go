package memstore

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// overrides are the Store's key overrides (sluice.OverrideStore), read by
// every decision whose Op names one. A record lapses at its Expires, on
// the store's clock for GetOverride and ListOverrides, and at the
// decision's time for a decision, as valkeystore's script does.
type overrides struct {
	mu    sync.Mutex
	recs  map[string]sluice.OverrideRecord
	in    map[string]string          // key → its index
	index map[string]map[string]bool // index → identities
}

func (o *overrides) init() {
	o.recs = make(map[string]sluice.OverrideRecord)
	o.in = make(map[string]string)
	o.index = make(map[string]map[string]bool)
}

// lookup returns the record under key, live at now.
func (o *overrides) lookup(key string, now time.Time) (sluice.OverrideRecord, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rec, ok := o.recs[key]
	if !ok || !now.Before(rec.Expires) {
		return sluice.OverrideRecord{}, false
	}
	return rec, true
}

// PutOverride implements sluice.OverrideStore.
func (s *Store) PutOverride(ctx context.Context, index, key string, rec sluice.OverrideRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &s.ovs
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sweep(s.clock())
	o.recs[key] = rec
	o.in[key] = index
	if o.index[index] == nil {
		o.index[index] = map[string]bool{}
	}
	o.index[index][rec.Identity] = true
	return nil
}

// sweep drops lapsed records and their index entries; called with o.mu
// held, on every put, so the records held are the live ones plus those
// lapsed since the last put.
func (o *overrides) sweep(now time.Time) {
	for k, rec := range o.recs {
		if !now.Before(rec.Expires) {
			o.remove(k, rec.Identity)
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

// GetOverride implements sluice.OverrideStore.
func (s *Store) GetOverride(ctx context.Context, key string) (sluice.OverrideRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return sluice.OverrideRecord{}, false, err
	}
	rec, ok := s.ovs.lookup(key, s.clock())
	return rec, ok, nil
}

// DeleteOverride implements sluice.OverrideStore.
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

// ListOverrides implements sluice.OverrideStore.
func (s *Store) ListOverrides(ctx context.Context, index string, keyOf func(string) string) ([]sluice.OverrideRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.clock()
	o := &s.ovs
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []sluice.OverrideRecord
	for id := range o.index[index] {
		rec, ok := o.recs[keyOf(id)]
		if !ok || !now.Before(rec.Expires) {
			delete(o.index[index], id)
			continue
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Identity < out[j].Identity })
	return out, nil
}

// applyOverride returns the rule op decides under at now: its Rule, or
// the Rule with the key's live override; invalid reports an override that
// is not a valid rule (ignored).
// until is the override's expiry when one applies.
func (s *Store) applyOverride(op *sluice.Op, now time.Time) (r sluice.Rule, src sluice.LimitSource, invalid bool, until time.Time) {
	if op.Override == "" {
		return op.Rule, sluice.SourcePolicy, false, until
	}
	rec, ok := s.ovs.lookup(op.Override, now)
	if !ok {
		return op.Rule, sluice.SourcePolicy, false, until
	}
	eff, err := op.Rule.Overridden(rec.Limit, rec.Param)
	if err != nil {
		return op.Rule, sluice.SourcePolicy, true, until
	}
	return eff, sluice.SourceOverride, false, rec.Expires
}
