// Package metrics defines the service's Prometheus metrics (names fixed by
// the README) and registers them on the registry the caller passes in; it
// never touches the global registry. Metrics is safe for concurrent use, as
// every Prometheus collector is.
package metrics
