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
	"aggregator/internal/repartition"
	"aggregator/internal/watermark"
)

const stage2Yaml = `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: repartition}
watermark: {max_out_of_orderness: 1s, idle_timeout: 5s, idle_advance: true}
window: {type: tumbling, size: 2s}
aggregates: [{name: n, fn: count}]
`

// stage2 is a repartitioned processor, driven as the consumer drives
// stage 2: records and markers of repartition partitions.
type stage2 struct {
	t   *testing.T
	p   *pipeline.Processor
	dec *record.Decoder
	rec record.Record
	log changelog
	out []string
}

func newStage2(t *testing.T, doc string, log changelog, parts ...int32) *stage2 {
	t.Helper()
	cfg, err := config.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	p, err := pipeline.New(cfg, pipeline.Mode{Repartitioned: true, Checkpointed: true})
	if err != nil {
		t.Fatalf("pipeline.New: %v", err)
	}
	dec, err := p.NewDecoder()
	if err != nil {
		t.Fatalf("NewDecoder: %v", err)
	}
	s := &stage2{t: t, p: p, dec: dec, log: log}
	for _, id := range parts {
		p.Assign(id, 0)
		if _, err := p.Restore(id, log.restorer(t, id), 0); err != nil {
			t.Fatalf("Restore(%d): %v", id, err)
		}
	}
	return s
}

// data applies a repartition record at offset off of repartition
// partition part, made by stage 1 from the record at srcOff of source
// partition src, through the header's encoding.
func (s *stage2) data(part int32, off int64, src int32, srcOff int64, value string) bool {
	s.t.Helper()
	source := ready.Input{Topic: "in", Partition: src, KafkaPartition: src, Offset: srcOff, Key: []byte("req"), Value: []byte(value)}
	var in ready.Input
	if _, marker, err := repartition.Parse(repartition.AppendData(nil, &source), source.Value, part, off, nil, &in); err != nil || marker {
		s.t.Fatalf("Parse = %v, %v", marker, err)
	}
	kind, err := s.dec.Decode(&in, &s.rec)
	_, applied := s.p.Apply(&in, &s.rec, kind, err, 0)
	s.take(false)
	return applied
}

func (s *stage2) mark(part int32, off int64, src, count int32, wm int64, idle bool) {
	s.t.Helper()
	var in ready.Input
	m, marker, err := repartition.Parse(repartition.AppendMarker(nil, watermark.Mark{Source: src, Count: count, Watermark: wm, Idle: idle}), nil, part, off, nil, &in)
	if err != nil || !marker {
		s.t.Fatalf("Parse = %v, %v", marker, err)
	}
	s.p.ApplyMark(part, off, m)
	s.take(false)
}

// take keeps a Ready's outputs; a commit's changelog goes to the log.
func (s *stage2) take(commit bool) ready.Ready {
	rd := s.p.Step()
	if commit {
		rd = s.p.Commit()
	}
	for i := range rd.Outputs {
		s.out = append(s.out, outputString(&rd.Outputs[i]))
	}
	if commit {
		s.log.write(rd.Changelog, rd.Positions)
		s.p.Accept()
	}
	return rd
}

func (s *stage2) outputs() []string {
	out := s.out
	s.out = nil
	return out
}

func TestRepartitionedWatermark(t *testing.T) {
	s := newStage2(t, stage2Yaml, changelog{}, 0, 1)
	s.data(0, 0, 0, 10, `{"k":"a","t":1000}`)
	s.data(1, 0, 1, 20, `{"k":"b","t":1500}`)
	// Source 0 is far ahead, but source 1 has not reported: nothing fires.
	s.mark(0, 1, 0, 2, 10_000, false)
	s.mark(1, 1, 0, 2, 10_000, false)
	if got := s.p.Watermark(); got != math.MinInt64 {
		t.Fatalf("one of two sources reported: Watermark() = %d, want minus infinity", got)
	}
	// Source 1 reports on partition 0 only: partition 0's windows follow
	// its own sources, and fire; partition 1's wait, and the lowest of the
	// partitions' watermarks stays at minus infinity.
	s.mark(0, 2, 1, 2, 2_500, false)
	if got := s.p.Watermark(); got != math.MinInt64 {
		t.Fatalf("partition 1 has not seen source 1: Watermark() = %d, want minus infinity", got)
	}
	want := []string{`result p0 {"k":"a"} [0,2000)#0 on_time rev 0 count 1 [{1  1 true false}] wm 2500`}
	if got := s.outputs(); !slices.Equal(got, want) {
		t.Fatalf("partition 0 has heard every source: outputs = %q, want %q", got, want)
	}
	if wm, _ := s.p.PartitionWatermark(1); wm != math.MinInt64 {
		t.Errorf("PartitionWatermark(1) = %d, want minus infinity", wm)
	}
	s.mark(1, 2, 1, 2, 2_500, false)
	if got := s.p.Watermark(); got != 2_500 {
		t.Fatalf("every source reported on both partitions: Watermark() = %d, want 2500", got)
	}
	want = []string{`result p1 {"k":"b"} [0,2000)#0 on_time rev 0 count 1 [{1  1 true false}] wm 2500`}
	if got := s.outputs(); !slices.Equal(got, want) {
		t.Errorf("W 2500: outputs = %q, want partition 1's [0,2000) window", got)
	}
	// A record of source 1 judged by W, not by its own partition: late.
	s.data(0, 3, 1, 21, `{"k":"a","t":100}`)
	if got := s.outputs(); len(got) != 1 || got[0] != "late p0@21 wm 2500" {
		t.Errorf("a record behind W: outputs = %q, want it late (at its source offset)", got)
	}
	if wm, idle := s.p.PartitionWatermark(1); wm != 2_500 || idle {
		t.Errorf("PartitionWatermark(1) = %d, %v, want 2500, false", wm, idle)
	}
	// Every source idle: idle_advance moves W with the wall clock.
	for r := int32(0); r < 2; r++ {
		s.mark(r, 4, 0, 2, 10_000, true)
		s.mark(r, 5, 1, 2, 2_500, true)
	}
	if got := s.p.IdleCount(); got != 2 {
		t.Errorf("IdleCount() = %d, want 2", got)
	}
	s.p.Tick(100_000)
	if got := s.p.Watermark(); got != 100_000-1_000-5_000 {
		t.Errorf("all idle, Tick(100000): Watermark() = %d, want %d", got, 100_000-1_000-5_000)
	}
	if got := s.p.SourceTable(0); got.Count != 2 || !got.Sources[1].Idle || got.Sources[1].Applied != 21 {
		t.Errorf("SourceTable(0) = %+v", got)
	}
}

// TestRepartitionedSkipAndRestore: a record a stage-1 retry wrote again
// (a source offset already applied) is skipped, and the table of sources
// is part of the changelog position: a new owner goes on from it.
func TestRepartitionedSkipAndRestore(t *testing.T) {
	log := changelog{}
	s := newStage2(t, stage2Yaml, log, 0)
	s.mark(0, 0, 0, 1, 500, false)
	if !s.data(0, 1, 0, 7, `{"k":"a","t":1000}`) || !s.data(0, 2, 0, 8, `{"k":"a","t":1200}`) {
		t.Fatalf("fresh records were not applied")
	}
	if s.data(0, 3, 0, 8, `{"k":"a","t":1200}`) || s.data(0, 4, 0, 7, `{"k":"a","t":1000}`) {
		t.Errorf("a repeat of source offsets 8 and 7 was applied")
	}
	rd := s.take(true)
	if want := []ready.Offset{{Partition: 0, Offset: 5}}; !slices.Equal(rd.Offsets, want) {
		t.Errorf("offsets = %+v, want %+v (past the skipped repeats)", rd.Offsets, want)
	}
	// The next owner restores the table: W, the sources' offsets.
	n := newStage2(t, stage2Yaml, log, 0)
	if got := n.p.Watermark(); got != 500 {
		t.Errorf("restored: Watermark() = %d, want 500", got)
	}
	if n.data(0, 5, 0, 8, `{"k":"a","t":1200}`) {
		t.Errorf("restored: a repeat of source offset 8 was applied")
	}
	if n.data(0, 4, 0, 9, `{"k":"a","t":1200}`) {
		t.Errorf("restored: a record below the position was applied")
	}
	n.data(0, 6, 0, 9, `{"k":"a","t":1900}`)
	n.mark(0, 7, 0, 1, 2_000, false)
	if got := n.outputs(); len(got) != 1 || got[0] != `result p0 {"k":"a"} [0,2000)#0 on_time rev 0 count 3 [{3  3 true false}] wm 2000` {
		t.Errorf("restored, then W 2000: outputs = %q, want one window of 3 (records 7, 8, 9)", got)
	}
	// A marker below the position is not applied again.
	if n.p.ApplyMark(0, 7, watermark.Mark{Source: 0, Count: 1, Watermark: 9_000}) {
		t.Errorf("ApplyMark below the position was applied")
	}
}

// TestRepartitionConfigOneStage: without Repartitioned a processor of a
// repartition config is one stage (replay's): its records move its
// generators.
func TestRepartitionConfigOneStage(t *testing.T) {
	cfg, err := config.Parse([]byte(stage2Yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(cfg, pipeline.Mode{})
	if err != nil {
		t.Fatal(err)
	}
	p.Assign(0, 0)
	p.Process(&ready.Input{Partition: 0, Offset: 0, Value: []byte(`{"k":"a","t":5000}`)}, 0)
	if got := p.Watermark(); got != 3999 {
		t.Errorf("Watermark() = %d, want 3999: the record moved the generator", got)
	}
}

// TestRepartitionedUncommittedPartition: a repartition partition no one
// committed (no position) joins an instance whose watermark the markers
// of its other partition moved on; its records were written before those
// markers reached it, so they are judged from minus infinity again, not
// against the others' watermark (they would all be late).
func TestRepartitionedUncommittedPartition(t *testing.T) {
	s := newStage2(t, stage2Yaml, changelog{}, 0)
	s.mark(0, 0, 0, 1, 50_000, false)
	if got := s.p.Watermark(); got != 50_000 {
		t.Fatalf("Watermark() = %d, want 50000", got)
	}
	s.p.Assign(1, 0)
	if _, err := s.p.Restore(1, changelog{}.restorer(t, 1), 0); err != nil {
		t.Fatal(err)
	}
	if got := s.p.Watermark(); got != math.MinInt64 {
		t.Errorf("after restoring partition 1 without a position: Watermark() = %d, want minus infinity", got)
	}
	s.data(1, 0, 0, 3, `{"k":"b","t":1000}`)
	s.data(0, 1, 0, 4, `{"k":"a","t":1000}`)
	if got := s.outputs(); !slices.Equal(got, []string{"late p0@4 wm 50000"}) {
		t.Errorf("outputs = %q, want partition 0's record late (against the watermark it had) and partition 1's aggregated", got)
	}
	s.mark(1, 1, 0, 1, 50_000, false)
	if got := s.outputs(); len(got) != 1 || got[0] != `result p1 {"k":"b"} [0,2000)#0 on_time rev 0 count 1 [{1  1 true false}] wm 50000` {
		t.Errorf("partition 1's marker: outputs = %q, want its window on time", got)
	}
}

// TestRepartitionedControlRecord: a transaction's control record (stage 1
// wrote the partition in transactions) moves the position past it: the
// commit's offset, and a partition read to its end lags by nothing. One
// behind the position changes nothing.
func TestRepartitionedControlRecord(t *testing.T) {
	s := newStage2(t, stage2Yaml, changelog{}, 0)
	s.mark(0, 0, 0, 1, 500, false)
	s.p.Skip(&ready.Input{Partition: 0, Offset: 1, RepartitionOffset: 1})
	s.p.Skip(&ready.Input{Partition: 0, Offset: 0, RepartitionOffset: 0})
	rd := s.take(true)
	if want := []ready.Offset{{Partition: 0, Offset: 2}}; !slices.Equal(rd.Offsets, want) {
		t.Errorf("offsets = %+v, want %+v (past the control record)", rd.Offsets, want)
	}
	s.p.Fetched(0, 2, 0)
	if lag, ok := s.p.Lag(0); lag != 0 || !ok {
		t.Errorf("Lag(0) = %d, %v, want 0, true (read to its log end)", lag, ok)
	}
}

// TestRepartitionedSourcesRenumbered: the input topics gained partitions
// (a higher source count): when an earlier topic grew, source id 1 names
// another partition now, whose offsets start again; the offsets applied
// under the old count are forgotten, so its records are applied, not
// skipped as repeats. A late marker of the old count changes nothing.
func TestRepartitionedSourcesRenumbered(t *testing.T) {
	s := newStage2(t, stage2Yaml, changelog{}, 0)
	s.mark(0, 0, 0, 2, 500, false)
	s.mark(0, 1, 1, 2, 500, false)
	if !s.data(0, 2, 1, 40, `{"k":"a","t":1000}`) {
		t.Fatalf("a fresh record of source 1 was not applied")
	}
	s.mark(0, 3, 2, 3, 500, false) // three sources now
	if !s.data(0, 4, 1, 7, `{"k":"a","t":1100}`) {
		t.Errorf("after the count grew, source 1's offset 7 was skipped as a repeat of offset 40 under the old count")
	}
	if s.data(0, 5, 1, 7, `{"k":"a","t":1100}`) {
		t.Errorf("a repeat of source 1's offset 7 under the new count was applied")
	}
	s.mark(0, 6, 0, 2, 9_000, false) // a reporter that has not seen the growth
	if tab := s.p.SourceTable(0); tab.Count != 3 || tab.Sources[0].Reported {
		t.Errorf("after a marker of the old count: table count %d, source 0 reported %v; want 3, false (it is ignored)", tab.Count, tab.Sources[0].Reported)
	}
}

// TestRepartitionedRaisedLateness: in stage 2 too, a window dropped under
// a lower allowed_lateness stays dropped after a restore under a higher
// one (docs/changing-config.md#three-kinds-of-key): a record for it is a late event, not a new window.
func TestRepartitionedRaisedLateness(t *testing.T) {
	yaml := func(lateness string) string {
		return strings.Replace(stage2Yaml, "size: 2s}", "size: 1s, allowed_lateness: "+lateness+"}", 1)
	}
	log := changelog{}
	s := newStage2(t, yaml("1s"), log, 0)
	s.mark(0, 0, 0, 1, 0, false)
	s.data(0, 1, 0, 10, `{"k":"a","t":500}`)
	s.data(0, 2, 0, 11, `{"k":"a","t":1500}`)
	s.mark(0, 3, 0, 1, 2199, false) // fires both; [0,1000) is dropped (cleanup 1999)
	s.take(true)
	s.outputs()
	n := newStage2(t, yaml("5s"), log, 0)
	n.data(0, 4, 0, 12, `{"k":"a","t":600}`)
	n.data(0, 5, 0, 13, `{"k":"a","t":1700}`)
	want := []string{"late p0@12 wm 2199", `result p0 {"k":"a"} [1000,2000)#0 late rev 1 count 2 [{2  2 true false}] wm 2199`}
	if got := n.outputs(); !slices.Equal(got, want) {
		t.Errorf("restored under 5s: outputs = %q, want %q (600 late, [1000,2000) open)", got, want)
	}
}
