package verify

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/doctor"
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
	checks := rep.writePolicies(w)
	fmt.Fprintf(w, "\nvalkey settings (doctor's checks of what loses counts):\n")
	for _, f := range rep.Settings {
		fmt.Fprintln(w, settingLine(f))
	}
	fmt.Fprintln(w)
	rep.writeVerdict(w, checks)
	rep.writeCaveats(w)
}

// writePolicies writes a heading per policy and a line per check, and
// returns the number of checks.
func (rep *Report) writePolicies(w io.Writer) (checks int) {
	for _, p := range rep.Policies {
		fmt.Fprintln(w, policyHeading(p))
		for _, c := range p.Checks {
			checks++
			fmt.Fprintln(w, checkLine(c))
		}
	}
	return checks
}

// policyHeading is the heading of a policy's checks, after a blank line.
func policyHeading(p *PolicyReport) string {
	shadow := ""
	if p.Shadow {
		shadow = ", shadow (its limit checked as if enforced)"
	}
	return fmt.Sprintf("\npolicy %s: %s, on_failure %s, timeout %s%s", p.Name, p.Rule, p.FailMode, p.Timeout, shadow)
}

// writeVerdict writes the PASS or FAIL line, of checks checks, with the
// cleanup's outcome.
func (rep *Report) writeVerdict(w io.Writer, checks int) {
	cleanup := fmt.Sprintf("%d scratch keys deleted", rep.KeysDeleted)
	if rep.CleanupError != "" {
		cleanup += "; cleanup failed: " + rep.CleanupError
	}
	took := rep.Elapsed.Round(10 * time.Millisecond)
	if rep.Passed {
		fmt.Fprintf(w, "PASS: %d policies, %d checks passed in %v, and %d settings checks; %s\n", len(rep.Policies), checks, took, len(rep.Settings), cleanup)
	} else {
		fmt.Fprintf(w, "FAIL: %d of %d checks failed in %v: %s; %s\n", len(rep.Failed), checks+len(rep.Settings), took, strings.Join(rep.Failed, ", "), cleanup)
	}
}

// writeCaveats writes what holds only until a restart, and what could not
// be checked.
func (rep *Report) writeCaveats(w io.Writer) {
	for _, c := range rep.Caveats {
		fmt.Fprintf(w, "BUT the limits hold only until a restart: %s\n", c)
	}
	if len(rep.NotChecked) > 0 {
		fmt.Fprintf(w, "NOT CHECKED (the server did not let verify read them; check them in its configuration or your provider's settings): %s\n", strings.Join(rep.NotChecked, ", "))
	}
}

// settingLine is one of doctor's findings as a line of text.
func settingLine(f *doctor.Finding) string {
	verdict := settingVerdict(f)
	node := ""
	if f.Node != "" {
		node = " [" + f.Node + "]"
	}
	s := fmt.Sprintf("  %s %-16s %s%s", verdict, f.Check, f.Message, node)
	if f.Fix != "" && f.Severity >= doctor.Unknown {
		s += "\n       fix: " + f.Fix
	}
	return s
}

// settingVerdict judges one of doctor's findings for verify: an evicting
// maxmemory-policy (now, or once maxmemory is set) fails, since an
// evicted key starts again with its full limit; persistence losing long
// windows' counts is a caveat (the limits hold until a restart, a cost
// some deployments choose); a setting that could not be read is not
// checked.
func settingVerdict(f *doctor.Finding) string {
	switch {
	case f.Severity == doctor.Unknown:
		return "NOT CHECKED"
	case f.Check == "maxmemory-policy" && f.Severity >= doctor.Warning:
		return "FAIL"
	case f.Severity >= doctor.Warning:
		return "CAVEAT"
	}
	return "PASS"
}
