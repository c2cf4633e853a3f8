package benchmarks

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Scenario names the key pattern of a run.
type Scenario string

// The scenarios of a comparison.
const (
	ScenarioSpread  Scenario = "100k keys"
	ScenarioHot     Scenario = "hot key"
	ScenarioRefused Scenario = "refused hot key"
)

// Result is one timed run of one target.
type Result struct {
	Target      Target
	Scenario    Scenario
	Concurrency int
	Stats       *Stats
	// ClientCPU and ServerCPU are the CPU time the harness process and
	// valkey-server used during the run (zero when unknown).
	ClientCPU, ServerCPU time.Duration
}

// cpuPerDecision formats d spread over the run's decisions, in µs.
func (r Result) cpuPerDecision(d time.Duration) string {
	n := r.Stats.Decisions
	if d <= 0 || n == 0 {
		return "-"
	}
	us := float64(d) / 1e3 / float64(n)
	if us < 1 {
		return fmt.Sprintf("%.2f", us)
	}
	return fmt.Sprintf("%.1f", us)
}

// Memory is the state one target keeps in Valkey.
type Memory struct {
	Target      Target
	Identities  int
	BytesPerKey float64 // used_memory delta / Identities
	KeysPerID   float64 // DBSIZE delta / Identities
	Err         error
}

// Report is everything one comparison measured.
type Report struct {
	Header   []string // lines describing the run
	Results  []Result
	Memory   []Memory
	Duration time.Duration
}

// FormatDuration prints a latency compactly: "87µs", "1.25ms".
func FormatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// FormatRate prints decisions per second with thousands separators.
func FormatRate(r float64) string {
	n := int64(r + 0.5)
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// WriteMarkdown writes the report as markdown tables.
func (r *Report) WriteMarkdown(w io.Writer) {
	for _, h := range r.Header {
		fmt.Fprintln(w, h)
	}
	for _, sc := range []Scenario{ScenarioSpread, ScenarioHot, ScenarioRefused} {
		var rows []Result
		for _, res := range r.Results {
			if res.Scenario == sc {
				rows = append(rows, res)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n### %s\n\n", scenarioTitle(sc))
		fmt.Fprintln(w, "| library | algorithm | client | conc | decisions/s | p50 | p99 | allowed | denied | errors | client CPU µs/decision | server CPU µs/decision |")
		fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, res := range rows {
			st := res.Stats
			errs := fmt.Sprint(st.Errors)
			if st.Degraded > 0 {
				errs += fmt.Sprintf(" (+%d degraded)", st.Degraded)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %d | %d | %s | %s | %s |\n",
				res.Target.Name, res.Target.Algorithm, res.Target.Client, res.Concurrency,
				FormatRate(st.Rate()), FormatDuration(st.Latency.Quantile(0.50)), FormatDuration(st.Latency.Quantile(0.99)),
				st.Allowed, st.Denied, errs, res.cpuPerDecision(res.ClientCPU), res.cpuPerDecision(res.ServerCPU))
		}
	}
	if len(r.Memory) > 0 {
		fmt.Fprintf(w, "\n### Bytes per key in Valkey\n\n")
		fmt.Fprintf(w, "used_memory after one decision for each of %d identities, minus used_memory before (FLUSHALL between libraries); key names included.\n\n", r.Memory[0].Identities)
		fmt.Fprintln(w, "| library | algorithm | bytes per identity | Valkey keys per identity |")
		fmt.Fprintln(w, "|---|---|---:|---:|")
		for _, m := range r.Memory {
			if m.Err != nil {
				fmt.Fprintf(w, "| %s | %s | error: %v | |\n", m.Target.Name, m.Target.Algorithm, m.Err)
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.2f |\n", m.Target.Name, m.Target.Algorithm, m.BytesPerKey, m.KeysPerID)
		}
	}
	r.writeRatios(w)
	for _, res := range r.Results {
		if res.Stats.FirstErr != nil {
			fmt.Fprintf(w, "\nFirst error of %s, %s, concurrency %d (%d errors): %v\n",
				res.Target.Label(), res.Scenario, res.Concurrency, res.Stats.Errors, res.Stats.FirstErr)
		}
	}
	if r.Duration > 0 {
		fmt.Fprintf(w, "\nWhole comparison took %s.\n", r.Duration.Round(time.Second))
	}
}

func scenarioTitle(sc Scenario) string {
	switch sc {
	case ScenarioSpread:
		return "100k keys (prepared before timing, never refused)"
	case ScenarioHot:
		return "One hot key (limit high enough that nothing is refused)"
	}
	return "Refused hot key (10 per hour: every timed decision is a refusal)"
}

// writeRatios compares Sluice's GCRA and token bucket (the algorithms of
// the speed goal) with the fastest peer of the same scenario and
// concurrency.
func (r *Report) writeRatios(w io.Writer) {
	type cell struct {
		sc Scenario
		c  int
	}
	var cells []cell
	seen := map[cell]bool{}
	best := map[cell]Result{}
	for _, res := range r.Results {
		k := cell{res.Scenario, res.Concurrency}
		if !seen[k] {
			seen[k] = true
			cells = append(cells, k)
		}
		if !strings.HasPrefix(res.Target.Name, "sluice") { // Sluice on either client is not a peer
			if b, ok := best[k]; !ok || res.Stats.Rate() > b.Stats.Rate() {
				best[k] = res
			}
		}
	}
	header := false
	for _, k := range cells {
		peer, ok := best[k]
		if !ok {
			continue
		}
		for _, res := range r.Results {
			if res.Target.Name != "sluice" || res.Scenario != k.sc || res.Concurrency != k.c ||
				res.Target.Algorithm != "gcra" && res.Target.Algorithm != "token_bucket" {
				continue
			}
			if !header {
				header = true
				fmt.Fprintf(w, "\n### Sluice vs the fastest peer in the same run\n\n")
				fmt.Fprintln(w, "| scenario | conc | sluice algorithm | decisions/s | fastest peer | peer decisions/s | ratio | sluice p99 | peer p99 |")
				fmt.Fprintln(w, "|---|---:|---|---:|---|---:|---:|---:|---:|")
			}
			ratio := 0.0
			if pr := peer.Stats.Rate(); pr > 0 {
				ratio = res.Stats.Rate() / pr
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %.2fx | %s | %s |\n",
				k.sc, k.c, res.Target.Algorithm, FormatRate(res.Stats.Rate()), peer.Target.Name, FormatRate(peer.Stats.Rate()),
				ratio, FormatDuration(res.Stats.Latency.Quantile(0.99)), FormatDuration(peer.Stats.Latency.Quantile(0.99)))
		}
	}
}
