package modules_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository's root directory (tests run in internal/modules).
const root = "../.."

// library are the packages of the library module a user may import.
var library = []string{
	"", "/clientip", "/httplimit", "/httplimit/sfvtest", "/login", "/luascript", "/memstore",
	"/sluicetest", "/valkeystore", "/valkeytest", "/valkeytest/spawn", "/valkeytest/syncbuf", "/waiting",
}

// heavy are the service's dependencies, which a user of the library must
// not carry in its module graph.
var heavy = []string{"google.golang.org/grpc", "prometheus", "chromedp", "gonum", "fsnotify", "envoyproxy", "yaml", "jsonschema", "opentelemetry", "valkeyotel"}

// viaValkeyGo are those of heavy that valkey-go's own go.mod requires (YAML,
// for its tests' gomega): in the graph of any user of valkey-go, but never
// a requirement of the library.
var viaValkeyGo = map[string]bool{"yaml": true}

// TestConsumerGraph builds a module outside the repository that imports
// every package of the library, as a user's would (a replace directive to
// the work tree stands for the published version), and checks that its
// module graph holds none of the service's dependencies.
func TestConsumerGraph(t *testing.T) {
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mod := "module example.com/consumer\n\ngo 1.26.0\n\nrequire github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000\n\nreplace github.com/sluicehq/sluice => " + abs + "\n"
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, p := range library {
		src.WriteString("\t_ \"github.com/sluicehq/sluice" + p + "\"\n")
	}
	src.WriteString(")\n\nfunc main() {}\n")
	for name, data := range map[string]string{"go.mod": mod, "main.go": src.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gocmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s\n(the module proxy must be reachable)", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	gocmd("mod", "tidy")
	gocmd("build", "./...")
	all := gocmd("list", "-m", "all")
	graph := gocmd("mod", "graph")
	for _, h := range heavy {
		if viaValkeyGo[h] {
			// Only valkey-go may bring it: no requirement of the library's.
			for _, edge := range strings.Split(graph, "\n") {
				from, to, _ := strings.Cut(edge, " ")
				if strings.Contains(to, h) && !strings.HasPrefix(from, "github.com/valkey-io/valkey-go@") {
					t.Errorf("%s requires %s", from, to)
				}
			}
			continue
		}
		for _, line := range strings.Split(all, "\n") {
			if strings.Contains(line, h) {
				t.Errorf("a user of the library carries %s (%s) in its module graph", h, line)
			}
		}
	}
	if t.Failed() {
		t.Logf("go list -m all:\n%s\ngo mod graph:\n%s", all, graph)
	}
}

// TestModuleBoundaries lists every package of every module of the
// repository with its tests' dependencies, and checks that a package of
// the repository imports the repository's internal packages only from its
// own module.
func TestModuleBoundaries(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && p != root) {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 6 {
		t.Fatalf("found modules %v, want at least the library, the service, sluiceprom, sluiceotel, grpclimit and redisstore", dirs)
	}
	const repo = "github.com/sluicehq/sluice"
	for _, dir := range dirs {
		cmd := exec.Command("go", "list", "-e", "-deps", "-test", "-f", "{{.ImportPath}}\t{{with .Module}}{{.Path}}{{end}}\t{{join .Imports \" \"}}", "./...")
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: go list: %v", dir, err)
		}
		module := map[string]string{}
		imports := map[string][]string{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			f := strings.Split(sc.Text(), "\t")
			if len(f) != 3 {
				continue
			}
			p := strip(f[0])
			module[p] = f[1]
			for _, im := range strings.Fields(f[2]) {
				imports[p] = append(imports[p], strip(im))
			}
		}
		for p, ims := range imports {
			if !strings.HasPrefix(p, repo) {
				continue
			}
			for _, im := range ims {
				if strings.HasPrefix(im, repo) && (strings.Contains(im, "/internal/") || strings.HasSuffix(im, "/internal")) && module[im] != module[p] {
					t.Errorf("%s (module %s) imports %s, internal to module %s", p, module[p], im, module[im])
				}
			}
		}
	}
}

// TestNoReplace: no module's go.mod holds a replace directive (go.work
// ties the work tree together), since go install refuses a module that
// does: `go install github.com/sluicehq/sluice/cmd/sluice@latest` must work.
func TestNoReplace(t *testing.T) {
	mods, err := filepath.Glob(filepath.Join(root, "*", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mods = append(mods, filepath.Join(root, "go.mod"), filepath.Join(root, "cmd", "sluice", "go.mod"))
	for _, m := range mods {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "replace") {
				t.Errorf("%s: %q: a replace directive (go.work replaces the modules for development)", m, line)
			}
		}
	}
}

// strip drops the test variant's suffix of a package path ("p [p.test]").
func strip(p string) string {
	p, _, _ = strings.Cut(p, " ")
	return p
}

// core are the library's packages that import only the standard library
// and the packages listed (docs/modules.md): the root package and driver,
// and waiting, which httplimit, grpclimit and sluice serve all import.
var core = map[string][]string{
	"":         {"/driver"},
	"/driver":  nil,
	"/waiting": {"/driver"},
}

// TestCoreImports checks, with every dependency (not only the direct
// imports), that each package of core depends only on the standard
// library and the packages it lists.
func TestCoreImports(t *testing.T) {
	const repo = "github.com/sluicehq/sluice"
	for p, allowed := range core {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", "."+p)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", repo+p, err)
		}
		ok := map[string]bool{repo + p: true}
		for _, a := range allowed {
			ok[repo+a] = true
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			dep, std, _ := strings.Cut(line, " ")
			if std != "true" && !ok[dep] {
				t.Errorf("%s depends on %s: only the standard library and %v", repo+p, dep, allowed)
			}
		}
	}
}
