package memstore

import (
	"slices"

	"github.com/sluicehq/sluice/driver"
)

// inFlight is the Go twin of luascript/scripts/inflight.lua: s.leases maps
// each lease of the key to when it ends (microseconds). Every decision
// first reaps the leases that ended (at or before now), counting them in
// r.expired (a released lease left the map at its release, a reset key
// is gone, and a reaped one leaves the map: each is counted once); then cost 1
// acquires, cost 0 peeks or (renew) renews, cost -1 releases id. The map
// holds at most limit leases; the key is deleted once it holds none, and
// otherwise lives until its latest lease ends (plus the margin), from its
// last write.
func inFlight(s *state, now, limit, lease, cost int64, renew bool, id driver.LeaseID) (r reply, write, del bool) {
	for k, end := range s.leases {
		if end <= now {
			delete(s.leases, k)
			r.expired++
		}
	}
	count := int64(len(s.leases))
	r.receipt = now
	_, held := s.leases[id]
	switch {
	case renew:
		if held {
			s.leases[id] = now + lease
			r.allowed, r.receipt, write = true, now+lease, true
		}
	case cost < 0:
		if held {
			delete(s.leases, id)
			r.allowed, write = true, true
			count--
		}
	case count < limit:
		r.allowed = true
		if cost > 0 {
			if s.leases == nil {
				s.leases = make(map[driver.LeaseID]int64)
			}
			if !held {
				count++
			}
			s.leases[id] = now + lease
			r.receipt, write = now+lease, true
		}
	default:
		// The lease whose end leaves fewer than limit.
		ends := make([]int64, 0, count)
		for _, end := range s.leases {
			ends = append(ends, end)
		}
		slices.Sort(ends)
		r.retry = ends[count-limit] - now
	}
	r.remaining = max(0, limit-count)
	if count == 0 {
		return r, false, true
	}
	var latest int64
	for _, end := range s.leases {
		latest = max(latest, end)
	}
	r.reset = latest - now
	if write {
		s.ttlMicro = r.reset
	}
	return r, write, false
}
