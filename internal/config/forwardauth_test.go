package config

import (
	"strings"
	"testing"
)

const fwdPolicies = "policies:\n  - {name: api, algorithm: gcra, burst: 5, rate: 5/s}\n"

func TestForwardAuthSection(t *testing.T) {
	c, err := Parse("ok.yaml", []byte(fwdPolicies+`forward_auth:
  trusted_proxies: [10.0.0.0/8, "::1"]
  client_ip_header: x-real-ip
  unmatched: deny
  routes:
    - {name: a, path_prefix: /api/, methods: [GET, POST], host: "*.Example.com", limits: [{policy: api, key: [header:x-api-key, claim:X-User, client_ip]}]}
    - {limits: [{policy: api, key: client_ip}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	fa := c.ForwardAuth
	if len(fa.TrustedProxies) != 2 || fa.ClientIPHeader != "X-Real-Ip" || fa.Unmatched != UnmatchedDeny || len(fa.Routes) != 2 {
		t.Fatalf("%+v", fa)
	}
	r := fa.Routes[0]
	if r.PathPrefix != "/api" || r.Host != "*.example.com" || len(r.Methods) != 2 {
		t.Errorf("route: %+v", r)
	}
	var keys []string
	for _, k := range r.Limits[0].Keys {
		keys = append(keys, k.String())
	}
	if strings.Join(keys, " ") != "header:X-Api-Key claim:X-User client_ip" {
		t.Errorf("keys %v", keys)
	}
	if fa.Routes[1].Name != "route 2" {
		t.Errorf("default name %q", fa.Routes[1].Name)
	}
}

func TestForwardAuthErrors(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"no proxies", "forward_auth:\n  routes: []\n", "trusted_proxies is missing or empty"},
		{"bad proxy", "forward_auth:\n  trusted_proxies: [10.0.0.0/33]\n  routes: []\n", "bad.yaml:4:21: forward_auth.trusted_proxies"},
		{"no routes", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n", "routes is missing"},
		{"unknown field", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  route: []\n", `unknown field "route" (did you mean "routes"?`},
		{"unmatched", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  unmatched: maybe\n  routes: []\n", "unmatched must be allow (no limit) or deny"},
		{"unknown policy", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{limits: [{policy: apx, key: client_ip}]}]\n", `policy "apx" is not defined`},
		{"bad key", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{limits: [{policy: api, key: cookie:x}]}]\n", `key "cookie:x" must be client_ip, header:NAME or claim:NAME`},
		{"bad header name", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{limits: [{policy: api, key: 'header:a b'}]}]\n", `must be client_ip`},
		{"no key", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{limits: [{policy: api}]}]\n", "has no key"},
		{"no limits", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{path_prefix: /a}]\n", "limits is missing"},
		{"relative prefix", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{path_prefix: api, limits: [{policy: api, key: client_ip}]}]\n", "path_prefix must start with /"},
		{"unclean prefix", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{path_prefix: /a/../b, limits: [{policy: api, key: client_ip}]}]\n", `write "/b"`},
		{"method", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{methods: [get], limits: [{policy: api, key: client_ip}]}]\n", "upper-case HTTP method"},
		{"host port", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{host: 'a.com:80', limits: [{policy: api, key: client_ip}]}]\n", "host must be a host name without port"},
		{"host wildcard", "forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{host: 'a.*.com', limits: [{policy: api, key: client_ip}]}]\n", "host must be"},
	} {
		_, err := Parse("bad.yaml", []byte(fwdPolicies+c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"/login":             "/login",
		"/login?x=/../admin": "/login",
		"/a/../login":        "/login",
		"//login//":          "/login",
		"/%6Cogin":           "/login",
		"/a%2F..%2Flogin":    "/login",
		"/%zz/x":             "/%zz/x",
		"":                   "/",
		"login":              "/login",
		"http://h/v1/x?y":    "/v1/x",
		"/../../etc":         "/etc",
		"/a/b#frag":          "/a/b",
	} {
		if got := CleanPath(in); got != want {
			t.Errorf("CleanPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRouteMatches(t *testing.T) {
	r := &Route{PathPrefix: "/api", Methods: []string{"GET"}, Host: "*.example.com"}
	for _, c := range []struct {
		method, path, host string
		want               bool
	}{
		{"GET", "/api", "a.example.com", true},
		{"GET", "/api/x", "A.Example.com:8443", true},
		{"GET", "/apix", "a.example.com", false},
		{"POST", "/api", "a.example.com", false},
		{"GET", "/api", "example.com", false},
		{"GET", "/api", "badexample.com", false},
		{"GET", "/api", "[::1]:80", false},
	} {
		if got := r.Matches(c.method, c.path, c.host); got != c.want {
			t.Errorf("%+v: %v", c, got)
		}
	}
	exact := &Route{Host: "example.com"}
	if !exact.Matches("GET", "/", "EXAMPLE.com:80") || exact.Matches("GET", "/", "a.example.com") {
		t.Error("exact host")
	}
	if !(&Route{}).Matches("DELETE", "/anything", "") {
		t.Error("a route without conditions matches everything")
	}
}
