package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docSimulate returns the arguments of docs/simulate.md's first simulate
// example (a shell command over several lines).
// docSimulate returns the arguments of docs/simulate.md's commands.
func docSimulate(t *testing.T) [][]string {
	t.Helper()
	readme, err := os.ReadFile("../../docs/simulate.md")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, m := range regexp.MustCompile(`go run ./cmd/sluice simulate((?:[^\n]*\\\n)*[^\n]*)`).FindAllSubmatch(readme, -1) {
		out = append(out, append([]string{"simulate"}, strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))...))
	}
	if len(out) < 2 {
		t.Fatalf("docs/simulate.md has %d `go run ./cmd/sluice simulate` commands, want 2", len(out))
	}
	return out
}

// runDocSimulate runs a command of docs/simulate.md, which must write
// wantOut, into a temporary directory, checks that its CSV and picture are
// the committed ones, and returns its output.
func runDocSimulate(t *testing.T, args []string, wantOut string) string {
	t.Helper()
	var out string
	for i, a := range args {
		if a == "--out" && i+1 < len(args) {
			out = args[i+1]
			args[i+1] = filepath.Join(t.TempDir(), "run")
		}
	}
	if out != wantOut {
		t.Fatalf("docs/simulate.md's command writes %q, want %s", out, wantOut)
	}
	for i, a := range args {
		if strings.HasPrefix(a, "examples/") {
			args[i] = "../../" + a
		}
	}
	code, stdout, stderr := runCmd(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	for _, ext := range []string{".csv", ".png"} {
		got, err := os.ReadFile(args[indexOf(args, "--out")+1] + ext)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile("../../" + out + ext)
		if err != nil {
			t.Fatal(err)
		}
		if ext == ".png" {
			if _, err := png.Decode(bytes.NewReader(got)); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Errorf("the docs/simulate.md command's %s differs from the committed %s%s: run it again", ext, out, ext)
		}
	}
	return stdout
}

// TestSimulateDocExample: docs/simulate.md's picture and numbers are what
// its command makes.
func TestSimulateDocExample(t *testing.T) {
	stdout := runDocSimulate(t, docSimulate(t)[0], "docs/simulate/five-algorithms")
	// The five algorithms, as docs/algorithms.md's output of examples/algorithms
	// says: the fixed window lets both bursts through.
	for _, line := range []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra"} {
		if !strings.Contains(stdout, line) {
			t.Errorf("output lacks %s: %s", line, stdout)
		}
	}
	if !regexp.MustCompile(`fixed_window\s+fixed_window\(limit=10, window=1s\)\s+1\s+40\s+21\s+19`).MatchString(stdout) {
		t.Errorf("fixed window: want 21 of 40 allowed:\n%s", stdout)
	}
}

// TestSimulateInFlightDocExample: docs/simulate.md's in_flight picture and
// numbers are what its command makes, and never more than the limit held.
func TestSimulateInFlightDocExample(t *testing.T) {
	stdout := runDocSimulate(t, docSimulate(t)[1], "docs/simulate/in-flight")
	if !regexp.MustCompile(`exports: at most 5 leases held at once by one key \(limit 5\); \d+ released, [1-9]\d* holders crashed`).MatchString(stdout) {
		t.Errorf("want the lease summary, with crashed holders:\n%s", stdout)
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func TestSimulateCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "run")
	log := filepath.Join(dir, "decisions.jsonl")
	code, stdout, stderr := runCmd("simulate", "--policy", "name=api,algorithm=gcra,burst=5,rate=5/s",
		"--traffic", "steady:8/s", "--traffic", "retry:10/s,key=mobile", "--duration", "20s", "--out", out, "--decisions", log)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	// The run's size is said up front, before the results.
	if i, j := strings.Index(stdout, "simulating 1 policy over 20s in buckets of 100ms: about 560 decisions"), strings.Index(stdout, "done in"); i < 0 || j < i {
		t.Errorf("no size up front:\n%s", stdout)
	}
	for _, ext := range []string{".csv", ".svg", ".png"} {
		if st, err := os.Stat(out + ext); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", ext, err)
		}
	}
	// Replay under a looser limit: refusals flip to allowed.
	changed := filepath.Join(dir, "changed.yaml")
	os.WriteFile(changed, []byte("policies:\n  - {name: api, algorithm: gcra, burst: 5, rate: 20/s}\n"), 0o644)
	code, stdout, stderr = runCmd("simulate", "--replay", log, "--config", changed, "--out", out)
	if code != 0 || !regexp.MustCompile(`api\s+gcra\(burst=5, interval=50ms\)\s+\d+\s+\d+\s+\d+\s+0\s+[1-9]\d*\s+2`).MatchString(stdout) {
		t.Errorf("replay: exit %d:\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(out + "-flips.csv"); err != nil {
		t.Error(err)
	}

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--traffic", "steady:1/s"}, 2, "no policies"},
		{[]string{"--policy", "algorithm=gcra,burst=1,rate=1/s"}, 2, "no traffic"},
		{[]string{"--policy", "algorithm=gcra,burst=1,rate=1/s", "--traffic", "steady:1"}, 2, `"steady:1"`},
		{[]string{"--policy", "algorithm=gcra,burst=1,rate=1/s", "--traffic", "steady:1000/s", "--duration", "7d"}, 1, "--max-decisions"},
		{[]string{"--policy", "algorithm=gcra,burst=1,rate=1/s", "--traffic", "steady:1/s", "--duration", "10"}, 2, "--duration"},
		{[]string{"--policy", "algorithm=gcra,burst=1,rate=1/s", "--traffic", "steady:1/s", "--format", "gif"}, 2, "gif"},
		{[]string{"--replay", log}, 2, "--config"},
		{[]string{"--replay", log, "--config", changed, "--traffic", "steady:1/s"}, 2, "--traffic does not apply"},
	} {
		code, stdout, stderr := runCmd(append([]string{"simulate", "--out", filepath.Join(dir, "bad")}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("%v: exit %d, stderr %q, want %d and %q", c.args, code, stderr, c.code, c.msg)
		}
		if c.code == 1 && strings.Contains(stdout, "done") {
			t.Errorf("%v: ran before refusing: %s", c.args, stdout)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "bad*")); len(matches) > 0 {
		t.Errorf("refused runs wrote %v", matches)
	}
}

// TestSimulateGrantsCommand: --processes runs a policy with grants over N
// simulated processes beside the exact policy, both in the table; a bad
// count is refused, and --processes does not apply to --replay.
func TestSimulateGrantsCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hot.yaml")
	os.WriteFile(cfg, []byte("policies:\n  - {name: hot, algorithm: gcra, burst: 100, rate: 500/s, grants: auto}\n"), 0o644)
	out := filepath.Join(dir, "run")
	code, stdout, stderr := runCmd("simulate", "--config", cfg, "--traffic", "poisson:3000/s", "--duration", "2s", "--processes", "3", "--out", out, "--format", "csv")
	if code != 0 || !regexp.MustCompile(`(?m)^hot \(grants, 3 processes\)\s+gcra`).MatchString(stdout) || !regexp.MustCompile(`(?m)^hot\s+gcra`).MatchString(stdout) {
		t.Fatalf("exit %d:\n%s%s", code, stdout, stderr)
	}
	csv, _ := os.ReadFile(out + ".csv")
	if !strings.Contains(string(csv), "hot (grants, 3 processes)") {
		t.Errorf("the CSV lacks the fleet")
	}
	if code, _, stderr := runCmd("simulate", "--config", cfg, "--traffic", "steady:1/s", "--processes", "-1", "--out", out); code == 0 || !strings.Contains(stderr, "--processes") {
		t.Errorf("--processes -1: exit %d %s", code, stderr)
	}
	if code, _, stderr := runCmd("simulate", "--replay", out+".csv", "--config", cfg, "--processes", "2", "--out", out); code != 2 || !strings.Contains(stderr, "--processes does not apply") {
		t.Errorf("--processes with --replay: exit %d %s", code, stderr)
	}
}
