package metrics_test

import (
	"maps"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/metrics"
)

func TestNewRegistersFixedNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.Records.WithLabelValues("calls", "0", "aggregated").Inc()
	m.Produced.WithLabelValues("calls-windows").Inc()
	m.ProduceErrors.WithLabelValues("calls-windows").Inc()
	m.PartitionWatermark.WithLabelValues("calls", "0").Set(1)
	m.ConsumerLag.WithLabelValues("calls", "0").Set(1)
	m.Latency.Observe(0.01)

	want := []string{
		"aggregator_records_total", "aggregator_firings_total", "aggregator_produced_records_total",
		"aggregator_produce_errors_total", "aggregator_open_windows", "aggregator_partition_watermark_seconds",
		"aggregator_watermark_seconds", "aggregator_watermark_lag_seconds", "aggregator_idle_partitions",
		"aggregator_end_to_end_latency_seconds", "aggregator_consumer_lag_records", "aggregator_ready",
		"aggregator_restoring_partitions", "aggregator_restored_records_total", "aggregator_restore_duration_seconds",
		"aggregator_changelog_records_total", "aggregator_commits_total", "aggregator_session_merges_total",
		"aggregator_key_partition_conflicts_total", "aggregator_repartition_bytes_total", "aggregator_repartition_purge_lag_records",
		"aggregator_repartition_records_total", "aggregator_repartition_folded_records_total", "aggregator_repartition_unfolded_records_total",
		"aggregator_watermark_source_partition", "aggregator_sources_unreported", "aggregator_hanging_transactions",
		"aggregator_producer_renewals_total", "aggregator_generations", "aggregator_generation_skipped_records_total",
		"aggregator_restores_total", "aggregator_standby_takeover_entries_total",
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = true
	}
	for _, name := range want {
		if !got[name] {
			t.Errorf("Gather() has no %s; got %v", name, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("Gather() = %d families, want %d: %v", len(got), len(want), got)
	}
}

func TestFiringsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "aggregator_firings_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"on_time": 0, "late": 0, "final": 0, "retract": 0, "early": 0, "timeout": 0}
	if !maps.Equal(got, want) {
		t.Errorf("aggregator_firings_total = %v, want %v", got, want)
	}
}

func TestNewTwiceOnOneRegistryPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	defer func() {
		if recover() == nil {
			t.Error("second New on the same registry did not panic")
		}
	}()
	metrics.New(reg)
}

func TestSeconds(t *testing.T) {
	tests := map[string]struct {
		ms   int64
		want float64
	}{
		"epoch":        {0, 0},
		"milliseconds": {1_922_350_204_999, 1_922_350_204.999},
		"before epoch": {-1500, -1.5},
		"no watermark": {math.MinInt64, math.Inf(-1)},
		"end of input": {math.MaxInt64, math.Inf(1)},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := metrics.Seconds(tt.ms); got != tt.want {
				t.Errorf("Seconds(%d) = %v, want %v", tt.ms, got, tt.want)
			}
		})
	}
}

func TestKafkaHooksPerSubsystem(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	defer cluster.Close()
	reg := prometheus.NewRegistry()
	for _, sub := range []string{"kafka_consumer", "kafka_producer"} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), metrics.KafkaHooks(reg, sub))
		if err != nil {
			t.Fatalf("NewClient(%s) = %v", sub, err)
		}
		defer cl.Close()
		if err := cl.Ping(t.Context()); err != nil {
			t.Fatalf("Ping(%s) = %v", sub, err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
	}
	for _, name := range []string{"aggregator_kafka_consumer_connects_total", "aggregator_kafka_producer_connects_total"} {
		if !seen[name] {
			t.Errorf("Gather() has no %s; got %v", name, seen)
		}
	}
}
