package demo

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/producer"
)

// Source produces a Generator's records to one topic at a steady rate,
// keyed by sid so the producer's partitioner keeps each key in one
// partition, as docs/delivery.md#partitions assumes.
type Source struct {
	Client *kgo.Client
	Topic  string
	Gen    *Generator
	Rate   float64          // records/s
	Clock  func() time.Time // the wall clock; the generator's event clock follows it

	sent [Filtered + 1]atomic.Int64
	seq  int64 // of the next record (Run's goroutine only)
}

// SeqHeader is the header in which Source numbers its records from 0, in
// the order it produces them across partitions: a reader that processes
// them in that order reads them as one consumer that kept up would.
const SeqHeader = "demo.seq"

// Seq returns the SeqHeader number of r, and whether it has one.
func Seq(r *kgo.Record) (int64, bool) {
	for _, h := range r.Headers {
		if h.Key == SeqHeader {
			n, err := strconv.ParseInt(string(h.Value), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// Sent returns how many records of each class were given to the
// producer. Each is acknowledged, or Run returns the error: counting them
// then, not at the acknowledgement, keeps the count at or above what the
// service has read (a record can be fetched before its producer hears the
// broker's acknowledgement).
func (s *Source) Sent() Counts {
	var c Counts
	for i := range s.sent {
		c[i] = s.sent[i].Load()
	}
	return c
}

// tick is how often Run tops up to the rate: small enough for a smooth
// stream, large enough to batch.
const tick = 20 * time.Millisecond

// Run produces until ctx is done, then delivers the records in flight.
// It returns the first produce error, or nil.
func (s *Source) Run(ctx context.Context) error {
	var (
		once     sync.Once
		firstErr error
	)
	fail := func(err error) { once.Do(func() { firstErr = err }) }
	// Records already generated are delivered even after ctx is done.
	deliver := context.WithoutCancel(ctx)
	start := s.Clock()
	var due int64
	t := time.NewTicker(tick)
	defer t.Stop()
	for ctx.Err() == nil {
		now := s.Clock()
		for target := Due(now.Sub(start), s.Rate); due < target; due++ {
			s.produce(deliver, s.Gen.Next(now), fail)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	if err := s.Client.Flush(deliver); err != nil {
		fail(err)
	}
	return firstErr
}

func (s *Source) produce(ctx context.Context, r Record, fail func(error)) {
	rec := &kgo.Record{Topic: s.Topic, Key: r.Key, Value: r.Value, Timestamp: r.EventTime,
		Headers: []kgo.RecordHeader{{Key: SeqHeader, Value: strconv.AppendInt(nil, s.seq, 10)}}}
	s.seq++
	s.sent[r.Class].Add(1)
	s.Client.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		if err != nil {
			fail(fmt.Errorf("produce to %s: %w", s.Topic, err))
		}
	})
}

// Watch reads the output topics with cl (a read_committed consumer of
// them) into b, and the results topic's records into c as the Service's
// unless c is nil, until ctx is done. It returns the first record the
// Board or the Check rejects, or nil once ctx is done.
func Watch(ctx context.Context, cl *kgo.Client, b *Board, c *Check) error {
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var err error
		fetches.EachRecord(func(r *kgo.Record) {
			e := b.ObserveVersion(r.Topic, r.Value, header(r, producer.HeaderConfigVersion))
			if c != nil && r.Topic == b.results && e == nil {
				e = c.Observe(Service, r.Key, r.Value)
			}
			if e != nil && err == nil {
				err = e
			}
		})
		if err != nil {
			return err
		}
	}
}

// header is the value of r's header key, "" if it has none.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// ReadCutovers reads each state partition's cut-over time from g
// (aggregator_cutover_timestamp_seconds), in ms, by partition: none until
// a partition's restore meets a new generation (docs/changing-config.md).
func ReadCutovers(g prometheus.Gatherer) (map[int32]int64, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	out := map[int32]int64{}
	for _, f := range families {
		if f.GetName() != "aggregator_cutover_timestamp_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if p, err := strconv.ParseInt(l.GetValue(), 10, 32); l.GetName() == "partition" && err == nil {
					out[int32(p)] = int64(math.Round(m.GetGauge().GetValue() * 1000))
				}
			}
		}
	}
	return out, nil
}

// Pipeline is what the view shows from the service's own metrics.
type Pipeline struct {
	Processed float64 // aggregator_records_total, every outcome
	// Watermark is aggregator_watermark_seconds in ms, the lowest over the
	// instances that have one; math.MinInt64 if none has one yet.
	Watermark int64
}

// ReadPipeline reads the service's metrics from g, so the view shows what
// /metrics shows.
func ReadPipeline(g prometheus.Gatherer) (Pipeline, error) {
	p := Pipeline{Watermark: math.MinInt64}
	families, err := g.Gather()
	if err != nil {
		return p, fmt.Errorf("gather metrics: %w", err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "aggregator_records_total":
			for _, m := range f.GetMetric() {
				p.Processed += m.GetCounter().GetValue()
			}
		case "aggregator_watermark_seconds":
			for _, m := range f.GetMetric() {
				if wm := watermarkMillis(m.GetGauge().GetValue()); wm != math.MinInt64 && (p.Watermark == math.MinInt64 || wm < p.Watermark) {
					p.Watermark = wm
				}
			}
		}
	}
	return p, nil
}

// InstanceLabel is the label that tells apart the metrics of the service
// instances `demo --instances N` runs in one process: 1 to N.
const InstanceLabel = "demo_instance"

// Instance is one service instance as its metrics show it.
type Instance struct {
	Name       string  // its InstanceLabel value
	Ready      bool    // aggregator_ready
	Partitions []int32 // the partitions of the input topic it holds, ascending
	// Stage2 are the partitions of the repartition topic it holds (with
	// source.partitioning repartition), ascending: its windows are there.
	// An instance may hold partitions of one stage only: the group's
	// balancer shares out the partitions of both topics together.
	Stage2 []int32
	// Silent are the held input partitions that have no watermark yet
	// (no record read from them).
	Silent []int32
	// Unreported is how many source partitions no marker has reported to
	// its stage 2 yet (aggregator_sources_unreported).
	Unreported int
	Watermark  int64 // its merged watermark in ms; math.MinInt64 if none yet
}

// ReadInstances returns, for each value of InstanceLabel in g (by name,
// numbers in order), the partitions of topic and of stage2 (the
// repartition topic; "" by key) that instance holds: those with an
// aggregator_partition_watermark_seconds series, which an instance keeps
// for each partition it is assigned.
func ReadInstances(g prometheus.Gatherer, topic, stage2 string) ([]Instance, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	byName := map[string]*Instance{}
	note := func(name string) *Instance {
		if byName[name] == nil {
			byName[name] = &Instance{Name: name, Watermark: math.MinInt64}
		}
		return byName[name]
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			name, ok := labels[InstanceLabel]
			if !ok {
				continue
			}
			in := note(name)
			switch f.GetName() {
			case "aggregator_watermark_seconds":
				in.Watermark = watermarkMillis(m.GetGauge().GetValue())
			case "aggregator_ready":
				in.Ready = m.GetGauge().GetValue() == 1
			case "aggregator_sources_unreported":
				in.Unreported = int(m.GetGauge().GetValue())
			case "aggregator_partition_watermark_seconds":
				p, err := strconv.ParseInt(labels["partition"], 10, 32)
				switch {
				case err != nil:
				case labels["topic"] == topic:
					in.Partitions = append(in.Partitions, int32(p))
					if watermarkMillis(m.GetGauge().GetValue()) == math.MinInt64 {
						in.Silent = append(in.Silent, int32(p))
					}
				case stage2 != "" && labels["topic"] == stage2:
					in.Stage2 = append(in.Stage2, int32(p))
				}
			}
		}
	}
	out := make([]Instance, 0, len(byName))
	for _, name := range slices.SortedFunc(maps.Keys(byName), naturalCompare) {
		in := byName[name]
		slices.Sort(in.Partitions)
		slices.Sort(in.Stage2)
		slices.Sort(in.Silent)
		out = append(out, *in)
	}
	return out, nil
}

// Unsettled says why the group's assignment is not yet one the
// generator may start on: an instance not ready, or holding no partition
// (of either stage), or a partition held twice (mid-rebalance). "" when
// every instance is ready and holds a partition, and none is held twice.
// An instance holding only input partitions (stage 1) or only
// repartition partitions (stage 2) is settled: the group's balancer
// shares out both topics' partitions together.
func Unsettled(ins []Instance) string {
	var why []string
	held := map[[2]int32]string{} // {stage, partition}: holder
	for _, in := range ins {
		switch {
		case !in.Ready:
			why = append(why, "#"+in.Name+" is not ready")
		case len(in.Partitions)+len(in.Stage2) == 0:
			why = append(why, "#"+in.Name+" holds no partition")
		}
		for stage, ps := range [][]int32{in.Partitions, in.Stage2} {
			for _, p := range ps {
				tp := [2]int32{int32(stage), p}
				if other, ok := held[tp]; ok {
					why = append(why, fmt.Sprintf("%s %d is held by #%s and #%s", stageName(stage), p, other, in.Name))
				}
				held[tp] = in.Name
			}
		}
	}
	return strings.Join(why, ", ")
}

func stageName(stage int) string {
	if stage == 0 {
		return "partition"
	}
	return "repartition partition"
}

// Waiting says which instances have no watermark yet, and what each waits
// for: by key (stage2 false), a first record on each of its partitions;
// with the repartition stage, a marker from every source partition, on
// an instance holding repartition partitions (one holding only input
// partitions has no windows, and no watermark of its own). "" when every
// instance that needs one has a watermark.
func Waiting(ins []Instance, stage2 bool) string {
	var why []string
	for _, in := range ins {
		if in.Watermark != math.MinInt64 {
			continue
		}
		switch {
		case stage2 && len(in.Stage2) == 0:
		case stage2 && in.Unreported > 0:
			why = append(why, fmt.Sprintf("#%s for markers from %d source %s", in.Name, in.Unreported, plural(in.Unreported, "partition", "partitions")))
		case stage2:
			why = append(why, "#"+in.Name+" for a watermark from its repartition partitions")
		case len(in.Silent) > 0:
			why = append(why, fmt.Sprintf("#%s for a first record on %s %s", in.Name, plural(len(in.Silent), "partition", "partitions"), partitionsText(in.Silent)))
		default:
			why = append(why, "#"+in.Name+" for a partition")
		}
	}
	return strings.Join(why, ", ")
}

// plural is one when n is 1, else many.
func plural[N int | int64](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// watermarkMillis turns the gauge back into ms. The gauge starts at 0 and
// reads -Inf before the first watermark: both mean none.
func watermarkMillis(seconds float64) int64 {
	switch {
	case seconds == 0, math.IsNaN(seconds), math.IsInf(seconds, -1):
		return math.MinInt64
	case math.IsInf(seconds, 1):
		return math.MaxInt64
	}
	return int64(math.Round(seconds * 1000))
}
