package server

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/memstore"
)

// TestDenyCacheSwitch: deny_cache: false sends every request to the store
// (a delete behind the server's back is seen at once), the default answers
// a refused key from the cache; a reload that raises a policy's limit
// starts with an empty cache.
func TestDenyCacheSwitch(t *testing.T) {
	const y = `policies:
  - {name: on, algorithm: gcra, burst: 1, rate: 1/h}
  - {name: off, algorithm: gcra, burst: 1, rate: 1/h, deny_cache: false}
`
	cfg, err := config.Parse("test.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	s, err := New(cfg, Options{Store: store, StoreName: "memory", Logger: quietLogger(), Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	check := func(policy string) bool {
		r := do(t, "POST", ts.URL+"/v1/check", `{"policy":"`+policy+`","key":"k"}`)
		return r.body["allowed"] == true
	}
	for _, c := range []struct {
		policy string
		cached bool
	}{{"on", true}, {"off", false}} {
		check(c.policy)
		if check(c.policy) {
			t.Fatalf("%s: the second request of a burst of 1 was allowed", c.policy)
		}
		// Deleted with no notice: only the store's answer changes.
		store.Delete(context.Background(), "rl:v1:"+c.policy+".gcra:gcra:{k}")
		if refused := !check(c.policy); refused != c.cached {
			t.Errorf("deny_cache of %s: refused after a silent delete %v, want %v", c.policy, refused, c.cached)
		}
	}
	check("on")
	if check("on") {
		t.Fatal("not refused")
	}
	raised, err := config.Parse("test.yaml", []byte(`policies:
  - {name: on, algorithm: gcra, burst: 5, rate: 1/h}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(raised); err != nil {
		t.Fatal(err)
	}
	if !check("on") {
		t.Error("refused after a reload raised the burst from 1 to 5")
	}
}
