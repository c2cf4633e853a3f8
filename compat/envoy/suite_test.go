// Package envoy_test runs envoyproxy/ratelimit's own black-box tests
// against the sluice serve binary: its test/integration Go cases (through
// gRPC) and its integration-test/scripts (through an emulation of the
// Envoy of examples/envoy/proxy.yaml). testdata/upstream holds upstream's
// files at the pinned commit (see testdata/upstream/UPSTREAM), unchanged
// but for the two stand-in packages there (the runner, which starts
// sluice serve with a test's settings as environment variables, and
// memcached).
package envoy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notApplicable are upstream's cases that test what Sluice does not
// have, with the reason.
// The memcache tests start memcached before their cases, and are counted
// whole: memcached is not installed, so their 6 cases never start.
var notApplicable = map[string]string{
	"TestBasicConfigMemcache":            "memcache backend, 3 cases (BACKEND_TYPE=memcache is refused at start)",
	"TestConfigMemcacheWithMaxIdleConns": "memcache backend, 2 cases",
	"TestMultiNodeMemcache":              "memcache backend, 1 case",
	"Test_mTLSSetup":                     "tests the suite's own certificate helper, not the service",
}

// pendingRefusals are the variables whose refusal at start a case may
// still meet, as docs/migrating-from-envoy-ratelimit.md lists them: what
// Sluice does not support yet. None is left (REDIS_PERSECOND,
// GRPC_SERVER_USE_TLS and CONFIG_TYPE=GRPC_XDS_SOTW are supported).
// A case refused for any other reason fails the harness, and so does a
// case that starts and then fails. Once Sluice supports one, its cases
// start and must pass.
var pendingRefusals []string

// caseResult is one leaf case of upstream's suite.
type caseResult struct {
	name    string
	action  string // pass, fail, skip
	output  strings.Builder
	refused string // the binary's refusal, from the case or its parents
	parent  bool
	// start and end are the wall times of the case's first runner start
	// and last runner stop (the runner prints them); zero if none.
	start, end time.Time
	rerun      string // why the case was re-run, and its first attempt's outcome
}

// straddles reports whether a minute edge (which every hour edge also
// is) fell between the case's first runner start and its last stop: the
// minute and hour limits of upstream's cases have clock-aligned windows,
// as upstream's own, so a counter restarts partway through such a case.
func (c *caseResult) straddles() bool {
	return !c.start.IsZero() && !c.end.IsZero() && !c.start.Truncate(time.Minute).Equal(c.end.Truncate(time.Minute))
}

// span is the case's wall-time span, for the log.
func (c *caseResult) span() string {
	if c.start.IsZero() || c.end.IsZero() {
		return "no runner span"
	}
	s := fmt.Sprintf("%s-%s (%.1fs)", c.start.UTC().Format("15:04:05.0"), c.end.UTC().Format("15:04:05.0"), c.end.Sub(c.start).Seconds())
	if c.straddles() {
		s += " straddles the minute edge " + c.end.Truncate(time.Minute).UTC().Format("15:04")
	}
	return s
}

func TestUpstreamIntegration(t *testing.T) {
	t.Parallel() // the other of TestUpstreamIntegration and TestUpstreamScripts mostly waits
	require(t, "valkey-server", "bash scripts/install-valkey.sh (from the repository root)")
	require(t, "valkey-cli", "bash scripts/install-valkey.sh (from the repository root)")
	lockPorts(t)
	freeOf(t, append([]int{6383, 6380, 6384, 6385, 8082, 8083, 8084, 18000}, fleetPorts...)...)
	bin := buildSluice(t)
	work := t.TempDir()
	copyTree(t, filepath.Join("testdata", "upstream"), work)
	projectDir := t.TempDir()
	startFleet(t, projectDir, work)
	links := redisServerLink(t)

	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "SLUICE_BIN="+bin, "PROJECT_DIR="+projectDir,
		"SSL_CERT_FILE="+filepath.Join(projectDir, "cert.pem"), "PATH="+links+string(os.PathListSeparator)+os.Getenv("PATH"))
	testBin := filepath.Join(t.TempDir(), "integration.test")
	build := exec.Command("go", "test", "-c", "-tags", "integration", "-o", testBin, "./test/integration")
	build.Dir, build.Env = work, env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building upstream's suite: %v\n%s", err, out)
	}
	list := exec.Command(testBin, "-test.list", ".*")
	list.Dir, list.Env = filepath.Join(work, "test", "integration"), env
	names, err := list.Output()
	if err != nil {
		t.Fatalf("listing upstream's cases: %v", err)
	}
	var cases []*caseResult
	var raw bytes.Buffer
	for _, top := range strings.Fields(string(names)) {
		cases = append(cases, runTop(t, testBin, top, list.Dir, env, &raw)...)
	}
	for i, c := range cases {
		if classify(c) != "failing" || !c.straddles() {
			continue
		}
		cases[i] = rerunStraddling(t, testBin, c, list.Dir, env, &raw)
	}
	if p := os.Getenv("SLUICE_COMPAT_RAW"); p != "" {
		os.WriteFile(p, raw.Bytes(), 0o644)
	}
	if len(cases) == 0 {
		t.Fatalf("upstream's suite ran no case:\n%s", tail(raw.String(), 4000))
	}
	report(t, cases)
}

// runTop runs upstream's top-level test top, each run in a process group
// of its own, ended with what it started when it ends. A case that
// panics ends its process (upstream's cases index into the response
// without checking it): the run is repeated skipping the cases already
// run, until top runs to its end.
func runTop(t *testing.T, testBin, top, dir string, env []string, raw *bytes.Buffer) []*caseResult {
	t.Helper()
	var done []*caseResult
	seen := map[string]bool{}
	for attempt := 0; attempt < 20; attempt++ {
		args := []string{"tool", "test2json", "-t", testBin, "-test.v=test2json", "-test.count=1", "-test.timeout=5m", "-test.run", "^" + top + "$"}
		if len(seen) > 0 {
			var subs []string
			for n := range seen {
				if n == top {
					continue
				}
				subs = append(subs, regexp.QuoteMeta(strings.TrimPrefix(n, top+"/")))
			}
			sort.Strings(subs)
			args = append(args, "-test.skip", "^"+top+"$/^("+strings.Join(subs, "|")+")$")
		}
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, _ := cmd.Output()
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		raw.Write(out)
		cases, finished := parseEvents(t, out)
		fresh := 0
		for _, c := range cases {
			if !seen[c.name] {
				seen[c.name] = true
				done = append(done, c)
				fresh++
			}
		}
		if finished || fresh == 0 || len(cases) == 1 && cases[0].name == top {
			break
		}
	}
	// A rerun that skips every subtest reports the top-level test as a
	// leaf: it is not a case when it has subtests.
	var leaves []*caseResult
	for _, c := range done {
		if c.name != top || len(done) == 1 {
			leaves = append(leaves, c)
		}
	}
	return leaves
}

// rerunStraddling runs failing case c again, once, because a minute
// edge fell inside it: its runner first waits for the next minute edge
// unless twice the first attempt's span (and 5s) remains before it. The
// re-run's outcome is the case's; a re-run that straddles again, or a
// case that failed without straddling, is not re-run.
func rerunStraddling(t *testing.T, testBin string, c *caseResult, dir string, env []string, raw *bytes.Buffer) *caseResult {
	t.Helper()
	align := 2*c.end.Sub(c.start).Seconds() + 5
	if align > 55 {
		align = 55
	}
	var parts []string
	for _, p := range strings.Split(c.name, "/") {
		parts = append(parts, "^"+regexp.QuoteMeta(p)+"$")
	}
	cmd := exec.Command("go", "tool", "test2json", "-t", testBin, "-test.v=test2json", "-test.count=1", "-test.timeout=5m", "-test.run", strings.Join(parts, "/"))
	cmd.Dir, cmd.Env = dir, append(append([]string(nil), env...), fmt.Sprintf("SLUICE_COMPAT_ALIGN=%.1f", align))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.Output()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	raw.Write(out)
	why := fmt.Sprintf("re-run: its first attempt failed and straddled a minute edge, %s", c.span())
	leaves, _ := parseEvents(t, out)
	for _, r := range leaves {
		if r.name == c.name {
			r.rerun = why
			t.Logf("upstream's %s %s; the re-run: %s, %s\nthe first attempt's output:\n%s", c.name, why, r.action, r.span(), tail(c.output.String(), 2000))
			return r
		}
	}
	c.rerun = why + "; the re-run did not run it:\n" + tail(string(out), 2000)
	t.Logf("upstream's %s %s", c.name, c.rerun)
	return c
}

// parseEvents reads go test -json's events into leaf cases, each with the
// refusal printed in it or in its parents.
func parseEvents(t *testing.T, out []byte) (leaves []*caseResult, finished bool) {
	t.Helper()
	byName := map[string]*caseResult{}
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var ev struct{ Action, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.Test == "" {
			finished = finished || ev.Action == "pass" || ev.Action == "fail" && !strings.Contains(string(out), "panic: ")
			continue
		}
		c := byName[ev.Test]
		if c == nil {
			c = &caseResult{name: ev.Test}
			byName[ev.Test] = c
			order = append(order, ev.Test)
			if i := strings.LastIndex(ev.Test, "/"); i >= 0 {
				if p := byName[ev.Test[:i]]; p != nil {
					p.parent = true
					c.refused = p.refused
				}
			}
		}
		switch ev.Action {
		case "output":
			c.output.WriteString(ev.Output)
			if _, msg, ok := strings.Cut(ev.Output, "SLUICE-COMPAT-REFUSED: "); ok {
				c.refused = strings.TrimSpace(msg)
			}
			if _, ns, ok := strings.Cut(ev.Output, "SLUICE-COMPAT-SPAN-START "); ok && c.start.IsZero() {
				if n, err := strconv.ParseInt(strings.TrimSpace(ns), 10, 64); err == nil {
					c.start = time.Unix(0, n)
				}
			}
			if _, ns, ok := strings.Cut(ev.Output, "SLUICE-COMPAT-SPAN-END "); ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(ns), 10, 64); err == nil {
					c.end = time.Unix(0, n)
				}
			}
		case "pass", "fail", "skip":
			c.action = ev.Action
		}
	}
	for _, n := range order {
		if c := byName[n]; !c.parent {
			leaves = append(leaves, c)
		}
	}
	return leaves, finished
}

// report classifies the cases, logs the counts, and fails for every case
// that neither passes, nor is refused for a pending variable, nor is not
// applicable.
func report(t *testing.T, cases []*caseResult) {
	t.Helper()
	counts := map[string]int{}
	var lines []string
	for _, c := range cases {
		kind := classify(c)
		counts[kind]++
		line := fmt.Sprintf("%-12s %s  [%s]", kind, c.name, c.span())
		if c.rerun != "" {
			line += " (" + strings.SplitN(c.rerun, "\n", 2)[0] + ")"
		}
		lines = append(lines, line)
		switch kind {
		case "failing":
			t.Errorf("upstream's %s fails against sluice serve:\n%s", c.name, tail(c.output.String(), 4000))
		case "refused?":
			t.Errorf("upstream's %s: sluice serve refused to start for a reason that is not a pending difference: %s", c.name, c.refused)
		}
	}
	sort.Strings(lines)
	t.Logf("upstream's test/integration against sluice serve, case by case:\n%s", strings.Join(lines, "\n"))
	var byVar []string
	for _, v := range pendingRefusals {
		n := 0
		for _, c := range cases {
			if classify(c) == "refused" && strings.Contains(c.refused, v+"=") {
				n++
			}
		}
		byVar = append(byVar, fmt.Sprintf("%s %d", v, n))
	}
	reruns := 0
	for _, c := range cases {
		if c.rerun != "" {
			reruns++
		}
	}
	t.Logf("applicable: %d passing, %d refused at start (a case may name several: %s), %d failing; not applicable: %d; re-run once for straddling a minute edge: %d",
		counts["passing"], counts["refused"], strings.Join(byVar, ", "), counts["failing"]+counts["refused?"], counts["n/a"], reruns)
	for n := range notApplicable {
		found := false
		for _, c := range cases {
			found = found || c.name == n
		}
		if !found {
			t.Errorf("%s is listed as not applicable but upstream's suite has no such case", n)
		}
	}
}

func classify(c *caseResult) string {
	if _, ok := notApplicable[c.name]; ok {
		return "n/a"
	}
	if c.refused != "" {
		for _, v := range pendingRefusals {
			if strings.Contains(c.refused, v) {
				return "refused"
			}
		}
		return "refused?"
	}
	if c.action == "pass" {
		return "passing"
	}
	return "failing"
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
