package deploytest

// nginx as Debian installs it: a copy of the stock /etc/nginx (package
// nginx-common, whose sites-enabled/default is a default_server on port 80
// serving the welcome page) with the instructions of docs/proxies.md
// carried out in it, so that the shipped file is tested where and as the
// documentation puts it.

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// debianNginx is one such copy.
type debianNginx struct {
	bin  string
	dir  string // the prefix: pid, logs, temporary files
	etc  string // the copy of /etc/nginx
	port int    // what port 80 became
	// sluice and app are the upstreams' addresses (host:port).
	sluice, app string
}

// stockEtcNginx checks that /etc/nginx holds Debian's files as the package
// installed them (each conffile's checksum, sites-enabled/default linked,
// conf.d empty), failing t with how to restore it otherwise.
func stockEtcNginx(t *testing.T) {
	t.Helper()
	const restore = "the test copies Debian's stock /etc/nginx; restore it with: apt-get install --reinstall -o Dpkg::Options::=--force-confnew nginx-common (and remove what was added), or " + installProxies
	out, err := exec.Command("dpkg-query", "-W", "-f=${Conffiles}", "nginx-common").Output()
	if err != nil {
		t.Fatalf("dpkg-query nginx-common: %v: %s", err, restore)
	}
	checked := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[0], "/etc/nginx/") || slices.Contains(f, "obsolete") {
			continue
		}
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatalf("%v: %s", err, restore)
		}
		if sum := md5.Sum(b); hex.EncodeToString(sum[:]) != f[1] {
			t.Fatalf("%s differs from the file package nginx-common installed: %s", f[0], restore)
		}
		checked++
	}
	if checked == 0 {
		t.Fatalf("dpkg-query lists no /etc/nginx conffiles of nginx-common: %s", restore)
	}
	if target, err := os.Readlink("/etc/nginx/sites-enabled/default"); err != nil || target != "/etc/nginx/sites-available/default" {
		t.Fatalf("/etc/nginx/sites-enabled/default is not the stock link to sites-available/default (%q, %v): %s", target, err, restore)
	}
	for _, d := range []string{"/etc/nginx/conf.d", "/etc/nginx/sites-enabled"} {
		entries, err := os.ReadDir(d)
		if err != nil || (d == "/etc/nginx/conf.d" && len(entries) != 0) || (d == "/etc/nginx/sites-enabled" && len(entries) != 1) {
			t.Fatalf("%s does not hold what the package put there (%v): %s", d, err, restore)
		}
	}
}

// newDebianNginx copies the stock /etc/nginx into a temporary directory,
// with the paths, port 80 and the shipped upstreams moved to the test's.
func newDebianNginx(t *testing.T, sluiceHP, appHP string) *debianNginx {
	t.Helper()
	n := &debianNginx{bin: lookTool(t, "nginx"), dir: t.TempDir(), port: freePort(t), sluice: sluiceHP, app: appHP}
	stockEtcNginx(t)
	n.etc = filepath.Join(n.dir, "etc", "nginx")
	err := filepath.WalkDir("/etc/nginx", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := n.path(p)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(n.path(target), dst)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o644)
		}
	})
	if err != nil {
		t.Fatalf("copying /etc/nginx: %v", err)
	}
	for _, f := range []string{"nginx.conf", "sites-available/default"} {
		n.rewrite(t, filepath.Join(n.etc, f))
	}
	// Temporary files in the test's directory, not /var/lib/nginx.
	main := filepath.Join(n.etc, "nginx.conf")
	b, _ := os.ReadFile(main)
	temp := fmt.Sprintf("http {\n\tclient_body_temp_path %[1]s/body;\n\tproxy_temp_path %[1]s/proxy;\n\tfastcgi_temp_path %[1]s/fastcgi;\n\tuwsgi_temp_path %[1]s/uwsgi;\n\tscgi_temp_path %[1]s/scgi;\n", n.dir)
	if err := os.WriteFile(main, []byte(replaceAll(t, "/etc/nginx/nginx.conf", string(b), "http {\n", temp)), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// path maps a path under /etc/nginx to the copy's.
func (n *debianNginx) path(p string) string {
	if rest, ok := strings.CutPrefix(p, "/etc/nginx"); ok {
		return n.etc + rest
	}
	return p
}

var (
	listen80   = regexp.MustCompile(`\blisten(\s+)80\b`)
	listenV680 = regexp.MustCompile(`\blisten(\s+)\[::\]:80\b`)
)

// rewrite moves a configuration file's absolute paths, port 80 and the
// shipped upstream addresses to the test's.
func (n *debianNginx) rewrite(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	s = strings.ReplaceAll(s, "/etc/nginx", n.etc)
	s = strings.ReplaceAll(s, "/run/nginx.pid", filepath.Join(n.dir, "nginx.pid"))
	s = strings.ReplaceAll(s, "/var/log/nginx", n.dir)
	s = listen80.ReplaceAllString(s, fmt.Sprintf("listen${1}%d", n.port))
	s = listenV680.ReplaceAllString(s, fmt.Sprintf("listen${1}[::]:%d", n.port))
	s = strings.ReplaceAll(s, "server 127.0.0.1:8080;", "server "+n.sluice+";")
	s = strings.ReplaceAll(s, "server 127.0.0.1:3000;", "server "+n.app+";")
	if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// args are nginx's command-line arguments for the copy, before extra.
func (n *debianNginx) args(extra ...string) []string {
	return append([]string{"-p", n.dir + "/", "-c", filepath.Join(n.etc, "nginx.conf"), "-e", "stderr",
		"-g", "daemon off; master_process off;"}, extra...)
}

// test runs nginx -t on the copy, returning its output and whether it passed.
func (n *debianNginx) test() (string, bool) {
	out, err := exec.Command(n.bin, n.args("-t")...).CombinedOutput()
	return string(out), err == nil
}

// nginxInstructions returns the commands docs/proxies.md gives for nginx
// (the lines of its sh blocks that name /etc/nginx or run nginx), split at
// &&, and checks that deploy/nginx/sluice.conf's header gives the same.
func nginxInstructions(t *testing.T) [][]string {
	t.Helper()
	pick := func(lines []string) [][]string {
		var out [][]string
		for _, line := range lines {
			if !strings.Contains(line, "/etc/nginx") && !strings.HasPrefix(line, "nginx ") {
				continue
			}
			for _, part := range strings.Split(line, "&&") {
				if f := strings.Fields(part); len(f) > 0 {
					out = append(out, f)
				}
			}
		}
		return out
	}
	doc := pick(shellLines(t, filepath.Join(repoRoot, "docs", "proxies.md")))
	b, err := os.ReadFile("nginx/sluice.conf")
	if err != nil {
		t.Fatal(err)
	}
	var header []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		if cmd, ok := strings.CutPrefix(line, "#   "); ok {
			if i := strings.Index(cmd, " #"); i >= 0 {
				cmd = cmd[:i]
			}
			header = append(header, strings.TrimSpace(cmd))
		}
	}
	conf := pick(header)
	if fmt.Sprint(doc) != fmt.Sprint(conf) {
		t.Fatalf("docs/proxies.md gives the nginx commands %q, deploy/nginx/sluice.conf's header %q: they should be the same", doc, conf)
	}
	if len(doc) == 0 {
		t.Fatal("docs/proxies.md gives no commands for nginx")
	}
	return doc
}

// install carries out the instructions in the copy: cp, rm, ln -s and
// nginx -t (which must pass); nginx -s reload is left to start.
func (n *debianNginx) install(t *testing.T, cmds [][]string, skip func([]string) bool) {
	t.Helper()
	for _, c := range cmds {
		if skip != nil && skip(c) {
			continue
		}
		switch {
		case c[0] == "cp" && len(c) == 3:
			dst := n.path(c[2])
			if st, err := os.Stat(dst); strings.HasSuffix(c[2], "/") || (err == nil && st.IsDir()) {
				dst = filepath.Join(dst, filepath.Base(c[1]))
			}
			mustCopy(t, filepath.Join(repoRoot, c[1]), dst, 0o644)
			n.rewrite(t, dst)
		case c[0] == "rm" && len(c) >= 2:
			for _, p := range c[1:] {
				if p == "-f" {
					continue
				}
				if err := os.Remove(n.path(p)); err != nil {
					t.Fatalf("%q: %v", c, err)
				}
			}
		case c[0] == "ln" && len(c) == 4 && c[1] == "-s":
			if err := os.Symlink(n.path(c[2]), n.path(c[3])); err != nil {
				t.Fatalf("%q: %v", c, err)
			}
		case c[0] == "nginx" && len(c) == 2 && c[1] == "-t":
			if out, ok := n.test(); !ok {
				t.Fatalf("nginx -t on the stock Debian configuration with the instructions carried out fails:\n%s", out)
			}
		case c[0] == "nginx" && len(c) == 3 && c[1] == "-s" && c[2] == "reload":
		default:
			t.Fatalf("docs/proxies.md: the test does not know how to carry out %q", c)
		}
	}
}

// startNginx runs nginx on a copy of Debian's stock configuration with
// docs/proxies.md's instructions carried out in it, returning its URL.
func startNginx(t *testing.T, s *stack) string {
	t.Helper()
	n := newDebianNginx(t, s.sluiceHP, s.appHP)
	n.install(t, nginxInstructions(t), nil)
	runProxy(t, "nginx", n.port, []string{}, append([]string{n.bin}, n.args()...)...)
	return fmt.Sprintf("http://127.0.0.1:%d", n.port)
}

// TestNginxDebianDefaultKept: whoever copies the shipped file but keeps
// Debian's default site is stopped by nginx -t (two default servers on
// port 80), rather than served the welcome page.
func TestNginxDebianDefaultKept(t *testing.T) {
	n := newDebianNginx(t, "127.0.0.1:1", "127.0.0.1:2")
	removed := false
	n.install(t, nginxInstructions(t), func(c []string) bool {
		skip := c[0] == "rm" && slices.Contains(c, "/etc/nginx/sites-enabled/default")
		removed = removed || skip
		return skip || c[0] == "nginx"
	})
	if !removed {
		t.Fatal("docs/proxies.md does not say to remove /etc/nginx/sites-enabled/default")
	}
	out, ok := n.test()
	if ok || !strings.Contains(out, "duplicate default server") {
		t.Fatalf("nginx -t with Debian's default site kept: passed %v, want a failure naming the duplicate default server:\n%s", ok, out)
	}
}

// TestNginxDebianBesideDefault: the documented alternative to removing
// Debian's default site (default_server dropped from sluice.conf's listen
// lines, server_name set): requests for that name reach the application
// through Sluice, the others still get the default site.
func TestNginxDebianBesideDefault(t *testing.T) {
	s := startStack(t)
	n := newDebianNginx(t, s.sluiceHP, s.appHP)
	n.install(t, nginxInstructions(t), func(c []string) bool {
		return (c[0] == "rm" && slices.Contains(c, "/etc/nginx/sites-enabled/default")) || c[0] == "nginx"
	})
	conf := filepath.Join(n.etc, "conf.d", "sluice.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	edited := replaceAll(t, "nginx/sluice.conf", string(b), " default_server;", ";", "server_name _;", "server_name app.example;")
	if err := os.WriteFile(conf, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := n.test(); !ok {
		t.Fatalf("nginx -t with server_name set and Debian's default kept:\n%s", out)
	}
	runProxy(t, "nginx", n.port, []string{}, append([]string{n.bin}, n.args()...)...)
	base := fmt.Sprintf("http://127.0.0.1:%d", n.port)
	req, _ := http.NewRequest("GET", base+"/items", nil)
	req.Host = "app.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "app" || resp.Header.Get("X-Ratelimit-Limit") != "20" {
		t.Errorf("Host app.example: %d %q %v, want the application's answer with X-RateLimit-Limit 20", resp.StatusCode, body, resp.Header)
	}
	if a := send(t, "GET", base+"/items"); a.code == 200 && a.body == "app" {
		t.Errorf("another Host reached the application: the default site should answer it")
	}
}
