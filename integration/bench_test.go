package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
)

const benchRecords = 200_000

// BenchmarkEndToEnd measures the pipeline's records/s (consume, decode,
// window, produce) against a plain franz-go group consumer reading the
// same 4-partition topic, for tumbling and sliding(60) windows. Both rates
// include creating the client and joining a new group; the plain consumer
// only counts the records it fetched (kfake serves them from memory).
func BenchmarkEndToEnd(b *testing.B) {
	kc := newCluster(b, 4)
	brokers := kc.ListenAddrs()
	lines, parts := ordered(benchRecords, base) // ~100-byte JSON records
	cl := client(b, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	for i := 0; i < len(lines); i += 10_000 {
		var recs []*kgo.Record
		for j := i; j < min(i+10_000, len(lines)); j++ {
			recs = append(recs, &kgo.Record{Topic: inTopic, Partition: parts[j], Value: []byte(fmt.Sprintf(`%s,"pad":"%030d"}`, lines[j][:len(lines[j])-1], j))})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("plain", func(b *testing.B) {
		var rate float64
		n := 0
		for b.Loop() {
			n++
			rate = plainRate(b, brokers, fmt.Sprintf("bench-plain-%d-%d", n, time.Now().UnixNano()))
		}
		b.ReportMetric(rate, "records/s")
	})
	for name, window := range map[string]string{
		"tumbling":    tumbling,
		"sliding(60)": "{type: sliding, size: 60s, slide: 1s, allowed_lateness: 2s}",
	} {
		b.Run(name, func(b *testing.B) {
			var rate float64
			n := 0
			for b.Loop() {
				cfg := parseConfig(b, callsConfig(window), brokers)
				n++
				cfg.Source.Group = fmt.Sprintf("bench-%s-%d-%d", name, n, time.Now().UnixNano())
				rate = pipelineRate(b, cfg)
			}
			b.ReportMetric(rate, "records/s")
		})
	}
}

// plainRate reads the whole topic with a plain consumer in a new group,
// joining included, as for the pipeline.
func plainRate(b *testing.B, brokers []string, group string) float64 {
	began := time.Now()
	cl := client(b, brokers, kgo.ConsumeTopics(inTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.ConsumerGroup(group), kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.FetchMaxWait(50*time.Millisecond))
	n := 0
	for n < benchRecords {
		n += cl.PollFetches(context.Background()).NumRecords()
	}
	return float64(n) / time.Since(began).Seconds()
}

// pipelineRate runs the service over the whole topic and times it until
// every record has an outcome.
func pipelineRate(b *testing.B, cfg config.Config) float64 {
	reg := prometheus.NewRegistry()
	began := time.Now()
	s := startWith(b, cfg, nil, reg)
	for recordsCounted(b, reg) < benchRecords {
		time.Sleep(5 * time.Millisecond) // polling for the end
	}
	elapsed := time.Since(began)
	s.stop(b)
	return benchRecords / elapsed.Seconds()
}

func recordsCounted(b *testing.B, reg *prometheus.Registry) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "aggregator_records_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
