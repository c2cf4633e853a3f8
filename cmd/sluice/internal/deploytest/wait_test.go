package deploytest

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNginxWait: through a real nginx with deploy/nginx, a request a
// policy with wait refuses waits in Sluice for the next token and then
// passes to the application; sluice serve counts it admitted. The wait
// (about a second) is longer than the shipped proxy_read_timeout of
// /_sluice, raised as deploy/nginx/sluice.conf says to for a wait.
func TestNginxWait(t *testing.T) {
	s := startStackEdited(t, func(y string) string {
		return replaceAll(t, "forward-auth.yaml", y, "    burst: 20\n    rate: 5/s\n", "    burst: 1\n    rate: 1/s\n    wait: 5s\n")
	})
	base := startNginxEdited(t, s, func(conf string) string {
		return replaceAll(t, "nginx/sluice.conf", conf, "        proxy_read_timeout 1s;\n    }\n\n    # Refused:", "        proxy_read_timeout 7s;\n    }\n\n    # Refused:")
	})
	for i := 1; i <= 2; i++ { // the second waits for the token the first left
		if a := send(t, "GET", base+"/items"); a.code != 200 || a.body != "app" {
			t.Fatalf("request %d: %d %q %v", i, a.code, a.body, a.header)
		}
	}
	if got := scrapeLine(t, s.sluice.HTTP, `sluice_server_waits_total{limiter="api.token_bucket",outcome="admitted"}`); got != "1" {
		t.Fatalf("admitted waits %q, want 1", got)
	}
	if n := len(s.seen()); n != 2 {
		t.Fatalf("the application saw %d requests, want 2", n)
	}
}

// startNginxEdited is startNginx with the installed sluice.conf changed
// by edit.
func startNginxEdited(t *testing.T, s *stack, edit func(string) string) string {
	t.Helper()
	n := newDebianNginx(t, s.sluiceHP, s.appHP)
	n.install(t, nginxInstructions(t), nil)
	conf := filepath.Join(n.etc, "conf.d", "sluice.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte(edit(string(b))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := n.test(); !ok {
		t.Fatalf("nginx -t on the edited sluice.conf:\n%s", out)
	}
	runProxy(t, "nginx", n.port, []string{}, append([]string{n.bin}, n.args()...)...)
	return fmt.Sprintf("http://127.0.0.1:%d", n.port)
}

// scrapeLine returns the value of the metric line that starts with
// series in base's /metrics, "" when there is none.
func scrapeLine(t *testing.T, base, series string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}
