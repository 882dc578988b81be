package helm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// The chart is rendered as release "aggregator" in namespace "streaming";
// the promtool tests in deploy/prometheus expect these labels.
const (
	chartDir    = "aggregator"
	fullValues  = "aggregator/ci/full-values.yaml"
	oauthValues = "aggregator/ci/oauth-values.yaml"
	releaseName = "aggregator"
	namespace   = "streaming"
)

// The prometheus-operator CRDs, as .Capabilities.APIVersions names them.
var operatorCRDs = []string{"monitoring.coreos.com/v1/PrometheusRule", "monitoring.coreos.com/v1/ServiceMonitor"}

// kubeVersion is the cluster version the chart is linted and rendered for.
var kubeVersion = chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}

// valuesFiles are the values every chart-wide test runs with: the defaults
// and the full-featured file that `helm lint` also gets.
var valuesFiles = map[string]string{"defaults": "", "full": fullValues, "oauth": oauthValues}

// readValues reads a values file; "" gives no overrides (the chart defaults).
func readValues(t testing.TB, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	vals, err := chartutil.ReadValuesFile(file)
	if err != nil {
		t.Fatalf("ReadValuesFile(%s): %v", file, err)
	}
	return vals
}

// parseValues parses inline YAML values.
func parseValues(t testing.TB, text string) map[string]any {
	t.Helper()
	vals, err := chartutil.ReadValues([]byte(text))
	if err != nil {
		t.Fatalf("ReadValues(%q): %v", text, err)
	}
	return vals
}

// render renders the chart as `helm template` would, for a cluster that
// serves the built-in APIs plus apis.
func render(t testing.TB, vals map[string]any, apis ...string) (map[string]string, error) {
	t.Helper()
	return renderAs(t, releaseName, vals, apis...)
}

// renderAs is render for a release of another name.
func renderAs(t testing.TB, release string, vals map[string]any, apis ...string) (map[string]string, error) {
	t.Helper()
	return renderRevision(t, release, 1, vals, apis...)
}

// renderRevision is renderAs for revision revision of the release (an
// upgrade when above 1).
func renderRevision(t testing.TB, release string, revision int, vals map[string]any, apis ...string) (map[string]string, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = kubeVersion
	caps.APIVersions = append(slices.Clone(caps.APIVersions), apis...)
	opts := chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: revision, IsInstall: revision == 1, IsUpgrade: revision > 1}
	top, err := chartutil.ToRenderValues(chrt, vals, opts, caps)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	return engine.Render(chrt, top)
}

// object is one rendered manifest.
type object struct {
	Source     string // template file
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	JSON []byte
}

// mustRender renders and splits the output into objects, in file order.
func mustRender(t testing.TB, vals map[string]any, apis ...string) []object {
	t.Helper()
	files, err := render(t, vals, apis...)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return objects(t, files)
}

// objects splits rendered files into objects, in file order.
func objects(t testing.TB, files map[string]string) []object {
	t.Helper()
	var objs []object
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for doc := range strings.SplitSeq(files[name], "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			js, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s: not YAML: %v\n%s", name, err, doc)
			}
			if string(js) == "null" {
				continue
			}
			o := object{Source: name, JSON: js}
			if err := json.Unmarshal(js, &o); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

// find returns the release's main object of kind (the one named after the
// release), failing the test unless there is exactly one.
func find(t testing.TB, objs []object, kind string) object {
	t.Helper()
	return findNamed(t, objs, kind, releaseName)
}

// findNamed returns the object of kind and name, failing the test unless
// there is exactly one.
func findNamed(t testing.TB, objs []object, kind, name string) object {
	t.Helper()
	var found []object
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("rendered %d objects of kind %s named %s, want 1", len(found), kind, name)
	}
	return found[0]
}

// kinds lists the kinds of objs, sorted.
func kinds(objs []object) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.Kind)
	}
	slices.Sort(ks)
	return ks
}

// apiTypes maps each kind the chart may render to its API version and Go type.
var apiTypes = map[string]struct {
	apiVersion string
	new        func() any
}{
	"ConfigMap":               {"v1", func() any { return new(corev1.ConfigMap) }},
	"Service":                 {"v1", func() any { return new(corev1.Service) }},
	"ServiceAccount":          {"v1", func() any { return new(corev1.ServiceAccount) }},
	"Deployment":              {"apps/v1", func() any { return new(appsv1.Deployment) }},
	"Job":                     {"batch/v1", func() any { return new(batchv1.Job) }},
	"CronJob":                 {"batch/v1", func() any { return new(batchv1.CronJob) }},
	"PodDisruptionBudget":     {"policy/v1", func() any { return new(policyv1.PodDisruptionBudget) }},
	"HorizontalPodAutoscaler": {"autoscaling/v2", func() any { return new(autoscalingv2.HorizontalPodAutoscaler) }},
	"NetworkPolicy":           {"networking.k8s.io/v1", func() any { return new(networkingv1.NetworkPolicy) }},
	"ServiceMonitor":          {"monitoring.coreos.com/v1", func() any { return new(monitoringv1.ServiceMonitor) }},
	"PrometheusRule":          {"monitoring.coreos.com/v1", func() any { return new(monitoringv1.PrometheusRule) }},
	// KEDA's Go API would bring controller-runtime into this module: the
	// ScaledObject is checked against KEDA's CRD schema instead (keda_test.go).
	"ScaledObject": {"keda.sh/v1alpha1", func() any { return new(map[string]any) }},
}

// decodeStrict decodes o into its API type, rejecting any field the type
// does not have (what `kubectl apply --validate=strict` rejects).
func decodeStrict(o object) (any, error) {
	typ, ok := apiTypes[o.Kind]
	if !ok {
		return nil, fmt.Errorf("%s: kind %s has no API type in the test", o.Source, o.Kind)
	}
	if o.APIVersion != typ.apiVersion {
		return nil, fmt.Errorf("%s: %s has apiVersion %s, want %s", o.Source, o.Kind, o.APIVersion, typ.apiVersion)
	}
	v := typ.new()
	dec := json.NewDecoder(bytes.NewReader(o.JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", o.Source, o.Kind, err)
	}
	return v, nil
}

// decode decodes the release's main object of kind into T, strictly.
func decode[T any](t testing.TB, objs []object, kind string) *T {
	t.Helper()
	return decodeNamed[T](t, objs, kind, releaseName)
}

// decodeNamed decodes the object of kind and name into T, strictly.
func decodeNamed[T any](t testing.TB, objs []object, kind, name string) *T {
	t.Helper()
	v, err := decodeStrict(findNamed(t, objs, kind, name))
	if err != nil {
		t.Fatal(err)
	}
	typed, ok := v.(*T)
	if !ok {
		t.Fatalf("%s decodes to %T, not %T", kind, v, typed)
	}
	return typed
}

// repoFile reads a file of the repository, relative to helm/.
func repoFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
