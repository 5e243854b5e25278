// Package kubernetes checks the shipped manifests (packaging/kubernetes/) offline against
// Kubernetes' own API types: each document is decoded strictly into the Go type of its
// kind from k8s.io/api, so a misspelt or misplaced field, a wrong type or an unknown kind
// fails, as the API server would refuse them. What the fields mean against php_worker's
// Caddyfile (probe paths and ports, grace periods) is checked by
// tests/e2e/test_kubernetes.py, which runs that Caddyfile.
package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// kinds maps each apiVersion and kind the manifests may use to a new value of its type.
var kinds = map[string]func() any{
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
}

func documents(t *testing.T) [][]byte {
	t.Helper()
	matches, err := filepath.Glob("../../packaging/kubernetes/*.yaml")
	if err != nil || len(matches) == 0 {
		t.Fatalf("no manifests in packaging/kubernetes/: %v", err)
	}
	var docs [][]byte
	for _, path := range matches {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(text, []byte("\n---\n")) {
			if len(bytes.TrimSpace(doc)) > 0 {
				docs = append(docs, doc)
			}
		}
	}
	return docs
}

func TestEveryManifestDecodesStrictlyIntoItsKubernetesType(t *testing.T) {
	seen := map[string]int{}
	for _, doc := range documents(t) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		key := head.APIVersion + "/" + head.Kind
		newValue, ok := kinds[key]
		if !ok {
			t.Errorf("%s: not a kind these manifests are checked for", key)
			continue
		}
		if err := yaml.UnmarshalStrict(doc, newValue()); err != nil {
			t.Errorf("%s does not match Kubernetes' type: %v", key, err)
		}
		seen[head.Kind]++
	}
	for _, kind := range []string{"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler"} {
		if seen[kind] != 1 {
			t.Errorf("%d %s in the manifests, want 1", seen[kind], kind)
		}
	}
}

func TestAMisspeltFieldIsRefused(t *testing.T) {
	// The check itself: a field Kubernetes does not know fails the strict decoding.
	doc := []byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: 3\n  terminationGracePeriod: 45\n")
	if err := yaml.UnmarshalStrict(doc, &appsv1.Deployment{}); err == nil {
		t.Fatal("a misspelt field was accepted")
	}
	doc = []byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: three\n")
	if err := yaml.UnmarshalStrict(doc, &appsv1.Deployment{}); err == nil {
		t.Fatal("a string for an integer was accepted")
	}
}
