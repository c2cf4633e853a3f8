package main

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// TestParseFormats: --format takes any of csv, svg and png, and refuses
// anything else by name.
func TestParseFormats(t *testing.T) {
	want, err := parseFormats(" csv,png ")
	if err != nil || len(want) != 2 || !want["csv"] || !want["png"] || want["svg"] {
		t.Errorf("csv,png: %v %v", want, err)
	}
	for _, bad := range []string{"", "csv,", "jpg", "csv,gif"} {
		if _, err := parseFormats(bad); err == nil || !strings.Contains(err.Error(), "--format: unknown") {
			t.Errorf("%q: %v, want --format: unknown", bad, err)
		}
	}
}

// TestSimulateFlagSteps: --replay needs --config and refuses the flags it
// has no use for, each by name; the durations must be positive.
func TestSimulateFlagSteps(t *testing.T) {
	parse := func(args ...string) *simulateFlags {
		t.Helper()
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f := defineSimulateFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	if err := parse("--replay", "log").checkReplay(); err == nil || !strings.Contains(err.Error(), "needs --config") {
		t.Errorf("--replay alone: %v", err)
	}
	if err := parse("--replay", "log", "--config", "c").checkReplay(); err != nil {
		t.Errorf("--replay --config: %v", err)
	}
	for _, fl := range []string{"--traffic=steady:1/s", "--trace=x", "--policy=algorithm=gcra", "--decisions=d", "--duration=1s", "--bucket=1s", "--rate-window=1s", "--watch=k"} {
		name, _, _ := strings.Cut(fl, "=")
		if err := parse("--replay", "log", "--config", "c", fl).checkReplay(); err == nil || err.Error() != name+" does not apply to --replay" {
			t.Errorf("--replay with %s: %v", fl, err)
		}
	}
	opts, err := parse("--duration", "2s", "--bucket", "10ms", "--traffic", "burst:3@1s").options(nil)
	if err != nil || opts.Duration != 2*time.Second || opts.Bucket != 10*time.Millisecond || opts.RateWindow != 0 || len(opts.Traffic) != 1 {
		t.Errorf("options: %+v %v", opts, err)
	}
	for _, fl := range []string{"--duration=0s", "--bucket=-1s", "--rate-window=soon"} {
		name, _, _ := strings.Cut(fl, "=")
		if _, err := parse(fl).options(nil); err == nil || !strings.HasPrefix(err.Error(), name+": want a positive duration") {
			t.Errorf("%s: %v", fl, err)
		}
	}
}

// TestKeysFlagsCheck: sluice keys refuses contradicting flags.
func TestKeysFlagsCheck(t *testing.T) {
	for _, tc := range []struct {
		f    keysFlags
		want string
	}{
		{keysFlags{limit: 1}, ""},
		{keysFlags{limit: 0}, "--limit must be at least 1"},
		{keysFlags{limit: 1, names: true, find: "h:ab"}, "give --names or --find, not both"},
		{keysFlags{limit: 1, find: "ab"}, "--find takes a hashed key"},
		{keysFlags{limit: 1, find: "h:ab"}, ""},
	} {
		err := tc.f.check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.f, err, tc.want)
		}
	}
}

// TestKeyCensus: keys are grouped by limiter:state, the configured groups
// first and the others as first seen; a key of fewer parts is "(other)";
// expiring keys give the TTL spread, the others are counted apart; the
// listing holds the key as counted.
func TestKeyCensus(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	c := newKeyCensus(cfg, "", 10)
	configured := len(c.order)
	if configured != len(cfg.Policies) {
		t.Fatalf("%d groups for %d policies", configured, len(cfg.Policies))
	}
	c.list = &keyListing{}
	add := func(key string, ttl, mem int64) {
		parts := strings.SplitN(strings.TrimPrefix(key, c.prefix+":"), ":", 3)
		c.count(c.group(parts), key, parts, ttl, mem)
	}
	p := cfg.Prefix
	add(p+":gone:fixed_window:{a%3Ab}", 3000, 100)
	add(p+":gone:fixed_window:{c}", 1000, 50)
	add(p+":gone:fixed_window:{d}", -1, 10)
	add(p+":stray", 5, 1)
	out := c.result()
	if len(out) != configured+2 {
		t.Fatalf("%d groups, want %d configured and 2 more", len(out), configured)
	}
	g := out[configured]
	if g.Policy != "" || g.Limiter != "gone" || g.State != "fixed_window" || g.Keys != 3 || g.Bytes != 160 || g.NoTTL != 1 ||
		g.TTLMin != 1000 || g.TTLMed != 3000 || g.TTLMax != 3000 {
		t.Errorf("group of gone: %+v", g)
	}
	if o := out[configured+1]; o.Limiter != "(other)" || o.State != "" || o.Keys != 1 {
		t.Errorf("group of a short key: %+v", o)
	}
	if l := c.list.keys; len(l) != 4 || l[0].Key != "a:b" || !l[0].Recoverable || l[3].Recoverable {
		t.Errorf("listing: %+v", l)
	}
}
