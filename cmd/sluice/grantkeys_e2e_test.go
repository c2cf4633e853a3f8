package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/valkeytest"
)

// TestE2EGrantsInspectReset: through the binary on a real Valkey, with a
// sluice serve holding grants of a key: inspect shows the key's grant
// state (units available at Valkey, each holder with its units and the
// time its grant has left), whose numbers add up to the limit with what
// was spent; reset refills the level but for the units held, which the
// holder keeps: after it, the holder and Valkey together admit the limit
// less the units the holder spent since its last call, never more.
func TestE2EGrantsInspectReset(t *testing.T) {
	v := valkeytest.Start(t)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, "policies:\n  - {name: hot, algorithm: gcra, burst: 20, rate: 1/h, grants: auto, grant_life: 1h, grant_period: 30m}\n")
	p := serve(t, nil, "--config", cfg, "--valkey", v.Addr)
	waitReady(t, p)
	spent := checkSeq(t, p.HTTP, "hot", "k", 12)
	if spent != 12 {
		t.Fatalf("allowed %d of 12", spent)
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := sluiceCmd(t, append(args[:1:1], append([]string{"--config", cfg, "--valkey", v.Addr}, args[1:]...)...)...)
		noStackTrace(t, strings.Join(args, " "), stderr)
		return code, stdout, stderr
	}
	inspect := func() keyState {
		t.Helper()
		code, stdout, stderr := run("inspect", "--json", "hot", "k")
		var st keyState
		if err := json.Unmarshal([]byte(stdout), &st); err != nil || code != 0 || st.Grants == nil {
			t.Fatalf("inspect --json: exit %d, %v\n%s%s", code, err, stdout, stderr)
		}
		return st
	}
	st := inspect()
	g := st.Grants
	// Valkey counts for the holder the units it held at its last call
	// (Held), some spent since: Available + Held covers what the holder
	// has not spent, and never more than the limit.
	unspent := 20 - spent - g.Available // granted and not spent
	if len(g.Holders) != 1 || g.Held != g.Holders[0].Units || g.Held == 0 || g.Held < unspent || g.Available+g.Held > 20 ||
		g.Holders[0].EndsInMS <= 3_500_000 || g.Holders[0].EndsInMS > 3_600_000 || !strings.Contains(st.StoreKey, ":g1.") {
		t.Fatalf("inspect: %+v %+v", st, g)
	}
	held := g.Held
	if code, stdout, _ := run("inspect", "hot", "k"); code != 0 || !strings.Contains(stdout, "held by 1 holder(s)") || !strings.Contains(stdout, "units, grant ends in 59m") {
		t.Fatalf("inspect: exit %d\n%s", code, stdout)
	}
	code, stdout, stderr := run("reset", "hot", "k")
	if code != 0 || !strings.Contains(stdout, "stay theirs until their grants end") || !strings.Contains(stderr, `"had_state":true`) {
		t.Fatalf("reset: exit %d\n%s%s", code, stdout, stderr)
	}
	if st := inspect(); st.Grants.Available != 20-held || st.Grants.Held != held {
		t.Fatalf("after the reset: %+v, want %d available and %d held", st.Grants, 20-held, held)
	}
	// The holder spends what it has not spent, then what Valkey has: the
	// limit less the units it spent since its last call (still counted
	// held when the level was refilled), until the level refills.
	if got := checkSeq(t, p.HTTP, "hot", "k", 40); got != 20-held+unspent || got > 20 {
		t.Fatalf("after the reset: allowed %d of 40, want %d (20 less the %d spent since the holder's last call)", got, 20-held+unspent, held-unspent)
	}
	if code, _, stderr := run("inspect", "hot", "nokey"); code != 1 || !strings.Contains(stderr, "no state for key") {
		t.Fatalf("inspect of a key never used: exit %d %s", code, stderr)
	}
	// A replica that shuts down gives its units back.
	checkSeq(t, p.HTTP, "hot", "k2", 3)
	code, stdout, _ = run("inspect", "--json", "hot", "k2")
	var before keyState
	if err := json.Unmarshal([]byte(stdout), &before); err != nil || code != 0 || before.Grants.Held == 0 {
		t.Fatalf("inspect k2 before the shutdown: exit %d %v\n%s", code, err, stdout)
	}
	if code := p.Stop(); code != 0 {
		t.Fatalf("sluice serve exited %d", code)
	}
	code, stdout, _ = run("inspect", "--json", "hot", "k2")
	var after keyState
	if err := json.Unmarshal([]byte(stdout), &after); err != nil || code != 0 || after.Grants.Held != 0 || after.Grants.Available != 20-3 {
		t.Fatalf("inspect k2 after the shutdown: exit %d %v\n%s", code, err, stdout)
	}
}

// checkSeq sends n checks of policy and key one after the other and counts
// those allowed.
func checkSeq(t *testing.T, base, policy, key string, n int) (allowed int64) {
	t.Helper()
	for range n {
		code, m := post(t, base+"/v1/check", `{"policy":"`+policy+`","key":"`+key+`"}`)
		if code != 200 || m["degraded"] == true {
			t.Fatalf("check: %d %v", code, m)
		}
		if m["allowed"] == true {
			allowed++
		}
	}
	return allowed
}
