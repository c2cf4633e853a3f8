package benchmarks

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLegsSummary runs legs-summary.awk (envoy-bench.sh's LEGS=N summary)
// on random legs, some missing or with errors, and compares its output
// with a reference written here: the medians of each target over the
// rounds, each target's per-round ratios to target 0's leg, their medians,
// and the rounds in which both halves of the goal held.
func TestLegsSummary(t *testing.T) {
	awk, err := exec.LookPath("awk")
	if err != nil {
		t.Fatal("awk not found: install mawk or gawk (apt-get install mawk)")
	}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		rounds, n := 1+rng.IntN(9), 2+rng.IntN(3)
		names := make([]string, n)
		for k := range names {
			names[k] = fmt.Sprintf("target %d", k)
		}
		var in strings.Builder
		legs := map[string]summaryLeg{} // "proto k r"
		for r := range rounds {
			for _, p := range []string{"http", "grpc"} {
				for k := range n {
					if rng.IntN(12) == 0 {
						continue // a leg that did not run
					}
					l := summaryLeg{float64(rng.IntN(30000)), float64(rng.IntN(20000)) / 1000, float64(rng.IntN(90000)) / 1000, 0}
					if rng.IntN(10) == 0 {
						l.errs = 1
					}
					if k > 0 && rng.IntN(4) == 0 { // near the goal's edges
						b, ok := legs[fmt.Sprint(p, 0, r)]
						if ok {
							l.rps, l.p99 = 2*b.rps, b.p99/2
						}
					}
					legs[fmt.Sprint(p, k, r)] = l
					fmt.Fprintf(&in, "%d %s %d %.0f %.3f %.3f %d\n", r, p, k, l.rps, l.p50, l.p99, l.errs)
				}
			}
		}
		file := filepath.Join(t.TempDir(), "legs")
		if err := os.WriteFile(file, []byte(in.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(awk, "-v", "n="+strconv.Itoa(n), "-v", "names="+strings.Join(names, "\t")+"\t",
			"-f", "legs-summary.awk", file).CombinedOutput()
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, out)
		}
		// The legs as the file holds them (rounded as written).
		read := map[string]summaryLeg{}
		for line := range strings.Lines(in.String()) {
			f := strings.Fields(line)
			num := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v }
			read[f[1]+" "+f[2]+" "+f[0]] = summaryLeg{num(3), num(4), num(5), int(num(6))}
		}
		if got, want := string(out), legsSummaryReference(read, rounds, names); got != want {
			t.Fatalf("seed %d: legs\n%s\ngot\n%s\nwant\n%s", seed, in.String(), got, want)
		}
	}
}

// summaryLeg is one leg of a LEGS run: requests per second, p50 and p99
// in ms, and whether it had errors.
type summaryLeg struct {
	rps, p50, p99 float64
	errs          int
}

// legsSummaryReference is what legs-summary.awk should print for legs
// ("proto k round" to req/s, p50, p99, errors).
func legsSummaryReference(legs map[string]summaryLeg, rounds int, names []string) string {
	median := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		v = slices.Clone(v)
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	var b strings.Builder
	for _, p := range []string{"http", "grpc"} {
		fmt.Fprintf(&b, "\n%s, medians of %d rounds:\n", p, rounds)
		fmt.Fprintf(&b, "%-24s %10s %9s %9s\n", "service", "req/s", "p50 ms", "p99 ms")
		for k, name := range names {
			var rps, p50, p99 []float64
			errs := 0
			for r := range rounds {
				if l, ok := legs[fmt.Sprintf("%s %d %d", p, k, r)]; ok {
					rps, p50, p99 = append(rps, l.rps), append(p50, l.p50), append(p99, l.p99)
					errs += l.errs
				}
			}
			suffix := ""
			if errs > 0 {
				suffix = fmt.Sprintf("  (%d legs with errors)", errs)
			}
			fmt.Fprintf(&b, "%-24s %10.0f %9.2f %9.2f%s\n", name, median(rps), median(p50), median(p99), suffix)
		}
		for k := 1; k < len(names); k++ {
			var x, y []float64
			met := 0
			line := ""
			for r := range rounds {
				l, ok := legs[fmt.Sprintf("%s %d %d", p, k, r)]
				base, baseOK := legs[fmt.Sprintf("%s 0 %d", p, r)]
				if !ok || !baseOK || base.rps <= 0 || base.p99 <= 0 {
					continue
				}
				rx, ry := l.rps/base.rps, l.p99/base.p99
				x, y = append(x, rx), append(y, ry)
				if rx >= 2 && ry <= 0.5 {
					met++
				}
				line += fmt.Sprintf(" %.2fx/%.2f", rx, ry)
			}
			fmt.Fprintf(&b, "%s / envoyproxy/ratelimit, per round (req/s ratio / p99 ratio):%s\n", names[k], line)
			if len(x) == 0 {
				b.WriteString("  no round with both legs\n")
				continue
			}
			fmt.Fprintf(&b, "  median %.2fx, p99 %.2f; both halves of the goal held in %d of %d rounds\n", median(x), median(y), met, len(x))
		}
		last := len(names) - 1
		for k := 1; k < last; k++ {
			var x []float64
			line := ""
			for r := range rounds {
				l, ok := legs[fmt.Sprintf("%s %d %d", p, k, r)]
				noop, noopOK := legs[fmt.Sprintf("%s %d %d", p, last, r)]
				if !ok || !noopOK || noop.rps <= 0 {
					continue
				}
				x = append(x, l.rps/noop.rps)
				line += fmt.Sprintf(" %.0f%%", 100*x[len(x)-1])
			}
			fmt.Fprintf(&b, "%s / %s, per round (req/s):%s\n", names[k], names[last], line)
			if len(x) == 0 {
				b.WriteString("  no round with both legs\n")
				continue
			}
			fmt.Fprintf(&b, "  median %.0f%%\n", 100*median(x))
		}
	}
	return b.String()
}
