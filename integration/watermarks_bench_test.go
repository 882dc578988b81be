package integration

import "testing"

// BenchmarkWatermarkScope measures the CPU per input record of by_key
// with watermark.scope global (the watermark topic written at every
// commit and read back) against scope partition (nothing published or
// read), on the end-to-end benchmark's input (1000 keys), tumbling
// windows, exactly_once, one instance. Each iteration runs both, one after
// the other, so the machine's load drifts alike for both, in turns first
// (the first run of an iteration pays for the garbage of the one before:
// run 4x, 8x, ...); cpu-ratio is
// global's cpu-ns/record over partition's (kfake's work included: it runs
// in the process).
func BenchmarkWatermarkScope(b *testing.B) {
	kc := newCluster(b, 4)
	brokers := kc.ListenAddrs()
	produceBenchInput(b, brokers, 1000)
	var global, partition timing
	b.ReportAllocs()
	scopes := []string{"global", "partition"}
	for b.Loop() {
		scopes[0], scopes[1] = scopes[1], scopes[0]
		for _, scope := range scopes {
			cfg := benchConfig(b, tumbling, "exactly_once", "scope-"+scope, brokers)
			cfg.Watermark.Scope, cfg.State.WatermarkTopic = scope, ""
			if scope == "global" {
				cfg.State.WatermarkTopic = cfg.Source.Group + "-watermarks"
			}
			run := runPipeline(b, cfg, false).timing
			if scope == "global" {
				global.add(run)
			} else {
				partition.add(run)
			}
		}
	}
	b.ReportMetric(global.cpuPerRecord(), "global-cpu-ns/record")
	b.ReportMetric(partition.cpuPerRecord(), "partition-cpu-ns/record")
	b.ReportMetric(global.cpuPerRecord()/partition.cpuPerRecord(), "cpu-ratio")
}
