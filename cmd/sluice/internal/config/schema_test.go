package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"go.yaml.in/yaml/v3"
)

const repoRoot = "../../../.."

// TestGeneratedDocsCurrent: docs/configuration.md and
// docs/sluice.schema.json are what the field table makes.
func TestGeneratedDocsCurrent(t *testing.T) {
	for name, want := range map[string][]byte{
		"docs/configuration.md":   Reference(),
		"docs/sluice.schema.json": Schema(),
	} {
		got, err := os.ReadFile(filepath.Join(repoRoot, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the field table makes: run `cd cmd/sluice && go generate ./internal/config` and commit it", name)
		}
	}
}

// compiledSchema compiles the committed docs/sluice.schema.json with a
// real JSON Schema validator.
func compiledSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "docs/sluice.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource("sluice.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("sluice.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// asJSON converts a YAML document to the JSON value a validator sees, as an
// editor's YAML language server does (merge keys resolved).
func asJSON(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// yamlBlock returns the first ```yaml block after heading in a Markdown file.
func yamlBlock(t *testing.T, file, heading string) []byte {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), heading)
	if !ok {
		t.Fatalf("%s has no %q", file, heading)
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatalf("%s: no yaml block after %q", file, heading)
	}
	block, _, _ = strings.Cut(block, "```")
	return []byte(block)
}

// repoConfigs are the configuration files of the repository: the examples,
// the deploy files (the Kubernetes ConfigMap's embedded one included), the
// files docs/ ships, and the YAML blocks of the docs that tests parse.
func repoConfigs(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	var files []string
	for _, g := range []string{"examples/*.yaml", "examples/*/*.yaml", "deploy/sluice.yaml", "deploy/forward-auth.yaml",
		"docs/*.yaml", "docs/envoy-bench/ratelimit/config/*.yaml", "docs/envoy-diff/ratelimit/config/*.yaml",
		"cmd/sluice/internal/config/default.yaml"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, g))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(repoRoot, f)
		if rel == "docs/openapi.yaml" {
			continue // the HTTP API, not a configuration
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[rel] = b
	}
	k8s, err := os.ReadFile(filepath.Join(repoRoot, "deploy/kubernetes/sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(k8s))
	for {
		var obj struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&obj); err != nil {
			break
		}
		if obj.Kind == "ConfigMap" {
			for name, data := range obj.Data {
				if strings.HasSuffix(name, ".yaml") {
					out["deploy/kubernetes/sluice.yaml ConfigMap "+name] = []byte(data)
				}
			}
		}
	}
	out["docs/configuration.md ## Example"] = yamlBlock(t, "docs/configuration.md", "\n## Example\n")
	out["docs/quotas.md"] = yamlBlock(t, "docs/quotas.md", "# Quotas: calendar periods, plans and key overrides")
	out["README.md ## Quotas"] = yamlBlock(t, "README.md", "## Quotas: calendar periods, plans and key overrides")
	if len(out) < 12 {
		t.Fatalf("found only %d configurations: %v", len(out), sortedKeys(out))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestRepoConfigsValidate: every configuration of the repository is
// accepted by the decoder and validates against docs/sluice.schema.json,
// and the examples carry the yaml-language-server line editors read.
func TestRepoConfigsValidate(t *testing.T) {
	schema := compiledSchema(t)
	configs := repoConfigs(t)
	for _, name := range sortedKeys(configs) {
		data := configs[name]
		if _, err := Parse(name, data); err != nil {
			t.Errorf("%s: the decoder refuses it: %v", name, err)
		}
		if err := schema.Validate(asJSON(t, data)); err != nil {
			t.Errorf("%s: the schema refuses it: %v", name, err)
		}
	}
	for _, f := range []string{"examples/sluice.yaml", "examples/five-algorithms.yaml", "deploy/sluice.yaml", "deploy/forward-auth.yaml"} {
		if !bytes.HasPrefix(configs[f], []byte("# yaml-language-server: $schema=../docs/sluice.schema.json\n")) {
			t.Errorf("%s does not start with the yaml-language-server $schema line", f)
		}
	}
}

// TestDocBlocksValidate: every YAML block of README.md and docs/ that is a
// configuration or a part of one (its top-level keys are configuration
// sections) validates against the schema, which checks no references
// between sections; those the decoder accepts whole are checked by both.
func TestDocBlocksValidate(t *testing.T) {
	schema := compiledSchema(t)
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs/*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(repoRoot, "README.md"))
	configs := 0
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rest := string(doc)
		for i := 1; ; i++ {
			_, after, ok := strings.Cut(rest, "```yaml\n")
			if !ok {
				break
			}
			block, tail, _ := strings.Cut(after, "```")
			rest = tail
			name := fmt.Sprintf("%s block %d", filepath.Base(f), i)
			var top map[string]any
			if err := yaml.Unmarshal([]byte(block), &top); err != nil || len(top) == 0 {
				continue
			}
			part := true
			for k := range top {
				part = part && slices.Contains(topSection.names(), k)
			}
			if _, err := Parse(name, []byte(block)); err != nil && !part {
				continue
			}
			configs++
			if err := schema.Validate(asJSON(t, []byte(block))); err != nil {
				t.Errorf("%s: the decoder accepts it, the schema refuses it: %v\n%s", name, err, block)
			}
		}
	}
	if configs < 6 {
		t.Fatalf("only %d configuration blocks found", configs)
	}
	t.Logf("%d configuration blocks", configs)
}

// TestConfigurationDocExample: the example of docs/configuration.md
// parses, its quota policy included.
func TestConfigurationDocExample(t *testing.T) {
	c, err := Parse("configuration.md", yamlBlock(t, "docs/configuration.md", "\n## Example\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy("messages")
	if p == nil || !p.Overrides || len(p.Plans) != 1 || p.Params.Calendar.Unit != sluice.Day {
		t.Fatalf("messages: %+v", p)
	}
	if c.Valkey == nil || c.Valkey.TLS == nil || c.Admin == nil || c.ForwardAuth == nil || c.Domain("edge") == nil {
		t.Fatalf("the example should show every section: %+v", c)
	}
}

// refusalBase is a configuration with every section, which the refusal
// cases change one field of.
const refusalBase = `
prefix: rl:v1
listen: 127.0.0.1:8080
valkey:
  addresses: [127.0.0.1:6379]
  timeout: 50ms
  tls: {ca_file: /ca.pem}
  sentinel_placeholder: 0
admin: {token_env: TOKEN}
policies:
  - {name: tb, algorithm: token_bucket, burst: 10, rate: 5/s, plans: {pro: {burst: 20, rate: 10/s}}}
  - {name: fw, algorithm: fixed_window, limit: 10, window: 1m, plans: {pro: {limit: 20}}}
  - {name: cal, algorithm: fixed_window, limit: 10, period: month, zone: UTC, renewal_day: 5}
  - {name: log, algorithm: sliding_log, limit: 5, window: 15m, count_rejected: true,
     penalty: {after: 5, within: 1m, block: 1m, max_block: 16m, forgive: 24h}}
domains:
  - domain: edge
    descriptors:
      - key: k
        rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: other}]}
        descriptors: [{key: nested, policy: tb}]
forward_auth:
  trusted_proxies: [127.0.0.1/32]
  routes:
    - {name: r, path_prefix: /api, limits: [{policy: tb, key: client_ip}]}
`

// baseDoc returns refusalBase as a generic value, without the placeholder.
func baseDoc(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(refusalBase), &m); err != nil {
		t.Fatal(err)
	}
	delete(m["valkey"].(map[string]any), "sentinel_placeholder")
	return m
}

// at returns the mapping of refusalBase that sec describes, or nil when
// the base has none (its fields are then tested from another instance).
func at(doc map[string]any, sec *Section, field string) map[string]any {
	pol := func(i int) map[string]any { return doc["policies"].([]any)[i].(map[string]any) }
	desc := doc["domains"].([]any)[0].(map[string]any)["descriptors"].([]any)[0].(map[string]any)
	route := doc["forward_auth"].(map[string]any)["routes"].([]any)[0].(map[string]any)
	switch sec {
	case topSection:
		return doc
	case valkeySection:
		return doc["valkey"].(map[string]any)
	case tlsSection:
		return doc["valkey"].(map[string]any)["tls"].(map[string]any)
	case adminSection:
		return doc["admin"].(map[string]any)
	case policySection:
		// the policy whose algorithm takes the field
		switch field {
		case "limit", "window":
			return pol(1)
		case "period", "zone", "renewal_day":
			return pol(2)
		case "count_rejected":
			return pol(3)
		}
		return pol(0)
	case penaltySection:
		return pol(3)["penalty"].(map[string]any)
	case plansSection:
		if field == "limit" {
			return pol(1)["plans"].(map[string]any)["pro"].(map[string]any)
		}
		return pol(0)["plans"].(map[string]any)["pro"].(map[string]any)
	case domainSection:
		return doc["domains"].([]any)[0].(map[string]any)
	case descriptorSection:
		return desc
	case rateLimitSection:
		return desc["rate_limit"].(map[string]any)
	case replacesSection:
		return desc["rate_limit"].(map[string]any)["replaces"].([]any)[0].(map[string]any)
	case forwardAuthSection:
		return doc["forward_auth"].(map[string]any)
	case routeSection:
		return route
	case routeLimitSection:
		return route["limits"].([]any)[0].(map[string]any)
	case sentinelSection:
		v := doc["valkey"].(map[string]any)
		delete(v, "addresses")
		v["sentinel"] = map[string]any{"master_set": "m", "addresses": []any{"127.0.0.1:26379"}}
		return v["sentinel"].(map[string]any)
	}
	return nil
}

// refusal is a configuration both the decoder and the schema must refuse.
type refusal struct {
	name string
	data []byte
}

// tableRefusals derives refusals from the field table itself: in every
// section an unknown field; for every field of a scalar kind a value of
// the wrong type; for every bounded integer a value on each side of its
// bounds; for every enum a value outside it; for every mapping, list or
// many-formed field a value of another shape. A row added to the table is
// so tested at once, and one the decoder does not read (a field it would
// accept and ignore) makes the decoder accept a case and the test fail.
func tableRefusals(t *testing.T) []refusal {
	var out []refusal
	add := func(name string, sec *Section, change func(m map[string]any)) {
		doc := baseDoc(t)
		field, _, _ := strings.Cut(name, " ")
		m := at(doc, sec, field)
		if m == nil {
			t.Fatalf("no instance of %s in the base configuration", sec.Path)
		}
		change(m)
		b, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, refusal{sec.Path + ": " + name, b})
	}
	for _, sec := range Sections {
		sec := sec
		add("unknown field", sec, func(m map[string]any) { m["no_such_field"] = "x" })
		for _, f := range sec.Fields {
			f := f
			switch f.Kind {
			case KindInt:
				add(f.Name+" not a number", sec, func(m map[string]any) { m[f.Name] = "many" })
				add(f.Name+" below its bounds", sec, func(m map[string]any) { m[f.Name] = f.Min - 1 })
				add(f.Name+" above its bounds", sec, func(m map[string]any) { m[f.Name] = f.Max + 1 })
			case KindDuration:
				add(f.Name+" not a duration", sec, func(m map[string]any) { m[f.Name] = "soon" })
				add(f.Name+" a bare number", sec, func(m map[string]any) { m[f.Name] = 15 })
			case KindRate:
				add(f.Name+" not a rate", sec, func(m map[string]any) { m[f.Name] = "fast" })
			case KindBool:
				add(f.Name+" not a boolean", sec, func(m map[string]any) { m[f.Name] = "sometimes" })
			case KindEnum:
				add(f.Name+" outside its values", sec, func(m map[string]any) { m[f.Name] = "bogus" })
			case KindString:
				add(f.Name+" a list", sec, func(m map[string]any) { m[f.Name] = []any{"a", "b"} })
			case KindList:
				add(f.Name+" a mapping", sec, func(m map[string]any) { m[f.Name] = map[string]any{"a": "b"} })
			case KindSection:
				add(f.Name+" a list", sec, func(m map[string]any) { m[f.Name] = []any{"a"} })
			case KindMap:
				add(f.Name+" a list", sec, func(m map[string]any) { m[f.Name] = []any{"a"} })
			case KindAny:
				add(f.Name+" a string", sec, func(m map[string]any) { m[f.Name] = "a" })
			case KindCustom:
				add(f.Name+" an unknown mapping", sec, func(m map[string]any) { m[f.Name] = map[string]any{"no_such_field": 1} })
			default:
				t.Fatalf("%s.%s: no refusal for kind %d", sec.Path, f.Name, f.Kind)
			}
		}
	}
	return out
}

// handRefusals are the cases the table's kinds do not make: algorithm
// fields, required fields, exclusive fields, patterns.
var handRefusals = []struct{ name, yaml string }{
	{"burst on a fixed window", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m, burst: 3}\n"},
	{"window on a token bucket", "policies:\n  - {name: a, algorithm: token_bucket, burst: 1, rate: 1/s, window: 1m}\n"},
	{"count_rejected on a sliding window", "policies:\n  - {name: a, algorithm: sliding_window, limit: 1, window: 1m, count_rejected: true}\n"},
	{"period on gcra", "policies:\n  - {name: a, algorithm: gcra, burst: 1, rate: 1/s, period: day, zone: UTC}\n"},
	{"sliding log over MaxSlidingLogLimit", fmt.Sprintf("policies:\n  - {name: a, algorithm: sliding_log, limit: %d, window: 1m}\n", driver.MaxSlidingLogLimit+1)},
	{"sliding log plan over MaxSlidingLogLimit", fmt.Sprintf("policies:\n  - {name: a, algorithm: sliding_log, limit: 1, window: 1m, plans: {pro: {limit: %d}}}\n", driver.MaxSlidingLogLimit+1)},
	{"token bucket without rate", "policies:\n  - {name: a, algorithm: token_bucket, burst: 1}\n"},
	{"sliding log without window", "policies:\n  - {name: a, algorithm: sliding_log, limit: 1}\n"},
	{"fixed window without window or period", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1}\n"},
	{"fixed window with window and period", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m, period: day, zone: UTC}\n"},
	{"period without zone", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: day}\n"},
	{"zone without period", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m, zone: UTC}\n"},
	{"renewal_day with a week", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: week, zone: UTC, renewal_day: 2}\n"},
	{"plan with burst on a fixed window", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m, plans: {pro: {burst: 2}}}\n"},
	{"plan with limit on a token bucket", "policies:\n  - {name: a, algorithm: token_bucket, burst: 1, rate: 1/s, plans: {pro: {limit: 2}}}\n"},
	{"plan without its limit", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m, plans: {pro: {}}}\n"},
	{"plan name with a space", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m, plans: {'p r': {limit: 2}}}\n"},
	{"policy without a name", "policies:\n  - {algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"policy without an algorithm", "policies:\n  - {name: a, limit: 1, window: 1m}\n"},
	{"policy name too long", "policies:\n  - {name: " + strings.Repeat("a", maxPolicyName+1) + ", algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"policy name .", "policies:\n  - {name: '.', algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"policy name ..", "policies:\n  - {name: '..', algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"plan name ..", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m, plans: {'..': {limit: 2}}}\n"},
	{"policy name with a slash", "policies:\n  - {name: a/b, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"headers unknown", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m, headers: [ietf, bogus]}\n"},
	{"prefix with a brace", "prefix: 'a{b'\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"prefix too long", "prefix: " + strings.Repeat("p", 65) + "\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"listen without a port", "listen: localhost\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"rate with a bad unit", "policies:\n  - {name: a, algorithm: token_bucket, burst: 1, rate: 5/week}\n"},
	{"valkey address and addresses", "valkey: {address: 'a:1', addresses: ['b:1']}\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"valkey addresses and sentinel", "valkey: {addresses: ['b:1'], sentinel: {master_set: m, addresses: ['s:1']}}\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"valkey password_env and password_file", "valkey: {password_env: P, password_file: /p}\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"sentinel without master_set", "valkey: {sentinel: {addresses: ['s:1']}}\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"sentinel without addresses", "valkey: {sentinel: {master_set: m, addresses: []}}\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"tls cert_file without key_file", "valkey: {tls: {cert_file: /c}}\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"tls a number", "valkey: {tls: 3}\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"admin with both", "admin: {token_env: T, token_file: /t}\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"admin with neither", "admin: {}\npolicies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\n"},
	{"domain without a name", "domains:\n  - descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"},
	{"descriptor without a key", "domains:\n  - domain: d\n    descriptors: [{value: v, rate_limit: {unit: second, requests_per_unit: 1}}]\n"},
	{"descriptor with policy and rate_limit", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\ndomains:\n  - domain: d\n    descriptors: [{key: k, policy: a, rate_limit: {unit: second, requests_per_unit: 1}}]\n"},
	{"rate_limit without a unit", "domains:\n  - domain: d\n    descriptors: [{key: k, rate_limit: {requests_per_unit: 1}}]\n"},
	{"rate_limit unlimited with a unit", "domains:\n  - domain: d\n    descriptors: [{key: k, rate_limit: {unlimited: true, unit: second}}]\n"},
	{"envoy format: unknown unit", "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}\n"},
	{"envoy format: unknown field", "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}, limit: 3}\n"},
	{"envoy format: unknown top-level field", "domain: d\npolicies: []\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n"},
	{"forward_auth without trusted_proxies", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  routes: [{limits: [{policy: a, key: client_ip}]}]\n"},
	{"forward_auth without routes", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  trusted_proxies: [127.0.0.1/32]\n"},
	{"route without limits", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  trusted_proxies: [127.0.0.1/32]\n  routes: [{path_prefix: /a}]\n"},
	{"route with empty limits", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  trusted_proxies: [127.0.0.1/32]\n  routes: [{path_prefix: /a, limits: []}]\n"},
	{"route path_prefix without a slash", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  trusted_proxies: [127.0.0.1/32]\n  routes: [{path_prefix: api, limits: [{policy: a, key: client_ip}]}]\n"},
	{"route method in lower case", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  trusted_proxies: [127.0.0.1/32]\n  routes: [{methods: [get], limits: [{policy: a, key: client_ip}]}]\n"},
	{"limit without a key", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  trusted_proxies: [127.0.0.1/32]\n  routes: [{limits: [{policy: a}]}]\n"},
	{"limit key unknown", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  trusted_proxies: [127.0.0.1/32]\n  routes: [{limits: [{policy: a, key: cookie:x}]}]\n"},
	{"limit key header name too long", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  trusted_proxies: [127.0.0.1/32]\n  routes: [{limits: [{policy: a, key: header:" + strings.Repeat("h", maxHeaderName+1) + "}]}]\n"},
	{"limit key with first and all", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  trusted_proxies: [127.0.0.1/32]\n  routes: [{limits: [{policy: a, key: {first: [client_ip], all: [header:x]}}]}]\n"},
	{"limit key mapping unknown", "policies:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1m}\nforward_auth:\n  trusted_proxies: [127.0.0.1/32]\n  routes: [{limits: [{policy: a, key: {any: [client_ip]}}]}]\n"},
}

// TestSchemaRefusesWhatTheDecoderRefuses: the configurations the decoder
// refuses for an unknown field, a wrong type, a bound, an enum, an
// algorithm's field, a missing or exclusive field are refused by
// docs/sluice.schema.json too, checked with a real JSON Schema validator.
func TestSchemaRefusesWhatTheDecoderRefuses(t *testing.T) {
	schema := compiledSchema(t)
	// The base itself is accepted by both, so each case refuses only its
	// change.
	base, err := yaml.Marshal(baseDoc(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("base.yaml", base); err != nil {
		t.Fatalf("the base configuration: %v", err)
	}
	if err := schema.Validate(asJSON(t, base)); err != nil {
		t.Fatalf("the schema refuses the base configuration: %v", err)
	}
	cases := tableRefusals(t)
	for _, h := range handRefusals {
		cases = append(cases, refusal{h.name, []byte(h.yaml)})
	}
	if len(cases) < 150 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		if _, err := Parse("case.yaml", c.data); err == nil {
			t.Errorf("%s: the decoder accepts it:\n%s", c.name, c.data)
		}
		if err := schema.Validate(asJSON(t, c.data)); err == nil {
			t.Errorf("%s: the schema accepts it:\n%s", c.name, c.data)
		}
	}
}

// TestFieldTableComplete: every row has a kind and a description, every
// policy field the decoder reads per algorithm has its algorithms, and the
// bounds are the library's.
func TestFieldTableComplete(t *testing.T) {
	for _, sec := range Sections {
		for _, f := range sec.Fields {
			if f.Kind == 0 || f.Desc == "" {
				t.Errorf("%s.%s: kind %d, description %q", sec.Path, f.Name, f.Kind, f.Desc)
			}
			if f.Kind == KindCustom && (f.Schema == nil || f.Type == "") {
				t.Errorf("%s.%s: a custom field needs its schema and type", sec.Path, f.Name)
			}
		}
	}
	for _, c := range []struct {
		f        *Field
		min, max int64
	}{
		{policySection.Field("limit"), 1, driver.MaxLimit},
		{policySection.Field("burst"), 1, driver.MaxLimit},
		{plansSection.Field("limit"), 1, driver.MaxLimit},
		{plansSection.Field("burst"), 1, driver.MaxLimit},
	} {
		if c.f.Min != c.min || c.f.Max != c.max {
			t.Errorf("%s: bounds %d..%d, want %d..%d", c.f.Name, c.f.Min, c.f.Max, c.min, c.max)
		}
	}
	if w := policySection.Field("window"); w.MinDur != driver.MinWindow || w.MaxDur != driver.MaxWindow {
		t.Errorf("window: bounds %v..%v", w.MinDur, w.MaxDur)
	}
	// The largest limit the table allows is one the library accepts, and
	// one more is refused by the library too: the bound is the library's.
	if _, err := (sluice.FixedWindow{Limit: driver.MaxLimit, Window: driver.MinWindow}).Rule(); err != nil {
		t.Errorf("MaxLimit refused by the library: %v", err)
	}
	if _, err := (sluice.FixedWindow{Limit: driver.MaxLimit + 1, Window: driver.MinWindow}).Rule(); err == nil {
		t.Error("MaxLimit+1 accepted by the library")
	}
}

// TestEnumValuesAccepted: every value the table lists for an enum is
// accepted by the decoder and the schema (the decoder's switch and the
// table agree), and so is every boolean spelling.
func TestEnumValuesAccepted(t *testing.T) {
	schema := compiledSchema(t)
	n := 0
	for _, sec := range Sections {
		for _, f := range sec.Fields {
			if f.Kind != KindEnum && f.Kind != KindBool || f.Name == "algorithm" {
				continue // the algorithms: the base configuration has a policy of each kind of fields
			}
			values := f.Enum
			if f.Kind == KindBool {
				values = boolSpellings
			}
			for _, v := range values {
				doc := baseDoc(t)
				m := at(doc, sec, f.Name)
				m[f.Name] = v
				switch {
				case f.Name == "period" && v != "month":
					delete(m, "renewal_day")
				case f.Name == "deny_cache" || f.Name == "overrides":
					delete(m, "plans") // deny_cache: true is refused with plans; overrides turn it off
					delete(m, "deny_cache")
					m[f.Name] = v
				case f.Name == "grants" && v == "auto" || f.Name == "on_failure" && v == "share":
					continue // need the policy to take grants: TestGrantsSchema
				case f.Name == "count_rejected" || f.Name == "unlimited" || f.Name == "share_threshold" || f.Name == "plan_entry" || f.Name == "warning_header":
					continue // true needs other fields (checked at load only); false is their default
				}
				b, err := yaml.Marshal(doc)
				if err != nil {
					t.Fatal(err)
				}
				n++
				if _, err := Parse("case.yaml", b); err != nil {
					t.Errorf("%s.%s: %q: the decoder refuses it: %v", sec.Path, f.Name, v, err)
				}
				if err := schema.Validate(asJSON(t, b)); err != nil {
					t.Errorf("%s.%s: %q: the schema refuses it: %v", sec.Path, f.Name, v, err)
				}
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d cases", n)
	}
}

// TestFixturesValidate: every configuration the tests of cmd/sluice write
// as a string constant (the fixtures of this package, the server's, the
// commands'), when the decoder accepts it, validates against the schema.
func TestFixturesValidate(t *testing.T) {
	schema := compiledSchema(t)
	var files []string
	for _, g := range []string{"../*/*_test.go", "../../*_test.go"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	fset := token.NewFileSet()
	accepted := 0
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			s, ok := constString(n)
			if !ok {
				return true
			}
			if !strings.Contains(s, "\n") || !strings.Contains(s, ":") {
				return false
			}
			if _, err := Parse("fixture.yaml", []byte(s)); err != nil {
				return false
			}
			accepted++
			var v any
			if yaml.Unmarshal([]byte(s), &v) != nil {
				return false
			}
			if err := schema.Validate(asJSON(t, []byte(s))); err != nil {
				t.Errorf("%s: the decoder accepts this fixture, the schema refuses it: %v\n%s", fset.Position(n.Pos()), err, s)
			}
			return false
		})
	}
	if accepted < 50 {
		t.Fatalf("only %d fixtures accepted by the decoder", accepted)
	}
	t.Logf("%d fixtures", accepted)
}

// constString returns the value of a string literal or a concatenation of
// them.
func constString(n ast.Node) (string, bool) {
	switch x := n.(type) {
	case *ast.BasicLit:
		if x.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(x.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if x.Op != token.ADD {
			return "", false
		}
		a, ok1 := constString(x.X)
		b, ok2 := constString(x.Y)
		return a + b, ok1 && ok2
	case *ast.ParenExpr:
		return constString(x.X)
	}
	return "", false
}

// TestFieldTableDefaults: the defaults the table documents are the ones the
// decoder takes when a field is absent.
func TestFieldTableDefaults(t *testing.T) {
	c, err := Parse("defaults.yaml", []byte("valkey: {addresses: ['127.0.0.1:6379']}\n"+
		"policies:\n  - {name: a, algorithm: fixed_window, limit: 1, period: month, zone: UTC}\n"+
		"  - {name: b, algorithm: sliding_log, limit: 1, window: 1m}\n"+
		"domains:\n  - {domain: d, descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]}\n"+
		"forward_auth: {trusted_proxies: [127.0.0.1/32], routes: [{limits: [{policy: a, key: client_ip}]}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, b := c.Policy("a"), c.Policy("b")
	failMode := map[sluice.FailMode]string{sluice.FailOpen: "allow", sluice.FailClosed: "deny"}
	headers := "none"
	if p.Headers == HeadersAll {
		headers = "all"
	}
	domain := c.Domain("d")
	env := c.Policy(domain.Descriptors[0].Policy)
	for _, x := range []struct {
		sec        *Section
		field, got string
	}{
		{topSection, "prefix", c.Prefix},
		{valkeySection, "timeout", c.Valkey.Timeout.String()},
		{valkeySection, "connect_timeout", c.Valkey.ConnectTimeout.String()},
		{policySection, "on_failure", failMode[p.FailMode]},
		{policySection, "shadow", fmt.Sprint(p.Shadow)},
		{policySection, "headers", headers},
		{policySection, "show_keys", p.ShowKeys.String()},
		{policySection, "overrides", fmt.Sprint(p.Overrides)},
		{policySection, "deny_cache", fmt.Sprint(p.DenyCache)},
		{policySection, "renewal_day", fmt.Sprint(p.Params.Calendar.RenewalDay)},
		{policySection, "count_rejected", fmt.Sprint(b.Params.CountRejected)},
		{domainSection, "counting", domain.Counting.String() + " (each in envoyproxy/ratelimit's format)"},
		{rateLimitSection, "unit_multiplier", fmt.Sprint(env.EnvoyLimit.Multiplier)},
		{forwardAuthSection, "path_case", map[bool]string{false: "insensitive", true: "sensitive"}[c.ForwardAuth.PathCaseSensitive]},
		{forwardAuthSection, "unmatched", map[Unmatched]string{UnmatchedAllow: "allow", UnmatchedDeny: "deny"}[c.ForwardAuth.Unmatched]},
	} {
		if want := x.sec.Field(x.field).Default; x.got != want {
			t.Errorf("%s.%s: the decoder's default is %q, the table says %q", x.sec.Path, x.field, x.got, want)
		}
	}
	if p.Timeout != c.Valkey.Timeout || policySection.Field("timeout").Default != "valkey.timeout" {
		t.Errorf("policy timeout default %v, valkey.timeout %v", p.Timeout, c.Valkey.Timeout)
	}
	for _, f := range []string{"shadow_mode", "detailed_metric", "value_to_metric", "share_threshold", "quota_mode", "plan_entry"} {
		if descriptorSection.Field(f).Default != "false" {
			t.Errorf("descriptor %s: default %q", f, descriptorSection.Field(f).Default)
		}
	}
}
