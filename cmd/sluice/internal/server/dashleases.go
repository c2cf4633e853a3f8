package server

import (
	"github.com/sluicehq/sluice/driver"
)

// The dashboard's in-flight leases: for each in_flight policy, what
// became of its leases, from sluice_decisions_total (acquired, refused)
// and sluice_lease_events_total (released, ended, renewed, lost, expired).
// How many are held now is not among them: a crashed holder's lease is
// counted expired only when the store reaps it, at the next decision on
// its key (sluice inspect shows a key's leases).

// dashLeases is one in_flight policy's lease counters (cumulative).
type dashLeases struct {
	Limit   int64 `json:"limit"`
	LeaseMS int64 `json:"lease_ms"`
	// Released counts releases that freed their lease; Ended releases that
	// found it ended already (expired, or its key reset); Renewed renewals
	// that extended it; Lost renewals that found it ended; Expired the
	// leases the store reaped because their lease passed without a release
	// or renewal (counted when their key is next used).
	Released int64 `json:"released"`
	Ended    int64 `json:"ended"`
	Renewed  int64 `json:"renewed"`
	Lost     int64 `json:"lost"`
	Expired  int64 `json:"expired"`
}

// leasesOf is the empty lease counters of p, or nil when p is not
// in_flight.
func leasesOf(p *policy) *dashLeases {
	if p.cfg.Algorithm != driver.AlgorithmInFlight {
		return nil
	}
	return &dashLeases{Limit: p.cfg.Limit, LeaseMS: p.cfg.Params.Lease.Milliseconds()}
}

// addLeaseEvent adds a policy's lease events of one kind.
func (out *dashState) addLeaseEvent(d dashSample) {
	p := d.policy()
	if p == nil || p.Leases == nil {
		return
	}
	n := int64(d.m.GetCounter().GetValue())
	switch d.labels["event"] {
	case "released":
		p.Leases.Released += n
	case "ended":
		p.Leases.Ended += n
	case "renewed":
		p.Leases.Renewed += n
	case "lost":
		p.Leases.Lost += n
	case "expired":
		p.Leases.Expired += n
	}
}
