package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestCalendarPolicy(t *testing.T) {
	const y = `
policies:
  - {name: daily, algorithm: fixed_window, limit: 10000, period: day, zone: America/Los_Angeles}
  - {name: monthly, algorithm: fixed_window, limit: 50, period: month, zone: Europe/Paris, renewal_day: 31}
  - {name: firsts, algorithm: fixed_window, limit: 5, period: month, zone: UTC}
  - {name: weekly, algorithm: fixed_window, limit: 7, period: week, zone: Asia/Kathmandu}
`
	c, err := Parse("x.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"daily":   "fixed_window(limit=10000, period=day in America/Los_Angeles)",
		"monthly": "fixed_window(limit=50, period=month from day 31 in Europe/Paris)",
		"firsts":  "fixed_window(limit=5, period=month from day 1 in UTC)",
		"weekly":  "fixed_window(limit=7, period=week in Asia/Kathmandu)",
	} {
		r, err := c.Policy(name).Policy.Rule()
		if err != nil || r.String() != want {
			t.Errorf("%s: %v %v, want %s", name, r, err, want)
		}
	}
	if w := c.Policy("daily").Window(); w != 24*time.Hour {
		t.Errorf("daily window %v", w)
	}
	if c.Policy("daily").Params.Calendar.Unit != sluice.Day {
		t.Errorf("daily params %+v", c.Policy("daily").Params)
	}
}

func TestCalendarErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown zone", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: day, zone: Mars/Olympus}\n", `bad.yaml:2:69: policy "a": zone: unknown time zone "Mars/Olympus"`},
		{"Local zone", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: day, zone: Local}\n", `zone: unknown time zone "Local"`},
		{"no zone", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: day}\n", `policy "a": a period needs zone`},
		{"renewal day 0", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: month, zone: UTC, renewal_day: 0}\n", `renewal_day must be between 1 and 31, got 0`},
		{"renewal day 32", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: month, zone: UTC, renewal_day: 32}\n", `renewal_day must be between 1 and 31, got 32`},
		{"renewal day on a day", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: day, zone: UTC, renewal_day: 3}\n", `renewal_day is only for period: month`},
		{"bad period", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: fortnight, zone: UTC}\n", `period: unknown calendar period "fortnight"`},
		{"window and period", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h, period: day, zone: UTC}\n", `needs window (a duration) or period`},
		{"neither", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1}\n", `needs window (a duration) or period`},
		{"zone without period", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h, zone: UTC}\n", `zone is for a calendar period`},
		{"period on gcra", "policies:\n  - {name: a, algorithm: gcra, burst: 1, rate: 1/s, period: day, zone: UTC}\n", `period is not used by gcra`},
		{"period on sliding window", "policies:\n  - {name: a, algorithm: sliding_window, limit: 1, window: 1s, period: day, zone: UTC}\n", `period is not used by sliding_window`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("bad.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tc.want)
			}
		})
	}
}

func TestPlansAndOverrides(t *testing.T) {
	const y = `
policies:
  - name: api
    algorithm: token_bucket
    burst: 20
    rate: 5/s
    overrides: true
    plans:
      free: {burst: 10}
      pro: {burst: 100, rate: 50/s}
`
	c, err := Parse("x.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy("api")
	if !p.Overrides || len(p.Plans) != 2 || p.Plans[0].Name != "free" || p.Plans[1].Policy != (sluice.TokenBucket{Capacity: 100, Rate: 50, Per: time.Second}) ||
		p.Plans[0].Policy != (sluice.TokenBucket{Capacity: 10, Rate: 5, Per: time.Second}) {
		t.Fatalf("%+v", p)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"plan window", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h, plans: {pro: {limit: 2, window: 2h}}}\n", `plan pro: unknown field "window"`},
		{"plan rate on a window", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h, plans: {pro: {limit: 2, rate: 1/s}}}\n", `plan pro: unknown field "rate"`},
		{"plan without limit", "policies:\n  - {name: a, algorithm: gcra, burst: 1, rate: 1/s, plans: {pro: {rate: 2/s}}}\n", `plan "pro" needs burst`},
		{"plan twice", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h, plans: {pro: {limit: 2}, pro: {limit: 3}}}\n", `pro`},
		{"plan bad name", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h, plans: {'a b': {limit: 2}}}\n", `plan name`},
		{"plans not a mapping", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h, plans: [pro]}\n", `plans must be a mapping`},
		{"plan_entry without policy", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h, plans: {pro: {limit: 2}}}\ndomains:\n  - domain: d\n    descriptors:\n      - {key: plan, plan_entry: true}\n", `plan_entry needs policy`},
		{"plan_entry with a value", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h, plans: {pro: {limit: 2}}}\ndomains:\n  - domain: d\n    descriptors:\n      - {key: plan, value: pro, policy: a, plan_entry: true}\n", `the descriptor has no value`},
		{"plan_entry without plans", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h}\ndomains:\n  - domain: d\n    descriptors:\n      - {key: plan, policy: a, plan_entry: true}\n", `policy "a" has no plans`},
		{"overrides not bool", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1h, overrides: sometimes}\n", `overrides must be true or false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("bad.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tc.want)
			}
		})
	}
}

// TestReadmeQuotaYAML: the configuration README.md's "Quotas" section and
// docs/quotas.md show parses, as a daily quota in Los Angeles with a plan
// and overrides.
func TestReadmeQuotaYAML(t *testing.T) {
	for _, f := range []struct{ file, after string }{
		{"README.md", "## Quotas: calendar periods, plans and key overrides"},
		{"docs/quotas.md", "# Quotas: calendar periods, plans and key overrides"},
	} {
		doc, err := os.ReadFile("../../../../" + f.file)
		if err != nil {
			t.Fatal(err)
		}
		_, after, ok := strings.Cut(string(doc), f.after)
		if !ok {
			t.Fatalf("%s has no %q", f.file, f.after)
		}
		_, block, _ := strings.Cut(after, "```yaml\n")
		block, _, _ = strings.Cut(block, "```")
		c, err := Parse(f.file, []byte(block))
		if err != nil {
			t.Fatal(err)
		}
		p := c.Policy("messages")
		if p == nil || !p.Overrides || len(p.Plans) != 1 || p.Plans[0].Limit != 50000 || p.Params.Calendar.Unit != sluice.Day || p.Params.Calendar.Zone.String() != "America/Los_Angeles" {
			t.Fatalf("%s: messages: %+v", f.file, p)
		}
	}
}
