package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/config"
)

// replayOnly is a config replay accepts and run does not: no Kafka keys.
const replayOnly = `
source: {format: csv, csv: {columns: [sid, callType, callTime, duration]}, key: [sid],
  timestamp: {field: callTime, layout: "2006-01-02 15:04:05"}}
window: {size: 5s}
aggregates: [{name: total_duration, fn: sum, field: duration}]
`

// forRun adds what run needs to replayOnly.
const forRun = replayOnly + `
sink: {results_topic: calls-windows, late_topic: calls-late}
`

func TestValidate(t *testing.T) {
	withKafka := func(extra string) string {
		return strings.Replace(forRun, "source: {", "source: {brokers: [kafka:9092], topics: [calls], group: calls-agg, ", 1) + extra
	}
	tests := map[string]struct {
		config string
		args   []string
		env    []string
		want   string // "" = valid; else a text of the error
	}{
		"everything run needs":        {withKafka(""), nil, nil, ""},
		"no results topic":            {strings.Replace(withKafka(""), "results_topic: calls-windows, ", "", 1), nil, nil, "sink.results_topic"},
		"no Kafka keys":               {forRun, nil, nil, "source.brokers"},
		"no Kafka keys, --for run":    {forRun, []string{"--for", "run"}, nil, "source.brokers"},
		"no Kafka keys, --for replay": {replayOnly, []string{"--for", "replay"}, nil, ""},
		"loopback listen":             {withKafka(`http: {listen: "127.0.0.1:9090"}`), nil, nil, ""},
		"localhost listen":            {withKafka(`http: {listen: "localhost:9090"}`), nil, nil, ""},
		"IPv6 loopback listen":        {withKafka(`http: {listen: "[::1]:9090"}`), nil, nil, ""},
		"every interface":             {withKafka(`http: {listen: ":9090"}`), nil, nil, ""},
		"every error named": {strings.Replace(strings.Replace(withKafka(""), "window: {size: 5s}", "window: {sizee: 5s}", 1), "fn: sum", "fn: summ", 1), nil, nil,
			`window.sizee = "5s": unknown key (did you mean window.size?)` + "\n" + `aggregates[0].fn = "summ": must be one of`},
		"one interface":                  {withKafka(`http: {listen: "10.0.0.7:9090"}`), nil, nil, ""},
		"loopback listen, --for replay":  {replayOnly + `http: {listen: "127.0.0.1:9090"}`, []string{"--for", "replay"}, nil, ""},
		"loopback from the environment":  {withKafka(""), nil, []string{"AGGREGATOR_HTTP_LISTEN=127.0.0.1:9090"}, ""},
		"unknown variable":               {withKafka(""), nil, []string{"AGGREGATOR_WINDOW_SIZEE=5s"}, "AGGREGATOR_WINDOW_SIZEE: no config key has this variable (did you mean AGGREGATOR_WINDOW_SIZE?)"},
		"unknown variable, --for replay": {replayOnly, []string{"--for", "replay"}, []string{"AGGREGATOR_SORCE_GROUP=g"}, "did you mean AGGREGATOR_SOURCE_GROUP?"},
		"other variables are ignored":    {withKafka(""), nil, []string{"HOME=/root", "AGGREGATOR=1", "KAFKA_BROKERS=x"}, ""},
		"an empty unknown variable":      {withKafka(""), nil, []string{"AGGREGATOR_WINDOW_SIZEE="}, ""},
		"a list of objects":              {withKafka(""), nil, []string{"AGGREGATOR_AGGREGATES=x"}, "cannot be overridden"},
		"protobuf with a registry": {strings.Replace(withKafka(""), "format: csv, csv: {columns: [sid, callType, callTime, duration]}",
			"format: protobuf, schema_registry: {url: 'http://registry:8081'}", 1), nil, nil, ""},
		"avro without a registry": {strings.Replace(withKafka(""), "format: csv, csv: {columns: [sid, callType, callTime, duration]}",
			"format: avro", 1), nil, nil, "source.schema_registry.url"},
		"registry url from the environment, --for replay": {strings.Replace(replayOnly, "format: csv, csv: {columns: [sid, callType, callTime, duration]}",
			"format: json_schema", 1), []string{"--for", "replay"}, []string{"AGGREGATOR_SOURCE_SCHEMA_REGISTRY_URL=https://registry"}, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tt.config), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			args := append([]string{"validate", "--config", path}, tt.args...)
			err := run(context.Background(), args, tt.env, nil, &stdout, &stderr)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("run(%q) = %v, want a valid config", args, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || exitCode(err) != 2):
				t.Errorf("run(%q) = %v (exit %d), want exit 2 with an error containing %q", args, err, exitCode(err), tt.want)
			case tt.want == "" && !strings.Contains(stdout.String(), "total_duration"):
				t.Errorf("run(%q) printed %q, want the effective config", args, stdout.String())
			}
			// A loopback http.listen is a warning for run, which run logs too.
			loopback := strings.Contains(name, "loopback") || strings.Contains(name, "localhost")
			warned := strings.Contains(stderr.String(), "aggregator: warning: http.listen = ") &&
				strings.Contains(stderr.String(), "a loopback address answers only on this host")
			if forRun := !slices.Contains(tt.args, "replay"); warned != (loopback && forRun) {
				t.Errorf("run(%q) wrote %q to stderr, want a warning about http.listen: %v", args, stderr.String(), loopback && forRun)
			}
		})
	}
}

// TestValidateRedactsRegistryPassword: the effective config never shows
// the registry password.
func TestValidateRedactsRegistryPassword(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	conf := strings.Replace(replayOnly, "format: csv, csv: {columns: [sid, callType, callTime, duration]}",
		"format: avro, schema_registry: {url: 'https://registry', username: svc, password: hunter2}", 1)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"validate", "--config", path, "--for", "replay"}, nil, nil, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if out := stdout.String(); strings.Contains(out, "hunter2") || !strings.Contains(out, "password: <redacted>") {
		t.Errorf("validate printed:\n%s\nwant the registry password redacted", out)
	}
}

func TestValidateUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"validate", "--config", "x.yaml", "--for", "demo"}, nil, nil, &stdout, &stderr)
	if !errors.Is(err, errUsage) || errors.Is(err, config.ErrInvalid) {
		t.Errorf("validate --for demo = %v, want a usage error", err)
	}
}
