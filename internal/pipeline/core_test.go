package pipeline_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/state"
)

const coreYaml = `
source: {topics: [calls, sms], group: g, key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: %s}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 2s}
aggregates: [{name: n, fn: count}]
`

func newInstanceCore(t *testing.T, partitioning string, counts ...int32) (*pipeline.Core, *record.Decoder) {
	t.Helper()
	cfg, err := config.Parse([]byte(strings.Replace(coreYaml, "%s", partitioning, 1)), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	c, err := pipeline.NewCore(pipeline.Spec{Config: cfg, Partitions: counts})
	if err != nil {
		t.Fatalf("NewCore: %v", err)
	}
	dec, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, dec
}

// applyValues decodes and applies values as the records of partition id
// from offset 0 on.
func applyValues(c *pipeline.Core, dec *record.Decoder, topic string, n, id int32, values ...string) pipeline.Counts {
	recs := make([]pipeline.Decoded, len(values))
	for i, v := range values {
		recs[i].In = ready.Input{Topic: topic, Partition: id, KafkaPartition: n, Offset: int64(i), Value: []byte(v)}
		c.Decode(dec, &recs[i], false, nil)
	}
	var counts pipeline.Counts
	c.Apply(id, recs, int64(len(values)), 0, &counts)
	return counts
}

func restoreAllEmpty(t *testing.T, c *pipeline.Core) {
	t.Helper()
	for _, id := range c.Unrestored() {
		if _, err := c.Restore(id, state.NewRestorer(), 0); err != nil {
			t.Fatalf("Restore(%d): %v", id, err)
		}
	}
}

// TestCoreOffsetsByTopic: a commit Ready names its offsets by topic and
// Kafka partition, with by_key (two input topics, numbered topic after
// topic) and with repartition (both stages' offsets in one list).
func TestCoreOffsetsByTopic(t *testing.T) {
	t.Run("by_key", func(t *testing.T) {
		c, dec := newInstanceCore(t, "by_key", 3, 2)
		id, ok := c.Assign("sms", 1, 0)
		if !ok || id != 4 {
			t.Fatalf("Assign(sms, 1) = %d, %v; want 4, true", id, ok)
		}
		restoreAllEmpty(t, c)
		applyValues(c, dec, "sms", 1, id, `{"k":"a","t":1}`, `{"k":"a","t":2}`)
		rd := c.Commit(0)
		if want := []ready.Offset{{Topic: "sms", Partition: 1, Offset: 2}}; !slices.Equal(rd.Offsets, want) {
			t.Errorf("Offsets = %+v, want %+v", rd.Offsets, want)
		}
		if len(rd.Positions) != 1 || rd.Positions[0].Partition != 4 {
			t.Errorf("Positions = %+v, want one of changelog partition 4", rd.Positions)
		}
	})
	t.Run("repartition", func(t *testing.T) {
		c, dec := newInstanceCore(t, "repartition", 3, 2)
		l := c.Layout()
		if l.RepartitionTopic() != "g-repartition" || l.RepartitionPartitions() != 5 || l.Changelog() != 5 {
			t.Fatalf("layout: repartition topic %q, %d partitions, %d changelog partitions; want g-repartition, 5, 5",
				l.RepartitionTopic(), l.RepartitionPartitions(), l.Changelog())
		}
		in, _ := c.Assign("sms", 0, 0)
		rep, _ := c.Assign("g-repartition", 2, 0)
		if in != 8 || rep != 2 {
			t.Fatalf("ids: sms[0] %d, g-repartition[2] %d; want 8 (after the 5 repartition partitions and calls' 3), 2", in, rep)
		}
		if got := c.Unrestored(); !slices.Equal(got, []int32{rep}) {
			t.Fatalf("Unrestored = %v, want the repartition partition only (stage 1 keeps no state)", got)
		}
		restoreAllEmpty(t, c)
		counts := applyValues(c, dec, "sms", 0, in, `{"k":"a","t":1}`, `bad`, `{"k":"b","t":3}`)
		if counts[pipeline.DeadLetter] != 1 || counts[pipeline.Aggregated] != 0 {
			t.Errorf("stage 1 counts = %v, want the dead letter only (stage 2 counts what it forwards)", counts)
		}
		rd := c.Step(0)
		kinds := map[ready.Kind]int{}
		for _, o := range rd.Outputs {
			kinds[o.Kind]++
		}
		if kinds[ready.Repartition] != 2 || kinds[ready.DeadLetter] != 1 {
			t.Errorf("Step outputs by kind = %v, want 2 repartition records and 1 dead letter", kinds)
		}
		rd = c.Commit(0)
		want := []ready.Offset{{Topic: "sms", Partition: 0, Offset: 3}}
		if !slices.Equal(rd.Offsets, want) {
			t.Errorf("Offsets = %+v, want %+v (the repartition partition has no position yet)", rd.Offsets, want)
		}
		if len(rd.Outputs) == 0 || rd.Outputs[0].Kind != ready.Marker {
			t.Errorf("commit outputs = %d, want stage 1's markers", len(rd.Outputs))
		}
		c.Accept()
	})
}

// TestCoreStage1WaitsForRestores: with repartition, stage 1 hands over
// nothing, neither its records, dead letters and markers nor its input
// offsets, until the window partitions of the first assignment are
// restored (a restore may refuse the config: then nothing was written);
// it keeps what it processed meanwhile and hands it over after. An
// instance whose first assignment has no window partition hands over
// at once.
func TestCoreStage1WaitsForRestores(t *testing.T) {
	kinds := func(rd ready.Ready) map[ready.Kind]int {
		out := map[ready.Kind]int{}
		for _, o := range rd.Outputs {
			out[o.Kind]++
		}
		return out
	}
	c, dec := newInstanceCore(t, "repartition", 3, 2)
	in, _ := c.Assign("sms", 0, 0)
	c.Assign("g-repartition", 2, 0)
	if rd := c.Commit(0); len(rd.Outputs) != 0 || len(rd.Offsets) != 0 {
		t.Fatalf("Commit before the restore: %d outputs, offsets %+v; want none (no markers)", len(rd.Outputs), rd.Offsets)
	}
	c.Accept()
	applyValues(c, dec, "sms", 0, in, `{"k":"a","t":1}`, `bad`)
	if rd := c.Step(0); len(rd.Outputs) != 0 {
		t.Fatalf("Step before the restore: outputs %v, want none", kinds(rd))
	}
	if rd := c.Commit(0); len(rd.Outputs) != 0 || len(rd.Offsets) != 0 {
		t.Fatalf("Commit before the restore: outputs %v, offsets %+v; want none", kinds(rd), rd.Offsets)
	}
	c.Accept()
	restoreAllEmpty(t, c)
	rd := c.Commit(0)
	if k := kinds(rd); k[ready.Repartition] != 1 || k[ready.DeadLetter] != 1 || k[ready.Marker] == 0 {
		t.Errorf("Commit after the restore: outputs %v, want the repartition record, the dead letter and markers", k)
	}
	if want := []ready.Offset{{Topic: "sms", Partition: 0, Offset: 2}}; !slices.Equal(rd.Offsets, want) {
		t.Errorf("Commit after the restore: offsets %+v, want %+v", rd.Offsets, want)
	}
	c.Accept()

	// A partition revoked meanwhile (its restore waited, say on an open
	// transaction): what it processed is its next owner's to process
	// again from the committed offset, not handed over here.
	c, dec = newInstanceCore(t, "repartition", 3, 2)
	in0, _ := c.Assign("sms", 0, 0)
	in1, _ := c.Assign("sms", 1, 0)
	c.Assign("g-repartition", 2, 0)
	applyValues(c, dec, "sms", 0, in0, `{"k":"a","t":1}`, `bad`)
	applyValues(c, dec, "sms", 1, in1, `{"k":"b","t":2}`)
	c.Revoke(in0)
	restoreAllEmpty(t, c)
	rd = c.Commit(0)
	if k := kinds(rd); k[ready.Repartition] != 1 || k[ready.DeadLetter] != 0 {
		t.Errorf("Commit after sms[0] was revoked: outputs %v, want sms[1]'s repartition record only (and markers)", k)
	}
	if want := []ready.Offset{{Topic: "sms", Partition: 1, Offset: 1}}; !slices.Equal(rd.Offsets, want) {
		t.Errorf("Commit after sms[0] was revoked: offsets %+v, want %+v", rd.Offsets, want)
	}
	c.Accept()

	c, _ = newInstanceCore(t, "repartition", 3, 2)
	if rd := c.Commit(0); len(rd.Outputs) != 0 {
		t.Errorf("Commit before any assignment: outputs %v, want none", kinds(rd))
	}
	c.Accept()
	c.Assign("sms", 0, 0)
	if k := kinds(c.Commit(0)); k[ready.Marker] == 0 {
		t.Errorf("Commit of an instance of input partitions only: outputs %v, want its markers", k)
	}
}

// TestCoreSourcesGrow: with repartition, a partition of the last input
// topic beyond its count is assigned and makes the counts due; one of
// another topic is not assigned, and a change of that topic's count is
// an error.
func TestCoreSourcesGrow(t *testing.T) {
	c, _ := newInstanceCore(t, "repartition", 3, 2)
	if id, ok := c.Assign("sms", 2, 0); !ok || id != 10 || !c.SourcesDue() {
		t.Fatalf("Assign(sms, 2) = %d, %v, due %v; want 10, true, due", id, ok, c.SourcesDue())
	}
	grew, was, err := c.Sources([]int32{3, 3})
	if !grew || was != 2 || err != nil || c.SourcesDue() {
		t.Fatalf("Sources(3, 3) = %v, %d, %v, due %v; want grew from 2, not due", grew, was, err, c.SourcesDue())
	}
	if _, ok := c.Assign("calls", 3, 0); ok {
		t.Error("Assign(calls, 3), a partition calls gained: ok, want refused")
	}
	if _, _, err := c.Sources([]int32{4, 3}); err == nil {
		t.Error("Sources(4, 3): no error, want one (calls' partitions are numbered before sms')")
	}
}

// TestCoreStats: each Ready carries the core's stats: the watermark,
// open windows, each partition's watermark and lag, and with repartition
// what stage 2 knows of the source partitions (none reported before a
// marker).
func TestCoreStats(t *testing.T) {
	c, dec := newInstanceCore(t, "by_key", 3, 2)
	id, _ := c.Assign("calls", 1, 0)
	restoreAllEmpty(t, c)
	applyValues(c, dec, "calls", 1, id, `{"k":"a","t":5000}`, `{"k":"b","t":6000}`)
	// watermark.scope global: the group's other partitions hold the
	// watermark until they are published.
	st := c.Step(0).Stats
	if st.Watermark != math.MinInt64 || st.OpenWindows != 2 || !st.HasSources || st.Unreported != 4 || st.Holder != 1 {
		t.Errorf("Step's stats: watermark %d, %d open windows, sources %v, %d unreported, holder %d; want minus infinity, 2, 4 unreported, holder 1",
			st.Watermark, st.OpenWindows, st.HasSources, st.Unreported, st.Holder)
	}
	want := []ready.PartitionStats{{ID: id, Watermark: 4999, Lag: 0, LagKnown: true}}
	if !slices.Equal(st.Partitions, want) {
		t.Errorf("Step's partitions = %+v, want %+v", st.Partitions, want)
	}
	if st := c.Commit(0).Stats; !slices.Equal(st.Partitions, want) || st.OpenWindows != 2 {
		t.Errorf("Commit's stats: partitions %+v, %d open windows; want %+v, 2", st.Partitions, st.OpenWindows, want)
	}

	c, dec = newInstanceCore(t, "repartition", 3, 2)
	in, _ := c.Assign("calls", 0, 0)
	rep, _ := c.Assign("g-repartition", 0, 0)
	restoreAllEmpty(t, c)
	applyValues(c, dec, "calls", 0, in, `{"k":"a","t":5000}`)
	st = c.Step(0).Stats
	if !st.HasSources || st.Unreported != 5 || st.Holder != -1 {
		t.Errorf("repartition, no marker yet: sources %v, %d unreported, holder %d; want 5 unreported, none holding", st.HasSources, st.Unreported, st.Holder)
	}
	ids := []int32{}
	for _, ps := range st.Partitions {
		ids = append(ids, ps.ID)
	}
	if !slices.Equal(ids, []int32{rep, in}) {
		t.Errorf("partitions in the stats = %v, want both stages' (%d, %d)", ids, rep, in)
	}
}
