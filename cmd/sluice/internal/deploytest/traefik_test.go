package deploytest

import (
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/valkeytest"
	"go.yaml.in/yaml/v3"
)

// TestTraefikConfig checks deploy/traefik/dynamic.yaml against a running
// sluice serve (no Traefik runs here): the forwardAuth address is the
// endpoint that reads X-Forwarded-* and refuses with 429 and Retry-After,
// forwarded headers from clients are not trusted, the headers it copies to
// the application are ones Sluice sends, and the router uses the middleware.
func TestTraefikConfig(t *testing.T) {
	b, err := os.ReadFile("traefik/dynamic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		HTTP struct {
			Middlewares map[string]struct {
				ForwardAuth *struct {
					Address             string   `yaml:"address"`
					TrustForwardHeader  bool     `yaml:"trustForwardHeader"`
					AuthResponseHeaders []string `yaml:"authResponseHeaders"`
				} `yaml:"forwardAuth"`
			} `yaml:"middlewares"`
			Routers map[string]struct {
				EntryPoints []string `yaml:"entryPoints"`
				Rule        string   `yaml:"rule"`
				Middlewares []string `yaml:"middlewares"`
				Service     string   `yaml:"service"`
			} `yaml:"routers"`
			Services map[string]any `yaml:"services"`
		} `yaml:"http"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	mw, ok := cfg.HTTP.Middlewares["sluice"]
	if !ok || mw.ForwardAuth == nil {
		t.Fatal("no forwardAuth middleware named sluice")
	}
	fa := mw.ForwardAuth
	if fa.TrustForwardHeader {
		t.Error("trustForwardHeader: true lets clients choose X-Forwarded-For")
	}
	for name, r := range cfg.HTTP.Routers {
		if len(r.Middlewares) == 0 || r.Middlewares[0] != "sluice" {
			t.Errorf("router %s does not ask sluice first: %v", name, r.Middlewares)
		}
		if _, ok := cfg.HTTP.Services[r.Service]; !ok {
			t.Errorf("router %s: no service %q", name, r.Service)
		}
	}
	u, err := url.Parse(fa.Address)
	if err != nil {
		t.Fatal(err)
	}

	v := valkeytest.Start(t)
	p := start(t, binary(t), nil, nil, "serve", "--config", mustAbs(t, "forward-auth.yaml"), "--valkey", v.Addr,
		"--listen", "127.0.0.1:0", "--grpc-listen", "off")
	waitReady(t, p)
	// Ask as Traefik does: GET to the address with X-Forwarded-*.
	ask := func() *http.Response {
		req, _ := http.NewRequest("GET", p.HTTP+u.Path, nil)
		req.Header.Set("X-Forwarded-Method", "POST")
		req.Header.Set("X-Forwarded-Uri", "/login?next=/")
		req.Header.Set("X-Forwarded-Host", "example.com")
		req.Header.Set("X-Forwarded-For", "192.0.2.10")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i := 0; i < 5; i++ {
		resp := ask()
		if resp.StatusCode != 200 {
			t.Fatalf("ask %d: %d", i, resp.StatusCode)
		}
	}
	if resp := ask(); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("sixth login: %d %v, want 429 with Retry-After", resp.StatusCode, resp.Header)
	}
	// The copied headers are ones Sluice sends on an allowed answer.
	req, _ := http.NewRequest("GET", p.HTTP+u.Path, nil)
	req.Header.Set("X-Forwarded-Uri", "/items")
	req.Header.Set("X-Forwarded-For", "192.0.2.10")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, h := range fa.AuthResponseHeaders {
		if resp.Header.Get(h) == "" {
			t.Errorf("authResponseHeaders lists %s, which Sluice does not send (it sent %v)", h, resp.Header)
		}
	}
}
