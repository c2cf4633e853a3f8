package deploytest

// The Helm chart in helm/sluice: linted, rendered with its default values
// and each values file in helm/sluice/ci, every manifest validated by
// kubeconform against the Kubernetes and prometheus-operator schemas
// (kubeschema_test.go), checked against the binary (flags, ports, probes,
// the configuration accepted by sluice validate-config with the pod's own
// environment) and run: the rendered pod serves from its Secret's Valkey, and
// a ConfigMap update, swapped in as the kubelet does, reloads the policies
// without a restart.

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/valkeytest"
	"go.yaml.in/yaml/v3"
)

const chartDir = "helm/sluice"

// goTool finds name on PATH or in the Go bin directory, where
// scripts/install-helm.sh puts it.
func goTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, v := range []string{"GOBIN", "GOPATH"} {
		out, _ := exec.Command("go", "env", v).Output()
		dir := strings.TrimSpace(string(out))
		if dir == "" {
			continue
		}
		if v == "GOPATH" {
			dir = filepath.Join(filepath.SplitList(dir)[0], "bin")
		}
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	t.Fatalf("%s is missing: run scripts/install-helm.sh (go install from the Go module proxy); the Helm chart is checked with it", name)
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// helm runs helm with args and returns its combined output.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(goTool(t, "helm"), args...)
	// No user's repositories, plugins or cache: only the chart on disk.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// helmTemplate renders the chart as release "sluice" in namespace "rl".
func helmTemplate(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helm(t, append([]string{"template", "sluice", chartDir, "--namespace", "rl"}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, out)
	}
	return out
}

// The parts of the rendered objects the tests read.
type helmObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       helmSpec          `yaml:"spec"`
}

type helmSpec struct {
	Replicas     *int              `yaml:"replicas"`
	MinAvailable int               `yaml:"minAvailable"`
	MinReplicas  int               `yaml:"minReplicas"`
	Selector     k8sSelector       `yaml:"selector"`
	Template     helmPodTemplate   `yaml:"template"`
	Ports        []k8sServicePort  `yaml:"ports"`
	Endpoints    []helmEndpoint    `yaml:"endpoints"`
	Target       map[string]string `yaml:"scaleTargetRef"`
	Groups       []any             `yaml:"groups"`
}

type helmEndpoint struct {
	Port string `yaml:"port"`
	Path string `yaml:"path"`
}

type helmPodTemplate struct {
	Metadata struct {
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec struct {
		AutomountServiceAccountToken *bool `yaml:"automountServiceAccountToken"`
		SecurityContext              struct {
			RunAsNonRoot   bool `yaml:"runAsNonRoot"`
			RunAsUser      int  `yaml:"runAsUser"`
			SeccompProfile struct {
				Type string `yaml:"type"`
			} `yaml:"seccompProfile"`
		} `yaml:"securityContext"`
		Containers []helmContainer `yaml:"containers"`
		Volumes    []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	} `yaml:"spec"`
}

type helmContainer struct {
	Args  []string `yaml:"args"`
	Env   []helmEnv
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe  k8sProbe                             `yaml:"readinessProbe"`
	LivenessProbe   k8sProbe                             `yaml:"livenessProbe"`
	Resources       struct{ Requests map[string]string } `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type helmEnv struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

// helmRelease is one rendering, decoded.
type helmRelease struct {
	objs map[string]*helmObject // by kind/name
	file string                 // the rendered manifests
}

func decodeRelease(t *testing.T, out string) *helmRelease {
	t.Helper()
	r := &helmRelease{objs: map[string]*helmObject{}, file: filepath.Join(t.TempDir(), "release.yaml")}
	if err := os.WriteFile(r.file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o helmObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the rendered chart: %v", err)
		}
		if o.Kind == "" {
			continue
		}
		key := o.Kind + "/" + o.Metadata.Name
		if r.objs[key] != nil {
			t.Fatalf("%s rendered twice", key)
		}
		r.objs[key] = &o
	}
	return r
}

// only returns the one object of kind, or nil; more than one fails t.
func (r *helmRelease) only(t *testing.T, kind string) *helmObject {
	t.Helper()
	var found *helmObject
	for _, o := range r.objs {
		if o.Kind == kind {
			if found != nil {
				t.Fatalf("more than one %s rendered", kind)
			}
			found = o
		}
	}
	return found
}

func (r *helmRelease) kinds() []string {
	var ks []string
	for _, o := range r.objs {
		ks = append(ks, o.Kind)
	}
	slices.Sort(ks)
	return ks
}

// secretValue returns the value of key in the rendered Secret name, and
// whether the chart renders that Secret at all.
func (r *helmRelease) secretValue(t *testing.T, name, key string) (string, bool, bool) {
	t.Helper()
	s := r.objs["Secret/"+name]
	if s == nil {
		return "", false, false
	}
	if v, ok := s.StringData[key]; ok {
		return v, true, true
	}
	v, ok := s.Data[key]
	if !ok {
		return "", false, true
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		t.Fatalf("Secret %s key %s: %v", name, key, err)
	}
	return string(b), true, true
}

// helmCase is a rendering and what it must hold beyond the checks every
// rendering gets.
type helmCase struct {
	values string   // a values file of helm/sluice/ci, "" for the defaults
	kinds  []string // every kind rendered
	grpc   bool
	// password: the configuration names a Valkey password.
	password bool
	// env: variables the container must have, with their values ("" for a
	// Secret's).
	env map[string]string
}

var helmCases = map[string]helmCase{
	"default":             {kinds: []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "Secret", "Service"}, grpc: true},
	"minimal-values.yaml": {kinds: []string{"ConfigMap", "Deployment", "Secret", "Service"}},
	"production-values.yaml": {kinds: []string{"ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service"},
		grpc: true, password: true, env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability.svc:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
			"OTEL_SERVICE_NAME": "sluice", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.05",
			"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=production", "SLUICE_ADMIN_TOKEN": ""}},
	"monitoring-values.yaml": {kinds: []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "PrometheusRule", "Secret", "Service", "ServiceMonitor"},
		grpc: true, password: true},
}

// TestHelmCasesCoverCI: every values file in helm/sluice/ci is a case.
func TestHelmCasesCoverCI(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if len(files) < 3 {
		t.Fatalf("want values files in %s/ci, have %v", chartDir, files)
	}
	for _, f := range files {
		if _, ok := helmCases[filepath.Base(f)]; !ok {
			t.Errorf("%s is not in helmCases: say what it must render", f)
		}
	}
}

// TestHelmLint: helm lint --strict with the defaults and each values file.
func TestHelmLint(t *testing.T) {
	for name := range helmCases {
		args := []string{"lint", "--strict", chartDir}
		if name != "default" {
			args = append(args, "-f", filepath.Join(chartDir, "ci", name))
		}
		if out, err := helm(t, args...); err != nil || !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestHelmTemplate renders each case and checks it: valid Kubernetes
// objects (kubeconform, strict), the kinds it must render, and
// checkRelease's checks against the binary.
func TestHelmTemplate(t *testing.T) {
	for name, c := range helmCases {
		t.Run(name, func(t *testing.T) {
			var args []string
			if name != "default" {
				args = []string{"-f", filepath.Join(chartDir, "ci", name)}
			}
			r := decodeRelease(t, helmTemplate(t, args...))
			if out, ok := kubeconform(t, r.file); !ok || !strings.Contains(out, "Invalid: 0, Errors: 0") {
				t.Errorf("kubeconform:\n%s", out)
			}
			if got := r.kinds(); !slices.Equal(got, c.kinds) {
				t.Errorf("rendered %v, want %v", got, c.kinds)
			}
			checkRelease(t, r, c)
		})
	}
}

// checkRelease checks a rendering against itself and the binary.
func checkRelease(t *testing.T, r *helmRelease, c helmCase) {
	t.Helper()
	dep, svc, cm := r.only(t, "Deployment"), r.only(t, "Service"), r.only(t, "ConfigMap")
	if dep == nil || svc == nil || cm == nil {
		t.Fatalf("want a Deployment, Service and ConfigMap; have %v", r.kinds())
	}
	pod := dep.Spec.Template
	if !subset(dep.Spec.Selector.MatchLabels, pod.Metadata.Labels) || !subset(svc.Spec.Selector.Flat, pod.Metadata.Labels) {
		t.Errorf("the Deployment's selector %v or the Service's %v does not select the pods %v", dep.Spec.Selector.MatchLabels, svc.Spec.Selector.Flat, pod.Metadata.Labels)
	}

	// Hardened.
	sc := pod.Spec.SecurityContext
	uid, _ := userOf(t, finalImage(t).user)
	if !sc.RunAsNonRoot || sc.RunAsUser != int(uid) || sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("pod securityContext %+v: want runAsNonRoot, runAsUser %d (the image's USER) and seccomp RuntimeDefault", sc, uid)
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the pod mounts a service account token it has no use for")
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(pod.Spec.Containers))
	}
	ct := pod.Spec.Containers[0]
	csc := ct.SecurityContext
	if !csc.ReadOnlyRootFilesystem || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || !slices.Equal(csc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("container securityContext %+v: want a read-only root, no privilege escalation and every capability dropped", csc)
	}

	// The command line, ports and probes against the binary.
	vals := serveArgs(t, "the chart's args", ct.Args)
	ports := map[string]int{}
	for _, p := range ct.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if got := portOf(t, "--listen", vals["listen"]); ports["http"] != got {
		t.Errorf("--listen port %d, containerPort http %d", got, ports["http"])
	}
	if c.grpc {
		if got := portOf(t, "--grpc-listen", vals["grpc-listen"]); ports["grpc"] != got {
			t.Errorf("--grpc-listen port %d, containerPort grpc %d", got, ports["grpc"])
		}
	} else if vals["grpc-listen"] != "off" || ports["grpc"] != 0 {
		t.Errorf("gRPC disabled, yet --grpc-listen %q and containerPort %d", vals["grpc-listen"], ports["grpc"])
	}
	for what, pr := range map[string]struct {
		probe k8sProbe
		path  string
	}{"readinessProbe": {ct.ReadinessProbe, "/readyz"}, "livenessProbe": {ct.LivenessProbe, "/healthz"}} {
		if pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path || pr.probe.HTTPGet.Port != "http" {
			t.Errorf("%s: want httpGet %s on port http, have %+v", what, pr.path, pr.probe.HTTPGet)
		}
	}
	svcPorts := map[string]bool{}
	for _, sp := range svc.Spec.Ports {
		svcPorts[sp.Name] = true
		if _, ok := ports[sp.TargetPort]; !ok {
			t.Errorf("Service port %s targets %q; the container has %v", sp.Name, sp.TargetPort, ports)
		}
	}
	if !svcPorts["http"] || svcPorts["grpc"] != c.grpc {
		t.Errorf("Service ports %v, want http and (gRPC %v) grpc", svcPorts, c.grpc)
	}

	// The ConfigMap is mounted as a directory (a subPath mount is never
	// updated) where --config points.
	dir, file := filepath.Split(vals["config"])
	var mounted string
	for _, m := range ct.VolumeMounts {
		if filepath.Clean(m.MountPath) != filepath.Clean(dir) {
			continue
		}
		if m.SubPath != "" {
			t.Errorf("the configuration is mounted with subPath %q: ConfigMap updates would never reach it", m.SubPath)
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				mounted = v.ConfigMap.Name
			}
		}
	}
	if mounted != cm.Metadata.Name {
		t.Fatalf("--config %s is not in the mounted ConfigMap %s", vals["config"], cm.Metadata.Name)
	}
	data, ok := cm.Data[file]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s", cm.Metadata.Name, file)
	}

	// The Valkey address: --valkey $(VAR), VAR from the Secret's key.
	env := map[string]helmEnv{}
	for _, e := range ct.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s defined twice", e.Name)
		}
		env[e.Name] = e
	}
	secretRef := func(name string) (string, string) {
		e, ok := env[name]
		if !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Fatalf("env %s is not from a Secret: %+v", name, e)
		}
		ref := e.ValueFrom.SecretKeyRef
		if _, has, rendered := r.secretValue(t, ref.Name, ref.Key); rendered && !has {
			t.Errorf("env %s: the rendered Secret %s has no key %s", name, ref.Name, ref.Key)
		}
		return ref.Name, ref.Key
	}
	m := regexp.MustCompile(`^\$\(([A-Z_][A-Z0-9_]*)\)$`).FindStringSubmatch(vals["valkey"])
	if m == nil {
		t.Fatalf("--valkey %q is not $(VARIABLE)", vals["valkey"])
	}
	secretRef(m[1])

	cfg, err := config.Parse("ConfigMap "+file, []byte(data))
	if err != nil {
		t.Fatalf("the rendered configuration: %v", err)
	}
	if cfg.Valkey == nil || len(cfg.Valkey.Addresses) != 0 {
		t.Errorf("the configuration's valkey section should be there without addresses (those come from --valkey): %+v", cfg.Valkey)
	}
	if pw := cfg.Valkey != nil && cfg.Valkey.PasswordEnv != ""; pw != c.password {
		t.Errorf("the configuration names a password: %v, want %v", pw, c.password)
	} else if pw {
		secretRef(cfg.Valkey.PasswordEnv)
	}
	for name, want := range c.env {
		e, ok := env[name]
		switch {
		case !ok:
			t.Errorf("env %s missing", name)
		case want == "" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil):
			t.Errorf("env %s is not from a Secret", name)
		case want != "" && e.Value != want:
			t.Errorf("env %s=%q, want %q", name, e.Value, want)
		}
	}

	// sluice validate-config --secrets accepts it in the pod's environment
	// (a stand-in for each Secret's value).
	local := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(local, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var podEnv []string
	for _, e := range ct.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = "stand-in-secret-value-0123456789"
		}
		podEnv = append(podEnv, e.Name+"="+v)
	}
	vc := exec.Command(binary(t), "validate-config", "--secrets", local)
	vc.Env = podEnv
	if out, err := vc.CombinedOutput(); err != nil || !strings.Contains(string(out), ": ok:") {
		t.Errorf("sluice validate-config --secrets on the rendered configuration: %v\n%s\n%s", err, out, data)
	}

	checkScaling(t, r, dep, ct, pod.Metadata.Labels)
	checkMonitoring(t, r, svc)
}

// checkScaling: the budget selects the pods and leaves one to evict; the
// autoscaler owns the replica count and has a CPU request to scale on.
func checkScaling(t *testing.T, r *helmRelease, dep *helmObject, ct helmContainer, podLabels map[string]string) {
	t.Helper()
	replicas := 0
	if dep.Spec.Replicas != nil {
		replicas = *dep.Spec.Replicas
	}
	if hpa := r.only(t, "HorizontalPodAutoscaler"); hpa != nil {
		if dep.Spec.Replicas != nil {
			t.Error("with an autoscaler the Deployment sets replicas: every helm upgrade would reset the scale")
		}
		if hpa.Spec.Target["kind"] != "Deployment" || hpa.Spec.Target["name"] != dep.Metadata.Name {
			t.Errorf("the autoscaler targets %v", hpa.Spec.Target)
		}
		if ct.Resources.Requests["cpu"] == "" {
			t.Error("an autoscaler on CPU utilization without a CPU request never scales")
		}
		replicas = hpa.Spec.MinReplicas
	} else if replicas < 1 {
		t.Errorf("replicas %d", replicas)
	}
	if pdb := r.only(t, "PodDisruptionBudget"); pdb != nil {
		if !subset(pdb.Spec.Selector.MatchLabels, podLabels) {
			t.Errorf("the PodDisruptionBudget's selector %v does not select the pods", pdb.Spec.Selector.MatchLabels)
		}
		if pdb.Spec.MinAvailable < 1 || pdb.Spec.MinAvailable >= replicas {
			t.Errorf("minAvailable %d with %d replicas: a drain could never proceed, or could take all", pdb.Spec.MinAvailable, replicas)
		}
	}
}

// checkMonitoring: the ServiceMonitor scrapes the Service's http port's
// /metrics; the PrometheusRule holds deploy/prometheus's rules, valid and
// passing their unit tests under promtool.
func checkMonitoring(t *testing.T, r *helmRelease, svc *helmObject) {
	t.Helper()
	if sm := r.only(t, "ServiceMonitor"); sm != nil {
		if !subset(sm.Spec.Selector.MatchLabels, svc.Metadata.Labels) {
			t.Errorf("the ServiceMonitor's selector %v does not select the Service %v", sm.Spec.Selector.MatchLabels, svc.Metadata.Labels)
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("the ServiceMonitor scrapes %+v, want /metrics on port http", sm.Spec.Endpoints)
		}
	}
	pr := r.only(t, "PrometheusRule")
	if pr == nil {
		return
	}
	b, err := os.ReadFile(filepath.Join("prometheus", "sluice-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want struct{ Groups []any }
	if err := yaml.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pr.Spec.Groups, want.Groups) || len(want.Groups) == 0 {
		t.Errorf("the PrometheusRule's groups are not deploy/prometheus/sluice-alerts.yaml's: cp prometheus/sluice-alerts.yaml %s/files/", chartDir)
	}
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("prometheus", "sluice-alerts.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sluice-alerts.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sluice-alerts.test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "sluice-alerts.yaml"}, {"test", "rules", "sluice-alerts.test.yaml"}} {
		cmd := exec.Command(promtool(t), args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s on the PrometheusRule's rules: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestHelmAlertsCopy: the chart's copy of the alert rules is the file in
// deploy/prometheus (Helm reads only files inside the chart).
func TestHelmAlertsCopy(t *testing.T) {
	a, err := os.ReadFile(filepath.Join("prometheus", "sluice-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "files", "sluice-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s/files/sluice-alerts.yaml differs from prometheus/sluice-alerts.yaml: cp deploy/prometheus/sluice-alerts.yaml deploy/%s/files/", chartDir, chartDir)
	}
}

// TestHelmRefuses: values the chart cannot honour fail the rendering with
// a reason, instead of rendering something that silently misbehaves.
func TestHelmRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "replicaCont=3"}, "replicaCont"},
		{[]string{"--set", "valkey.adress=x:1"}, "adress"},
		{[]string{"--set", "otel.env.TRACE_ENDPOINT=x"}, "TRACE_ENDPOINT"},
		{[]string{"--set", "config.valkey.timeout=1s"}, "config.valkey"},
		{[]string{"--set", "config.listen=:9090"}, "config.listen"},
		{[]string{"--set", "valkey.settings.addresses={a:1}"}, "valkey.settings.addresses"},
		{[]string{"--set", "valkey.settings.password_env=X"}, "valkey.settings.password_env"},
		{[]string{"--set", "valkey.address="}, "valkey.existingSecret"},
		{[]string{"--set", "valkey.password=pw", "--set", "valkey.passwordKey="}, "passwordKey"},
		{[]string{"--set", "replicaCount=1"}, "minAvailable"},
		{[]string{"--set", "autoscaling.enabled=true", "--set", "resources.requests=null"}, "resources.requests.cpu"},
		{[]string{"--set", "autoscaling.enabled=true", "--set", "autoscaling.minReplicas=1"}, "minAvailable"},
	} {
		out, err := helm(t, append([]string{"template", "sluice", chartDir}, c.args...)...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("helm template %v: %v, want a refusal naming %q:\n%s", c.args, err, c.want, out)
		}
	}
}

// TestKubeconformStrict: the schemas refuse what the API server would: a
// misspelled field, a wrong type, a missing required field, in a built-in
// kind and a prometheus-operator one. (Without this, schemas that accept
// anything would pass every rendering.)
func TestKubeconformStrict(t *testing.T) {
	good := `apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      securityContext: {runAsNonRoot: true}
      containers:
        - {name: c, image: i, ports: [{name: http, containerPort: 8080}], resources: {requests: {cpu: 1, memory: 64Mi}}}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: s}
spec:
  selector: {matchLabels: {a: b}}
  endpoints: [{port: http, path: /metrics, interval: 30s}]
`
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if out, ok := kubeconform(t, write("good.yaml", good)); !ok {
		t.Fatalf("a valid Deployment and ServiceMonitor refused:\n%s", out)
	}
	for name, bad := range map[string]string{
		"misspelled field": strings.Replace(good, "runAsNonRoot", "runAsNonRot", 1),
		"wrong type":       strings.Replace(good, "containerPort: 8080", "containerPort: eighty", 1),
		"missing required": strings.Replace(good, "name: c, image: i,", "image: i,", 1),
		"CRD field":        strings.Replace(good, "path: /metrics", "pathh: /metrics", 1),
		"CRD type":         strings.Replace(good, "endpoints: [{", "endpoints: {x: [{", 1) + "}",
	} {
		if out, ok := kubeconform(t, write(strings.ReplaceAll(name, " ", "-")+".yaml", bad)); ok {
			t.Errorf("%s: accepted:\n%s", name, out)
		}
	}
}

// TestHelmReleaseServes runs the rendered pod: the binary with the
// Deployment's args and environment (the Secret's address and password
// resolved, $(VAR) expanded as the kubelet does), its ConfigMap laid out as
// the kubelet mounts one, against a Valkey requiring that password. Then a
// helm upgrade's new ConfigMap, swapped in as the kubelet does (a new
// ..data), is served by the same process, and does not change the pod
// template (no rollout); a new password does.
func TestHelmReleaseServes(t *testing.T) {
	v := valkeytest.Start(t)
	const password = "helm-test-password"
	v.RequirePass(t, password)
	set := []string{"-f", filepath.Join(chartDir, "ci", "monitoring-values.yaml"), "--set", "valkey.address=" + v.Addr, "--set", "valkey.password=" + password}
	r := decodeRelease(t, helmTemplate(t, set...))
	dep, cm := r.only(t, "Deployment"), r.only(t, "ConfigMap")
	ct := dep.Spec.Template.Spec.Containers[0]

	env := map[string]string{}
	var envList []string
	for _, e := range ct.Env {
		val := e.Value
		if e.ValueFrom != nil {
			ref := e.ValueFrom.SecretKeyRef
			s, ok, _ := r.secretValue(t, ref.Name, ref.Key)
			if !ok {
				t.Fatalf("env %s: Secret %s has no %s", e.Name, ref.Name, ref.Key)
			}
			val = s
		}
		env[e.Name] = val
		envList = append(envList, e.Name+"="+val)
	}
	args := expandK8s(ct.Args, env)

	mount := t.TempDir()
	kubeletMount(t, mount, "..2026_01_01_00_00_00.000000001", cm.Data)
	vals := serveArgs(t, "the chart's args", args)
	local := filepath.Join(mount, filepath.Base(vals["config"]))
	run := []string{"serve"}
	for name, val := range vals {
		switch name {
		case "listen", "grpc-listen":
			val = "127.0.0.1:0"
		case "config":
			val = local
		}
		run = append(run, "--"+name, val)
	}
	p := start(t, binary(t), envList, nil, run...)
	waitReady(t, p)
	if code, body := post(t, p.HTTP+"/v1/check", `{"policy":"api","key":"helm"}`); code != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Fatalf("policy api: %d %s", code, body)
	}
	if code, body := post(t, p.HTTP+"/v1/check", `{"policy":"added","key":"helm"}`); code != 404 {
		t.Fatalf("policy added before the upgrade: %d %s", code, body)
	}

	// helm upgrade with one more policy: a new ConfigMap, the same pod.
	added := filepath.Join(t.TempDir(), "added.yaml")
	b, _ := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	var defaults struct {
		Config map[string]any `yaml:"config"`
	}
	if err := yaml.Unmarshal(b, &defaults); err != nil {
		t.Fatal(err)
	}
	defaults.Config["policies"] = append(defaults.Config["policies"].([]any), map[string]any{"name": "added", "algorithm": "fixed_window", "limit": 1, "window": "1m"})
	b, _ = yaml.Marshal(map[string]any{"config": defaults.Config})
	if err := os.WriteFile(added, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r2 := decodeRelease(t, helmTemplate(t, append(set, "-f", added)...))
	dep2, cm2 := r2.only(t, "Deployment"), r2.only(t, "ConfigMap")
	if !reflect.DeepEqual(dep.Spec.Template, dep2.Spec.Template) {
		t.Errorf("a policy change alters the pod template (a rollout, not a reload):\n%+v\n%+v", dep.Spec.Template.Metadata, dep2.Spec.Template.Metadata)
	}
	if reflect.DeepEqual(cm.Data, cm2.Data) {
		t.Fatal("the added policy is not in the ConfigMap")
	}
	kubeletMount(t, mount, "..2026_01_01_00_01_00.000000002", cm2.Data)
	waitFor(t, "the swapped ConfigMap's new policy", func() bool {
		code, _ := post(t, p.HTTP+"/v1/check", `{"policy":"added","key":"helm"}`)
		return code == 200
	})
	select {
	case <-p.done:
		t.Fatal("sluice exited")
	default:
	}

	// A change of the Valkey connection changes the pod template: the pods
	// restart with it (a running sluice keeps its connection).
	for _, change := range [][]string{
		{"--set", "valkey.password=another"},
		{"--set", "valkey.address=127.0.0.1:1"},
		{"--set", "valkey.settings.timeout=20ms"},
		{"--set", "valkey.existingSecret=other"},
	} {
		r3 := decodeRelease(t, helmTemplate(t, append(set, change...)...))
		if reflect.DeepEqual(dep.Spec.Template, r3.only(t, "Deployment").Spec.Template) {
			t.Errorf("%v leaves the pod template as it was: running pods would keep the old connection", change)
		}
	}
}

// TestHelmDocs: docs/deploy.md's two Helm commands fit the chart: the
// Secret the first creates holds the keys the release reads, and the
// release the second installs reads its Valkey address and password from
// that Secret (and creates none).
func TestHelmDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Helm\n")
	if !ok {
		t.Fatal("docs/deploy.md has no ## Helm section")
	}
	_, block, _ := strings.Cut(sec, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	lines := strings.Split(strings.TrimSpace(block), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "kubectl create secret generic ") || !strings.HasPrefix(lines[1], "helm install ") {
		t.Fatalf("want the two commands kubectl create secret generic and helm install, have:\n%s", block)
	}
	f := strings.Fields(lines[0])
	secret, literal := f[4], map[string]bool{}
	for _, a := range f[5:] {
		if kv, ok := strings.CutPrefix(a, "--from-literal="); ok {
			k, _, _ := strings.Cut(kv, "=")
			literal[k] = true
		}
	}
	f = strings.Fields(lines[1])
	if len(f) < 4 || f[3] != "deploy/"+chartDir {
		t.Fatalf("helm install %v does not install deploy/%s", f, chartDir)
	}
	args := append([]string{"template", f[2], filepath.Join(repoRoot, f[3])}, f[4:]...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	r := decodeRelease(t, out)
	if s := r.only(t, "Secret"); s != nil {
		t.Errorf("the documented release creates Secret %s too", s.Metadata.Name)
	}
	cfg, err := config.Parse("ConfigMap", []byte(r.only(t, "ConfigMap").Data["sluice.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Valkey == nil || cfg.Valkey.PasswordEnv == "" {
		t.Fatal("the documented release uses no Valkey password")
	}
	read := map[string]string{}
	for _, e := range r.only(t, "Deployment").Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			if ref.Name != secret || !literal[ref.Key] {
				t.Errorf("env %s reads %s/%s; the documented Secret is %s with %v", e.Name, ref.Name, ref.Key, secret, literal)
			}
			read[e.Name] = ref.Key
		}
	}
	if read["SLUICE_VALKEY_ADDRESS"] == "" || read[cfg.Valkey.PasswordEnv] == "" {
		t.Errorf("the address and password are not both read from the Secret: %v", read)
	}
}

// expandK8s expands $(VAR) in args from env as the kubelet does: a
// variable not defined is left as written, $$ is a literal $.
func expandK8s(args []string, env map[string]string) []string {
	re := regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = re.ReplaceAllStringFunc(a, func(m string) string {
			if m == "$$" {
				return "$"
			}
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	return out
}

// kubeletMount lays data out in dir as the kubelet's atomic writer updates
// a ConfigMap volume: the files in a new timestamped directory, a
// "..data_tmp" link to it renamed over "..data", each file a link into
// "..data" (made once), the previous version removed.
func kubeletMount(t *testing.T, dir, version string, data map[string]string) {
	t.Helper()
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range data {
		if err := os.WriteFile(filepath.Join(dir, version, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range data {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHelmMatchesManifests: the chart's defaults render what
// deploy/kubernetes holds (the same policies and Valkey settings, security
// contexts, probes, resources, ports, replicas and budget), and those
// manifests are valid Kubernetes objects too.
func TestHelmMatchesManifests(t *testing.T) {
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if out, ok := kubeconform(t, files...); !ok || !strings.Contains(out, "Invalid: 0, Errors: 0") {
		t.Errorf("kubeconform deploy/kubernetes:\n%s", out)
	}
	generic := func(text string) map[string]map[string]any {
		objs := map[string]map[string]any{}
		dec := yaml.NewDecoder(strings.NewReader(text))
		for {
			var o map[string]any
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if o != nil {
				objs[o["kind"].(string)] = o
			}
		}
		return objs
	}
	b, err := os.ReadFile(filepath.Join("kubernetes", "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifests := generic(string(b))
	chart := generic(helmTemplate(t))
	get := func(o map[string]any, path ...any) any {
		var v any = o
		for _, p := range path {
			switch k := p.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[k]
			case int:
				l, _ := v.([]any)
				if k >= len(l) {
					return nil
				}
				v = l[k]
			}
		}
		return v
	}
	pod := []any{"spec", "template", "spec"}
	ctr := append(append([]any{}, pod...), "containers", 0)
	for _, path := range [][]any{
		{"spec", "replicas"},
		append(append([]any{}, pod...), "securityContext"),
		append(append([]any{}, pod...), "automountServiceAccountToken"),
		append(append([]any{}, ctr...), "securityContext"),
		append(append([]any{}, ctr...), "readinessProbe"),
		append(append([]any{}, ctr...), "livenessProbe"),
		append(append([]any{}, ctr...), "resources"),
		append(append([]any{}, ctr...), "ports"),
		append(append([]any{}, ctr...), "volumeMounts"),
	} {
		a, b := get(manifests["Deployment"], path...), get(chart["Deployment"], path...)
		if a == nil || !reflect.DeepEqual(a, b) {
			t.Errorf("Deployment %v: deploy/kubernetes %v, the chart %v", path, a, b)
		}
	}
	for _, c := range []struct {
		kind string
		path []any
	}{{"Service", []any{"spec", "ports"}}, {"PodDisruptionBudget", []any{"spec", "minAvailable"}}} {
		a, b := get(manifests[c.kind], c.path...), get(chart[c.kind], c.path...)
		if a == nil || !reflect.DeepEqual(a, b) {
			t.Errorf("%s %v: deploy/kubernetes %v, the chart %v", c.kind, c.path, a, b)
		}
	}
	var a, c map[string]any
	if err := yaml.Unmarshal([]byte(get(manifests["ConfigMap"], "data", "sluice.yaml").(string)), &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(get(chart["ConfigMap"], "data", "sluice.yaml").(string)), &c); err != nil {
		t.Fatal(err)
	}
	delete(a["valkey"].(map[string]any), "addresses") // the chart's comes from the Secret
	if !reflect.DeepEqual(a, c) {
		t.Errorf("the configuration: deploy/kubernetes %v, the chart %v", a, c)
	}
}
