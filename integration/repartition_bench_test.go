package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
)

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

// BenchmarkRepartitionFilter measures what state.repartition_format 3
// costs against 2 (stage 1 forwards the records its source.filter
// rejects, for stage 2 to filter per generation): the end-to-end
// benchmark's input with a field "half" that is 1 in every second
// record, tumbling windows, exactly_once, repartition; without a filter
// (format 3 adds a flags byte a record) and with one that keeps half of
// the records (format 3 writes the other half to the repartition topic
// too). Each iteration runs the four, one after the other, so that the
// machine's load drifts alike for them; it reports each one's CPU and
// repartition bytes per input record, and the ratios of format 3 to 2.
func BenchmarkRepartitionFilter(b *testing.B) {
	kc := newCluster(b, 4)
	brokers := kc.ListenAddrs()
	produceHalfInput(b, brokers, 1000)
	type variant struct {
		name   string
		format int32
		filter bool
	}
	variants := []variant{{"nofilter-f2", 2, false}, {"nofilter-f3", 3, false}, {"filter-f2", 2, true}, {"filter-f3", 3, true}}
	times := make([]timing, len(variants))
	bytes := make([]float64, len(variants))
	for b.Loop() {
		for i, v := range variants {
			cfg := benchConfig(b, tumbling, "exactly_once", v.name, brokers)
			cfg.Source.Partitioning, cfg.State.RepartitionTopic = "repartition", cfg.Source.Group+"-repartition"
			cfg.State.RepartitionFormat = v.format
			if v.filter {
				cfg.Source.Filter = []config.Filter{{Field: "half", Equals: "1"}}
			}
			run := runPipeline(b, cfg, false)
			times[i].add(run.timing)
			bytes[i] += run.repartitionBytes
		}
	}
	for i, v := range variants {
		b.ReportMetric(times[i].cpuPerRecord(), v.name+"-cpu-ns/record")
		b.ReportMetric(bytes[i]/float64(times[i].records), v.name+"-repartition-B/record")
	}
	b.ReportMetric(times[1].cpuPerRecord()/times[0].cpuPerRecord(), "nofilter-f3/f2-cpu")
	b.ReportMetric(times[3].cpuPerRecord()/times[2].cpuPerRecord(), "filter-f3/f2-cpu")
	b.ReportMetric(bytes[3]/bytes[2], "filter-f3/f2-bytes")
}

// produceHalfInput is produceBenchInput's records with a field "half",
// 1 in every second record and 0 in the others.
func produceHalfInput(b *testing.B, brokers []string, keys int) {
	cl := client(b, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	const chunk = 10_000
	for i := 0; i < benchRecords; i += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for j := i; j < min(i+chunk, benchRecords); j++ {
			key := j % keys
			v := fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d,"half":%d,"pad":"%040d"}`, key, base+int64(j)*benchStepMs, j%10, j/keys%2, j)
			recs = append(recs, &kgo.Record{Topic: inTopic, Partition: int32(key % 4), Value: []byte(v)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
}
