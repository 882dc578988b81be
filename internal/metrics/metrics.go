package metrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// Namespace prefixes every metric of the service, including the Kafka
// client metrics from kprom.
const Namespace = "aggregator"

// Metrics holds the service's own collectors. Label values: outcome is one
// of aggregated, partially_late, late, filtered, marker, dead_letter;
// firing is one of on_time, late, final, retract, early, timeout.
type Metrics struct {
	Records            *prometheus.CounterVec // {topic, partition, outcome}
	Firings            *prometheus.CounterVec // {firing}
	SessionMerges      prometheus.Counter
	KeyConflicts       prometheus.Counter     // records of a group key seen first on another partition of the instance
	GenerationSkips    prometheus.Counter     // records aggregated by a generation and a dead letter to another's decoding (docs/changing-config.md#a-record-in-two-generations)
	Produced           *prometheus.CounterVec // {topic}: acknowledged output records
	ProduceErrors      *prometheus.CounterVec // {topic}
	Unwritable         *prometheus.CounterVec // {topic}: written as stubs (late, dead letters) or dropped (results)
	OpenWindows        prometheus.Gauge
	Generations        prometheus.Gauge     // live generations of windows over the state partitions (docs/changing-config.md)
	CutoverTimestamp   *prometheus.GaugeVec // {partition}: the cut-over T of a state partition's newest generation, seconds
	PartitionWatermark *prometheus.GaugeVec // {topic, partition}, seconds
	Watermark          prometheus.Gauge     // merged, seconds
	WatermarkLag       prometheus.Gauge     // wall clock minus merged watermark, seconds
	IdlePartitions     prometheus.Gauge
	Latency            prometheus.Histogram   // record fetched → result acknowledged, seconds
	ConsumerLag        *prometheus.GaugeVec   // {topic, partition}
	Ready              prometheus.Gauge       // 1 when the group is joined and not shutting down
	RestoringParts     prometheus.Gauge       // partitions whose changelog is being read
	RestoredRecords    prometheus.Counter     // changelog records read by restores
	RestoreSeconds     prometheus.Histogram   // one restore of newly assigned partitions
	HangingTxns        prometheus.Gauge       // changelog partitions held by a hanging transaction
	Renewals           prometheus.Counter     // exactly_once sessions made again after a fenced producer
	ChangelogRecords   prometheus.Counter     // changelog records written (tombstones included)
	Commits            *prometheus.CounterVec // {result}: committed, aborted

	// state.standby_replicas (docs/scaling.md#standby-state).
	StandbyLagRecords *prometheus.GaugeVec   // {partition}: changelog records a standby copy is behind
	StandbyLagSeconds *prometheus.GaugeVec   // {partition}: the age of the oldest changelog end a copy has not reached
	Restores          *prometheus.CounterVec // {from}: partitions restored, from a standby copy or from the changelog's start
	// {at}: window state entries of the partitions taken over from standby
	// copies: built by the copy before the takeover, or at it (the tail's)
	StandbyEntries *prometheus.CounterVec

	// source.partitioning repartition (docs/scaling.md#the-repartition-stage).
	RepartitionBytes prometheus.Counter // key, value and header bytes of the records stage 1 wrote
	// RepartitionRecords counts them by kind: record (one input record)
	// or partial (a group of partials, format 4); RepartitionFolded the
	// input records the groups hold, RepartitionUnfolded those stage 2
	// read back from the input because it could not merge their group
	// (docs/design.md#two-phase-aggregation).
	RepartitionRecords  *prometheus.CounterVec // {kind}
	RepartitionFolded   prometheus.Counter
	RepartitionUnfolded prometheus.Counter
	RepartitionPurge    prometheus.Gauge     // records stage 2 committed that DeleteRecords has not removed yet
	SourceWatermark     *prometheus.GaugeVec // {partition}: each source partition's watermark as stage 2 sees it, seconds
	WatermarkSource     prometheus.Gauge     // the source partition whose watermark is W (-1: none)
	SourcesUnreported   prometheus.Gauge     // source partitions no marker has reported yet
}

// Firing label values, pre-created so dashboards see zeros before the first firing.
var firings = []string{"on_time", "late", "final", "retract", "early", "timeout"}

// New creates the metrics and registers them on reg. It panics if reg
// already holds metrics with these names, as promauto does: that is a
// wiring bug, not a runtime condition.
func New(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		Records: f.NewCounterVec(prometheus.CounterOpts{
			Name: "aggregator_records_total",
			Help: "Input records by outcome: aggregated, partially_late, late, filtered, marker, dead_letter.",
		}, []string{"topic", "partition", "outcome"}),
		Firings: f.NewCounterVec(prometheus.CounterOpts{
			Name: "aggregator_firings_total",
			Help: "Window results emitted, by firing: on_time, late, final, early (window.early_firings), timeout (count windows); retract counts sessions withdrawn by a merge (tombstones).",
		}, []string{"firing"}),
		SessionMerges: f.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_session_merges_total",
			Help: "Records that bridged two or more sessions of a key into one.",
		}),
		GenerationSkips: f.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_generation_skipped_records_total",
			Help: "Records that a live generation of windows aggregated and another could not decode (a value one generation's aggregates need and the other's do not): counted once as aggregated, not dead letters.",
		}),
		KeyConflicts: f.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_key_partition_conflicts_total",
			Help: "Records whose group key was seen first on another input partition of this instance (source.partitioning by_key): their windows are computed apart, per partition.",
		}),
		Produced: f.NewCounterVec(prometheus.CounterOpts{
			Name: "aggregator_produced_records_total",
			Help: "Output records acknowledged by the brokers, per output topic.",
		}, []string{"topic"}),
		ProduceErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "aggregator_produce_errors_total",
			Help: "Output records that failed to produce, per output topic.",
		}, []string{"topic"}),
		Unwritable: f.NewCounterVec(prometheus.CounterOpts{
			Name: "aggregator_unwritable_outputs_total",
			Help: "Outputs that could not be written whole (larger than the topic's max.message.bytes, or refused with a per-record error): late events and dead letters are written as stubs (aggregator.truncated=true), results are dropped.",
		}, []string{"topic"}),
		OpenWindows: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_open_windows",
			Help: "Windows (key, window) held in state.",
		}),
		Generations: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_generations",
			Help: "Live generations of windows (config generations, docs/changing-config.md) over this instance's state partitions: one per partition, more while an old generation finishes its windows.",
		}),
		CutoverTimestamp: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aggregator_cutover_timestamp_seconds",
			Help: "The event time T at which a state partition cut over to its newest generation, in seconds since the epoch (set at the cut-over).",
		}, []string{"partition"}),
		PartitionWatermark: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aggregator_partition_watermark_seconds",
			Help: "Watermark of each assigned input partition, in seconds since the epoch.",
		}, []string{"topic", "partition"}),
		Watermark: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_watermark_seconds",
			Help: "Merged watermark (minimum over non-idle partitions), in seconds since the epoch.",
		}),
		WatermarkLag: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_watermark_lag_seconds",
			Help: "Wall clock minus the merged watermark.",
		}),
		IdlePartitions: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_idle_partitions",
			Help: "Assigned partitions currently idle (left out of the merged watermark).",
		}),
		Latency: f.NewHistogram(prometheus.HistogramOpts{
			Name: "aggregator_end_to_end_latency_seconds",
			Help: "From fetching the record that fired a window to the result being acknowledged.",
			// 1ms to ~16s: a firing waits for its batch's produce and commit.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		ConsumerLag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aggregator_consumer_lag_records",
			Help: "Records between the consumed position and the log end, per input partition.",
		}, []string{"topic", "partition"}),
		Ready: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_ready",
			Help: "1 when the consumer group is joined and the process is not shutting down.",
		}),
		RestoringParts: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_restoring_partitions",
			Help: "Assigned partitions whose state is being restored from the changelog.",
		}),
		StandbyLagRecords: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aggregator_standby_lag_records",
			Help: "Changelog records a standby copy of a state partition (state.standby_replicas) is behind the changelog's last stable offset, per changelog partition.",
		}, []string{"partition"}),
		StandbyLagSeconds: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aggregator_standby_lag_seconds",
			Help: "How long ago the changelog held the oldest record a standby copy lacks (0: it holds every committed record), per changelog partition.",
		}, []string{"partition"}),
		Restores: f.NewCounterVec(prometheus.CounterOpts{
			Name: "aggregator_restores_total",
			Help: "State partitions restored, by from: standby (a standby copy, reading the changelog's tail) or changelog (reading it from its start).",
		}, []string{"from"}),
		StandbyEntries: f.NewCounterVec(prometheus.CounterOpts{
			Name: "aggregator_standby_takeover_entries_total",
			Help: "Window state entries of the state partitions taken over from a standby copy, by at: copy (built by the copy as the changelog committed them) or takeover (built at the takeover: the changelog tail's puts and deletions).",
		}, []string{"at"}),
		RestoredRecords: f.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_restored_records_total",
			Help: "Changelog records read while restoring state.",
		}),
		Renewals: f.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_producer_renewals_total",
			Help: "exactly_once: times the transactional producer was fenced and the group client made again (the partitions restored from the last commit).",
		}),
		HangingTxns: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_hanging_transactions",
			Help: "Changelog partitions this instance must restore whose last stable offset has not moved past an open transaction for longer than the transaction timeout.",
		}),
		RestoreSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "aggregator_restore_duration_seconds",
			Help:    "Time to restore the state of newly assigned partitions from the changelog.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 8),
		}),
		ChangelogRecords: f.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_changelog_records_total",
			Help: "Changelog records written: state changes, tombstones and positions.",
		}),
		RepartitionBytes: f.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_repartition_bytes_total",
			Help: "Bytes (keys, values, headers) of the records written to the repartition topic (source.partitioning repartition).",
		}),
		RepartitionRecords: f.NewCounterVec(prometheus.CounterOpts{
			Name: "aggregator_repartition_records_total",
			Help: "Records written to the repartition topic, by kind: record (one input record), partial (a group of partials: stage 1 folded input records into them).",
		}, []string{"kind"}),
		RepartitionFolded: f.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_repartition_folded_records_total",
			Help: "Input records stage 1 folded into partials instead of sending them one by one (repartition records of kind partial hold them).",
		}),
		RepartitionUnfolded: f.NewCounter(prometheus.CounterOpts{
			Name: "aggregator_repartition_unfolded_records_total",
			Help: "Input records stage 2 read back from the input topic and applied one by one, because it could not merge the group of partials that held them.",
		}),
		RepartitionPurge: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_repartition_purge_lag_records",
			Help: "Records of the owned repartition partitions that stage 2 committed and that are not deleted yet.",
		}),
		SourceWatermark: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aggregator_source_watermark_seconds",
			Help: "Each source partition's watermark as stage 2 sees it (the lowest over the owned repartition partitions), by the source partition's dense id.",
		}, []string{"partition"}),
		WatermarkSource: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_watermark_source_partition",
			Help: "The dense id of the source partition whose watermark holds the merged watermark (-1: none, or not repartitioned).",
		}),
		SourcesUnreported: f.NewGauge(prometheus.GaugeOpts{
			Name: "aggregator_sources_unreported",
			Help: "Source partitions that no marker has reported yet to an owned repartition partition: the merged watermark waits for them.",
		}),
		Commits: f.NewCounterVec(prometheus.CounterOpts{
			Name: "aggregator_commits_total",
			Help: "Commits of state, outputs and offsets, by result (committed, aborted, rejected).",
		}, []string{"result"}),
	}
	m.Commits.WithLabelValues("committed")
	m.Commits.WithLabelValues("aborted")
	m.Commits.WithLabelValues("rejected")
	m.WatermarkSource.Set(-1)
	m.RepartitionRecords.WithLabelValues("record")
	m.RepartitionRecords.WithLabelValues("partial")
	for _, from := range []string{"standby", "changelog"} {
		m.Restores.WithLabelValues(from)
	}
	for _, at := range []string{"copy", "takeover"} {
		m.StandbyEntries.WithLabelValues(at)
	}
	for _, name := range firings {
		m.Firings.WithLabelValues(name)
	}
	return m
}

// KafkaHooks returns the kgo option that records a Kafka client's metrics
// on reg as aggregator_<subsystem>_*. Every client needs its own
// subsystem (kafka_consumer, kafka_producer, kafka_admin, ...): duplicate
// names panic at registration.
func KafkaHooks(reg prometheus.Registerer, subsystem string) kgo.Opt {
	return kgo.WithHooks(kprom.NewMetrics(Namespace, kprom.Subsystem(subsystem), kprom.Registerer(reg)))
}

// Seconds converts int64 milliseconds since the epoch (the engine's time)
// to the float seconds the *_seconds gauges use. The engine's "no
// watermark yet" (math.MinInt64) and "end of input" (math.MaxInt64) become
// -Inf and +Inf rather than nonsense dates.
func Seconds(ms int64) float64 {
	switch ms {
	case math.MinInt64:
		return math.Inf(-1)
	case math.MaxInt64:
		return math.Inf(1)
	}
	return float64(ms) / 1000
}
