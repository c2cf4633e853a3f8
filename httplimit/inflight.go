package httplimit

import "github.com/sluicehq/sluice"

// leases returns the leases st's in-flight limits hold, or nil for none.
func (st *Status) leases() []*sluice.Lease {
	var out []*sluice.Lease
	for i := range st.Limits {
		if ls := st.Limits[i].Lease; ls != nil {
			out = append(out, ls)
		}
	}
	return out
}
