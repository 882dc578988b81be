// Package helm holds the tests of the Helm chart in helm/aggregator: they
// lint it and render it with the Helm library (no helm binary needed),
// decode every rendered object strictly into its Kubernetes or
// prometheus-operator API type, check the rendered service config with
// config.Parse, and run promtool's unit tests on the rendered alert rules.
// The package has no non-test code. It is its own module (aggregator/helm,
// the service through a replace directive), so the service's go.mod holds
// only what the service needs and not Helm and the Kubernetes API: run the
// tests from this folder, `cd helm && go test ./...` (.ci/run does).
package helm
