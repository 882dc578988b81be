package helm_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

// promtoolTests are the promtool unit tests of the rendered rules; their
// rule_files entry names renderedRules.
const (
	promtoolTests = "../deploy/prometheus/alerts_test.yaml"
	renderedRules = "aggregator-rules.yaml"
)

// wantAlerts are the alerts the chart ships, each with a runbook section.
var wantAlerts = []string{
	"AggregatorLateEventRateHigh", "AggregatorDeadLetters", "AggregatorWatermarkLagHigh",
	"AggregatorConsumerLagHigh", "AggregatorNoResults", "AggregatorProduceErrors", "AggregatorPodRestarting",
}

// renderRules renders the chart's PrometheusRule with default values, as
// installed on a cluster with the prometheus-operator CRDs.
func renderRules(t *testing.T) *monitoringv1.PrometheusRule {
	t.Helper()
	return decode[monitoringv1.PrometheusRule](t, mustRender(t, nil, operatorCRDs...), "PrometheusRule")
}

func TestAlertsAreDocumented(t *testing.T) {
	runbook := string(repoFile(t, "../docs/operations.md"))
	tests := string(repoFile(t, promtoolTests))
	var got []string
	for _, r := range renderRules(t).Spec.Groups[0].Rules {
		got = append(got, r.Alert)
		for _, key := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[key] == "" {
				t.Errorf("%s: no %s annotation", r.Alert, key)
			}
		}
		if r.Labels["severity"] == "" {
			t.Errorf("%s: no severity label", r.Alert)
		}
		anchor := strings.ToLower(r.Alert)
		if !strings.HasSuffix(r.Annotations["runbook_url"], "#"+anchor) {
			t.Errorf("%s: runbook_url %q does not end in #%s", r.Alert, r.Annotations["runbook_url"], anchor)
		}
		if !regexp.MustCompile(`(?m)^#+ ` + r.Alert + `$`).MatchString(runbook) {
			t.Errorf("%s: docs/operations.md has no runbook heading %q", r.Alert, r.Alert)
		}
		if !strings.Contains(tests, "alertname: "+r.Alert) {
			t.Errorf("%s: %s does not test it", r.Alert, promtoolTests)
		}
	}
	if !slices.Equal(got, wantAlerts) {
		t.Errorf("alerts = %v, want %v", got, wantAlerts)
	}
}

// TestAlertRulesWithPromtool runs `promtool check rules` and `promtool test
// rules` on the rules rendered from the chart, so the tests cannot drift
// from what is deployed. .ci/deploy-checks installs promtool.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): run .ci/deploy-checks, which installs it from Debian's prometheus package", err)
	}
	dir := t.TempDir()
	groups, err := yaml.Marshal(map[string]any{"groups": renderRules(t).Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, renderedRules), groups)
	writeFile(t, filepath.Join(dir, "alerts_test.yaml"), repoFile(t, promtoolTests))
	for _, args := range [][]string{
		{"check", "rules", renderedRules},
		{"test", "rules", "alerts_test.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("promtool %s: %v", strings.Join(args, " "), err)
			}
			t.Errorf("promtool %s: %v\n%s\nrules:\n%s", strings.Join(args, " "), err, out, groups)
		}
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
