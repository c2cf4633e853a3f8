package deploytest

// kubeconform's schemas, made here from what the Go module proxy serves:
// the Kubernetes OpenAPI document (k8s.io/kubernetes's
// api/openapi-spec/swagger.json) and prometheus-operator's CRDs, both at the
// versions scripts/install-helm.sh pins. The conversion is the one
// kubeconform's openapi2jsonschema.py makes for its published schemas: every
// object with properties refuses others (kubectl's strict validation),
// int-or-string fields take either; a quantity (cpu: 1 or cpu: 100m) takes a
// number or a string, as the API server does.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// pinned returns the module@version scripts/install-helm.sh assigns to name.
func pinned(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "scripts", "install-helm.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `=(\S+@\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("scripts/install-helm.sh pins no %s=module@version", name)
	}
	return string(m[1])
}

// moduleDir returns the module cache directory of module@version, which
// scripts/install-helm.sh downloads (go mod download, a no-op when cached).
func moduleDir(t *testing.T, modver string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", modver)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); err != nil || jerr != nil || m.Dir == "" {
		t.Fatalf("go mod download %s (run scripts/install-helm.sh): %v %s\n%s", modver, err, m.Error, out)
	}
	return m.Dir
}

type gvk struct{ apiVersion, kind string }

// schemaFile is kubeconform's file name for g under the location template
// schemaTemplate: the kind, the group's first label and the version.
func (g gvk) schemaFile() string {
	group, version, ok := strings.Cut(g.apiVersion, "/")
	suffix := "-" + strings.ToLower(strings.Split(group, ".")[0])
	if ok {
		suffix += "-" + strings.ToLower(version)
	}
	return strings.ToLower(g.kind) + suffix + ".json"
}

const schemaTemplate = "{{ .ResourceKind }}{{ .KindSuffix }}.json"

// kubeSchemas is the run's schema directory and its sources.
var kubeSchemas schemaSet

type schemaSet struct {
	once sync.Once
	err  error
	dir  string
	mu   sync.Mutex
	// defs are the OpenAPI document's definitions, converted; roots maps
	// each kind to its definition; crds holds the CRDs' converted schemas.
	defs  map[string]any
	roots map[gvk]string
	crds  map[gvk]any
}

// loadSchemas reads and converts the schema sources, once per run.
func loadSchemas(t *testing.T) {
	t.Helper()
	k8s := moduleDir(t, pinned(t, "kubernetes_schemas"))
	promOp := moduleDir(t, pinned(t, "prometheus_operator_crds"))
	ks := &kubeSchemas
	ks.once.Do(func() {
		ks.dir, ks.err = os.MkdirTemp("", "sluice-kubeschemas-")
		if ks.err != nil {
			return
		}
		ks.err = ks.readOpenAPI(filepath.Join(k8s, "api", "openapi-spec", "swagger.json"))
		if ks.err != nil {
			return
		}
		ks.crds = map[gvk]any{}
		for _, name := range []string{"servicemonitors", "prometheusrules"} {
			if ks.err = ks.readCRD(filepath.Join(promOp, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+name+".yaml")); ks.err != nil {
				return
			}
		}
	})
	if ks.err != nil {
		t.Fatalf("the Kubernetes schemas: %v", ks.err)
	}
}

func (ks *schemaSet) readOpenAPI(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	ks.defs, ks.roots = map[string]any{}, map[gvk]string{}
	for name, d := range doc.Definitions {
		if name == "io.k8s.apimachinery.pkg.api.resource.Quantity" {
			ks.defs[name] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
			continue
		}
		ks.defs[name] = strictSchema(d)
		kinds, _ := d["x-kubernetes-group-version-kind"].([]any)
		for _, k := range kinds {
			k := k.(map[string]any)
			av := k["version"].(string)
			if g := k["group"].(string); g != "" {
				av = g + "/" + av
			}
			ks.roots[gvk{av, k["kind"].(string)}] = name
		}
	}
	if len(ks.roots) < 50 {
		return fmt.Errorf("%s: only %d kinds", path, len(ks.roots))
	}
	return nil
}

func (ks *schemaSet) readCRD(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd struct {
		Spec struct {
			Group string `yaml:"group"`
			Names struct {
				Kind string `yaml:"kind"`
			} `yaml:"names"`
			Versions []struct {
				Name   string `yaml:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
				} `yaml:"schema"`
			} `yaml:"versions"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("%s: version %s has no schema", path, v.Name)
		}
		ks.crds[gvk{crd.Spec.Group + "/" + v.Name, crd.Spec.Names.Kind}] = strictSchema(v.Schema.OpenAPIV3Schema)
	}
	if len(crd.Spec.Versions) == 0 {
		return fmt.Errorf("%s: no versions", path)
	}
	return nil
}

// strictSchema converts one OpenAPI schema: objects with properties refuse
// others (unless they keep unknown fields), int-or-string takes either.
// It walks the keywords that hold schemas, so that a property named like a
// keyword is not taken for one.
func strictSchema(v any) any {
	s, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if f, _ := s["format"].(string); f == "int-or-string" || s["x-kubernetes-int-or-string"] == true {
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
	}
	out := map[string]any{}
	for k, e := range s {
		switch k {
		case "properties", "definitions", "patternProperties":
			m := map[string]any{}
			for name, sub := range e.(map[string]any) {
				m[name] = strictSchema(sub)
			}
			out[k] = m
		case "items", "additionalProperties", "not":
			if list, ok := e.([]any); ok {
				out[k] = strictList(list)
			} else {
				out[k] = strictSchema(e)
			}
		case "allOf", "anyOf", "oneOf":
			out[k] = strictList(e.([]any))
		default:
			out[k] = e
		}
	}
	if _, has := s["properties"]; has && s["additionalProperties"] == nil && s["x-kubernetes-preserve-unknown-fields"] != true {
		out["additionalProperties"] = false
	}
	return out
}

func strictList(l []any) []any {
	out := make([]any, len(l))
	for i, e := range l {
		out[i] = strictSchema(e)
	}
	return out
}

// writeSchema writes g's schema file (standalone: its definition with the
// definitions it reaches) unless written; an error for a kind neither
// source knows.
func writeSchema(g gvk) error {
	ks := &kubeSchemas
	ks.mu.Lock()
	defer ks.mu.Unlock()
	path := filepath.Join(ks.dir, g.schemaFile())
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	var schema map[string]any
	if crd, ok := ks.crds[g]; ok {
		schema = crd.(map[string]any)
	} else if root, ok := ks.roots[g]; ok {
		defs := map[string]any{}
		reach(ks.defs, root, defs)
		schema = map[string]any{}
		for k, v := range ks.defs[root].(map[string]any) {
			schema[k] = v
		}
		schema["definitions"] = defs
	} else {
		return fmt.Errorf("no schema for %s %s in the Kubernetes OpenAPI document or the CRDs", g.apiVersion, g.kind)
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// reach adds to out the definition name and every one it refers to.
func reach(defs map[string]any, name string, out map[string]any) {
	if _, done := out[name]; done {
		return
	}
	out[name] = defs[name]
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				reach(defs, strings.TrimPrefix(ref, "#/definitions/"), out)
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(defs[name])
}

// manifestKinds returns the apiVersion and kind of each document of the
// YAML files.
func manifestKinds(t *testing.T, files ...string) []gvk {
	t.Helper()
	var out []gvk
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
			}
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind != "" {
				out = append(out, gvk{o.APIVersion, o.Kind})
			}
		}
	}
	return out
}

// kubeconformTool finds kubeconform on PATH or in the Go bin directory.
func kubeconformTool(t *testing.T) string { return goTool(t, "kubeconform") }

// kubeconform validates files strictly against the schemas; it returns
// kubeconform's output and whether every resource is valid.
func kubeconform(t *testing.T, files ...string) (string, bool) {
	t.Helper()
	loadSchemas(t)
	for _, g := range manifestKinds(t, files...) {
		if err := writeSchema(g); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"-strict", "-summary", "-schema-location", filepath.Join(kubeSchemas.dir, schemaTemplate)}, files...)
	out, err := exec.Command(kubeconformTool(t), args...).CombinedOutput()
	return string(out), err == nil
}
