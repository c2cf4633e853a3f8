package server

// The dashboard's warnings and waits card: for each policy with warn_at
// or wait, its sluice_warnings_total and sluice_server_waits_total, and
// the requests waiting now (sluice_server_waiting).

// dashWarning is one policy of the card.
type dashWarning struct {
	Name    string `json:"name"`
	Limiter string `json:"limiter"`
	// WarnAt is the policy's warn_at (0: none), WaitMS its wait (0: none).
	WarnAt   int   `json:"warn_at"`
	WaitMS   int64 `json:"wait_ms"`
	Warnings int64 `json:"warnings"`
	// Waits counts how waits ended, by sluice_server_waits_total outcome.
	Waits dashWaits `json:"waits"`
}

type dashWaits struct {
	Admitted  int64 `json:"admitted"`
	Refused   int64 `json:"refused"`
	Full      int64 `json:"full"`
	Abandoned int64 `json:"abandoned"`
}

// addWarnings lists st's policies with warn_at or wait, in order, and
// returns them by limiter for addWarnMetric to fill.
func (out *dashState) addWarnings(st *state) map[string]*dashWarning {
	out.Warnings = []dashWarning{}
	for _, p := range st.order {
		if p.cfg.WarnAt > 0 || p.cfg.Wait > 0 {
			out.Warnings = append(out.Warnings, dashWarning{Name: p.cfg.Name, Limiter: p.cfg.Limiter, WarnAt: p.cfg.WarnAt, WaitMS: ceilMS(p.cfg.Wait)})
		}
	}
	by := make(map[string]*dashWarning, len(out.Warnings))
	for i := range out.Warnings {
		by[out.Warnings[i].Limiter] = &out.Warnings[i]
	}
	return by
}

// addWarnMetric folds a sample of the card's families into the snapshot.
func (out *dashState) addWarnMetric(name string, d dashSample, by map[string]*dashWarning) {
	w := by[d.labels["limiter"]]
	switch {
	case name == "sluice_server_waiting":
		out.Waiting = int64(d.m.GetGauge().GetValue())
	case w == nil:
	case name == "sluice_warnings_total":
		w.Warnings = int64(d.m.GetCounter().GetValue())
	case name == "sluice_server_waits_total":
		w.Waits.add(d.labels["outcome"], int64(d.m.GetCounter().GetValue()))
	}
}

// add sets the count of one outcome.
func (w *dashWaits) add(outcome string, n int64) {
	switch outcome {
	case waitAdmitted:
		w.Admitted = n
	case waitRefused:
		w.Refused = n
	case waitFull:
		w.Full = n
	case waitAbandoned:
		w.Abandoned = n
	}
}
