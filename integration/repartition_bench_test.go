package integration

import "testing"

// BenchmarkRepartition measures the CPU per input record of
// source.partitioning repartition against by_key on the same input (the
// end-to-end benchmark's, with 1000 keys: partitioned by key, so by_key's
// results are right too), tumbling windows, exactly_once. Each iteration
// runs both, one after the other, so that the machine's load drifts alike
// for both; the ratio of their cpu-ns/record is the cost of the second
// stage: the repartition topic written and read (kfake's work included:
// it runs in the process), each record decoded twice, the markers. The
// timing is runPipeline's (the clock stops once every record reached a
// window and every output so far is acknowledged).
func BenchmarkRepartition(b *testing.B) {
	kc := newCluster(b, 4)
	brokers := kc.ListenAddrs()
	produceBenchInput(b, brokers, 1000)
	var byKey, repart timing
	b.ReportAllocs()
	for b.Loop() {
		for _, mode := range []string{"by_key", "repartition"} {
			cfg := benchConfig(b, tumbling, "exactly_once", mode, brokers)
			cfg.Source.Partitioning, cfg.State.RepartitionTopic = mode, cfg.Source.Group+"-repartition"
			run := runPipeline(b, cfg, false).timing
			if mode == "by_key" {
				byKey.add(run)
			} else {
				repart.add(run)
			}
		}
	}
	b.ReportMetric(byKey.cpuPerRecord(), "by_key-cpu-ns/record")
	b.ReportMetric(repart.cpuPerRecord(), "repartition-cpu-ns/record")
	b.ReportMetric(repart.cpuPerRecord()/byKey.cpuPerRecord(), "cpu-ratio")
	b.ReportMetric(byKey.allocsPerRecord(), "by_key-allocs/record")
	b.ReportMetric(repart.allocsPerRecord(), "repartition-allocs/record")
	b.ReportMetric(float64(repart.records)/repart.wall.Seconds(), "repartition-records/s")
}
