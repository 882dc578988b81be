package helm_test

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

func TestLint(t *testing.T) {
	for name, file := range valuesFiles {
		t.Run(name, func(t *testing.T) {
			lintValues(t, readValues(t, file))
		})
	}
}

// lintValues runs `helm lint` with vals; warnings fail the test.
func lintValues(t *testing.T, vals map[string]any) {
	t.Helper()
	linter := lint.AllWithKubeVersion(chartDir, vals, namespace, &kubeVersion)
	for _, msg := range linter.Messages {
		if msg.Severity >= support.WarningSev {
			t.Errorf("helm lint: %v", msg)
		} else {
			t.Logf("helm lint: %v", msg)
		}
	}
}

func TestRenderedObjectsMatchTheirAPITypes(t *testing.T) {
	tests := map[string]struct {
		file  string
		apis  []string
		kinds []string
	}{
		"defaults": {"", nil, []string{"ConfigMap", "ConfigMap", "Deployment", "Job", "Service", "ServiceAccount"}},
		"defaults with the operator CRDs": {"", operatorCRDs,
			[]string{"ConfigMap", "ConfigMap", "Deployment", "Job", "PrometheusRule", "Service", "ServiceAccount", "ServiceMonitor"}},
		"full": {fullValues, nil, []string{"ConfigMap", "ConfigMap", "ConfigMap", "CronJob", "Deployment", "HorizontalPodAutoscaler", "Job",
			"NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "Service", "ServiceAccount", "ServiceMonitor"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			objs := mustRender(t, readValues(t, tt.file), tt.apis...)
			if got := kinds(objs); !slices.Equal(got, tt.kinds) {
				t.Errorf("rendered kinds = %v, want %v", got, tt.kinds)
			}
			for _, o := range objs {
				if _, err := decodeStrict(o); err != nil {
					t.Error(err)
				}
				if o.Metadata.Labels["app.kubernetes.io/name"] != "aggregator" || o.Metadata.Labels["app.kubernetes.io/instance"] != releaseName {
					t.Errorf("%s %s: labels %v lack the standard app.kubernetes.io labels", o.Kind, o.Metadata.Name, o.Metadata.Labels)
				}
			}
		})
	}
}

func TestDeployment(t *testing.T) {
	for name, file := range valuesFiles {
		t.Run(name, func(t *testing.T) {
			objs := mustRender(t, readValues(t, file))
			d := decode[appsv1.Deployment](t, objs, "Deployment")
			cm := decode[corev1.ConfigMap](t, objs, "ConfigMap")
			pod := d.Spec.Template.Spec
			c := container(t, pod)
			checkProbes(t, c)
			checkSecurity(t, pod, c)
			if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
				t.Error("enableServiceLinks is not false: Service env vars would share the AGGREGATOR_ prefix of config overrides")
			}
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Error("automountServiceAccountToken is not false")
			}
			if want := []string{"run", "--config", "/etc/aggregator/config.yaml"}; !slices.Equal(c.Args, want) {
				t.Errorf("args = %v, want %v", c.Args, want)
			}
			if got, want := d.Spec.Template.Annotations["checksum/config"], sha256Hex(strings.TrimSuffix(cm.Data["config.yaml"], "\n")); got != want {
				t.Errorf("checksum/config = %q, want sha256 of the ConfigMap's config.yaml %q", got, want)
			}
			shutdown := renderedShutdownTimeout(t, cm)
			if grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; grace <= shutdown {
				t.Errorf("terminationGracePeriodSeconds = %v, want more than shutdown_timeout %v", grace, shutdown)
			}
			if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
				t.Errorf("strategy = %s, want RollingUpdate", d.Spec.Strategy.Type)
			}
		})
	}
}

// container returns the aggregator container of pod.
func container(t *testing.T, pod corev1.PodSpec) corev1.Container {
	t.Helper()
	if len(pod.Containers) != 1 || pod.Containers[0].Name != "aggregator" {
		t.Fatalf("containers = %v, want one named aggregator", pod.Containers)
	}
	return pod.Containers[0]
}

func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe = %v, want an httpGet", p.name, p.probe)
			continue
		}
		if got := p.probe.HTTPGet; got.Path != p.path || got.Port.String() != "metrics" {
			t.Errorf("%s probe = GET %s on port %s, want %s on port metrics", p.name, got.Path, got.Port.String(), p.path)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" {
		t.Errorf("ports = %v, want one named metrics", c.Ports)
	}
}

func checkSecurity(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	ps, cs := pod.SecurityContext, c.SecurityContext
	if ps == nil || cs == nil {
		t.Fatalf("pod securityContext = %v, container securityContext = %v, want both", ps, cs)
	}
	checks := map[string]bool{
		"pod runAsNonRoot":                  ps.RunAsNonRoot != nil && *ps.RunAsNonRoot,
		"pod seccompProfile RuntimeDefault": ps.SeccompProfile != nil && ps.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"container runAsNonRoot":            cs.RunAsNonRoot != nil && *cs.RunAsNonRoot,
		"container readOnlyRootFilesystem":  cs.ReadOnlyRootFilesystem != nil && *cs.ReadOnlyRootFilesystem,
		"container no privilege escalation": cs.AllowPrivilegeEscalation != nil && !*cs.AllowPrivilegeEscalation,
		"container drops ALL capabilities":  cs.Capabilities != nil && slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}),
		"container numeric non-root user":   cs.RunAsUser != nil && *cs.RunAsUser != 0,
		"container has a writable /tmp":     slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" && !m.ReadOnly }),
	}
	for what, ok := range checks {
		if !ok {
			t.Errorf("security: want %s; pod %+v, container %+v", what, ps, cs)
		}
	}
}

// renderedShutdownTimeout is shutdown_timeout of the rendered config, or
// the service's default when the config does not set it.
func renderedShutdownTimeout(t *testing.T, cm *corev1.ConfigMap) time.Duration {
	t.Helper()
	var cfg struct {
		ShutdownTimeout string `json:"shutdown_timeout"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.ShutdownTimeout == "" {
		return 25 * time.Second
	}
	d, err := time.ParseDuration(cfg.ShutdownTimeout)
	if err != nil {
		t.Fatalf("shutdown_timeout %q: %v", cfg.ShutdownTimeout, err)
	}
	return d
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestConfigChangeRollsPods(t *testing.T) {
	checksum := func(values string) string {
		d := decode[appsv1.Deployment](t, mustRender(t, parseValues(t, values)), "Deployment")
		return d.Spec.Template.Annotations["checksum/config"]
	}
	base := checksum("")
	if got := checksum("config: {window: {size: 10s}}"); got == base {
		t.Errorf("checksum/config did not change with config.window.size: %s", got)
	}
	if got := checksum("auth: {tls: {existingSecret: kafka-ca}}"); got == base {
		t.Errorf("checksum/config did not change when auth.tls added TLS file paths: %s", got)
	}
	if got := checksum("replicaCount: 2"); got != base {
		t.Errorf("checksum/config changed with replicaCount: %s, want %s", got, base)
	}
}

// The pod name is the group.instance.id (static membership) unless
// staticMembership.enabled is false.
func TestStaticMembershipFromPodName(t *testing.T) {
	instanceID := func(values string) *corev1.EnvVar {
		d := decode[appsv1.Deployment](t, mustRender(t, parseValues(t, values)), "Deployment")
		for _, e := range container(t, d.Spec.Template.Spec).Env {
			if e.Name == "AGGREGATOR_SOURCE_INSTANCE_ID" {
				return &e
			}
		}
		return nil
	}
	if e := instanceID(""); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("default values: AGGREGATOR_SOURCE_INSTANCE_ID = %+v, want the pod name (fieldRef metadata.name)", e)
	}
	if e := instanceID("staticMembership: {enabled: false}"); e != nil {
		t.Errorf("staticMembership.enabled false: AGGREGATOR_SOURCE_INSTANCE_ID = %+v, want none", e)
	}
}

func TestTerminationGracePeriod(t *testing.T) {
	tests := map[string]struct {
		values string
		want   int64
	}{
		"default shutdown_timeout 25s": {"", 40},
		"minutes and seconds":          {"config: {shutdown_timeout: 1m30s}", 105},
		"fraction rounds up":           {"config: {shutdown_timeout: 1500ms}", 17},
		"hours":                        {"config: {shutdown_timeout: 1h}", 3615},
		"key removed: service default": {"config: {shutdown_timeout: null}", 40},
		"explicit, longer":             {"terminationGracePeriodSeconds: 26", 26},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := decode[appsv1.Deployment](t, mustRender(t, parseValues(t, tt.values)), "Deployment")
			if got := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; got != tt.want {
				t.Errorf("render(%q): terminationGracePeriodSeconds = %d, want %d", tt.values, got, tt.want)
			}
		})
	}
}

func TestBadValuesAreRejected(t *testing.T) {
	tests := map[string]struct{ values, want string }{
		"replicas not a number":        {"replicaCount: three", "replicaCount"},
		"negative replicas":            {"replicaCount: -1", "replicaCount"},
		"unknown top-level key":        {"replicas: 2", "replicas"},
		"typo in a config key":         {"config: {window: {allowed_latenes: 2s}}", "allowed_latenes"},
		"bad window type":              {"config: {window: {type: hopping}}", "type"},
		"session without gap":          {"config: {window: {type: session, size: null, offset: null}}", "gap"},
		"session with a size":          {"config: {window: {type: session, gap: 30s, offset: null}}", "size"},
		"bad duration":                 {"config: {window: {size: 5 seconds}}", "size"},
		"negative size":                {"config: {window: {size: -5s}}", "size"},
		"broker without port":          {"config: {source: {brokers: [kafka]}}", "brokers"},
		"no brokers":                   {"config: {source: {brokers: []}}", "brokers"},
		"password in values":           {"config: {source: {sasl: {mechanism: PLAIN, password: hunter2}}}", "password"},
		"slide on a tumbling window":   {"config: {window: {slide: 1s}}", "slide"},
		"sliding window without slide": {"config: {window: {type: sliding}}", "slide"},
		"csv block with format json":   {"config: {source: {csv: {columns: [a]}}}", "csv"},
		"quantile q out of range":      {"config: {aggregates: [{name: p, fn: quantile, field: d, q: 1.5}]}", "q"},
		"bad delivery":                 {"config: {delivery: exactly_twice}", "delivery"},
		"bad pull policy":              {"image: {pullPolicy: Sometimes}", "pullPolicy"},
		"prometheusRule enabled maybe": {"prometheusRule: {enabled: maybe}", "enabled"},
		"late ratio above 1":           {"prometheusRule: {alerts: {lateEvents: {ratio: 2}}}", "ratio"},
		"bad alert duration":           {"prometheusRule: {alerts: {lateEvents: {for: 15 minutes}}}", "for"},
		"bad severity":                 {"prometheusRule: {alerts: {deadLetters: {severity: urgent}}}", "severity"},
		"password in values, readably": {"config: {source: {sasl: {mechanism: PLAIN, password: hunter2}}}", "want null"},
		"grace period a string":        {"terminationGracePeriodSeconds: soon", "terminationGracePeriodSeconds"},
		"typo in a state key":          {"config: {state: {changelog: calls-state}}", "changelog"},
		"bad commit interval":          {"config: {state: {commit_interval: 100 ms}}", "commit_interval"},
		"resources typo":               {"resources: {request: {memory: 1Gi}}", "request"},
		"resources quantity typo":      {"resources: {limits: {memory: [1Gi]}}", "memory"},
		"probe typo":                   {"livenessProbe: {httpGet: {paht: /healthz, port: metrics}}", "paht"},
		"affinity typo":                {"affinity: {nodeAfinity: {}}", "nodeAfinity"},
		"securityContext typo":         {"securityContext: {runAsUsr: 1000}", "runAsUsr"},
		"podSecurityContext bad type":  {"podSecurityContext: {runAsNonRoot: yes please}", "runAsNonRoot"},
		"toleration typo":              {"tolerations: [{key: a, efect: NoSchedule}]", "efect"},
		"spread without topologyKey":   {"topologySpreadConstraints: [{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}]", "topologyKey"},
		"extraEnv without a name":      {"extraEnv: [{value: x}]", "name"},
		"extraVolumeMounts typo":       {"extraVolumeMounts: [{name: x, mountpath: /x}]", "mountpath"},
		"HPA behavior typo":            {"autoscaling: {behavior: {scaleDwn: {}}}", "scaleDwn"},
		"NetworkPolicy peer typo":      {"networkPolicy: {kafka: {to: [{namespaceSelektor: {}}]}}", "namespaceSelektor"},
		"KEDA threshold a string":      {"keda: {enabled: true, lagThreshold: lots}", "lagThreshold"},
		"KEDA unknown key":             {"keda: {enabled: true, lagTreshold: 5}", "lagTreshold"},
		// The API server refuses a projected token living longer than 2^32 s.
		"token lifetime past 2^32 s": {"config: {source: {sasl: {mechanism: OAUTHBEARER}}}\nauth: {oauth: {serviceAccountToken: {audience: kafka, expirationSeconds: 5000000000}}}", "expirationSeconds"},
		"transaction_timeout with at_least_once": {
			"config: {delivery: at_least_once, state: {transaction_timeout: 30s}}", "transaction_timeout"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := render(t, parseValues(t, tt.values))
			if err == nil || !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("render(%q) = %v, want a schema error naming %q", tt.values, err, tt.want)
			}
		})
	}
}

func TestBadCombinationsFailTheRender(t *testing.T) {
	tests := map[string]struct{ values, want string }{
		"grace period not above shutdown_timeout": {"terminationGracePeriodSeconds: 25", "must exceed config.shutdown_timeout"},
		"SASL without a Secret":                   {"config: {source: {sasl: {mechanism: SCRAM-SHA-512, username: u}}}", "auth.sasl.existingSecret"},
		"Secret without a SASL mechanism":         {"auth: {sasl: {existingSecret: kafka-user}}", "config.source.sasl.mechanism"},
		"client cert without key":                 {"auth: {tls: {existingSecret: s, certKey: tls.crt}}", "certKey and auth.tls.keyKey"},
		"autoscaling min above max":               {"autoscaling: {enabled: true, minReplicas: 4, maxReplicas: 2}", "minReplicas"},
		"autoscaling without a target":            {"autoscaling: {enabled: true, targetCPUUtilizationPercentage: null}", "needs targetCPUUtilizationPercentage"},
		"both PDB bounds": {"podDisruptionBudget: {enabled: true, minAvailable: 1, maxUnavailable: 1}",
			"podDisruptionBudget: set minAvailable or maxUnavailable, not both"},
		"KEDA with the HPA":              {"keda: {enabled: true}\nautoscaling: {enabled: true}", "enable one"},
		"KEDA min above max":             {"keda: {enabled: true, minReplicas: 4, maxReplicas: 2}", "keda.minReplicas"},
		"KEDA, SASL without credentials": {"keda: {enabled: true}\nauth: {sasl: {existingSecret: s}}\nconfig: {source: {sasl: {mechanism: PLAIN}}}", "keda.authenticationRef.name"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := render(t, parseValues(t, tt.values))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("render(%q) = %v, want an error containing %q", tt.values, err, tt.want)
			}
		})
	}
}

func TestMonitoringObjectsFollowTheCRDs(t *testing.T) {
	tests := map[string]struct {
		values string
		apis   []string
		want   []string
	}{
		"auto without the CRDs": {"", nil, nil},
		"auto with the CRDs":    {"", operatorCRDs, []string{"PrometheusRule", "ServiceMonitor"}},
		"false with the CRDs":   {"{prometheusRule: {enabled: false}, serviceMonitor: {enabled: false}}", operatorCRDs, nil},
		"true without the CRDs": {"{prometheusRule: {enabled: true}, serviceMonitor: {enabled: true}}", nil, []string{"PrometheusRule", "ServiceMonitor"}},
		"only the rule CRD":     {"", operatorCRDs[:1], []string{"PrometheusRule"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, k := range kinds(mustRender(t, parseValues(t, tt.values), tt.apis...)) {
				if k == "PrometheusRule" || k == "ServiceMonitor" {
					got = append(got, k)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("render(%q, %v) monitoring objects = %v, want %v", tt.values, tt.apis, got, tt.want)
			}
		})
	}
}

func TestNetworkPolicyAllowsOnlyBrokersAndDNS(t *testing.T) {
	np := decode[networkingv1.NetworkPolicy](t, mustRender(t, readValues(t, fullValues)), "NetworkPolicy")
	var egress []string
	for _, rule := range np.Spec.Egress {
		for _, p := range rule.Ports {
			egress = append(egress, string(*p.Protocol)+"/"+p.Port.String())
		}
	}
	if want := []string{"TCP/9093", "TCP/8081", "UDP/53", "TCP/53"}; !slices.Equal(egress, want) {
		t.Errorf("egress ports = %v, want %v (the brokers' port from config.source.brokers, the registry's from its URL, then DNS)", egress, want)
	}
	if len(np.Spec.Egress[0].To) == 0 {
		t.Error("broker egress has no peers although networkPolicy.kafka.to is set")
	}
	if len(np.Spec.Ingress) != 1 || np.Spec.Ingress[0].Ports[0].Port.String() != "metrics" {
		t.Errorf("ingress = %+v, want only the metrics port", np.Spec.Ingress)
	}
}

// TestNetworkPolicyRegistryPort: the registry's egress port is its URL's,
// or the scheme's default; no rule without a registry.
func TestNetworkPolicyRegistryPort(t *testing.T) {
	for url, want := range map[string][]string{
		"http://schema-registry:8081/": {"TCP/9092", "TCP/8081", "UDP/53", "TCP/53"},
		"https://registry.example.com": {"TCP/9092", "TCP/443", "UDP/53", "TCP/53"},
		"http://registry":              {"TCP/9092", "TCP/80", "UDP/53", "TCP/53"},
		"":                             {"TCP/9092", "UDP/53", "TCP/53"},
	} {
		vals := parseValues(t, "networkPolicy: {enabled: true}\nconfig: {source: {format: avro, schema_registry: {url: '"+url+"'}}}")
		if url == "" {
			vals = parseValues(t, "networkPolicy: {enabled: true}")
		}
		np := decode[networkingv1.NetworkPolicy](t, mustRender(t, vals), "NetworkPolicy")
		var egress []string
		for _, rule := range np.Spec.Egress {
			for _, p := range rule.Ports {
				egress = append(egress, string(*p.Protocol)+"/"+p.Port.String())
			}
		}
		if !slices.Equal(egress, want) {
			t.Errorf("url %q: egress ports = %v, want %v", url, egress, want)
		}
	}
}

// TestSchemaRegistrySecret: auth.schemaRegistry mounts the password as the
// file the config names and passes the username as env; without a URL it
// is refused.
func TestSchemaRegistrySecret(t *testing.T) {
	objs := mustRender(t, readValues(t, fullValues))
	pod := decode[appsv1.Deployment](t, objs, "Deployment").Spec.Template.Spec
	cm := decode[corev1.ConfigMap](t, objs, "ConfigMap")
	if !strings.Contains(cm.Data["config.yaml"], "password_file: /etc/aggregator/schema-registry/password") {
		t.Errorf("config.yaml has no registry password_file:\n%s", cm.Data["config.yaml"])
	}
	var env bool
	for _, e := range container(t, pod).Env {
		if e.Name == "AGGREGATOR_SOURCE_SCHEMA_REGISTRY_USERNAME" && e.ValueFrom.SecretKeyRef.Name == "aggregator-schema-registry" {
			env = true
		}
	}
	var vol bool
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "aggregator-schema-registry" && v.Secret.Items[0].Path == "password" {
			vol = true
		}
	}
	if !env || !vol {
		t.Errorf("registry Secret: username env %v, password volume %v; want both", env, vol)
	}
	_, err := render(t, parseValues(t, "auth: {schemaRegistry: {existingSecret: sr}}"))
	if err == nil || !strings.Contains(err.Error(), "config.source.schema_registry.url") {
		t.Errorf("render(registry Secret without a URL) = %v, want an error naming config.source.schema_registry.url", err)
	}
}

func TestServicePortFollowsListenAddress(t *testing.T) {
	objs := mustRender(t, readValues(t, fullValues))
	svc := decode[corev1.Service](t, objs, "Service")
	d := decode[appsv1.Deployment](t, objs, "Deployment")
	if got := svc.Spec.Ports[0].Port; got != 8080 {
		t.Errorf("Service port = %d, want 8080 from config.http.listen", got)
	}
	if got := container(t, d.Spec.Template.Spec).Ports[0].ContainerPort; got != 8080 {
		t.Errorf("containerPort = %d, want 8080 from config.http.listen", got)
	}
}

// TestNotesListStateAndACLs checks that NOTES.txt names the changelog topic
// and every ACL the principal needs (docs/delivery.md#both-modes), following delivery and
// sink.create_topics.
func TestNotesListStateAndACLs(t *testing.T) {
	tests := map[string]struct {
		vals       map[string]any
		want, deny []string
	}{
		"defaults": {readValues(t, ""), []string{
			"consumes calls as group aggregator\n",
			"Changelog topic (window state): aggregator-changelog, compacted,",
			"Created at start when missing.",
			"needs (delivery: exactly_once):",
			"Group aggregator: Read\n",
			"Topic calls-windows, calls-late, calls-dlq: Write, Describe, Create\n",
			"Topic aggregator-changelog: Read, Write, Describe, DescribeConfigs, Create\n",
			"TransactionalId prefix aggregator- (ids are aggregator-<hostname>-<pid>-<random>): Write, Describe\n",
			"Cluster: IdempotentWrite",
		}, nil},
		"full": {readValues(t, fullValues), []string{
			"Changelog topic (window state): calls-aggregator-state, compacted,",
			"(calls, calls-eu together)",
			"sink.create_topics is false: create it before the pods start.",
			"principal User:aggregator needs (delivery: exactly_once):",
			"Topic calls-aggregator-state: Read, Write, Describe, DescribeConfigs\n",
			"TransactionalId prefix calls-aggregator-",
		}, []string{"Create\n", "Created at start", "watermarks"}},
		"by_key": {parseValues(t, "config: {source: {partitioning: by_key}}"), []string{
			"Watermark topic (each input partition's watermark, read by every pod): aggregator-watermarks,\ncompacted, with one partition. Created at start when missing.",
			"Topic aggregator-watermarks: Read, Write, Describe, DescribeConfigs, Create\n",
		}, nil},
		"by_key, scope partition": {parseValues(t, "config: {source: {partitioning: by_key}, watermark: {scope: partition}}"), nil,
			[]string{"watermarks"}},
		"at_least_once": {parseValues(t, "config: {delivery: at_least_once}"), []string{
			"needs (delivery: at_least_once):",
			"Topic aggregator-changelog: Read, Write, Describe, DescribeConfigs, Create\n",
			"Cluster: IdempotentWrite",
		}, []string{"TransactionalId"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			files, err := render(t, tt.vals)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			notes := files["aggregator/templates/NOTES.txt"]
			for _, s := range tt.want {
				if !strings.Contains(notes, s) {
					t.Errorf("NOTES.txt lacks %q:\n%s", s, notes)
				}
			}
			for _, s := range tt.deny {
				if strings.Contains(notes, s) {
					t.Errorf("NOTES.txt has %q:\n%s", s, notes)
				}
			}
		})
	}
}

// TestOAuthAndRack: an OAuth client secret mounted as a file and named in
// the config, a projected service-account token as the token file, the
// rack from the pod's zone label, and the combinations that cannot work
// refused at render.
func TestOAuthAndRack(t *testing.T) {
	objs := mustRender(t, readValues(t, oauthValues))
	pod := decode[appsv1.Deployment](t, objs, "Deployment").Spec.Template.Spec
	cm := decode[corev1.ConfigMap](t, objs, "ConfigMap")
	if !strings.Contains(cm.Data["config.yaml"], "client_secret_file: /etc/aggregator/oauth/client-secret") {
		t.Errorf("config.yaml has no OAuth client_secret_file:\n%s", cm.Data["config.yaml"])
	}
	var rack, secret bool
	for _, e := range container(t, pod).Env {
		if e.Name == "AGGREGATOR_SOURCE_RACK" && e.ValueFrom.FieldRef.FieldPath == "metadata.labels['topology.kubernetes.io/zone']" {
			rack = true
		}
	}
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "aggregator-oauth" && v.Secret.Items[0].Path == "client-secret" {
			secret = true
		}
	}
	if !rack || !secret {
		t.Errorf("rack env from the zone label %v, client secret volume %v; want both", rack, secret)
	}

	objs = mustRender(t, parseValues(t, `
config: {source: {sasl: {mechanism: OAUTHBEARER}}}
auth: {oauth: {serviceAccountToken: {audience: kafka, expirationSeconds: 1800}}}`))
	pod = decode[appsv1.Deployment](t, objs, "Deployment").Spec.Template.Spec
	cm = decode[corev1.ConfigMap](t, objs, "ConfigMap")
	if !strings.Contains(cm.Data["config.yaml"], "token_file: /etc/aggregator/oauth-token/token") {
		t.Errorf("config.yaml has no OAuth token_file:\n%s", cm.Data["config.yaml"])
	}
	var projected bool
	for _, v := range pod.Volumes {
		if p := v.Projected; p != nil && len(p.Sources) == 1 && p.Sources[0].ServiceAccountToken != nil &&
			p.Sources[0].ServiceAccountToken.Audience == "kafka" && *p.Sources[0].ServiceAccountToken.ExpirationSeconds == 1800 {
			projected = true
		}
	}
	if !projected {
		t.Errorf("no projected service-account token of audience kafka in %+v", pod.Volumes)
	}

	objs = mustRender(t, parseValues(t, `
config: {source: {sasl: {mechanism: AWS_MSK_IAM, aws: {region: eu-west-1}}}}
serviceAccount: {annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::111122223333:role/aggregator"}}`))
	if sa := decode[corev1.ServiceAccount](t, objs, "ServiceAccount"); sa.Annotations["eks.amazonaws.com/role-arn"] == "" {
		t.Errorf("ServiceAccount annotations = %v, want the IRSA role", sa.Annotations)
	}

	for values, want := range map[string]string{
		"config: {source: {sasl: {mechanism: OAUTHBEARER, oauth: {token_endpoint: 'https://idp/token', client_id: a}}}}":                   "auth.oauth.existingSecret",
		"config: {source: {sasl: {mechanism: SCRAM-SHA-512, username: u}}}\nauth: {sasl: {existingSecret: s}, oauth: {existingSecret: o}}": "config.source.sasl.mechanism OAUTHBEARER",
		"config: {source: {sasl: {mechanism: OAUTHBEARER}}}\nauth: {oauth: {existingSecret: o}}":                                           "config.source.sasl.oauth.token_endpoint",
		"config: {source: {sasl: {mechanism: AWS_MSK_IAM}}}\nauth: {sasl: {existingSecret: s}}":                                            "auth.sasl.existingSecret is set",
	} {
		if _, err := render(t, parseValues(t, values)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("render(%s) = %v, want an error naming %s", values, err, want)
		}
	}
}
