package server

import (
	"embed"
	"io/fs"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The dashboard at /ui: one page of embedded static files (no CDN, no build
// step) that polls /ui/state.json and /v1/policies, and, with the admin
// token the operator types in, /v1/top-refused and /v1/keys. Its numbers
// are read from the server's own Prometheus registry, so the page and
// /metrics cannot disagree.

//go:embed ui
var uiFiles embed.FS

// uiHeaders are set on every /ui response: the page loads only its own
// files and talks only to this server.
func uiHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func (s *Server) handleUI() http.HandlerFunc {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	files := http.FileServerFS(sub)
	return func(w http.ResponseWriter, r *http.Request) {
		uiHeaders(w)
		if r.URL.Path == "/ui" || r.URL.Path == "/ui/" {
			http.ServeFileFS(w, r, sub, "index.html")
			return
		}
		http.StripPrefix("/ui/", files).ServeHTTP(w, r)
	}
}

// dashState is /ui/state.json.
type dashState struct {
	Now      time.Time    `json:"now"`
	Store    string       `json:"store"`
	Ready    bool         `json:"ready"`
	ReadyErr string       `json:"ready_error,omitempty"`
	Config   dashConfig   `json:"config"`
	Policies []dashPolicy `json:"policies"`
	// Grants are the policies with grants: their decisions made locally
	// against Valkey's (dashboard_grants.go).
	Grants []dashGrant `json:"grants"`
	// Nodes are the Valkey nodes and their breakers
	// (sluice_valkey_breaker_state); none for the in-process store.
	Nodes []dashNode `json:"nodes"`
	// Risks are the Valkey settings that lose counts or refuse decisions
	// (sluice_valkey_config_risk).
	Risks []dashRisk `json:"risks"`
	// Version is sluice_build_info's version label.
	Version string `json:"version,omitempty"`
	// Warnings are the policies with warn_at or wait, with their warnings
	// and waits; Waiting the requests waiting now (dashboard_warn.go).
	Warnings []dashWarning `json:"warnings"`
	Waiting  int64         `json:"waiting"`
}

type dashConfig struct {
	Source   string     `json:"source"`
	LoadedAt time.Time  `json:"loaded_at"`
	Policies int        `json:"policies"`
	Domains  int        `json:"domains"`
	Reload   dashReload `json:"reload"`
}

type dashReload struct {
	// OK is sluice_server_config_last_reload_successful.
	OK        bool      `json:"ok"`
	Successes int64     `json:"successes"`
	Failures  int64     `json:"failures"`
	At        time.Time `json:"at,omitzero"`
	Error     string    `json:"error,omitempty"`
}

// dashPolicy holds one policy's counters from sluice_decisions_total and
// its decision latency histogram (cumulative; the page turns them into
// rates and recent quantiles).
type dashPolicy struct {
	Name     string `json:"name"`
	Limiter  string `json:"limiter"`
	Allowed  int64  `json:"allowed"`
	Refused  int64  `json:"refused"`
	Shadow   int64  `json:"shadow_refused"`
	Degraded int64  `json:"degraded"`
	// Blocks are the blocks its penalty started (sluice_blocks_total).
	Blocks int64 `json:"blocks"`
	// Buckets are the latency histogram's upper bounds (seconds) and
	// cumulative counts; the last is +Inf.
	Buckets []dashBucket `json:"latency_buckets"`
	// Leases are an in_flight policy's lease counters (dashleases.go);
	// nil for a rate policy.
	Leases *dashLeases `json:"leases,omitempty"`
}

type dashBucket struct {
	LE    float64 `json:"le"` // 0 for +Inf in JSON terms: see Inf
	Count uint64  `json:"count"`
	Inf   bool    `json:"inf,omitempty"`
}

type dashNode struct {
	Address string `json:"address"`
	Breaker string `json:"breaker"`
}

type dashRisk struct {
	Node    string `json:"node"`
	Setting string `json:"setting"`
	Value   string `json:"value"`
}

// handleUIState serves the dashboard's JSON snapshot: readiness, the
// loaded configuration and the metrics the page draws, gathered from the
// server's own Prometheus registry.
func (s *Server) handleUIState(w http.ResponseWriter, r *http.Request) {
	uiHeaders(w)
	st := s.state.Load()
	out := dashState{Now: time.Now().UTC(), Store: s.opts.StoreName, Policies: []dashPolicy{}, Grants: []dashGrant{}, Nodes: []dashNode{}, Risks: []dashRisk{}}
	if err := s.Ready(r.Context()); err != nil {
		out.ReadyErr = err.Error()
	} else {
		out.Ready = true
	}
	out.Config = s.dashConfigOf(st)
	byLimiter := out.addPolicies(st)
	warnings := out.addWarnings(st)
	out.addGrantPolicies(st)
	families, err := s.reg.Gather()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			out.addMetric(mf.GetName(), m, metricLabels(m), byLimiter)
			out.addWarnMetric(mf.GetName(), dashSample{m: m, labels: metricLabels(m)}, warnings)
		}
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Address < out.Nodes[j].Address })
	writeJSON(w, http.StatusOK, out)
}

// dashConfigOf describes the loaded configuration and the last reload
// attempt; the reload counters come from the metrics (addMetric).
func (s *Server) dashConfigOf(st *state) dashConfig {
	c := dashConfig{Source: st.cfg.Source, LoadedAt: st.loadedAt.UTC(), Policies: len(st.order), Domains: len(st.cfg.Domains)}
	if last := s.lastReload.Load(); last != nil {
		c.Reload.At, c.Reload.Error = last.at, last.err
	}
	return c
}

// addPolicies lists the configured policies in order, with empty counters,
// and returns them indexed by limiter name for addMetric to fill.
func (out *dashState) addPolicies(st *state) map[string]*dashPolicy {
	for _, p := range st.order {
		out.Policies = append(out.Policies, dashPolicy{Name: p.cfg.Name, Limiter: p.cfg.Limiter, Buckets: []dashBucket{}, Leases: leasesOf(p)})
	}
	byLimiter := make(map[string]*dashPolicy, len(out.Policies))
	for i := range out.Policies {
		byLimiter[out.Policies[i].Limiter] = &out.Policies[i]
	}
	return byLimiter
}

// metricLabels returns a metric's labels as a name-to-value map.
func metricLabels(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

// addMetric folds one sample of the metric family name into the
// snapshot; families the dashboard does not draw are ignored.
func (out *dashState) addMetric(name string, m *dto.Metric, labels map[string]string, byLimiter map[string]*dashPolicy) {
	if add, ok := dashMetrics[name]; ok {
		add(out, dashSample{m: m, labels: labels, byLimiter: byLimiter})
	}
}

// dashSample is one sample of a metric family, with its labels and the
// snapshot's policies by limiter.
type dashSample struct {
	m         *dto.Metric
	labels    map[string]string
	byLimiter map[string]*dashPolicy
}

// policy is the snapshot's policy of the sample's limiter label, or nil.
func (d dashSample) policy() *dashPolicy { return d.byLimiter[d.labels["limiter"]] }

// dashMetrics holds, for each metric family the dashboard draws, how one
// of its samples folds into the snapshot.
var dashMetrics = map[string]func(*dashState, dashSample){
	"sluice_decisions_total":                      (*dashState).addDecisionCount,
	"sluice_decision_duration_seconds":            (*dashState).addLatency,
	"sluice_blocks_total":                         (*dashState).addBlocks,
	"sluice_server_config_last_reload_successful": (*dashState).addReloadOK,
	"sluice_server_config_reloads_total":          (*dashState).addReloadCount,
	"sluice_build_info":                           (*dashState).addVersion,
	"sluice_valkey_breaker_state":                 (*dashState).addBreaker,
	"sluice_valkey_config_risk":                   (*dashState).addRisk,
	"sluice_lease_events_total":                   (*dashState).addLeaseEvent,
	"sluice_grant_decisions_total":                (*dashState).addGrantDecisions,
	"sluice_grant_calls_total":                    (*dashState).addGrantCalls,
}

// addDecisionCount adds a policy's decisions of one outcome.
func (out *dashState) addDecisionCount(d dashSample) {
	if p := d.policy(); p != nil {
		p.addDecisions(d.labels["outcome"], int64(d.m.GetCounter().GetValue()))
	}
}

// addBlocks sets the blocks a policy's penalty started.
func (out *dashState) addBlocks(d dashSample) {
	if p := d.policy(); p != nil {
		p.Blocks = int64(d.m.GetCounter().GetValue())
	}
}

// addLatency sets a policy's decision latency histogram.
func (out *dashState) addLatency(d dashSample) {
	if p := d.policy(); p != nil {
		p.Buckets = histogramBuckets(d.m.GetHistogram())
	}
}

// addReloadOK sets whether the last reload succeeded.
func (out *dashState) addReloadOK(d dashSample) {
	out.Config.Reload.OK = d.m.GetGauge().GetValue() == 1
}

// addReloadCount adds the reloads of one result.
func (out *dashState) addReloadCount(d dashSample) {
	out.Config.Reload.addReloads(d.labels["result"], int64(d.m.GetCounter().GetValue()))
}

// addVersion sets the version Sluice was built as.
func (out *dashState) addVersion(d dashSample) { out.Version = d.labels["version"] }

// addBreaker adds a Valkey node in the circuit breaker state it is in.
func (out *dashState) addBreaker(d dashSample) {
	if d.m.GetGauge().GetValue() == 1 {
		out.Nodes = append(out.Nodes, dashNode{Address: d.labels["node"], Breaker: d.labels["state"]})
	}
}

// addRisk adds a Valkey setting that loses counts.
func (out *dashState) addRisk(d dashSample) {
	out.Risks = append(out.Risks, dashRisk{Node: d.labels["node"], Setting: d.labels["setting"], Value: d.labels["value"]})
}

// addDecisions adds n decisions of one sluice_decisions_total outcome to
// the policy's counters; every degraded outcome counts as Degraded.
func (p *dashPolicy) addDecisions(outcome string, n int64) {
	switch outcome {
	case "allowed":
		p.Allowed += n
	case "denied":
		p.Refused += n
	case "shadow_denied":
		p.Shadow += n
	case "degraded_allowed", "degraded_denied", "degraded_shadow_denied":
		p.Degraded += n
	}
}

// addReloads records the sluice_server_config_reloads_total count of one
// result (success or failure).
func (r *dashReload) addReloads(result string, n int64) {
	switch result {
	case "success":
		r.Successes = n
	case "failure":
		r.Failures = n
	}
}

func histogramBuckets(h *dto.Histogram) []dashBucket {
	out := make([]dashBucket, 0, len(h.GetBucket())+1)
	for _, b := range h.GetBucket() {
		out = append(out, dashBucket{LE: b.GetUpperBound(), Count: b.GetCumulativeCount()})
	}
	return append(out, dashBucket{Inf: true, Count: h.GetSampleCount()})
}
