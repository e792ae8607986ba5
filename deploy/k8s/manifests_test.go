// Package k8s holds longshore's Kubernetes manifests; its test decodes
// them strictly against the API types (an unknown or misspelled field
// fails) and checks that they hang together: selectors match their pods,
// every Secret and Service named exists, the nodes join a Service that
// exposes the gossip port.
package k8s

import (
	"bytes"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

type objects struct {
	secrets     map[string]*corev1.Secret
	services    map[string]*corev1.Service
	deployments map[string]*appsv1.Deployment
	daemonSets  map[string]*appsv1.DaemonSet
}

func load(t *testing.T, path string) objects {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	o := objects{secrets: map[string]*corev1.Secret{}, services: map[string]*corev1.Service{},
		deployments: map[string]*appsv1.Deployment{}, daemonSets: map[string]*appsv1.DaemonSet{}}
	for i, doc := range bytes.Split(data, []byte("\n---\n")) {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var err error
		switch head.APIVersion + " " + head.Kind {
		case "v1 Secret":
			v := &corev1.Secret{}
			err = yaml.UnmarshalStrict(doc, v)
			o.secrets[v.Name] = v
		case "v1 Service":
			v := &corev1.Service{}
			err = yaml.UnmarshalStrict(doc, v)
			o.services[v.Name] = v
		case "apps/v1 Deployment":
			v := &appsv1.Deployment{}
			err = yaml.UnmarshalStrict(doc, v)
			o.deployments[v.Name] = v
		case "apps/v1 DaemonSet":
			v := &appsv1.DaemonSet{}
			err = yaml.UnmarshalStrict(doc, v)
			o.daemonSets[v.Name] = v
		default:
			t.Fatalf("document %d: unexpected %s %s", i, head.APIVersion, head.Kind)
		}
		if err != nil {
			t.Fatalf("document %d (%s): %v", i, head.Kind, err)
		}
	}
	return o
}

// checkPod checks a pod template against the objects it names and the
// selector that must pick it.
func checkPod(t *testing.T, o objects, name string, sel map[string]string, pod corev1.PodTemplateSpec) {
	t.Helper()
	if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(pod.Labels)) {
		t.Errorf("%s: selector %v does not pick its pods %v", name, sel, pod.Labels)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && o.secrets[v.Secret.SecretName] == nil {
			t.Errorf("%s: volume %s names a missing Secret %s", name, v.Name, v.Secret.SecretName)
		}
	}
	for _, c := range pod.Spec.Containers {
		mounts := map[string]bool{}
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = true
		}
		for _, v := range pod.Spec.Volumes {
			if !mounts[v.Name] {
				t.Errorf("%s: volume %s not mounted by %s", name, v.Name, c.Name)
			}
		}
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil && o.secrets[e.SecretRef.Name] == nil {
				t.Errorf("%s: envFrom names a missing Secret %s", name, e.SecretRef.Name)
			}
		}
		ports := map[string]bool{}
		for _, p := range c.Ports {
			if ports[p.Name] || len(p.Name) > 15 {
				t.Errorf("%s: port name %q repeated or longer than 15", name, p.Name)
			}
			ports[p.Name] = true
		}
		if !strings.HasPrefix(c.Command[0], "/usr/local/bin/longshore-") {
			t.Errorf("%s: command %q", name, c.Command)
		}
	}
}

func arg(args []string, flag string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestManifests(t *testing.T) {
	o := load(t, "longshore.yaml")
	co := o.deployments["longshore-coordinator"]
	nodes := o.daemonSets["longshore-node"]
	seeds := o.services["longshore-gossip"]
	if co == nil || nodes == nil || seeds == nil {
		t.Fatalf("want the coordinator Deployment, the node DaemonSet and the gossip Service; have %v", o)
	}
	if co.Spec.Replicas == nil || *co.Spec.Replicas != 1 || co.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("coordinator: want one replica, recreated (never two at once)")
	}
	checkPod(t, o, "coordinator", co.Spec.Selector.MatchLabels, co.Spec.Template)
	checkPod(t, o, "node", nodes.Spec.Selector.MatchLabels, nodes.Spec.Template)

	cc := co.Spec.Template.Spec.Containers[0]
	if v, ok := arg(cc.Args, "checkpoint"); !ok || !strings.HasPrefix(v, "s3://") {
		t.Errorf("coordinator: journal %q, want it in the object store (a rescheduled pod resumes)", v)
	}
	nc := nodes.Spec.Template.Spec.Containers[0]
	if _, ok := nc.Resources.Limits["nvidia.com/gpu"]; !ok {
		t.Errorf("node: no GPUs requested")
	}
	if _, ok := arg(nc.Args, "manifest-cache"); !ok {
		t.Errorf("node: no --manifest-cache")
	}
	d1, _ := arg(cc.Args, "dataset")
	d2, _ := arg(nc.Args, "dataset")
	if d1 == "" || d1 != d2 {
		t.Errorf("coordinator dataset %q, nodes %q", d1, d2)
	}

	// Headless services; the one the nodes join exists and exposes the
	// gossip port, and selects the coordinator's pods.
	for name, s := range o.services {
		if s.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("service %s: not headless", name)
		}
	}
	if !labels.SelectorFromSet(seeds.Spec.Selector).Matches(labels.Set(co.Spec.Template.Labels)) ||
		!labels.SelectorFromSet(seeds.Spec.Selector).Matches(labels.Set(nodes.Spec.Template.Labels)) {
		t.Errorf("the gossip Service does not select both the coordinator and the nodes")
	}
	join, _ := arg(nc.Args, "join")
	host, port, _ := strings.Cut(join, ":")
	svc := o.services[strings.Split(host, ".")[0]]
	if svc == nil {
		t.Fatalf("node: --join %s names no Service here", join)
	}
	found := false
	for _, p := range svc.Spec.Ports {
		found = found || (p.Protocol == corev1.ProtocolUDP && port == "7001" && p.Port == 7001)
	}
	if !found || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(co.Spec.Template.Labels)) {
		t.Errorf("node: --join %s: Service %s does not expose gossip (UDP %s) on the coordinator", join, svc.Name, port)
	}
}

// TestStrict: the decoding is strict, so the test above fails on a
// misspelled field.
func TestStrict(t *testing.T) {
	doc := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 1}\n")
	if err := yaml.UnmarshalStrict(doc, &appsv1.Deployment{}); err == nil {
		t.Fatal("a misspelled field decoded")
	}
}
