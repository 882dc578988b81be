package helm_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/metrics"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// serviceMetrics returns the names of the series the service exports, as
// internal/metrics describes them (histograms with their _bucket, _sum and
// _count series).
func serviceMetrics(t *testing.T) []string {
	t.Helper()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	m := reflect.ValueOf(metrics.New(prometheus.NewRegistry())).Elem()
	var names []string
	for i := range m.NumField() {
		c, ok := m.Field(i).Interface().(prometheus.Collector)
		if !ok {
			continue
		}
		ch := make(chan *prometheus.Desc, 1)
		go func() { c.Describe(ch); close(ch) }()
		for desc := range ch {
			name := fqName.FindStringSubmatch(desc.String())[1]
			names = append(names, name, name+"_bucket", name+"_sum", name+"_count")
		}
	}
	if len(names) == 0 {
		t.Fatal("metrics.Metrics describes no metric")
	}
	return names
}

type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// renderDashboard renders the dashboard's ConfigMap and decodes the dashboard.
func renderDashboard(t *testing.T) dashboard {
	t.Helper()
	objs := mustRender(t, parseValues(t, "dashboard: {enabled: true}"))
	var cm *corev1.ConfigMap
	for _, o := range objs {
		if o.Kind == "ConfigMap" && o.Metadata.Name == releaseName+"-dashboard" {
			v, err := decodeStrict(o)
			if err != nil {
				t.Fatal(err)
			}
			cm = v.(*corev1.ConfigMap)
		}
	}
	if cm == nil {
		t.Fatalf("no ConfigMap %s-dashboard with dashboard.enabled", releaseName)
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels = %v, want grafana_dashboard: \"1\" for the Grafana sidecar", cm.Labels)
	}
	var d dashboard
	if err := json.Unmarshal([]byte(cm.Data["aggregator.json"]), &d); err != nil {
		t.Fatalf("aggregator.json: %v", err)
	}
	return d
}

func TestDashboard(t *testing.T) {
	d := renderDashboard(t)
	known := serviceMetrics(t)
	metricName := regexp.MustCompile(`\baggregator_[a-z_]+\b`)
	var titles []string
	for _, p := range d.Panels {
		titles = append(titles, p.Title)
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			for _, name := range metricName.FindAllString(target.Expr, -1) {
				if !slices.Contains(known, name) {
					t.Errorf("panel %q queries %s, which the service does not export", p.Title, name)
				}
			}
		}
	}
	for _, want := range []string{"Records by outcome", "Late events per partition", "Watermark per partition",
		"Watermark lag per partition", "Firings", "End-to-end latency", "Consumer lag per partition"} {
		if !slices.Contains(titles, want) {
			t.Errorf("dashboard has no panel %q; panels: %v", want, titles)
		}
	}
}

// TestAlertsQueryServiceMetrics keeps the alert expressions on metric names
// the service exports, and off time() (see TestLagPanelsUseTheSampleTime).
func TestAlertsQueryServiceMetrics(t *testing.T) {
	known := serviceMetrics(t)
	metricName := regexp.MustCompile(`\baggregator_[a-z_]+\b`)
	for _, r := range renderRules(t).Spec.Groups[0].Rules {
		if strings.Contains(r.Expr.String(), "time()") {
			t.Errorf("%s: %s measures against time(), not the sample's timestamp", r.Alert, r.Expr.String())
		}
		for _, name := range metricName.FindAllString(r.Expr.String(), -1) {
			if !slices.Contains(known, name) {
				t.Errorf("%s queries %s, which the service does not export", r.Alert, name)
			}
		}
	}
}

// TestLagPanelsUseTheSampleTime: a lag computed against time() adds the
// age of the last scrape (up to the scrape interval) to every partition;
// the sample's own timestamp gives the lag when it was measured, as the
// service's aggregator_watermark_lag_seconds does. promtool evaluates the
// per-partition panel 29s after a scrape of a watermark 1s behind.
func TestLagPanelsUseTheSampleTime(t *testing.T) {
	d := renderDashboard(t)
	var expr string
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			if strings.Contains(target.Expr, "time()") {
				t.Errorf("panel %q: %s measures against time(), not the sample's timestamp", p.Title, target.Expr)
			}
			if p.Title == "Watermark lag per partition" && strings.Contains(target.Expr, "partition_watermark") {
				expr = target.Expr
			}
		}
	}
	if expr == "" {
		t.Fatal("no per-partition query in panel \"Watermark lag per partition\"")
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): run .ci/deploy-checks, which installs it from Debian's prometheus package", err)
	}
	expr = strings.NewReplacer("$namespace", namespace, "$job", releaseName).Replace(expr)
	series := `aggregator_partition_watermark_seconds{job="aggregator",namespace="streaming",pod="p",topic="calls",partition="0"}`
	test, err := yaml.Marshal(map[string]any{
		"rule_files": []string{"none.yaml"},
		"tests": []any{map[string]any{
			"interval": "30s",
			// Scraped every 30s, each time 1s behind the scrape.
			"input_series": []any{map[string]any{"series": series, "values": "-1+30x10"}},
			"promql_expr_test": []any{map[string]any{
				"expr": expr, "eval_time": "4m59s",
				"exp_samples": []any{map[string]any{"labels": `{topic="calls",partition="0"}`, "value": 1}},
			}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "none.yaml"), []byte("groups: []\n"))
	writeFile(t, filepath.Join(dir, "lag_test.yaml"), test)
	cmd := exec.Command(promtool, "test", "rules", "lag_test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s\n%s", err, out, test)
	}
}
