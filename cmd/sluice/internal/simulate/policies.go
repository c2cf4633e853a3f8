package simulate

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"go.yaml.in/yaml/v3"
)

// ParsePolicies reads --policy values, each a comma-separated list of a
// configuration file's policy fields, such as
// "algorithm=gcra,burst=10,rate=10/s" or
// "name=login,algorithm=sliding_log,limit=5,window=15m". The name defaults
// to the algorithm's (with a number added when two would clash). They are
// validated exactly as the same policies in a configuration file.
func ParsePolicies(specs []string) ([]*config.Policy, error) {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	names := map[string]int{}
	for _, spec := range specs {
		fields, order, err := policyFields(spec)
		if err != nil {
			return nil, err
		}
		if _, ok := fields["name"]; !ok {
			fields["name"] = defaultPolicyName(fields["algorithm"], names)
			order = append([]string{"name"}, order...)
		}
		m := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range order {
			m.Content = append(m.Content,
				&yaml.Node{Kind: yaml.ScalarNode, Value: k},
				&yaml.Node{Kind: yaml.ScalarNode, Value: fields[k]})
		}
		seq.Content = append(seq.Content, m)
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Value: "policies"}, seq,
	}}
	data, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	cfg, err := config.Parse("--policy", data)
	if err != nil {
		return nil, fmt.Errorf("%w\n(the --policy values, as the configuration file they stand for:)\n%s", err, data)
	}
	return cfg.Policies, nil
}

// policyFields splits one --policy value into its field=value pairs, with
// the fields in the order given; a field given twice is refused.
func policyFields(spec string) (fields map[string]string, order []string, err error) {
	fields = map[string]string{}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, nil, fmt.Errorf("--policy %q: %q must be field=value (fields as in a configuration file: name, algorithm, limit, window, burst, rate, count_rejected)", spec, kv)
		}
		if _, dup := fields[k]; dup {
			return nil, nil, fmt.Errorf("--policy %q: %s given twice", spec, k)
		}
		fields[k] = v
		order = append(order, k)
	}
	return fields, order, nil
}

// defaultPolicyName names a policy given without a name after its
// algorithm ("policy" when none is given), numbered from the second of an
// algorithm on; names counts the names given per algorithm so far.
func defaultPolicyName(alg string, names map[string]int) string {
	if alg == "" {
		alg = "policy"
	}
	name := alg
	if n := names[alg]; n > 0 {
		name = fmt.Sprintf("%s-%d", alg, n+1)
	}
	names[alg]++
	return name
}

// NominalRate returns the rate a policy admits in the long run, in units
// per second: its Limit per Period (Limit per Window for the window
// algorithms, one unit per Interval for the token bucket and GCRA).
func NominalRate(r sluice.Rule) float64 {
	return float64(r.Limit) / r.Period().Seconds()
}

// roundUp returns d rounded up to a whole number of steps, at least one.
func roundUp(d, step time.Duration) time.Duration {
	n := int64(math.Ceil(float64(d) / float64(step)))
	if n < 1 {
		n = 1
	}
	return time.Duration(n) * step
}
