package simulate

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

func mustPolicies(t *testing.T, specs ...string) []*config.Policy {
	t.Helper()
	p, err := ParsePolicies(specs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustTraffic(t *testing.T, specs ...string) []Traffic {
	t.Helper()
	var out []Traffic
	for _, s := range specs {
		tr, err := ParseTraffic(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tr)
	}
	return out
}

// logged is one line of a decision log.
type logged struct {
	at      time.Time
	policy  string
	key     string
	cost    int64
	allowed bool
}

func readLog(t *testing.T, data []byte) []logged {
	t.Helper()
	rd, err := NewReader(bytes.NewReader(data), "log", true)
	if err != nil {
		t.Fatal(err)
	}
	var out []logged
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, logged{rec.Time, rec.Policy, rec.Key, rec.Cost, rec.Allowed})
	}
}

// simulateWithLog runs opts and returns the result, its CSV and the
// decision log.
func simulateWithLog(t *testing.T, opts Options) (*Result, [][]string, []logged) {
	t.Helper()
	var log bytes.Buffer
	opts.Decisions = &log
	plan, err := NewPlan(opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := plan.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteCSV(&out, res); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rows[0], ",") != CSVHeader {
		t.Fatalf("header %v", rows[0])
	}
	var lines []logged
	if log.Len() > 0 {
		lines = readLog(t, log.Bytes())
	}
	return res, rows[1:], lines
}

// reference decides the logged requests again with a real sluice.Limiter
// (deny cache on, its own clock) and computes each bucket's numbers
// plainly: the simulation's CSV must say the same.
func reference(t *testing.T, pol *config.Policy, lines []logged, start time.Time, dur, bucket, rateWindow time.Duration, watch string) [][]string {
	t.Helper()
	var now time.Time
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	l, err := sluice.New(store, pol.Policy, sluice.WithName(pol.Limiter), sluice.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := int(math.Ceil(float64(dur) / float64(bucket)))
	type row struct {
		req, allowed, refused, units, remaining int64
		keys                                    map[string]bool
	}
	rows := make([]row, n)
	for i := range rows {
		rows[i].keys = map[string]bool{}
	}
	b := 0
	peekAt := func(at time.Time) {
		now = at
		res, err := l.Peek(ctx, watch)
		if err != nil {
			t.Fatal(err)
		}
		rows[b].remaining = res.Remaining
		b++
	}
	for _, ln := range lines {
		if ln.policy != pol.Name {
			continue
		}
		for !ln.at.Before(start.Add(time.Duration(b+1) * bucket)) {
			peekAt(start.Add(time.Duration(b+1) * bucket))
		}
		now = ln.at
		res, err := l.AllowN(ctx, ln.key, ln.cost)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != ln.allowed {
			t.Fatalf("%s at %v key %q: limiter says allowed=%v, the simulation logged %v", pol.Name, ln.at.Sub(start), ln.key, res.Allowed, ln.allowed)
		}
		rows[b].req++
		rows[b].keys[ln.key] = true
		if res.Allowed {
			rows[b].allowed++
			rows[b].units += ln.cost
		} else {
			rows[b].refused++
		}
	}
	for b < n {
		end := start.Add(time.Duration(b+1) * bucket)
		if end.After(start.Add(dur)) {
			end = start.Add(dur)
		}
		peekAt(end)
	}
	k := int(rateWindow / bucket)
	nominal := NominalRate(l.Rule())
	var out [][]string
	for i, r := range rows {
		// The units of the k buckets ending with this one (none before
		// the start) over the whole window, and the keys seen in them.
		var sum int64
		keys := map[string]bool{}
		for j := i; j >= 0 && j > i-k; j-- {
			sum += rows[j].units
			for key := range rows[j].keys {
				keys[key] = true
			}
		}
		admitted := float64(sum) / (float64(k) * bucket.Seconds())
		out = append(out, []string{pol.Name, pol.Algorithm.String(), strconv.FormatFloat((time.Duration(i) * bucket).Seconds(), 'f', -1, 64),
			fmt.Sprint(r.req), fmt.Sprint(r.allowed), fmt.Sprint(r.refused), fmt.Sprint(r.units), fmt.Sprint(r.remaining),
			strconv.FormatFloat(admitted, 'f', 3, 64), strconv.FormatFloat(nominal, 'f', 3, 64), fmt.Sprint(len(keys))})
	}
	return out
}

func TestCSVMatchesLimiter(t *testing.T) {
	pols := mustPolicies(t,
		"algorithm=fixed_window,limit=10,window=1s",
		"algorithm=sliding_log,limit=10,window=1s",
		"algorithm=sliding_log,limit=4,window=700ms,count_rejected=true",
		"algorithm=sliding_window,limit=10,window=1s",
		"algorithm=token_bucket,burst=10,rate=10/s",
		"algorithm=gcra,burst=10,rate=10/s")
	traffic := mustTraffic(t, "burst:10@990ms", "burst:10@1010ms", "steady:20/s,from=1.06s,until=2.06s",
		"poisson:15/s,from=2s,keys=3", "on-off:30/s,on=300ms,off=700ms,from=3s,cost=2", "retry:25/s,key=retrier")
	dur, bucket := 5*time.Second, 50*time.Millisecond
	res, rows, lines := simulateWithLog(t, Options{Policies: pols, Traffic: traffic, Duration: dur, Bucket: bucket, Seed: 7})
	var want [][]string
	for i, p := range pols {
		want = append(want, reference(t, p, lines, res.Start, dur, bucket, res.Policies[i].RateWindow, DefaultKey)...)
	}
	compareRows(t, rows, want)
	// The example is not trivial: every policy refused and allowed.
	for _, p := range res.Policies {
		if p.Allowed == 0 || p.Refused == 0 {
			t.Errorf("%s: allowed %d, refused %d: want both", p.Name, p.Allowed, p.Refused)
		}
	}
}

// TestCSVMatchesLimiterRandom compares the simulation with the limiter on
// random policies and random traffic.
func TestCSVMatchesLimiterRandom(t *testing.T) {
	algs := []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra"}
	for seed := uint64(1); seed <= 25; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		alg := algs[rng.IntN(len(algs))]
		limit := 1 + rng.IntN(20)
		window := time.Duration(1+rng.IntN(2000)) * time.Millisecond
		spec := fmt.Sprintf("algorithm=%s,limit=%d,window=%v", alg, limit, window)
		if alg == "token_bucket" || alg == "gcra" {
			spec = fmt.Sprintf("algorithm=%s,burst=%d,rate=%d/m", alg, limit, 1+rng.IntN(1200))
		}
		if alg == "sliding_log" && rng.IntN(2) == 0 {
			spec += ",count_rejected=true"
		}
		pols := mustPolicies(t, spec)
		var specs []string
		for range 1 + rng.IntN(4) {
			rate := 1 + rng.IntN(40)
			cost := 1 + rng.IntN(limit)
			switch rng.IntN(5) {
			case 0:
				specs = append(specs, fmt.Sprintf("steady:%d/s,keys=%d,cost=%d", rate, 1+rng.IntN(3), cost))
			case 1:
				specs = append(specs, fmt.Sprintf("poisson:%d/s,keys=%d", rate, 1+rng.IntN(3)))
			case 2:
				specs = append(specs, fmt.Sprintf("burst:%d@%dms", 1+rng.IntN(30), rng.IntN(6000)))
			case 3:
				specs = append(specs, fmt.Sprintf("on-off:%d/s,on=%dms,off=%dms", rate, 1+rng.IntN(900), 1+rng.IntN(900)))
			case 4:
				specs = append(specs, fmt.Sprintf("retry:%d/s,key=r%d", rate, rng.IntN(2)))
			}
		}
		dur := time.Duration(1000+rng.IntN(6000)) * time.Millisecond
		bucket := time.Duration(1+rng.IntN(400)) * time.Millisecond
		t.Run(fmt.Sprintf("%d:%s:%s", seed, spec, strings.Join(specs, "+")), func(t *testing.T) {
			res, rows, lines := simulateWithLog(t, Options{Policies: pols, Traffic: mustTraffic(t, specs...), Duration: dur, Bucket: bucket, Seed: seed})
			want := reference(t, pols[0], lines, res.Start, dur, bucket, res.Policies[0].RateWindow, res.Watch)
			compareRows(t, rows, want)
		})
	}
}

func compareRows(t *testing.T, got, want [][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d CSV rows, want %d", len(got), len(want))
	}
	for i := range got {
		if strings.Join(got[i], ",") != strings.Join(want[i], ",") {
			t.Fatalf("CSV row %d:\n got %s\nwant %s", i+1, strings.Join(got[i], ","), strings.Join(want[i], ","))
		}
	}
}

// TestRetryClientNeverRefusedTwiceInARow: a client that waits the
// advertised RetryAfter is allowed on its next attempt, for every
// algorithm, at several multiples of the limit.
func TestRetryClientNeverRefusedTwiceInARow(t *testing.T) {
	pols := mustPolicies(t,
		"algorithm=fixed_window,limit=10,window=1s",
		"algorithm=sliding_log,limit=10,window=1s",
		"algorithm=sliding_log,limit=10,window=1s,count_rejected=true",
		"algorithm=sliding_window,limit=10,window=1s",
		"algorithm=token_bucket,burst=10,rate=10/s",
		"algorithm=gcra,burst=10,rate=10/s")
	for _, rate := range []string{"12/s", "25/s", "100/s", "1000/s"} {
		_, _, lines := simulateWithLog(t, Options{Policies: pols, Traffic: mustTraffic(t, "retry:"+rate), Duration: 20 * time.Second})
		refusals := map[string]int{}
		prev := map[string]bool{}
		for _, ln := range lines {
			if !ln.allowed {
				refusals[ln.policy]++
				if p, seen := prev[ln.policy]; seen && !p {
					t.Fatalf("retry:%s, %s: refused twice in a row (at %v)", rate, ln.policy, ln.at.Sub(DefaultStart))
				}
			}
			prev[ln.policy] = ln.allowed
		}
		for _, p := range pols {
			if refusals[p.Name] == 0 {
				t.Errorf("retry:%s, %s: never refused: the test proves nothing", rate, p.Name)
			}
		}
	}
}

func TestTrafficCounts(t *testing.T) {
	pols := mustPolicies(t, "algorithm=gcra,burst=1000,rate=1000/s")
	for _, c := range []struct {
		spec string
		want int64
	}{
		{"steady:10/s", 100},               // 0, 100ms, ... 9.9s
		{"steady:3/s,from=1s,until=2s", 3}, // 1s, 1.333s, 1.667s
		{"burst:7@2s", 7},
		{"burst:7@10s", 0}, // at the end: outside the run
		{"on-off:10/s,on=1s,off=1s", 50},
		{"steady:10/s,keys=4", 100},
	} {
		res, _, lines := simulateWithLog(t, Options{Policies: pols, Traffic: mustTraffic(t, c.spec), Duration: 10 * time.Second})
		if res.Policies[0].Requests != c.want || int64(len(lines)) != c.want {
			t.Errorf("%s: %d requests (%d logged), want %d", c.spec, res.Policies[0].Requests, len(lines), c.want)
		}
	}
	// Poisson: about the rate, repeatable with the same seed.
	var counts []int64
	for _, seed := range []uint64{1, 1, 2} {
		res, _, _ := simulateWithLog(t, Options{Policies: pols, Traffic: mustTraffic(t, "poisson:100/s"), Duration: 100 * time.Second, Seed: seed})
		counts = append(counts, res.Policies[0].Requests)
	}
	if counts[0] != counts[1] || counts[0] == counts[2] {
		t.Errorf("poisson counts %v: want the same for the same seed and not for another", counts)
	}
	if math.Abs(float64(counts[0])-10000) > 400 { // 4 standard deviations
		t.Errorf("poisson:100/s over 100s: %d requests, want about 10000", counts[0])
	}
}

func TestParseTrafficErrors(t *testing.T) {
	for _, s := range []string{"", "steady", "steady:12", "steady:0/s", "steady:2000000/s", "gust:1/s", "burst:10", "burst:0@1s",
		"burst:10@1", "on-off:10/s", "on-off:10/s,on=1s", "steady:1/s,on=1s", "steady:1/s,keys=0", "retry:1/s,keys=2",
		"steady:1/s,cost=0", "steady:1/s,key=", "steady:1/s,color=red", "steady:1/s,from=2s,until=1s", "burst:1@1s,from=1s", "steady:1/s,key=a,key=b"} {
		if _, err := ParseTraffic(s); err == nil {
			t.Errorf("ParseTraffic(%q): no error", s)
		}
	}
}

func TestPolicyFlags(t *testing.T) {
	p := mustPolicies(t, "algorithm=gcra,burst=10,rate=10/s", "algorithm=gcra,burst=5,rate=1/s", "name=login,algorithm=sliding_log,limit=5,window=15m")
	if p[0].Name != "gcra" || p[1].Name != "gcra-2" || p[2].Name != "login" || p[2].Limit != 5 {
		t.Errorf("names %q %q %q", p[0].Name, p[1].Name, p[2].Name)
	}
	for _, bad := range []string{"algorithm=gcra", "algorithm=gcra,burst=10,rate=10/s,window=1s", "algorithm=gcra,burst=10,rate=10/s,burst=3",
		"algorithm=nope,limit=1", "algorithm=fixed_window,limit=10\nwindow: 1s", "algorithm=fixed_window,limit=1,window=1s,name=a b", "limit"} {
		if _, err := ParsePolicies([]string{bad}); err == nil {
			t.Errorf("ParsePolicies(%q): no error", bad)
		}
	}
}

func TestTooLongIsRefusedUpFront(t *testing.T) {
	pols := mustPolicies(t, "algorithm=gcra,burst=10,rate=10/s")
	_, err := NewPlan(Options{Policies: pols, Traffic: mustTraffic(t, "steady:1000/s"), Duration: 24 * time.Hour, MaxDecisions: 1_000_000})
	var tl *TooLongError
	if !errors.As(err, &tl) || tl.Decisions < 86_400_000 {
		t.Fatalf("err %v, want a TooLongError for 86.4M decisions", err)
	}
	if !strings.Contains(err.Error(), "--max-decisions") {
		t.Errorf("message %q does not say how to proceed", err)
	}
	// A day at 1,000 requests per second is within the default bound.
	if _, err := NewPlan(Options{Policies: pols, Traffic: mustTraffic(t, "steady:1000/s"), Duration: 24 * time.Hour}); err != nil {
		t.Errorf("a day at 1000/s: %v", err)
	}
	if _, err := NewPlan(Options{Policies: pols, Traffic: mustTraffic(t, "steady:1/s"), Duration: time.Hour, Bucket: time.Millisecond}); err == nil {
		t.Error("3.6M buckets: no error")
	}
	if _, err := NewPlan(Options{Policies: pols, Traffic: mustTraffic(t, "steady:1/s,cost=11")}); err == nil {
		t.Error("cost above the limit: no error")
	}
	if _, err := NewPlan(Options{Policies: pols}); !errors.Is(err, ErrNoTraffic) {
		t.Errorf("no traffic: %v", err)
	}
	if _, err := NewPlan(Options{Policies: pols, Traffic: mustTraffic(t, "steady:1/s"), Watch: "nobody"}); err == nil {
		t.Error("--watch of an unknown key: no error")
	}
}

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTraceMalformedLineNumber(t *testing.T) {
	pols := mustPolicies(t, "algorithm=gcra,burst=10,rate=10/s")
	for _, c := range []struct {
		name, data string
		line       int
	}{
		{"csv-time", "0s,a\n1s,a\n\nsoon,a\n", 4},
		{"csv-bare-number", "0s,a\n1.5,a\n", 2},
		{"csv-empty-key", "time,key\n0s,a\n1s,\n", 3},
		{"csv-cost", "time,key,cost\n0s,a,1\n1s,a,x\n", 3},
		{"csv-cost-zero", "0s,a,0\n", 1},
		{"csv-cost-over-limit", "0s,a,1\n1s,a,11\n", 2},
		{"csv-columns", "0s,a,1,2\n", 1},
		{"csv-header", "time,key,color\n", 1},
		{"csv-quote", "0s,a\n1s,\"a\n", 2},
		{"csv-backwards", "0s,a\n2s,a\n1s,b\n", 3},
		{"csv-mixed", "0s,a\n2027-01-01T00:00:01Z,a\n", 2},
		{"csv-unknown-policy", "time,key,policy\n0s,a,gcra\n1s,a,other\n", 3},
		{"json-syntax", "{\"time\":\"0s\",\"key\":\"a\"}\n{\"time\":\"1s\",\"key\":\"a\"\n", 2},
		{"json-unknown-field", "{\"time\":\"0s\",\"key\":\"a\"}\n\n{\"time\":\"1s\",\"key\":\"a\",\"color\":1}\n", 3},
		{"json-missing-key", "{\"time\":\"0s\",\"key\":\"a\"}\n{\"time\":\"1s\"}\n", 2},
		{"json-two-values", "{\"time\":\"0s\",\"key\":\"a\"} {}\n", 1},
		{"json-long", "{\"time\":\"0s\",\"key\":\"a\"}\n{\"time\":\"1s\",\"key\":\"" + strings.Repeat("x", MaxLineBytes) + "\"}\n", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := writeFile(t, "trace", c.data)
			_, err := NewPlan(Options{Policies: pols, Trace: file})
			var le *LineError
			if !errors.As(err, &le) || le.Line != c.line {
				t.Fatalf("err %v, want an error on line %d", err, c.line)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%s:%d: ", file, c.line)) {
				t.Errorf("message %q does not name file:line", err)
			}
		})
	}
}

func TestTrace(t *testing.T) {
	pols := mustPolicies(t, "algorithm=fixed_window,limit=2,window=1s", "algorithm=gcra,burst=2,rate=2/s")
	csvTrace := "# a comment\ntime,key,cost,policy\n2027-03-01T10:00:00.1Z,a,1,\n2027-03-01T10:00:00.2Z,a,1,fixed_window\n2027-03-01T10:00:00.3Z,\"a,b\",2,\n2027-03-01T10:00:00.4Z,a,1,\n2027-03-01T10:00:01.5Z,a,1,\n"
	jsonTrace := `{"time":"2027-03-01T10:00:00.1Z","key":"a"}
{"time":"2027-03-01T10:00:00.2Z","key":"a","policy":"fixed_window"}
{"time":"2027-03-01T10:00:00.3Z","key":"a,b","cost":2}
{"time":"2027-03-01T10:00:00.4Z","key":"a"}
{"time":"2027-03-01T10:00:01.5Z","key":"a"}
`
	for name, data := range map[string]string{"csv": csvTrace, "json": jsonTrace} {
		t.Run(name, func(t *testing.T) {
			file := writeFile(t, "trace", data)
			res, rows, lines := simulateWithLog(t, Options{Policies: pols, Trace: file})
			if !res.Start.Equal(time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)) || res.Duration != 2*time.Second || res.Watch != "a" {
				t.Fatalf("start %v, duration %v, watch %q", res.Start, res.Duration, res.Watch)
			}
			fw, g := res.Policies[0], res.Policies[1]
			// fixed window: a, a, (a,b)x2, a refused (3rd in the window), a at 1.5s.
			if fw.Requests != 5 || fw.Allowed != 4 || g.Requests != 4 {
				t.Errorf("fixed window %d requests %d allowed, gcra %d requests", fw.Requests, fw.Allowed, g.Requests)
			}
			var want [][]string
			for i, p := range pols {
				want = append(want, reference(t, p, lines, res.Start, res.Duration, res.Bucket, res.Policies[i].RateWindow, res.Watch)...)
			}
			compareRows(t, rows, want)
		})
	}
}

func TestPictures(t *testing.T) {
	pols := mustPolicies(t, "algorithm=fixed_window,limit=10,window=1s", "algorithm=gcra,burst=10,rate=10/s")
	res, _, _ := simulateWithLog(t, Options{Policies: pols, Traffic: mustTraffic(t, "burst:10@990ms", "steady:20/s"), Duration: 3 * time.Second})
	for _, format := range []string{SVG, PNG} {
		var b bytes.Buffer
		if err := WritePicture(&b, res, format); err != nil {
			t.Fatal(err)
		}
		checkPicture(t, format, b.Bytes(), len(pols))
	}
	if err := WritePicture(io.Discard, res, "gif"); err == nil {
		t.Error("gif: no error")
	}
}

// FuzzParseTraffic: any --traffic value parses or is refused, never
// panics, and what parses can be planned.
func FuzzParseTraffic(f *testing.F) {
	for _, s := range []string{"steady:12/s", "poisson:100/s,keys=3", "burst:10@990ms", "on-off:50/s,on=2s,off=3s", "retry:20/s,key=m", "steady:1/s,from=1s,until=2s,cost=2", "steady:5/s,hold=exp:1s,crash=5%", "poisson:5/s,hold=100ms-2s,crash=0.1"} {
		f.Add(s)
	}
	pols, err := ParsePolicies([]string{"algorithm=gcra,burst=10,rate=10/s"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tr, err := ParseTraffic(s)
		if err != nil {
			return
		}
		if tr.Keys < 1 || tr.Cost < 1 || tr.Key == "" {
			t.Fatalf("%q: %+v", s, tr)
		}
		if tr.Keys > 1000 {
			return // planning builds the key table
		}
		NewPlan(Options{Policies: pols, Traffic: []Traffic{tr}, Duration: time.Second, MaxDecisions: 1000})
	})
}
