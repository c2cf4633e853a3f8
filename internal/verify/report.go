package verify

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// checkLine is one check as a line of text.
func checkLine(c *Check) string {
	verdict := "PASS"
	if !c.Passed {
		verdict = "FAIL"
	}
	s := fmt.Sprintf("  %s %-12s %s", verdict, c.Name, c.Detail)
	for _, f := range c.Failures {
		s += "\n       - " + f
	}
	return s
}

// WriteText writes the report for people: a heading per policy, a line
// per check with its figures, and the verdict.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "valkey %s (%s), scratch prefix %s\n", rep.Valkey, rep.Mode, rep.Prefix)
	checks, failed := 0, 0
	for _, p := range rep.Policies {
		shadow := ""
		if p.Shadow {
			shadow = ", shadow (its limit checked as if enforced)"
		}
		fmt.Fprintf(w, "\npolicy %s: %s, on_failure %s, timeout %s%s\n", p.Name, p.Rule, p.FailMode, p.Timeout, shadow)
		for _, c := range p.Checks {
			checks++
			if !c.Passed {
				failed++
			}
			fmt.Fprintln(w, checkLine(c))
		}
	}
	fmt.Fprintln(w)
	cleanup := fmt.Sprintf("%d scratch keys deleted", rep.KeysDeleted)
	if rep.CleanupError != "" {
		cleanup += "; cleanup failed: " + rep.CleanupError
	}
	took := rep.Elapsed.Round(10 * time.Millisecond)
	if rep.Passed {
		fmt.Fprintf(w, "PASS: %d policies, %d checks passed in %v; %s\n", len(rep.Policies), checks, took, cleanup)
		return
	}
	fmt.Fprintf(w, "FAIL: %d of %d checks failed in %v: %s; %s\n", failed, checks, took, strings.Join(rep.Failed, ", "), cleanup)
}
