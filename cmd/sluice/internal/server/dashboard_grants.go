package server

// The dashboard's card of grants: for each policy with grants, its
// decisions made locally (against the process's grant) and on Valkey, and
// its grant calls, from the sluice_grant_* metrics (grants.go).

// dashGrant is one policy with grants in the dashboard's snapshot:
// cumulative counters (the page turns them into rates).
type dashGrant struct {
	Name    string `json:"name"`
	Limiter string `json:"limiter"`
	// Local are the decisions made against the grant without a call;
	// Valkey those that waited for a grant call; Failed those the fail
	// mode decided; Calls the grant calls to Valkey.
	Local  int64 `json:"local"`
	Valkey int64 `json:"valkey"`
	Failed int64 `json:"failed"`
	Calls  int64 `json:"calls"`
}

// addGrantPolicies lists the policies of st with grants, in order.
func (out *dashState) addGrantPolicies(st *state) {
	for _, p := range st.order {
		if p.cfg.Grants {
			out.Grants = append(out.Grants, dashGrant{Name: p.cfg.Name, Limiter: p.cfg.Limiter})
		}
	}
}

// grant is the snapshot's grant policy of the sample's limiter, or nil.
func (out *dashState) grant(d dashSample) *dashGrant {
	for i := range out.Grants {
		if out.Grants[i].Limiter == d.labels["limiter"] {
			return &out.Grants[i]
		}
	}
	return nil
}

// addGrantDecisions sets a grant policy's decisions of one kind.
func (out *dashState) addGrantDecisions(d dashSample) {
	g := out.grant(d)
	if g == nil {
		return
	}
	n := int64(d.m.GetCounter().GetValue())
	switch d.labels["where"] {
	case "local":
		g.Local = n
	case "valkey":
		g.Valkey = n
	case "failed":
		g.Failed = n
	}
}

// addGrantCalls sets a grant policy's grant calls.
func (out *dashState) addGrantCalls(d dashSample) {
	if g := out.grant(d); g != nil {
		g.Calls = int64(d.m.GetCounter().GetValue())
	}
}
