package deploytest

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/valkeytest"
	"go.yaml.in/yaml/v3"
)

// k8sObject is the part of a Kubernetes object these tests read.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Replicas     int              `yaml:"replicas"`
		MinAvailable int              `yaml:"minAvailable"`
		Selector     k8sSelector      `yaml:"selector"`
		Template     k8sPodTemplate   `yaml:"template"`
		Ports        []k8sServicePort `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
	Flat        map[string]string `yaml:",inline"` // a Service's selector
}

type k8sPodTemplate struct {
	Metadata struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		SecurityContext struct {
			RunAsNonRoot bool `yaml:"runAsNonRoot"`
			RunAsUser    int  `yaml:"runAsUser"`
		} `yaml:"securityContext"`
		Containers []k8sContainer `yaml:"containers"`
		Volumes    []struct {
			Name      string `yaml:"name"`
			ConfigMap struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe  k8sProbe `yaml:"readinessProbe"`
	LivenessProbe   k8sProbe `yaml:"livenessProbe"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type k8sServicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort string `yaml:"targetPort"`
}

// readManifests decodes every document of the YAML files in kubernetes/.
func readManifests(t *testing.T) map[string]*k8sObject {
	t.Helper()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) == 0 {
		t.Fatal("no kubernetes/*.yaml")
	}
	objs := map[string]*k8sObject{}
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(r)
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			key := o.Kind + "/" + o.Metadata.Name
			if objs[key] != nil {
				t.Fatalf("%s: %s defined twice", f, key)
			}
			objs[key] = &o
		}
		r.Close()
	}
	return objs
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestKubernetes checks the manifests against each other and against the
// binary: the Deployment's args are real flags, its ports are the ones it
// listens on, the probes hit /readyz and /healthz on that port (and the
// binary, run with those args and the ConfigMap's config, answers 200 on
// both), the ConfigMap holds a valid config at the path --config names, the
// Service and PodDisruptionBudget select the pods, and the config's Valkey
// is the Valkey Service.
func TestKubernetes(t *testing.T) {
	objs := readManifests(t)
	dep, cm, svc, pdb := objs["Deployment/sluice"], objs["ConfigMap/sluice"], objs["Service/sluice"], objs["PodDisruptionBudget/sluice"]
	if dep == nil || cm == nil || svc == nil || pdb == nil {
		t.Fatalf("want Deployment, ConfigMap, Service and PodDisruptionBudget named sluice; have %v", keysOf(objs))
	}
	pod := dep.Spec.Template
	if !subset(dep.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Errorf("Deployment selector %v does not select its pods %v", dep.Spec.Selector.MatchLabels, pod.Metadata.Labels)
	}
	if !subset(svc.Spec.Selector.Flat, pod.Metadata.Labels) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector.Flat, pod.Metadata.Labels)
	}
	if !subset(pdb.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pods", pdb.Spec.Selector.MatchLabels)
	}
	if pdb.Spec.MinAvailable < 1 || pdb.Spec.MinAvailable >= dep.Spec.Replicas {
		t.Errorf("PodDisruptionBudget minAvailable %d with %d replicas: a drain could never proceed, or could take all", pdb.Spec.MinAvailable, dep.Spec.Replicas)
	}
	if !pod.Spec.SecurityContext.RunAsNonRoot {
		t.Error("the pod may run as root")
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if !c.SecurityContext.ReadOnlyRootFilesystem || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Error("the container must have a read-only root and no privilege escalation")
	}
	im := finalImage(t)
	uid, _ := userOf(t, im.user)
	if pod.Spec.SecurityContext.RunAsUser != int(uid) {
		t.Errorf("runAsUser %d, the image's USER is %d", pod.Spec.SecurityContext.RunAsUser, uid)
	}

	vals := serveArgs(t, "Deployment args", c.Args)
	portByName := map[string]int{}
	for _, p := range c.Ports {
		portByName[p.Name] = p.ContainerPort
	}
	if got := portOf(t, "--listen", vals["listen"]); portByName["http"] != got {
		t.Errorf("--listen port %d, containerPort http %d", got, portByName["http"])
	}
	if got := portOf(t, "--grpc-listen", vals["grpc-listen"]); portByName["grpc"] != got {
		t.Errorf("--grpc-listen port %d, containerPort grpc %d", got, portByName["grpc"])
	}
	for what, pr := range map[string]struct {
		probe k8sProbe
		path  string
	}{"readinessProbe": {c.ReadinessProbe, "/readyz"}, "livenessProbe": {c.LivenessProbe, "/healthz"}} {
		if pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path || pr.probe.HTTPGet.Port != "http" {
			t.Errorf("%s: want httpGet %s on port http, have %+v", what, pr.path, pr.probe.HTTPGet)
		}
	}
	for _, sp := range svc.Spec.Ports {
		if _, ok := portByName[sp.TargetPort]; !ok || portByName[sp.TargetPort] != sp.Port {
			t.Errorf("Service port %s: %d -> %q; the container has %v", sp.Name, sp.Port, sp.TargetPort, portByName)
		}
	}

	// The ConfigMap is mounted where --config points.
	dir, file := filepath.Split(vals["config"])
	var mountedCM string
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) == filepath.Clean(dir) {
			for _, v := range pod.Spec.Volumes {
				if v.Name == m.Name {
					mountedCM = v.ConfigMap.Name
				}
			}
		}
	}
	if mountedCM != cm.Metadata.Name {
		t.Fatalf("--config %s is not in the mounted ConfigMap %s", vals["config"], cm.Metadata.Name)
	}
	data, ok := cm.Data[file]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s (has %v)", cm.Metadata.Name, file, cm.Data)
	}
	cfg, err := config.Parse("ConfigMap "+file, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Valkey == nil || len(cfg.Valkey.Addresses) != 1 {
		t.Fatalf("the ConfigMap's config names no Valkey")
	}
	host, port, _ := net.SplitHostPort(cfg.Valkey.Addresses[0])
	vsvc := objs["Service/"+host]
	if vsvc == nil || len(vsvc.Spec.Ports) == 0 || strconv.Itoa(vsvc.Spec.Ports[0].Port) != port {
		t.Errorf("the config's Valkey %s is not a Service in the manifests", cfg.Valkey.Addresses[0])
	}

	// Run the binary with the Deployment's args and the ConfigMap's config.
	local := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(local, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	v := valkeytest.Start(t)
	p := start(t, binary(t), nil, nil, runnable(t, "Deployment args", c.Args, local, v.Addr)...)
	waitReady(t, p)
	if code, body := get(t, p.HTTP+"/healthz"); code != 200 {
		t.Errorf("liveness /healthz: %d %s", code, body)
	}
	for _, pol := range cfg.Policies {
		if code, body := post(t, p.HTTP+"/v1/check", `{"policy":"`+pol.Name+`","key":"k8s"}`); code != 200 || !strings.Contains(body, `"allowed":true`) {
			t.Errorf("policy %s: %d %s", pol.Name, code, body)
		}
	}
}

func keysOf(m map[string]*k8sObject) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
