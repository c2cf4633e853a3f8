package simulate

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

func writeLog(t *testing.T, pols []*config.Policy, traffic ...string) (string, []logged) {
	t.Helper()
	var log bytes.Buffer
	plan, err := NewPlan(Options{Policies: pols, Traffic: mustTraffic(t, traffic...), Duration: 10 * time.Second, Decisions: &log, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plan.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "decisions.jsonl")
	if err := os.WriteFile(file, log.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, readLog(t, log.Bytes())
}

var replayTraffic = []string{"poisson:40/s,keys=5", "burst:30@2s,key=client-0", "retry:15/s,key=mobile"}

func TestReplaySameConfigFlipsNothing(t *testing.T) {
	pols := mustPolicies(t,
		"algorithm=fixed_window,limit=10,window=1s",
		"algorithm=sliding_log,limit=10,window=1s,count_rejected=true",
		"algorithm=sliding_window,limit=10,window=1s",
		"algorithm=token_bucket,burst=10,rate=10/s",
		"algorithm=gcra,burst=10,rate=10/s")
	file, lines := writeLog(t, pols, replayTraffic...)
	res, err := Replay(context.Background(), file, pols)
	if err != nil {
		t.Fatal(err)
	}
	if res.Decisions != int64(len(lines)) || len(res.Policies) != len(pols) || len(res.Missing) != 0 {
		t.Fatalf("%d decisions (log has %d), %d policies, missing %v", res.Decisions, len(lines), len(res.Policies), res.Missing)
	}
	for _, p := range res.Policies {
		if p.ToDeny != 0 || p.ToAllow != 0 || len(p.Keys) != 0 {
			t.Errorf("%s: %d allow→deny, %d deny→allow under the same configuration", p.Name, p.ToDeny, p.ToAllow)
		}
		if p.Before == 0 || p.Before == p.Decisions {
			t.Errorf("%s: %d of %d allowed: want some refusals for the test to mean something", p.Name, p.Before, p.Decisions)
		}
	}
}

func TestReplayChangedConfig(t *testing.T) {
	old := mustPolicies(t,
		"name=api,algorithm=token_bucket,burst=10,rate=10/s",
		"name=search,algorithm=sliding_window,limit=10,window=1s",
		"name=login,algorithm=sliding_log,limit=10,window=1s",
		"name=gone,algorithm=fixed_window,limit=10,window=1s")
	file, lines := writeLog(t, old, replayTraffic...)
	changed := mustPolicies(t,
		"name=api,algorithm=gcra,burst=5,rate=15/s",               // algorithm and numbers change
		"name=search,algorithm=sliding_window,limit=20,window=1s", // looser
		"name=login,algorithm=sliding_log,limit=10,window=1s,count_rejected=true")
	changed = append(changed, mustPolicies(t, "name=shadowed,algorithm=fixed_window,limit=1,window=1s")...)
	res, err := Replay(context.Background(), file, changed)
	if err != nil {
		t.Fatal(err)
	}
	if res.Missing["gone"] == 0 || len(res.Missing) != 1 {
		t.Errorf("missing %v, want gone's decisions", res.Missing)
	}
	// The reference: a real limiter per policy over the log.
	for _, pol := range changed[:3] {
		var now time.Time
		l, err := sluice.New(memstore.New(memstore.WithClock(func() time.Time { return now })), pol.Policy, sluice.WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		toDeny, toAllow := map[string]int64{}, map[string]int64{}
		var decisions int64
		for _, ln := range lines {
			if ln.policy != pol.Name {
				continue
			}
			decisions++
			now = ln.at
			r, err := l.AllowN(context.Background(), ln.key, ln.cost)
			if err != nil {
				t.Fatal(err)
			}
			if ln.allowed && !r.Allowed {
				toDeny[ln.key]++
			}
			if !ln.allowed && r.Allowed {
				toAllow[ln.key]++
			}
		}
		var got *ReplayPolicy
		for _, p := range res.Policies {
			if p.Name == pol.Name {
				got = p
			}
		}
		if got == nil || got.Decisions != decisions {
			t.Fatalf("%s: %+v, want %d decisions", pol.Name, got, decisions)
		}
		var wantDeny, wantAllow int64
		var keys []string
		for k, n := range toDeny {
			wantDeny += n
			keys = append(keys, k)
		}
		for k, n := range toAllow {
			wantAllow += n
			if toDeny[k] == 0 {
				keys = append(keys, k)
			}
		}
		if got.ToDeny != wantDeny || got.ToAllow != wantAllow || len(got.Keys) != len(keys) {
			t.Errorf("%s: %d→deny %d→allow over %d keys, want %d, %d over %d", pol.Name, got.ToDeny, got.ToAllow, len(got.Keys), wantDeny, wantAllow, len(keys))
		}
		for _, k := range got.Keys {
			if k.ToDeny != toDeny[k.Key] || k.ToAllow != toAllow[k.Key] {
				t.Errorf("%s key %q: %d→deny %d→allow, want %d, %d", pol.Name, k.Key, k.ToDeny, k.ToAllow, toDeny[k.Key], toAllow[k.Key])
			}
		}
		if !sort.SliceIsSorted(got.Keys, func(i, j int) bool {
			return got.Keys[i].ToDeny+got.Keys[i].ToAllow > got.Keys[j].ToDeny+got.Keys[j].ToAllow
		}) {
			t.Errorf("%s: keys not sorted by flips", pol.Name)
		}
		if wantDeny+wantAllow == 0 {
			t.Errorf("%s: no flips: the change should flip some", pol.Name)
		}
	}
	var b bytes.Buffer
	if err := WriteFlipsCSV(&b, res); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil || strings.Join(rows[0], ",") != FlipsCSVHeader {
		t.Fatalf("flips CSV: %v %v", rows, err)
	}
}

func TestReplayShadowAllowsEverything(t *testing.T) {
	old := mustPolicies(t, "name=api,algorithm=fixed_window,limit=2,window=1s")
	file, lines := writeLog(t, old, "steady:10/s")
	shadow := mustPolicies(t, "name=api,algorithm=fixed_window,limit=2,window=1s")
	shadow[0].Shadow = true
	res, err := Replay(context.Background(), file, shadow)
	if err != nil {
		t.Fatal(err)
	}
	var refused int64
	for _, ln := range lines {
		if !ln.allowed {
			refused++
		}
	}
	if p := res.Policies[0]; refused == 0 || p.ToAllow != refused || p.ToDeny != 0 || p.After != p.Decisions {
		t.Errorf("shadow: %+v, want every one of %d refusals to flip to allowed", p, refused)
	}
}

func TestReplayBadLog(t *testing.T) {
	pols := mustPolicies(t, "name=api,algorithm=fixed_window,limit=2,window=1s")
	for _, c := range []struct {
		data string
		line int
	}{
		{`{"time":"0s","policy":"api","key":"a","allowed":true}` + "\n" + `{"time":"1s","policy":"api","key":"a"}`, 2},
		{`{"time":"0s","key":"a","allowed":true}`, 1},
		{`{"time":"2s","policy":"api","key":"a","allowed":true}` + "\n" + `{"time":"1s","policy":"api","key":"a","allowed":true}`, 2},
		{"time,key,policy\n0s,a,api\n", 1},
		{"time,key,policy,allowed\n0s,a,api,maybe\n", 2},
	} {
		file := writeFile(t, "log", c.data)
		_, err := Replay(context.Background(), file, pols)
		var le *LineError
		if !errors.As(err, &le) || le.Line != c.line {
			t.Errorf("%q: err %v, want one on line %d", c.data, err, c.line)
		}
	}
}

// FuzzReader: any input gives records or an error, never a panic, and
// every error names a line when it is about one.
func FuzzReader(f *testing.F) {
	f.Add([]byte("time,key,cost\n0s,a,1\n1s,b,2\n"), false)
	f.Add([]byte(`{"time":"2027-01-01T00:00:00Z","key":"a","policy":"p","allowed":true}`+"\n"), true)
	f.Add([]byte("0s,\"a\"\"b\",3\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, decisions bool) {
		rd, err := NewReader(bytes.NewReader(data), "fuzz", decisions)
		if err != nil {
			return
		}
		for range 10000 {
			rec, err := rd.Next()
			if err != nil {
				return
			}
			if rec.Key == "" || rec.Cost < 1 || rec.Line < 1 || (decisions && !rec.HasAllowed) {
				t.Fatalf("bad record %+v", rec)
			}
		}
	})
}
