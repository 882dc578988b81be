package integration

import "testing"

// BenchmarkRepartition measures the CPU per input record of
// source.partitioning repartition against by_key on the same input (the
// end-to-end benchmark's, with 1000 keys: partitioned by key, so by_key's
// results are right too), tumbling windows, exactly_once. The ratio of the
// two cpu-ns/record of one run is the cost of the second stage: the
// repartition topic written and read, each record decoded twice, the
// markers. The timing is runPipeline's (the clock stops once every record
// reached a window and every output so far is acknowledged).
func BenchmarkRepartition(b *testing.B) {
	kc := newCluster(b, 4)
	brokers := kc.ListenAddrs()
	produceBenchInput(b, brokers, 1000)
	var byKey float64
	for _, mode := range []string{"by_key", "repartition"} {
		b.Run(mode, func(b *testing.B) {
			var total timing
			b.ReportAllocs()
			for b.Loop() {
				cfg := benchConfig(b, tumbling, "exactly_once", mode, brokers)
				cfg.Source.Partitioning, cfg.State.RepartitionTopic = mode, cfg.Source.Group+"-repartition"
				total.add(runPipeline(b, cfg, false).timing)
			}
			total.report(b)
			if mode == "by_key" {
				byKey = total.cpuPerRecord()
			} else if byKey > 0 {
				b.ReportMetric(total.cpuPerRecord()/byKey, "cpu-ratio-to-by_key")
			}
		})
	}
}
