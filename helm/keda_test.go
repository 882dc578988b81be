package helm_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

const kedaValues = "aggregator/ci/keda-values.yaml"

// scaledObject is the part of a KEDA ScaledObject the tests read.
type scaledObject struct {
	Spec struct {
		ScaleTargetRef  struct{ Kind, Name string } `json:"scaleTargetRef"`
		MinReplicaCount int                         `json:"minReplicaCount"`
		MaxReplicaCount int                         `json:"maxReplicaCount"`
		Triggers        []struct {
			Type              string                       `json:"type"`
			Metadata          map[string]string            `json:"metadata"`
			AuthenticationRef *struct{ Name, Kind string } `json:"authenticationRef"`
		} `json:"triggers"`
	} `json:"spec"`
}

// TestKedaScaledObject checks the ScaledObject against KEDA's own CRD
// schema (vendored in testdata/crds, strict: an unknown field fails, as
// `kubectl apply --validate=strict` fails it) and its kafka trigger
// against the service config: the release's brokers, group and topic.
func TestKedaScaledObject(t *testing.T) {
	objs := mustRender(t, readValues(t, kedaValues))
	o := find(t, objs, "ScaledObject")
	if o.APIVersion != "keda.sh/v1alpha1" {
		t.Errorf("ScaledObject apiVersion = %s, want keda.sh/v1alpha1", o.APIVersion)
	}
	checkCRDSchema(t, o, "testdata/crds/keda.sh_scaledobjects.yaml")
	var so scaledObject
	if err := json.Unmarshal(o.JSON, &so); err != nil {
		t.Fatal(err)
	}
	d := decode[appsv1.Deployment](t, objs, "Deployment")
	if d.Spec.Replicas != nil {
		t.Errorf("Deployment replicas = %d with keda.enabled, want none (KEDA's HPA owns them)", *d.Spec.Replicas)
	}
	if so.Spec.ScaleTargetRef.Kind != "Deployment" || so.Spec.ScaleTargetRef.Name != d.Name || so.Spec.MinReplicaCount != 2 || so.Spec.MaxReplicaCount != 6 {
		t.Errorf("ScaledObject targets %+v, %d to %d replicas; want Deployment %s, 2 to 6", so.Spec.ScaleTargetRef, so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount, d.Name)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "kafka" {
		t.Fatalf("triggers = %+v, want one kafka trigger", so.Spec.Triggers)
	}
	tr := so.Spec.Triggers[0]
	want := map[string]string{
		// key [sid] with partitioning auto is the repartition stage: no topic, both stages' lag
		"bootstrapServers": "kafka-kafka-bootstrap.kafka.svc:9093", "consumerGroup": releaseName,
		"lagThreshold": "50000", "offsetResetPolicy": "earliest", "allowIdleConsumers": "false",
		"sasl": "scram_sha512", "tls": "enable",
	}
	if !maps.Equal(tr.Metadata, want) {
		t.Errorf("kafka trigger metadata = %v, want %v", tr.Metadata, want)
	}
	if tr.AuthenticationRef == nil || tr.AuthenticationRef.Name != "aggregator-kafka-scaler" || tr.AuthenticationRef.Kind != "TriggerAuthentication" {
		t.Errorf("authenticationRef = %+v, want TriggerAuthentication aggregator-kafka-scaler", tr.AuthenticationRef)
	}
	lintValues(t, readValues(t, kedaValues))
	if k := kinds(mustRender(t, parseValues(t, "keda: {enabled: true}"))); !slices.Contains(k, "ScaledObject") {
		t.Errorf("keda.enabled renders %v, want a ScaledObject", k)
	}
}

// checkCRDSchema validates o against the openAPIV3Schema of the CRD file,
// made strict: objects that list their properties admit no others (unless
// the CRD preserves unknown fields there).
func checkCRDSchema(t *testing.T, o object, crdFile string) {
	t.Helper()
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(repoFile(t, crdFile), &crd); err != nil {
		t.Fatalf("%s: %v", crdFile, err)
	}
	var schema map[string]any
	for _, v := range crd.Spec.Versions {
		if strings.HasSuffix(o.APIVersion, "/"+v.Name) {
			schema = v.Schema.OpenAPIV3Schema
		}
	}
	if schema == nil {
		t.Fatalf("%s serves no version of %s", crdFile, o.APIVersion)
	}
	strictCRD(schema)
	c := jsonschema.NewCompiler()
	if err := c.AddResource("crd.json", schema); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("crd.json")
	if err != nil {
		t.Fatalf("%s: %v", crdFile, err)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(o.JSON)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(doc); err != nil {
		t.Errorf("%s %s against %s: %v", o.Kind, o.Metadata.Name, crdFile, err)
	}
}

func strictCRD(s map[string]any) {
	props, ok := s["properties"].(map[string]any)
	if ok && s["additionalProperties"] == nil && s["x-kubernetes-preserve-unknown-fields"] != true {
		s["additionalProperties"] = false
	}
	for _, p := range props {
		strictCRD(p.(map[string]any))
	}
	for _, key := range []string{"items", "additionalProperties"} {
		if sub, ok := s[key].(map[string]any); ok {
			strictCRD(sub)
		}
	}
}

// TestKedaRepartition: with the repartition stage (source.partitioning
// repartition, or auto with a key of fields) the group reads the
// repartition topic too, so the trigger names no topic and KEDA counts the
// lag of every topic the group reads; by_key names the input topic.
func TestKedaRepartition(t *testing.T) {
	for _, tt := range []struct {
		partitioning string
		key          []any
		wantTopic    bool
	}{
		{"repartition", []any{"sid"}, false},
		{"auto", []any{"sid"}, false},
		{"auto", []any{"sid", "region"}, false},
		{"auto", []any{"$key"}, true},
		{"by_key", []any{"sid"}, true},
	} {
		vals := readValues(t, kedaValues)
		cfg, _ := vals["config"].(map[string]any)
		src, _ := cfg["source"].(map[string]any)
		if src == nil {
			t.Fatalf("%s has no config.source", kedaValues)
		}
		src["partitioning"], src["key"] = tt.partitioning, tt.key
		var so scaledObject
		if err := json.Unmarshal(find(t, mustRender(t, vals), "ScaledObject").JSON, &so); err != nil {
			t.Fatal(err)
		}
		if topic, ok := so.Spec.Triggers[0].Metadata["topic"]; ok != tt.wantTopic {
			t.Errorf("partitioning %s, key %v: kafka trigger topic = %q (named: %v), want named: %v", tt.partitioning, tt.key, topic, ok, tt.wantTopic)
		}
	}
}
