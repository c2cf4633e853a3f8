package config

import (
	"path"
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

// TestCleanPath: each spelling a backend may serve as /login is /login.
func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"/login":                "/login",
		"/login?x=/../admin":    "/login",
		"/a/../login":           "/login",
		"//login//":             "/login",
		"/%6Cogin":              "/login",
		"/%6cogin":              "/login",
		"/%4Cogin":              "/Login",
		"/a%2F..%2Flogin":       "/login",
		"/%zz/x":                "/%zz/x",
		"/a%":                   "/a%",
		"/a%4":                  "/a%4",
		"/a%252F":               "/a%2F",
		"":                      "/",
		"login":                 "/login",
		"http://h/v1/x?y":       "/v1/x",
		"http://h":              "/",
		"/x/http://h/login":     "/x/http:/h/login",
		"/../../etc":            "/etc",
		"/a/b#frag":             "/a/b",
		"/login;jsessionid=1":   "/login",
		"/login;a=1/x;b=2":      "/login/x",
		"/login%3Bjsessionid=1": "/login",
		"/;x/login":             "/login",
		"/a;x/../login":         "/login",
		"/login/;/":             "/login",
		"\\login":               "/login",
		"/%5Clogin":             "/login",
		"/api/%2e%2e/login":     "/login",
		"/login/.":              "/login",
		"/login%3F":             "/login?",
		"/%C3%A9":               "/\u00e9",
	} {
		got, err := CleanPath(in)
		if err != nil || got != want {
			t.Errorf("CleanPath(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/login%00", "/login\x00", "/log%0Ain", "/login%7F", "/%1f", "/a\tb", "/login%00?x"} {
		if got, err := CleanPath(in); err == nil || !strings.Contains(err.Error(), "control character") {
			t.Errorf("CleanPath(%q) = %q, %v, want a control-character error", in, got, err)
		}
	}
}

// TestMatchPath: case folded by default, kept with path_case: sensitive.
func TestMatchPath(t *testing.T) {
	fa := &ForwardAuth{}
	for _, in := range []string{"/LOGIN", "/Login", "/%4Cogin", "/login;jsessionid=1", "/LOGIN/", "//Login/./"} {
		if got, err := fa.MatchPath(in); err != nil || got != "/login" {
			t.Errorf("MatchPath(%q) = %q, %v, want /login", in, got, err)
		}
	}
	if _, err := fa.MatchPath("/login%00"); err == nil {
		t.Error("MatchPath(/login%00): no error")
	}
	sens := &ForwardAuth{PathCaseSensitive: true}
	if got, _ := sens.MatchPath("/%4Cogin"); got != "/Login" {
		t.Errorf("path_case sensitive: %q", got)
	}
}

// FuzzCleanPath: any input gives an error or a clean absolute path without
// the characters normalisation removes; an input with nothing to
// normalise but dot segments and slashes is path.Clean's.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/login", "/%4Cogin", "/login;jsessionid=1", "/login%00", "/a/../b//c", "http://h/x", "/%", "/%2", "/a%2F..%2F..%2Fb", "\\x", "/;/;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := CleanPath(in)
		if err != nil {
			if got != "" {
				t.Fatalf("CleanPath(%q) = %q with error %v", in, got, err)
			}
			return
		}
		if !strings.HasPrefix(got, "/") || path.Clean(got) != got {
			t.Fatalf("CleanPath(%q) = %q: not a clean absolute path", in, got)
		}
		if strings.ContainsAny(got, ";\\") {
			t.Fatalf("CleanPath(%q) = %q: holds ; or a backslash", in, got)
		}
		for i := 0; i < len(got); i++ {
			if got[i] < 0x20 || got[i] == 0x7f {
				t.Fatalf("CleanPath(%q) = %q: holds a control character", in, got)
			}
		}
		if strings.HasPrefix(in, "/") && !strings.ContainsAny(in, "%;\\?#") && !hasControl(in) && got != path.Clean(in) {
			t.Fatalf("CleanPath(%q) = %q, want path.Clean's %q", in, got, path.Clean(in))
		}
		if !strings.ContainsAny(got, "%?#") {
			if again, err := CleanPath(got); err != nil || again != got {
				t.Fatalf("CleanPath(CleanPath(%q)) = %q, %v, want %q again", in, again, err, got)
			}
		}
	})
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
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

// TestForwardAuthKeyModes: a list or {first: [...]} counts the first key
// present, {all: [...]} each; path_case folds path_prefix.
func TestForwardAuthKeyModes(t *testing.T) {
	c, err := Parse("ok.yaml", []byte(fwdPolicies+`forward_auth:
  trusted_proxies: [10.0.0.1]
  routes:
    - {path_prefix: /Login, limits: [{policy: api, key: {all: [client_ip, header:X-API-Key]}}]}
    - {limits: [{policy: api, key: {first: [header:X-API-Key, client_ip]}}, {policy: api, key: [claim:X-User]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := c.ForwardAuth.Routes
	if !r[0].Limits[0].All || len(r[0].Limits[0].Keys) != 2 || r[1].Limits[0].All || r[1].Limits[1].All || len(r[1].Limits[0].Keys) != 2 {
		t.Errorf("modes: %+v %+v %+v", r[0].Limits[0], r[1].Limits[0], r[1].Limits[1])
	}
	if r[0].PathPrefix != "/login" || c.ForwardAuth.PathCaseSensitive {
		t.Errorf("path_prefix %q folded, sensitive %v", r[0].PathPrefix, c.ForwardAuth.PathCaseSensitive)
	}
	c, err = Parse("ok.yaml", []byte(fwdPolicies+"forward_auth:\n  trusted_proxies: [10.0.0.1]\n  path_case: sensitive\n  routes: [{path_prefix: /Login, limits: [{policy: api, key: client_ip}]}]\n"))
	if err != nil || !c.ForwardAuth.PathCaseSensitive || c.ForwardAuth.Routes[0].PathPrefix != "/Login" {
		t.Fatalf("path_case: sensitive: %v %+v", err, c)
	}
	const head = "forward_auth:\n  trusted_proxies: [10.0.0.1]\n"
	for _, c := range []struct{ name, yaml, want string }{
		{"both", head + "  routes: [{limits: [{policy: api, key: {all: [client_ip], first: [client_ip]}}]}]\n", "both first and all"},
		{"neither", head + "  routes: [{limits: [{policy: api, key: {}}]}]\n", "key must be client_ip"},
		{"other field", head + "  routes: [{limits: [{policy: api, key: {any: [client_ip]}}]}]\n", `unknown field "any"`},
		{"empty all", head + "  routes: [{limits: [{policy: api, key: {all: []}}]}]\n", "key is empty"},
		{"twice", head + "  routes: [{limits: [{policy: api, key: {all: [client_ip, client_ip]}}]}]\n", "client_ip is listed twice"},
		{"path_case", head + "  path_case: upper\n  routes: []\n", "path_case must be insensitive"},
		{"escaped prefix", head + "  routes: [{path_prefix: /%6Cogin, limits: [{policy: api, key: client_ip}]}]\n", `write "/login"`},
		{"param prefix", head + "  routes: [{path_prefix: /login;x, limits: [{policy: api, key: client_ip}]}]\n", `write "/login"`},
		{"query prefix", head + "  routes: [{path_prefix: \"/login?x\", limits: [{policy: api, key: client_ip}]}]\n", "can never match"},
		{"control prefix", head + "  routes: [{path_prefix: \"/login\\0\", limits: [{policy: api, key: client_ip}]}]\n", "can never match"},
	} {
		_, err := Parse("bad.yaml", []byte(fwdPolicies+c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

// TestForwardAuthWarnings: a route every limit of which a client escapes
// with a new header value is warned about; one with a limit per address or
// per claim is not.
func TestForwardAuthWarnings(t *testing.T) {
	for _, c := range []struct {
		key  string
		warn bool
	}{
		{"header:X-API-Key", true},
		{"[header:X-API-Key, client_ip]", true},
		{"[claim:X-User, header:X-API-Key, client_ip]", true},
		{"{all: [header:X-API-Key, header:X-Other]}", true},
		{"{first: [header:X-API-Key, client_ip]}", true},
		{"client_ip", false},
		{"claim:X-User", false},
		{"[claim:X-User, client_ip]", false},
		{"{all: [client_ip, header:X-API-Key]}", false},
		{"{all: [header:X-API-Key, claim:X-User]}", false},
	} {
		cfg, err := Parse("w.yaml", []byte(fwdPolicies+"forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes:\n    - name: r\n      limits: [{policy: api, key: "+c.key+"}]\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		w := cfg.ForwardAuth.Warnings(cfg.Source)
		if got := len(w) > 0; got != c.warn {
			t.Errorf("key %s: warnings %q, want a warning: %v", c.key, w, c.warn)
		}
		if c.warn && (len(w) != 1 || !strings.HasPrefix(w[0], "w.yaml:6: forward_auth route r: ") || !strings.Contains(w[0], "never limited")) {
			t.Errorf("key %s: warning %q", c.key, w)
		}
	}
	// A second limit by address bounds the route.
	cfg, err := Parse("w.yaml", []byte(fwdPolicies+"forward_auth:\n  trusted_proxies: [10.0.0.1]\n  routes: [{limits: [{policy: api, key: header:X-A}, {policy: api, key: client_ip}]}]\n"))
	if err != nil || len(cfg.ForwardAuth.Warnings(cfg.Source)) != 0 {
		t.Errorf("header and client_ip limits: %v %q", err, cfg.ForwardAuth.Warnings(cfg.Source))
	}
}
