package helm_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"aggregator/internal/config"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// secretValue stands for every Secret value the pod gets, as env or file.
const secretValue = "secret-from-kubernetes"

// podName is what the Downward API gives for metadata.name, podZone for
// the zone label Kubernetes copies from the node.
const (
	podName = "aggregator-7d9f8c6b5-x2k4q"
	podZone = "eu-west-1b"
)

// TestRenderedConfigIsValid is `aggregator validate` on the ConfigMap, in
// the pod's environment: its env vars (Secret references resolved to a
// placeholder) and its Secret volumes (files under a temporary root).
func TestRenderedConfigIsValid(t *testing.T) {
	for name, file := range valuesFiles {
		t.Run(name, func(t *testing.T) {
			objs := mustRender(t, readValues(t, file))
			cm := decode[corev1.ConfigMap](t, objs, "ConfigMap")
			pod := decode[appsv1.Deployment](t, objs, "Deployment").Spec.Template.Spec
			text := cm.Data["config.yaml"]
			if strings.Contains(text, "password:") {
				t.Errorf("config.yaml holds a password:\n%s", text)
			}
			root := t.TempDir()
			mountSecrets(t, root, pod)
			text = strings.ReplaceAll(text, "/etc/aggregator/", root+"/etc/aggregator/")
			cfg, err := config.Parse([]byte(text), podEnv(t, pod))
			if err != nil {
				t.Fatalf("config.Parse(rendered config.yaml) = %v\n%s", err, text)
			}
			if err := cfg.ValidateKafka(); err != nil {
				t.Errorf("ValidateKafka() = %v", err)
			}
			if cfg.Source.InstanceID != podName {
				t.Errorf("source.instance_id = %q, want the pod name %q (static membership)", cfg.Source.InstanceID, podName)
			}
			switch sasl := cfg.Source.SASL; sasl.Mechanism {
			case "", config.MechanismAWSMSKIAM:
			case config.MechanismOAuthBearer:
				if b, err := os.ReadFile(sasl.OAuth.ClientSecretFile); err != nil || strings.TrimSpace(string(b)) != secretValue {
					t.Errorf("OAuth client_secret_file %q holds %q, %v; want the Secret's value", sasl.OAuth.ClientSecretFile, b, err)
				}
			default:
				if sasl.Password != secretValue {
					t.Errorf("SASL password = %q, want the Secret's value", sasl.Password)
				}
			}
		})
	}
}

// podEnv is the getenv of the aggregator container.
func podEnv(t *testing.T, pod corev1.PodSpec) func(string) string {
	env := map[string]string{}
	c := container(t, pod)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = secretValue
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			env[e.Name] = strconv.FormatInt(c.Resources.Limits.Memory().Value(), 10)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = podName
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.labels['topology.kubernetes.io/zone']":
			env[e.Name] = podZone
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		default:
			t.Fatalf("env %s: unsupported valueFrom %+v", e.Name, e.ValueFrom)
		}
	}
	return func(key string) string { return env[key] }
}

// mountSecrets writes each Secret volume's items under root at the
// container's mount path, as the kubelet would.
func mountSecrets(t *testing.T, root string, pod corev1.PodSpec) {
	t.Helper()
	mounts := map[string]string{}
	for _, m := range container(t, pod).VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for _, v := range pod.Volumes {
		if v.Secret == nil {
			continue
		}
		dir := filepath.Join(root, mounts[v.Name])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, item := range v.Secret.Items {
			if err := os.WriteFile(filepath.Join(dir, item.Path), []byte(secretValue+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSchemaCoversConfig keeps values.schema.json's config in step with
// config.Config: the same keys at every level, so the schema catches a typo
// before the pod does and never rejects a key the service accepts.
func TestSchemaCoversConfig(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(repoFile(t, "aggregator/values.schema.json"), &schema); err != nil {
		t.Fatal(err)
	}
	props := schema["properties"].(map[string]any)["config"]
	compareKeys(t, "config", reflect.TypeFor[config.Config](), props.(map[string]any))
}

func compareKeys(t *testing.T, path string, typ reflect.Type, schema map[string]any) {
	t.Helper()
	for typ.Kind() == reflect.Slice {
		typ = typ.Elem()
		schema = schema["items"].(map[string]any)
	}
	if typ.Kind() != reflect.Struct || typ.PkgPath() == "time" {
		return
	}
	props, _ := schema["properties"].(map[string]any)
	if schema["additionalProperties"] != false {
		t.Errorf("schema %s: additionalProperties is not false, typos would pass", path)
	}
	fields := map[string]reflect.Type{}
	for f := range typ.Fields() {
		fields[strings.Split(f.Tag.Get("yaml"), ",")[0]] = f.Type
	}
	if got, want := slices.Sorted(maps.Keys(props)), slices.Sorted(maps.Keys(fields)); !slices.Equal(got, want) {
		t.Errorf("schema %s keys = %v, want the yaml keys of %s: %v", path, got, typ, want)
	}
	for key, ft := range fields {
		if sub, ok := props[key].(map[string]any); ok {
			compareKeys(t, path+"."+key, ft, sub)
		}
	}
}
