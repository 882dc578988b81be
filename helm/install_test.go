package helm_test

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/config"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const hookName = releaseName + "-validate"

// TestValidateHook checks the pre-install/pre-upgrade Job: it runs
// `aggregator plan` (which validates the config, then checks it against
// the state in the changelog) with the pod's image, environment, Secrets and
// security context on a ConfigMap of its own holding the same config, and
// is deleted when it passes.
func TestValidateHook(t *testing.T) {
	for name, file := range valuesFiles {
		t.Run(name, func(t *testing.T) {
			objs := mustRender(t, readValues(t, file))
			d := decode[appsv1.Deployment](t, objs, "Deployment")
			job := decodeNamed[batchv1.Job](t, objs, "Job", hookName)
			hookCM := decodeNamed[corev1.ConfigMap](t, objs, "ConfigMap", hookName)
			cm := decode[corev1.ConfigMap](t, objs, "ConfigMap")
			for _, meta := range []map[string]string{job.Annotations, hookCM.Annotations} {
				if meta["helm.sh/hook"] != "pre-install,pre-upgrade" || meta["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
					t.Errorf("hook annotations = %v, want pre-install,pre-upgrade, deleted before creation and on success", meta)
				}
			}
			if job.Annotations["helm.sh/hook-weight"] <= hookCM.Annotations["helm.sh/hook-weight"] {
				t.Errorf("hook weights: Job %q, ConfigMap %q: the ConfigMap must come first", job.Annotations["helm.sh/hook-weight"], hookCM.Annotations["helm.sh/hook-weight"])
			}
			if strings.TrimSpace(hookCM.Data["config.yaml"]) != strings.TrimSpace(cm.Data["config.yaml"]) {
				t.Errorf("hook config.yaml differs from the pods':\n%s\nwant\n%s", hookCM.Data["config.yaml"], cm.Data["config.yaml"])
			}
			pod, jobPod := d.Spec.Template.Spec, job.Spec.Template.Spec
			c, jc := container(t, pod), container(t, jobPod)
			if want := []string{"plan", "--config", "/etc/aggregator/config.yaml"}; !slices.Equal(jc.Args, want) {
				t.Errorf("hook args = %v, want %v", jc.Args, want)
			}
			if jc.Image != c.Image || !reflect.DeepEqual(jc.Env, c.Env) || !reflect.DeepEqual(jc.EnvFrom, c.EnvFrom) ||
				!reflect.DeepEqual(jc.VolumeMounts, c.VolumeMounts) || !reflect.DeepEqual(jc.SecurityContext, c.SecurityContext) ||
				!reflect.DeepEqual(jobPod.SecurityContext, pod.SecurityContext) {
				t.Errorf("hook container differs from the pods' in image, env, mounts or security context:\n%+v\nwant like\n%+v", jc, c)
			}
			checkSecurity(t, jobPod, jc)
			if got := jobPod.Volumes[0].ConfigMap; got == nil || got.Name != hookName {
				t.Errorf("hook config volume = %+v, want ConfigMap %s", jobPod.Volumes[0], hookName)
			}
			if !reflect.DeepEqual(jobPod.Volumes[1:], pod.Volumes[1:]) {
				t.Errorf("hook volumes %+v, want the pods' %+v", jobPod.Volumes[1:], pod.Volumes[1:])
			}
			if jobPod.RestartPolicy != corev1.RestartPolicyNever || *job.Spec.BackoffLimit != 0 {
				t.Errorf("hook restartPolicy %s, backoffLimit %d: want Never and 0 (a bad config does not get better)", jobPod.RestartPolicy, *job.Spec.BackoffLimit)
			}
			labels := job.Spec.Template.Labels
			if selects(d.Spec.Selector.MatchLabels, labels) {
				t.Errorf("hook pod labels %v match the release's selector %v: the Service and PDB would count it", labels, d.Spec.Selector.MatchLabels)
			}
		})
	}
	if k := kinds(mustRender(t, parseValues(t, "validateHook: {enabled: false}"))); slices.Contains(k, "Job") {
		t.Errorf("validateHook.enabled false still renders %v", k)
	}
}

// selects reports whether a matchLabels selector selects labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestValidateHookRejectsWhatThePodWould: configs the schema lets through
// but the service rejects, so that only the hook stops them before a
// rollout stalls. The hook's config, in the hook's environment, fails
// `aggregator validate` (config.Parse, ValidateKafka)
// naming the key.
func TestValidateHookRejectsWhatThePodWould(t *testing.T) {
	tests := map[string]struct{ values, key string }{
		"unknown time zone":        {"config: {source: {timestamp: {timezone: Mars/Olympus_Mons}}}", "source.timestamp.timezone"},
		"window offset above size": {"config: {window: {size: 5s, offset: 5s}}", "window.offset"},
		"an unknown variable":      {"extraEnv: [{name: AGGREGATOR_WINDOW_SIZEE, value: 5s}]", "AGGREGATOR_WINDOW_SIZEE"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			objs := mustRender(t, parseValues(t, tt.values))
			job := decodeNamed[batchv1.Job](t, objs, "Job", hookName)
			text := decodeNamed[corev1.ConfigMap](t, objs, "ConfigMap", hookName).Data["config.yaml"]
			err := validate(t, text, job.Spec.Template.Spec)
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tt.key) {
				t.Errorf("aggregator validate on the hook's config = %v, want an invalid config naming %s", err, tt.key)
			}
		})
	}
}

// validate is `aggregator validate` (for run) on text in pod's environment.
func validate(t *testing.T, text string, pod corev1.PodSpec) error {
	t.Helper()
	getenv := podEnv(t, pod)
	var environ []string
	for _, e := range container(t, pod).Env {
		environ = append(environ, e.Name+"="+getenv(e.Name))
	}
	if err := config.CheckEnv(environ); err != nil {
		return err
	}
	cfg, err := config.Parse([]byte(text), getenv)
	if err != nil {
		return err
	}
	return cfg.ValidateKafka()
}

// TestLoopbackListenFailsTheRender: the service accepts a loopback
// http.listen with a warning, but in a pod the probes and scrapes come
// from outside it: the chart refuses to render it, naming the key.
func TestLoopbackListenFailsTheRender(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:9090", "localhost:9090", "[::1]:9090"} {
		_, err := render(t, parseValues(t, `config: {http: {listen: "`+listen+`"}}`))
		if err == nil || !strings.Contains(err.Error(), "config.http.listen") {
			t.Errorf("render with http.listen %s = %v, want an error naming config.http.listen", listen, err)
		}
	}
	if _, err := render(t, parseValues(t, `config: {http: {listen: ":9191"}}`)); err != nil {
		t.Errorf("render with http.listen :9191 = %v, want it rendered", err)
	}
}

// TestGroupDefaultsToTheRelease: two releases with the default values get
// their own consumer group and changelog; an explicit group wins.
func TestGroupDefaultsToTheRelease(t *testing.T) {
	tests := []struct {
		release, values, group, changelog string
	}{
		{"calls", "", "calls-aggregator", "calls-aggregator-changelog"},
		{"calls-eu", "", "calls-eu-aggregator", "calls-eu-aggregator-changelog"},
		{"aggregator", "", "aggregator", "aggregator-changelog"},
		{"calls", "fullnameOverride: calls-agg", "calls-agg", "calls-agg-changelog"},
		{"calls", "config: {source: {group: billing}}", "billing", "billing-changelog"},
		{"calls", "config: {state: {changelog_topic: calls-state}}", "calls-aggregator", "calls-state"},
	}
	for _, tt := range tests {
		files, err := renderAs(t, tt.release, parseValues(t, tt.values))
		if err != nil {
			t.Fatalf("render %s %q: %v", tt.release, tt.values, err)
		}
		var cm *corev1.ConfigMap
		for _, o := range objects(t, files) {
			if o.Kind == "ConfigMap" && !strings.HasSuffix(o.Metadata.Name, "-validate") {
				cm = decodeNamed[corev1.ConfigMap](t, []object{o}, "ConfigMap", o.Metadata.Name)
			}
		}
		cfg, err := config.Parse([]byte(cm.Data["config.yaml"]), nil)
		if err != nil {
			t.Fatalf("release %s %q: config.Parse: %v", tt.release, tt.values, err)
		}
		if cfg.Source.Group != tt.group || cfg.State.ChangelogTopic != tt.changelog {
			t.Errorf("release %s %q: group %q, changelog %q; want %q, %q", tt.release, tt.values,
				cfg.Source.Group, cfg.State.ChangelogTopic, tt.group, tt.changelog)
		}
	}
}

// TestMemoryLimitReachesTheService: the container gets its memory limit
// from the downward API, which the service turns into a Go memory limit.
func TestMemoryLimitReachesTheService(t *testing.T) {
	for name, file := range valuesFiles {
		t.Run(name, func(t *testing.T) {
			pod := decode[appsv1.Deployment](t, mustRender(t, readValues(t, file)), "Deployment").Spec.Template.Spec
			i := slices.IndexFunc(container(t, pod).Env, func(e corev1.EnvVar) bool { return e.Name == "CONTAINER_MEMORY_LIMIT" })
			if i < 0 {
				t.Fatal("no CONTAINER_MEMORY_LIMIT in the container's env")
			}
			ref := container(t, pod).Env[i].ValueFrom.ResourceFieldRef
			if ref == nil || ref.ContainerName != "aggregator" || ref.Resource != "limits.memory" || !ref.Divisor.IsZero() && ref.Divisor.Value() != 1 {
				t.Errorf("CONTAINER_MEMORY_LIMIT = %+v, want the aggregator container's limits.memory in bytes", container(t, pod).Env[i].ValueFrom)
			}
		})
	}
}

func TestTopologySpreadByDefault(t *testing.T) {
	pod := decode[appsv1.Deployment](t, mustRender(t, readValues(t, "")), "Deployment").Spec.Template.Spec
	if len(pod.TopologySpreadConstraints) != 1 {
		t.Fatalf("topologySpreadConstraints = %+v, want one by default", pod.TopologySpreadConstraints)
	}
	c := pod.TopologySpreadConstraints[0]
	if c.TopologyKey != "kubernetes.io/hostname" || c.WhenUnsatisfiable != corev1.ScheduleAnyway || c.MaxSkew != 1 ||
		c.LabelSelector == nil || !maps.Equal(c.LabelSelector.MatchLabels, map[string]string{"app.kubernetes.io/name": "aggregator", "app.kubernetes.io/instance": releaseName}) {
		t.Errorf("topology spread = %+v, want maxSkew 1 over hostnames, ScheduleAnyway, selecting the release's pods", c)
	}
	pod = decode[appsv1.Deployment](t, mustRender(t, parseValues(t, "topologySpreadConstraints: []")), "Deployment").Spec.Template.Spec
	if len(pod.TopologySpreadConstraints) != 0 {
		t.Errorf("topologySpreadConstraints: [] renders %+v, want none", pod.TopologySpreadConstraints)
	}
}

func TestPodDisruptionBudget(t *testing.T) {
	tests := map[string]struct {
		values                   string
		minAvailable, maxUnavail *intstr.IntOrString
	}{
		"default":              {"podDisruptionBudget: {enabled: true}", nil, ptr(intstr.FromInt32(1))},
		"minAvailable":         {"podDisruptionBudget: {enabled: true, minAvailable: 1}", ptr(intstr.FromInt32(1)), nil},
		"minAvailable percent": {"podDisruptionBudget: {enabled: true, minAvailable: 50%}", ptr(intstr.FromString("50%")), nil},
		"maxUnavailable":       {"podDisruptionBudget: {enabled: true, maxUnavailable: 2}", nil, ptr(intstr.FromInt32(2))},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			vals := parseValues(t, tt.values)
			lintValues(t, vals)
			pdb := decode[policyv1.PodDisruptionBudget](t, mustRender(t, vals), "PodDisruptionBudget")
			if !reflect.DeepEqual(pdb.Spec.MinAvailable, tt.minAvailable) || !reflect.DeepEqual(pdb.Spec.MaxUnavailable, tt.maxUnavail) {
				t.Errorf("render(%q): minAvailable %v, maxUnavailable %v; want %v, %v", tt.values, pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable, tt.minAvailable, tt.maxUnavail)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestConfigVersionIsTheRevision: state.config_version is the release
// revision, in the pods' config and in the hook's, so every upgrade and
// every rollback (a new revision) is a new version; values that set it
// win, 0 included.
func TestConfigVersionIsTheRevision(t *testing.T) {
	tests := []struct {
		revision int
		values   string
		want     int64
	}{
		{1, "", 1},
		{7, "", 7},
		{7, "config: {state: {config_version: 3}}", 3},
		{7, "config: {state: {config_version: 0}}", 0},
		{7, "config: {state: {commit_interval: 200ms}}", 7},
		{8, "config: {state: {cutover: '2030-12-01T10:10:00Z'}}", 8},
	}
	for _, tt := range tests {
		files, err := renderRevision(t, releaseName, tt.revision, parseValues(t, tt.values))
		if err != nil {
			t.Fatalf("render revision %d %q: %v", tt.revision, tt.values, err)
		}
		seen := 0
		for _, o := range objects(t, files) {
			if o.Kind != "ConfigMap" || strings.HasSuffix(o.Source, "dashboard.yaml") {
				continue
			}
			cm := decodeNamed[corev1.ConfigMap](t, []object{o}, "ConfigMap", o.Metadata.Name)
			text, ok := cm.Data["config.yaml"]
			if !ok {
				continue
			}
			seen++
			cfg, err := config.Parse([]byte(text), nil)
			if err != nil {
				t.Fatalf("revision %d %q: %s: config.Parse: %v", tt.revision, tt.values, o.Metadata.Name, err)
			}
			if cfg.State.ConfigVersion != tt.want {
				t.Errorf("revision %d %q: %s: state.config_version %d, want %d", tt.revision, tt.values, o.Metadata.Name, cfg.State.ConfigVersion, tt.want)
			}
		}
		if seen != 2 {
			t.Errorf("revision %d %q: %d configs, want the pods' and the hook's", tt.revision, tt.values, seen)
		}
	}
}

// state.standby_replicas is 1 whatever the pods (one pod keeps no copy:
// there is no other), unless the values set it.
func TestStandbyReplicasDefault(t *testing.T) {
	tests := []struct {
		values string
		want   int
	}{
		{"", 1},
		{"replicaCount: 3", 1},
		{"replicaCount: 3\nconfig: {state: {standby_replicas: 0}}", 0},
		{"replicaCount: 3\nconfig: {state: {standby_replicas: 2}}", 2},
		{"autoscaling: {enabled: true, minReplicas: 2, maxReplicas: 4}", 1},
	}
	for _, tt := range tests {
		cm := decode[corev1.ConfigMap](t, mustRender(t, parseValues(t, tt.values)), "ConfigMap")
		cfg, err := config.Parse([]byte(cm.Data["config.yaml"]), nil)
		if err != nil {
			t.Fatalf("%q: config.Parse: %v", tt.values, err)
		}
		if cfg.State.StandbyReplicas != tt.want {
			t.Errorf("%q: state.standby_replicas %d, want %d", tt.values, cfg.State.StandbyReplicas, tt.want)
		}
	}
}
