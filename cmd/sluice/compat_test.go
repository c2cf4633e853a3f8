package main

// The compatibility suite: envoyproxy/ratelimit's documented behaviour,
// checked against the real sluice serve binary started as envoyproxy/ratelimit
// is deployed (its environment variables, a runtime directory behind a
// symbolic link, several files and a merged domain, a real Valkey), over
// real gRPC and HTTP.

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/sluice/valkeytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const compatA = `
domain: rl
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: "/v1/*/action"
    rate_limit: {unit: hour, requests_per_unit: 2, name: action_limit}
  - key: path
    value: "/files/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: month, requests_per_unit: 0, name: never}
`

// compatB is a second file of domain rl (MERGE_DOMAIN_CONFIG), in YAML 1.1.
const compatB = `
domain: rl
descriptors:
  - key: internal
    rate_limit: {unlimited: true}
  - key: yearly
    rate_limit: {unit: year, requests_per_unit: 5}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: base
    rate_limit: &b {unit: hour, requests_per_unit: 4}
  - key: shadowed
    shadow_mode: yes
    rate_limit:
      <<: *b
      requests_per_unit: 1
  - key: api
    rate_limit: {unit: hour, requests_per_unit: 10, name: api_wide}
  - key: api_user
    rate_limit: {unit: hour, requests_per_unit: 100, name: user_high, replaces: [{name: api_wide}]}
`

const compatOther = `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
`

// compatExamples follows the cases of envoyproxy/ratelimit's README:
// nested descriptors, most specific match first, depth, shadow mode on a
// nested value, replaces across descriptors.
const compatExamples = `
domain: examples
descriptors:
  - key: kind
    value: promo
    descriptors:
      - key: phone
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: phone
    rate_limit: {unit: day, requests_per_unit: 50}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: ip
    value: 50.0.0.5
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: top
    value: t
    rate_limit: {unit: hour, requests_per_unit: 7}
  - key: svc
    descriptors:
      - {key: user, value: soft, shadow_mode: true, rate_limit: {unit: hour, requests_per_unit: 1}}
      - {key: user, value: hard, rate_limit: {unit: hour, requests_per_unit: 1}}
  - key: k1
    value: v1
    descriptors:
      - {key: user, value: bk, rate_limit: {name: specific, unit: hour, requests_per_unit: 5}}
  - key: k2
    value: v2
    descriptors:
      - {key: user, value: bk, rate_limit: {unit: hour, requests_per_unit: 10, replaces: [{name: specific}]}}
`

// runtimeTree writes version v of the configuration under root/v and
// points root/current at it, swapping the link atomically as a Kubernetes
// ConfigMap update does.
func runtimeTree(t *testing.T, root, v string, files map[string]string) {
	t.Helper()
	dir := filepath.Join(root, v, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(root, "current.tmp")
	os.Remove(tmp)
	if err := os.Symlink(filepath.Join(root, v), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(root, "current")); err != nil {
		t.Fatal(err)
	}
}

func TestEnvoyCompat(t *testing.T) {
	v := valkeytest.Start(t)
	root := t.TempDir()
	runtimeTree(t, root, "v1", map[string]string{"a.yaml": compatA, "b.yaml": compatB, "mongo.yaml": compatOther, "examples.yaml": compatExamples})
	p := serve(t, []string{
		"RUNTIME_ROOT=" + filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"MERGE_DOMAIN_CONFIG=true", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + v.Addr, "REDIS_POOL_SIZE=5",
		"USE_STATSD=false", "LOG_FORMAT=json", "LOG_LEVEL=info", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"CACHE_KEY_PREFIX=compat" + strings.ReplaceAll(t.Name(), "/", "_"),
	})
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	waitReady(t, p)
	// Windows are aligned on the clock: counts restart at each hour. Keep
	// the counting steps clear of an hour's edge.
	if left := time.Hour - time.Duration(time.Now().UnixNano())%time.Hour; left < 30*time.Second {
		time.Sleep(left + time.Second)
	}
	ask := func(hits uint32, ds ...*commonrl.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: ds, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	d := func(kv ...string) *commonrl.RateLimitDescriptor {
		out := &commonrl.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Entries = append(out.Entries, &commonrl.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	expect := func(what string, r *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, codes ...rlsv3.RateLimitResponse_Code) {
		t.Helper()
		if r.OverallCode != overall {
			t.Errorf("%s: overall %v, want %v: %v", what, r.OverallCode, overall, r)
		}
		for i, c := range codes {
			if r.Statuses[i].Code != c {
				t.Errorf("%s: status %d is %v, want %v: %v", what, i, r.Statuses[i].Code, c, r)
			}
		}
	}

	t.Run("middle wildcard, named limit", func(t *testing.T) {
		for i, rem := range []uint32{1, 0} {
			r := ask(0, d("path", "/v1/users/action"))
			expect("take", r, OK)
			st := r.Statuses[0]
			if st.LimitRemaining != rem || st.CurrentLimit.GetName() != "action_limit" || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
				t.Errorf("request %d: %v", i, st)
			}
		}
		expect("third", ask(0, d("path", "/v1/users/action")), OVER)
		// Another value has its own count; a non-matching path none.
		expect("other user", ask(0, d("path", "/v1/groups/action")), OK)
		if r := ask(0, d("path", "/v1/users/other")); r.Statuses[0].CurrentLimit != nil || r.OverallCode != OK {
			t.Errorf("unmatched: %v", r)
		}
	})
	t.Run("share_threshold", func(t *testing.T) {
		expect("a", ask(0, d("path", "/files/a")), OK)
		expect("b", ask(0, d("path", "/files/b")), OK)
		expect("c shares the count", ask(0, d("path", "/files/c")), OVER)
	})
	t.Run("each descriptor counts its own hits", func(t *testing.T) {
		r := ask(0, d("remote_address", "10.0.0.1"), d("blocked", "x"))
		expect("with a blocked one", r, OVER, OK, OVER)
		if r.Statuses[0].LimitRemaining != 2 {
			t.Errorf("remaining %d", r.Statuses[0].LimitRemaining)
		}
		if r := ask(0, d("remote_address", "10.0.0.1")); r.Statuses[0].LimitRemaining != 1 {
			t.Errorf("the refused call was not counted: %v", r)
		}
		// Hits above the limit are refused and counted: the window is full.
		r = ask(5, d("remote_address", "10.0.0.2"))
		expect("5 of 3", r, OVER)
		if st := r.Statuses[0]; st.DurationUntilReset == nil || st.DurationUntilReset.AsDuration() <= 0 || st.CurrentLimit.GetRequestsPerUnit() != 3 {
			t.Errorf("5 of 3: no reset or limit: %v", st)
		}
		expect("then 1", ask(1, d("remote_address", "10.0.0.2")), OVER)
	})
	t.Run("requests_per_unit 0, month, year", func(t *testing.T) {
		st := ask(0, d("blocked", "y")).Statuses[0]
		cl := st.CurrentLimit
		if st.Code != OVER || cl.GetName() != "never" || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MONTH || cl.GetRequestsPerUnit() != 0 {
			t.Errorf("blocked: %v", st)
		}
		if r := st.DurationUntilReset.AsDuration(); r <= 0 || r > 30*24*time.Hour {
			t.Errorf("blocked reset %v", r)
		}
		st = ask(0, d("yearly", "y")).Statuses[0]
		if st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_YEAR || st.LimitRemaining != 4 || st.CurrentLimit.GetName() != "" {
			t.Errorf("yearly: %v", st)
		}
	})
	t.Run("overrides", func(t *testing.T) {
		ov := func(rpu uint32, kv ...string) *commonrl.RateLimitDescriptor {
			x := d(kv...)
			x.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit_HOUR}
			return x
		}
		// On an unmatched descriptor, an unlimited one and a shadowed one.
		for _, kv := range [][]string{{"nomatch", "x"}, {"internal", "x"}, {"shadowed", "x"}} {
			expect(kv[0]+" first", ask(0, ov(1, kv...)), OK)
			expect(kv[0]+" second", ask(0, ov(1, kv...)), OVER)
		}
		r := ask(0, ov(0, "remote_address", "10.0.0.3"))
		expect("override 0", r, OVER)
		if r.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("override 0: %v", r)
		}
	})
	t.Run("unlimited, shadow, quota, replaces", func(t *testing.T) {
		if st := ask(0, d("internal", "x")).Statuses[0]; st.Code != OK || st.LimitRemaining != 4294967295 || st.CurrentLimit != nil {
			t.Errorf("unlimited: %v", st)
		}
		for range 3 {
			expect("shadowed", ask(0, d("shadowed", "s")), OK)
		}
		// Quota descriptors refuse the call only when all of them are over.
		expect("quota a", ask(0, d("quota", "a")), OK, OK)
		expect("a over, b not", ask(0, d("quota", "a"), d("quota", "b"), d("internal", "q")), OK, OVER, OK, OK)
		expect("both over", ask(0, d("quota", "a"), d("quota", "b"), d("internal", "q")), OVER, OVER, OVER, OK)
		r := ask(0, d("api", "k"), d("api_user", "u"))
		if r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit.GetName() != "user_high" {
			t.Errorf("replaces: %v", r)
		}
	})
	t.Run("hits_addend 0 looks, is_negative_hits gives back", func(t *testing.T) {
		x := d("remote_address", "10.0.0.4")
		x.HitsAddend = wrapperspb.UInt64(0)
		if st := ask(0, x).Statuses[0]; st.LimitRemaining != 3 {
			t.Errorf("look: %v", st)
		}
		ask(2, d("remote_address", "10.0.0.4"))
		back := d("remote_address", "10.0.0.4")
		back.IsNegativeHits = true
		if st := ask(1, back).Statuses[0]; st.Code != OK || st.LimitRemaining != 2 {
			t.Errorf("give back: %v", st)
		}
	})
	t.Run("README cases", func(t *testing.T) {
		ex := func(ds ...*commonrl.RateLimitDescriptor) *rlsv3.RateLimitResponse {
			t.Helper()
			r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "examples", Descriptors: ds})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		// Nested and flat limits in one call: both count.
		r := ex(d("kind", "promo", "phone", "555"), d("phone", "555"))
		if r.Statuses[0].LimitRemaining != 1 || r.Statuses[1].LimitRemaining != 49 {
			t.Errorf("nested + flat: %v", r)
		}
		expect("promo twice", ex(d("kind", "promo", "phone", "555"), d("phone", "555")), OK, OK, OK)
		expect("promo over, phone counts", ex(d("kind", "promo", "phone", "555"), d("phone", "555")), OVER, OVER, OK)
		if r = ex(d("phone", "555")); r.Statuses[0].LimitRemaining != 46 {
			t.Errorf("phone after 3 calls and this one: %v", r)
		}
		// The most specific match first: a value beats the key alone.
		expect("listed address", ex(d("ip", "50.0.0.5")), OVER)
		if r = ex(d("ip", "50.0.0.1")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Errorf("other address: %v", r)
		}
		// Depth: a request deeper than the tree matches nothing.
		if r = ex(d("top", "t", "sub", "s")); r.Statuses[0].CurrentLimit != nil {
			t.Errorf("deeper: %v", r)
		}
		// shadow_mode on one nested value only.
		for range 2 {
			ex(d("svc", "a", "user", "soft"), d("svc", "a", "user", "hard"))
		}
		expect("soft never, hard over", ex(d("svc", "a", "user", "soft"), d("svc", "a", "user", "hard")), OVER, OK, OVER)
		// replaces: with both, the named limit gives way; alone it applies.
		r = ex(d("k1", "v1", "user", "bk"), d("k2", "v2", "user", "bk"))
		if r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Errorf("replaced: %v", r)
		}
		if r = ex(d("k1", "v1", "user", "bk")); r.Statuses[0].CurrentLimit.GetName() != "specific" || r.Statuses[0].LimitRemaining != 4 {
			t.Errorf("alone: %v", r)
		}
	})
	t.Run("unknown domain", func(t *testing.T) {
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*commonrl.RateLimitDescriptor{d("a", "b")}})
		if err != nil || r.OverallCode != OK {
			t.Errorf("%v %v", r, err)
		}
	})
	t.Run("HTTP /json, /healthcheck, /rlconfig, metrics", func(t *testing.T) {
		body := `{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`
		code, text := httpText(t, "POST", p.HTTP+"/json", body)
		if code != 200 || !strings.Contains(text, `"overallCode":"OK"`) || !strings.Contains(text, `"limitRemaining":499`) {
			t.Errorf("/json: %d %s", code, text)
		}
		body = `{"domain":"rl","descriptors":[{"entries":[{"key":"blocked","value":"z"}]}]}`
		if code, text = httpText(t, "POST", p.HTTP+"/json", body); code != 429 || !strings.Contains(text, "OVER_LIMIT") {
			t.Errorf("/json over: %d %s", code, text)
		}
		if code, _ = httpText(t, "POST", p.HTTP+"/json", `{"domain":`); code != 400 {
			t.Errorf("/json malformed: %d", code)
		}
		if code, text = httpText(t, "GET", p.HTTP+"/healthcheck", ""); code != 200 || text != "OK" {
			t.Errorf("/healthcheck: %d %q", code, text)
		}
		if code, text = httpText(t, "GET", p.Debug+"/rlconfig", ""); code != 200 || !strings.Contains(text, "rl.path_/v1/*/action: unit=HOUR requests_per_unit=2") {
			t.Errorf("/rlconfig: %d %s", code, text)
		}
		_, text = httpText(t, "GET", p.HTTP+"/metrics", "")
		for _, want := range []string{
			`ratelimit_service_rate_limit_total_hits{domain="rl",key1="remote_address",key2=""}`,
			`ratelimit_service_rate_limit_over_limit{domain="rl",key1="path_/files/*",key2=""}`,
			`ratelimit_service_config_load_success 1`,
			`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
	t.Run("reload by swapping the symlink", func(t *testing.T) {
		runtimeTree(t, root, "v2", map[string]string{"a.yaml": strings.Replace(compatA, "requests_per_unit: 3", "requests_per_unit: 1000", 1), "b.yaml": compatB})
		deadline := time.Now().Add(20 * time.Second)
		for {
			st := ask(0, d("remote_address", "10.9.9.9")).Statuses[0]
			if st.CurrentLimit.GetRequestsPerUnit() == 1000 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the swapped configuration was not applied within 20s: %v\n%s", st, p.Logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
		// mongo.yaml is gone from v2: its domain limits nothing any more.
		r, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*commonrl.RateLimitDescriptor{d("database", "users")}})
		if err != nil || r.Statuses[0].CurrentLimit != nil {
			t.Errorf("removed domain: %v %v", r, err)
		}
	})
}

func httpText(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEnvoyCompatSentinel: REDIS_TYPE=sentinel with REDIS_URL
// "<master>,<sentinel>" reaches the primary the Sentinel names.
func TestEnvoyCompatSentinel(t *testing.T) {
	primary := valkeytest.Start(t)
	ss := valkeytest.StartSentinels(t, primary, 1, 0)
	root := t.TempDir()
	runtimeTree(t, root, "v1", map[string]string{"mongo.yaml": compatOther})
	p := serve(t, []string{
		"RUNTIME_ROOT=" + filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=sentinel", "REDIS_URL=" + valkeytest.SentinelMaster + "," + ss.Addrs[0],
		"USE_STATSD=false", "LOG_FORMAT=json", "LOG_LEVEL=info", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
	})
	waitReady(t, p)
	body := `{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`
	if code, text := httpText(t, "POST", p.HTTP+"/json", body); code != 200 || !strings.Contains(text, `"limitRemaining":499`) {
		t.Fatalf("/json: %d %s, want limitRemaining 499", code, text)
	}
	// The count lives on the primary the Sentinel names (a second call's
	// remaining could be 499 again if the second turned between them).
	keys, err := valkeytest.Keys(t.Context(), primary.Client(t), "*")
	if err != nil || len(keys) == 0 {
		t.Fatalf("no counter on the primary the Sentinel names: %v %v", keys, err)
	}
	if !strings.Contains(p.Logs(), "sentinel") {
		t.Errorf("the log does not say sentinel:\n%s", p.Logs())
	}
}
