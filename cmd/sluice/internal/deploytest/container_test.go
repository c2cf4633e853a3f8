package deploytest

// The Containerfile: what it builds, and that the result serves from an
// empty root directory with an empty environment, as in its scratch image.

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/valkeytest"
)

type instruction struct {
	cmd  string // FROM, RUN, COPY, ...
	args string
}

// parseContainerfile reads deploy/Containerfile's instructions (comments
// dropped, continuation lines joined).
func parseContainerfile(t *testing.T) []instruction {
	t.Helper()
	b, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || (line == "" && cur == "") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		cur += line
		cmd, args, _ := strings.Cut(cur, " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur = ""
	}
	return out
}

// finalStage returns the instructions of the last stage.
func finalStage(t *testing.T) []instruction {
	ins := parseContainerfile(t)
	last := 0
	for i, in := range ins {
		if in.cmd == "FROM" {
			last = i
		}
	}
	return ins[last:]
}

func jsonArgs(t *testing.T, in instruction) []string {
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		t.Fatalf("Containerfile %s %s: not a JSON array: %v", in.cmd, in.args, err)
	}
	return v
}

// image describes the final stage.
type image struct {
	from       string
	user       string
	entrypoint []string
	cmd        []string
	expose     []int
	copies     map[string]string // destination -> source
}

func finalImage(t *testing.T) image {
	t.Helper()
	im := image{copies: map[string]string{}}
	for _, in := range finalStage(t) {
		switch in.cmd {
		case "FROM":
			im.from = in.args
		case "USER":
			im.user = in.args
		case "ENTRYPOINT":
			im.entrypoint = jsonArgs(t, in)
		case "CMD":
			im.cmd = jsonArgs(t, in)
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				n, err := strconv.Atoi(p)
				if err != nil {
					t.Fatalf("EXPOSE %s", in.args)
				}
				im.expose = append(im.expose, n)
			}
		case "COPY":
			f := strings.Fields(in.args)
			src, dst := f[len(f)-2], f[len(f)-1]
			im.copies[dst] = src
		}
	}
	return im
}

func portOf(t *testing.T, where, addr string) int {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	n, err := strconv.Atoi(addr[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("%s: address %q has no port", where, addr)
	}
	return n
}

// TestContainerfile checks the image's shape against the binary: an empty
// base, a non-root user, a static binary, a command line of real flags
// listening on every interface, on the ports it exposes, with a config it
// ships and that validates.
func TestContainerfile(t *testing.T) {
	im := finalImage(t)
	if im.from != "scratch" {
		t.Errorf("final stage FROM %s, want scratch (nothing but the binary)", im.from)
	}
	if im.user == "" || strings.HasPrefix(im.user, "0") || strings.HasPrefix(im.user, "root") {
		t.Errorf("USER %q: the image must not run as root", im.user)
	}
	if len(im.entrypoint) != 1 || im.copies[im.entrypoint[0]] == "" {
		t.Fatalf("ENTRYPOINT %q is not the copied binary (copies: %v)", im.entrypoint, im.copies)
	}
	env, args := containerBuild(t)
	if !slicesContains(env, "CGO_ENABLED=0") {
		t.Errorf("build env %q: want CGO_ENABLED=0 for a static binary", env)
	}
	if args[len(args)-1] != "./cmd/sluice" {
		t.Errorf("build command %q does not build ./cmd/sluice", args)
	}
	vals := serveArgs(t, "Containerfile CMD", im.cmd)
	var listening []int
	for _, name := range []string{"listen", "grpc-listen"} {
		addr := vals[name]
		if !strings.HasPrefix(addr, ":") && !strings.HasPrefix(addr, "0.0.0.0:") && !strings.HasPrefix(addr, "[::]:") {
			t.Errorf("CMD --%s %q: in a container it must listen on every interface", name, addr)
		}
		listening = append(listening, portOf(t, "CMD --"+name, addr))
	}
	if !equalInts(listening, im.expose) {
		t.Errorf("CMD listens on %v, EXPOSE says %v", listening, im.expose)
	}
	src := im.copies[vals["config"]]
	if src == "" {
		t.Fatalf("CMD --config %s is not copied into the image", vals["config"])
	}
	if _, err := config.Load(filepath.Join(repoRoot, src)); err != nil {
		t.Errorf("the image's config %s: %v", src, err)
	}

	bin := binary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary needs a dynamic loader: it would not run FROM scratch")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v: it would not run FROM scratch", libs)
	}
	// The fallback roots are what valkey.tls: true uses in an image without
	// /etc/ssl (cmd/sluice/embed.go); their module must be linked.
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range bi.Deps {
		found = found || d.Path == "golang.org/x/crypto/x509roots/fallback"
	}
	if !found {
		t.Errorf("golang.org/x/crypto/x509roots/fallback is not linked: TLS to Valkey would find no roots in an empty image")
	}
}

// TestEmptyRoot runs the binary the way the image does: chrooted into a
// directory holding only the binary and its config (as the image holds),
// as user 65532, with an empty environment. It must serve, reach Valkey
// and decide; with TZ set, its log times carry that zone (embedded tzdata:
// there is no /usr/share/zoneinfo).
func TestEmptyRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestEmptyRoot chroots into an empty directory: run the tests as root (CI does)")
	}
	im := finalImage(t)
	uid, gid := userOf(t, im.user)
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for dst, src := range im.copies {
		if strings.HasPrefix(src, "--from=") || src == "/out/sluice" {
			continue
		}
		mustCopy(t, filepath.Join(repoRoot, src), filepath.Join(root, dst), 0o644)
	}
	mustCopy(t, binary(t), filepath.Join(root, im.entrypoint[0]), 0o755)
	entries, _ := os.ReadDir(filepath.Join(root, "etc"))
	if len(entries) != 1 || entries[0].Name() != "sluice" {
		t.Fatalf("the empty root's /etc holds %v, want only sluice/", entries)
	}

	v := valkeytest.Start(t)
	vals := serveArgs(t, "Containerfile CMD", im.cmd)
	args := runnable(t, "Containerfile CMD", im.cmd, vals["config"], v.Addr)
	attr := func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	}
	p := start(t, im.entrypoint[0], []string{}, attr(), args...)
	if code, body := get(t, p.HTTP+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if body := waitReady(t, p); !strings.Contains(body, `"store":"valkey"`) {
		t.Errorf("/readyz: %s", body)
	}
	code, body := post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"empty-root"}`)
	if code != 200 || !strings.Contains(body, `"allowed":true`) || strings.Contains(body, `"degraded":true`) {
		t.Errorf("/v1/check: %d %s", code, body)
	}
	p.Stop()

	// Time zones from the embedded database.
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatalf("the host has no Europe/Berlin: %v", err)
	}
	p = start(t, im.entrypoint[0], []string{"TZ=Europe/Berlin"}, attr(), args...)
	want := time.Now().In(berlin).Format("-07:00")
	m := regexp.MustCompile(`"time":"[0-9T:.-]+(Z|[+-]\d\d:\d\d)"`).FindStringSubmatch(p.Logs())
	if m == nil || m[1] != want {
		t.Errorf("with TZ=Europe/Berlin the log's zone is %q, want %s (is time/tzdata embedded?)\n%s", m, want, p.Logs())
	}
}

func userOf(t *testing.T, user string) (uint32, uint32) {
	u, g, ok := strings.Cut(user, ":")
	if !ok {
		g = u
	}
	un, err1 := strconv.Atoi(u)
	gn, err2 := strconv.Atoi(g)
	if err1 != nil || err2 != nil {
		t.Fatalf("USER %q: want numeric uid:gid (a scratch image has no /etc/passwd)", user)
	}
	return uint32(un), uint32(gn)
}

func mustCopy(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
