package modules_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneOptionStyle: every package of the repository that configures with
// functional options declares them as the root package does, an Option
// interface with an unexported method (so that only the package makes
// them), never as a function type. Packages configured by data use a
// Config struct instead, which is not an Option.
func TestOneOptionStyle(t *testing.T) {
	found := 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && p != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, spec := range g.Specs {
				ts := spec.(*ast.TypeSpec)
				if ts.Name.Name != "Option" {
					continue
				}
				found++
				it, ok := ts.Type.(*ast.InterfaceType)
				if !ok || len(it.Methods.List) != 1 || len(it.Methods.List[0].Names) != 1 || ast.IsExported(it.Methods.List[0].Names[0].Name) {
					t.Errorf("%s: type Option is not an interface with one unexported method, as the root package's", p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 5 {
		t.Fatalf("found %d Option types, want the root's, memstore's, valkeystore's, redisstore's and sluiceprom's", found)
	}
}
