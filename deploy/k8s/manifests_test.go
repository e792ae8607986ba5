// Package k8s holds longshore's Kubernetes manifests: a Kustomize base
// (base/) and an example overlay (overlays/example/). Its tests render
// the overlay as `kubectl apply -k` does (krusty, kubectl's own
// kustomize), decode every object strictly against the API types (an
// unknown or misspelled field fails) and check what a cluster cannot:
// no Secret shipped, every $(VAR) defined, non-root and read-only pods,
// GPUs on the trainer and not on the node. `make k8s-check` applies them
// to a real API server.
package k8s

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// userSecrets are the Secrets the user creates (README.md); the
// manifests reference them and never ship them.
var userSecrets = map[string][]string{
	"longshore-s3":   nil, // envFrom: whatever keys the store needs
	"longshore-keys": {"ca.crt", "ca.key", "gossip.key", "metrics.token"},
}

type rendered struct {
	jobs       map[string]*batchv1.Job
	configMaps map[string]*corev1.ConfigMap
	kinds      map[string]int
}

func render(t *testing.T, dir string) rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{jobs: map[string]*batchv1.Job{}, configMaps: map[string]*corev1.ConfigMap{}, kinds: map[string]int{}}
	for i, doc := range bytes.Split(out, []byte("\n---\n")) {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		r.kinds[head.Kind]++
		var v any
		switch head.APIVersion + " " + head.Kind {
		case "v1 Namespace":
			v = &corev1.Namespace{}
		case "v1 ServiceAccount":
			v = &corev1.ServiceAccount{}
		case "v1 Service":
			v = &corev1.Service{}
		case "v1 ConfigMap":
			cm := &corev1.ConfigMap{}
			v = cm
			defer func() { r.configMaps[strings.SplitN(cm.Name, "-", 3)[0]+"-"+strings.SplitN(cm.Name, "-", 3)[1]] = cm }()
		case "batch/v1 Job":
			j := &batchv1.Job{}
			v = j
			defer func() { r.jobs[j.Name] = j }()
		case "networking.k8s.io/v1 NetworkPolicy":
			v = &networkingv1.NetworkPolicy{}
		default:
			t.Fatalf("document %d: unexpected %s %s", i, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, v); err != nil {
			t.Fatalf("document %d (%s): %v", i, head.Kind, err)
		}
	}
	return r
}

// TestNoSecretPlaceholders: no manifest ships a Secret, so `kubectl
// apply` never overwrites the user's keys with placeholders (the old
// longshore.yaml did, with replace-me).
func TestNoSecretPlaceholders(t *testing.T) {
	placeholder := regexp.MustCompile(`(?i)replace-?me|changeme|change-me|<[a-z_ -]+>|xxxx|todo`)
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml") || strings.HasSuffix(p, ".env")) {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "#")
			if m := placeholder.FindString(code); m != "" {
				t.Errorf("%s:%d: placeholder %q: %s", p, i+1, m, strings.TrimSpace(line))
			}
			if regexp.MustCompile(`^\s*kind:\s*Secret\s*$`).MatchString(code) {
				t.Errorf("%s:%d: a Secret in the manifests would overwrite the user's", p, i+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestOverlay(t *testing.T) {
	r := render(t, "overlays/example")
	if r.kinds["Secret"] > 0 {
		t.Errorf("the overlay renders %d Secret(s)", r.kinds["Secret"])
	}
	coord, trainers := r.jobs["longshore-coordinator"], r.jobs["longshore-trainers"]
	if coord == nil || trainers == nil {
		t.Fatalf("want the longshore-coordinator and longshore-trainers Jobs, have %v", r.jobs)
	}
	cm := r.configMaps["longshore-job"]
	if cm == nil {
		t.Fatalf("no longshore-job ConfigMap")
	}
	if *trainers.Spec.Completions != 2 || *trainers.Spec.Parallelism != 2 {
		t.Errorf("trainers: %d completions, %d parallel; the example has 2 hosts", *trainers.Spec.Completions, *trainers.Spec.Parallelism)
	}
	if coord.Spec.Template.Spec.Hostname != "coordinator" || coord.Spec.Template.Spec.Subdomain != "longshore" {
		t.Errorf("the coordinator's pod is not coordinator.longshore (the nodes' --join)")
	}
	for _, j := range []*batchv1.Job{coord, trainers} {
		checkPod(t, j.Name, &j.Spec.Template.Spec, cm)
	}
	// The node is a native sidecar without GPUs; the trainer has them.
	var node *corev1.Container
	for i, c := range trainers.Spec.Template.Spec.InitContainers {
		if c.Name == "node" {
			node = &trainers.Spec.Template.Spec.InitContainers[i]
		}
	}
	if node == nil || node.RestartPolicy == nil || *node.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("the node is not a native sidecar (an init container with restartPolicy: Always)")
	}
	if _, ok := node.Resources.Limits["nvidia.com/gpu"]; ok {
		t.Errorf("the node requests GPUs: they are the trainer's")
	}
	if q := trainers.Spec.Template.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; q.Value() != 8 {
		t.Errorf("the trainer has %v GPUs, want 8", q.String())
	}
	for _, a := range node.Args {
		if a == "--gpus=all" {
			t.Errorf("--gpus=all refuses to start in the CPU image: use auto")
		}
	}
}

// checkPod: restricted Pod Security, probes, the user's Secrets only by
// their documented keys, every $(VAR) of an argument defined.
func checkPod(t *testing.T, name string, p *corev1.PodSpec, cm *corev1.ConfigMap) {
	sc := p.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: the pod must run as non-root with the RuntimeDefault seccomp profile", name)
	}
	if p.AutomountServiceAccountToken == nil || *p.AutomountServiceAccountToken {
		t.Errorf("%s: mounts a service account token it does not use", name)
	}
	for _, v := range p.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s: hostPath volume %s (refused by Pod Security baseline)", name, v.Name)
		}
		if s := v.Secret; s != nil {
			keys, ok := userSecrets[s.SecretName]
			if !ok {
				t.Errorf("%s: Secret %s is not one the user is told to create", name, s.SecretName)
			}
			for _, it := range s.Items {
				if !contains(keys, it.Key) {
					t.Errorf("%s: Secret %s key %s is not documented", name, s.SecretName, it.Key)
				}
			}
		}
	}
	all := append(append([]corev1.Container{}, p.InitContainers...), p.Containers...)
	for _, c := range all {
		cs := c.SecurityContext
		if cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem ||
			cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation ||
			cs.Capabilities == nil || !contains(toStrings(cs.Capabilities.Drop), "ALL") {
			t.Errorf("%s/%s: want a read-only root, no privilege escalation, every capability dropped", name, c.Name)
		}
		defined := map[string]bool{}
		for _, e := range c.Env {
			defined[e.Name] = true
		}
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil && strings.HasPrefix(cm.Name, ef.ConfigMapRef.Name) {
				for k := range cm.Data {
					defined[k] = true
				}
			}
			if ef.SecretRef != nil {
				if _, ok := userSecrets[ef.SecretRef.Name]; !ok {
					t.Errorf("%s/%s: envFrom Secret %s is not one the user is told to create", name, c.Name, ef.SecretRef.Name)
				}
			}
		}
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			for _, m := range regexp.MustCompile(`\$\(([A-Z_][A-Z0-9_]*)\)`).FindAllStringSubmatch(a, -1) {
				if !defined[m[1]] {
					t.Errorf("%s/%s: %s uses $(%s), which nothing defines", name, c.Name, a, m[1])
				}
			}
		}
		long := c.RestartPolicy != nil || len(p.Containers) > 0 && c.Name == p.Containers[0].Name && c.Name != "trainer"
		if long && (c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz") {
			t.Errorf("%s/%s: want a liveness probe on /healthz", name, c.Name)
		}
		// Ready when the daemon can do its job (journal loaded, welcomed
		// by a coordinator), not when a port is open.
		if long && (c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz") {
			t.Errorf("%s/%s: want a readiness probe on /readyz", name, c.Name)
		}
	}
}

// The worst case of a coordinator's start, as README.md ("Probes")
// derives it: the largest job docs/scale.md promises (10⁹ samples with
// a manifest index, 32,768 ranks, the journal's 4,096 generations kept)
// read from a store as slow as the S3 client still accepts a request
// (storage/s3 DefaultOptions: an attempt may take RequestTimeout plus a
// second per MiB, MinThroughput; a credential retrieval 30 s), then the
// gossip rejoin of the journal's members (5 s).
const (
	startRequests    = 13 // in sequence; README.md lists them
	startMiB         = 17 // the index 12 MB, the newest generation ≤ 4 MB, 5 LIST pages ≈ 1 MB, the last piece
	requestTimeout   = 60 // s, one attempt
	minThroughputMiB = 1  // MiB/s
	credentialFetch  = 30 // s, one for the dataset's store, one for the journal's
	gossipRejoin     = 5  // s
	worstStart       = startRequests*requestTimeout + startMiB/minThroughputMiB + 2*credentialFetch + gossipRejoin
)

// TestCoordinatorStartupProbe: the coordinator's liveness probe is held
// back by a startup probe on /healthz whose budget covers the documented
// worst case of a start, so a coordinator loading a big index or journal
// is not killed and restarted into the same load (a coordinator built
// before cmd/coordinator TestHealthzWhileLoading opens its metrics port
// only after loading; this one answers /healthz during the load).
// README.md states the same figures.
func TestCoordinatorStartupProbe(t *testing.T) {
	r := render(t, "overlays/example")
	coord := r.jobs["longshore-coordinator"]
	if coord == nil {
		t.Fatal("no longshore-coordinator Job")
	}
	var c *corev1.Container
	for i := range coord.Spec.Template.Spec.Containers {
		if coord.Spec.Template.Spec.Containers[i].Name == "coordinator" {
			c = &coord.Spec.Template.Spec.Containers[i]
		}
	}
	if c == nil {
		t.Fatal("no coordinator container")
	}
	p := c.StartupProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
		t.Fatalf("the coordinator has no startup probe on /healthz of the metrics port: %+v", p)
	}
	period, failures := p.PeriodSeconds, p.FailureThreshold
	if period == 0 {
		period = 10 // the API's defaults
	}
	if failures == 0 {
		failures = 3
	}
	budget := p.InitialDelaySeconds + period*failures
	if budget < worstStart {
		t.Errorf("the startup probe allows %d s (%d x %d s); a start may take %d s", budget, failures, period, worstStart)
	}
	live := c.LivenessProbe
	if live != nil && live.PeriodSeconds*live.FailureThreshold >= budget {
		t.Errorf("the startup probe's %d s are no longer than the liveness probe's own budget", budget)
	}
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("%d s", worstStart), fmt.Sprintf("%d × %d s", failures, period), fmt.Sprintf("%d s", budget)} {
		if !strings.Contains(string(b), want) {
			t.Errorf("README.md does not state %q (the worst case and the probe's budget)", want)
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func toStrings(cs []corev1.Capability) []string {
	var s []string
	for _, c := range cs {
		s = append(s, string(c))
	}
	return s
}
