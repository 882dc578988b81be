package pipeline_test

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/repartition"
	"aggregator/internal/windowing"
)

// scopeConfigs are by_key configs with watermark.scope partition: each
// partition's windows follow that partition's own watermark.
var scopeConfigs = map[string]string{
	"scope_tumbling": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
watermark: {max_out_of_orderness: 1s, scope: partition}
window: {type: tumbling, size: 2s, allowed_lateness: 1s}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}, {name: q, fn: quantile, field: v, q: 0.5}]
`,
	"scope_session": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
watermark: {scope: partition}
window: {type: session, gap: 500ms, gap_field: g, allowed_lateness: 2s}
aggregates: [{name: n, fn: count}, {name: f, fn: first, field: v}]
`,
	"scope_sliding_early": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
watermark: {max_out_of_orderness: 500ms, scope: partition}
window: {type: sliding, size: 3s, slide: 1s, allowed_lateness: 1500ms, early_firings: {every: 400ms, time: event}}
aggregates: [{name: n, fn: count}, {name: mx, fn: max, field: v}]
`,
}

// withScope is cfg with watermark.scope global instead of partition.
func withScope(yaml, scope string) string {
	return strings.Replace(yaml, "scope: partition", "scope: "+scope, 1)
}

// A lagging partition does not hold another partition's windows back:
// partition 0's window fires at partition 0's own watermark while
// partition 1 is far behind, and partition 0's records are judged against
// it. With scope global the same input waits for partition 1.
func TestScopePartitionLaggingPartition(t *testing.T) {
	yaml := scopeConfigs["scope_tumbling"]
	for _, scope := range []string{"partition", "global"} {
		t.Run(scope, func(t *testing.T) {
			p, out := newProcessor(t, withScope(yaml, scope))
			p.Assign(0, 0)
			p.Assign(1, 0)
			in := func(part int32, off int64, v string) pipeline.Outcome {
				return p.Process(&ready.Input{Partition: part, Offset: off, Value: []byte(v)}, math.MaxInt64)
			}
			in(1, 0, `{"k": "b", "t": 1000, "v": 1}`) // partition 1: W -1 for a long time
			in(0, 0, `{"k": "a", "t": 1000, "v": 1}`)
			in(0, 1, `{"k": "a", "t": 5000, "v": 1}`) // partition 0: W 3999
			straggler := in(0, 2, `{"k": "a", "t": 500, "v": 1}`)
			wm0, _ := p.PartitionWatermark(0)
			if scope == "global" {
				if len(out.results) != 0 || straggler != pipeline.Aggregated || p.Watermark() != -1 {
					t.Fatalf("scope global: results %v, straggler %v, Watermark() %d; want none, aggregated, -1 (partition 1 holds W)", out.results, straggler, p.Watermark())
				}
				return
			}
			if len(out.results) != 1 || out.results[0].Partition != 0 || out.results[0].Window != (windowing.Window{Start: 0, End: 2000}) ||
				out.results[0].Watermark != 3999 || out.results[0].Count != 1 {
				t.Fatalf("results = %+v, want partition 0's [0,2000) of 1 fired at its own watermark 3999", out.results)
			}
			if straggler != pipeline.LateEvent || !slices.Equal(out.late, []int64{2}) {
				t.Errorf("straggler = %v, late %v; want it late against partition 0's watermark", straggler, out.late)
			}
			if got := p.Watermark(); got != -1 || wm0 != 3999 {
				t.Errorf("Watermark() = %d, PartitionWatermark(0) = %d; want -1 (the lowest) and 3999", got, wm0)
			}
			// Partition 1 catches up: its window fires at its own watermark.
			in(1, 1, `{"k": "b", "t": 9000, "v": 1}`)
			if len(out.results) != 2 || out.results[1].Partition != 1 || out.results[1].Watermark != 7999 {
				t.Errorf("after partition 1 moved: results = %+v, want partition 1's window at 7999", out.results)
			}
			if got := p.Watermark(); got != 3999 {
				t.Errorf("Watermark() = %d, want 3999", got)
			}
		})
	}
}

// perPartition is what a processor emitted, per partition in emission
// order: results, late events (offsets) and dead letters.
func perPartition(outs []string) map[string][]string {
	m := map[string][]string{}
	for _, o := range outs {
		part := strings.Fields(o)[1]
		part = part[:strings.IndexAny(part+"@", "@")]
		m[part] = append(m[part], o)
	}
	return m
}

// drive applies ins to a fresh processor of yaml holding parts and
// returns its outputs as outputString names them, flushed at the end.
func drive(t *testing.T, yaml string, ins []crashInput, parts ...int32) []string {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	p, err := pipeline.New(cfg, pipeline.Mode{})
	if err != nil {
		t.Fatalf("pipeline.New: %v", err)
	}
	for _, id := range parts {
		p.Assign(id, 0)
	}
	var outs []string
	take := func() {
		rd := p.Step()
		for i := range rd.Outputs {
			outs = append(outs, outputString(&rd.Outputs[i]))
		}
	}
	for _, in := range ins {
		if slices.Contains(parts, in.part) {
			p.Process(&ready.Input{Partition: in.part, Offset: in.offset, Value: []byte(in.value)}, math.MaxInt64)
			take()
		}
	}
	p.Flush()
	take()
	return outs
}

// With scope partition, what a partition emits is what it emits alone:
// three partitions on one processor give, partition by partition, the
// outputs of each on its own processor, and of two of them on another.
func TestScopePartitionEqualsPartitionsAlone(t *testing.T) {
	const parts = 3
	ins := laggingStream(13, 400, parts)
	for name, yaml := range scopeConfigs {
		t.Run(name, func(t *testing.T) {
			all := perPartition(drive(t, yaml, ins, 0, 1, 2))
			if len(all) != parts {
				t.Fatalf("outputs of %d partitions, want %d", len(all), parts)
			}
			pair := perPartition(drive(t, yaml, ins, 1, 2))
			for id := range int32(parts) {
				alone := perPartition(drive(t, yaml, ins, id))
				key := fmt.Sprintf("p%d", id)
				if !slices.Equal(all[key], alone[key]) {
					t.Errorf("partition %d on one processor with the others:\n%s", id, firstDiff(all[key], alone[key]))
				}
				if id > 0 && !slices.Equal(pair[key], alone[key]) {
					t.Errorf("partition %d with one other:\n%s", id, firstDiff(pair[key], alone[key]))
				}
			}
			// The lagging partition 0 holds scope global's windows back:
			// the stream tells the two scopes apart.
			if global := drive(t, withScope(yaml, "global"), ins, 0, 1, 2); reflect.DeepEqual(perPartition(global), all) {
				t.Error("scope global gives scope partition's outputs: the stream does not test the scope")
			}
		})
	}
}

// With scope partition, an idle partition's windows move with idle_advance
// on their own (every partition need not be idle): partition 1 is caught
// up and quiet, partition 0 is not.
func TestScopePartitionIdleAdvance(t *testing.T) {
	yaml := `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
watermark: {max_out_of_orderness: 1s, idle_timeout: 5s, idle_advance: true, scope: partition}
window: {type: tumbling, size: 2s}
aggregates: [{name: n, fn: count}]
`
	p, out := newProcessor(t, yaml)
	p.Assign(0, 0)
	p.Assign(1, 0)
	p.Process(&ready.Input{Partition: 0, Offset: 0, Value: []byte(`{"k": "a", "t": 1000}`)}, 0)
	p.Process(&ready.Input{Partition: 1, Offset: 0, Value: []byte(`{"k": "b", "t": 1000}`)}, 0)
	p.SetCaughtUp(1, true, 0)
	p.Tick(60_000)
	p.drain()
	if len(out.results) != 1 || out.results[0].Partition != 1 || out.results[0].Watermark != 60_000-1_000-5_000 {
		t.Fatalf("results = %+v, want partition 1's window, moved by idle_advance to %d", out.results, 60_000-1_000-5_000)
	}
	if wm, idle := p.PartitionWatermark(1); wm != 54_000 || !idle {
		t.Errorf("PartitionWatermark(1) = %d, %v, want 54000, idle", wm, idle)
	}
	if wm, idle := p.PartitionWatermark(0); wm != -1 || idle {
		t.Errorf("PartitionWatermark(0) = %d, %v, want -1, not idle (it is not caught up)", wm, idle)
	}
	// Partition 1's next record is judged against the watermark its windows reached.
	if got := p.Process(&ready.Input{Partition: 1, Offset: 1, Value: []byte(`{"k": "b", "t": 30000}`)}, 60_000); got != pipeline.LateEvent {
		t.Errorf("a record behind partition 1's advanced watermark: %v, want late", got)
	}
}

// stage2Parts drives repartition records of two repartition partitions
// through a processor holding parts, and returns its outputs. Source 0's
// records land on repartition partition 0, source 1's (6 s behind) on 1;
// each carries its source's watermark around it, and every ten rounds
// both sources' markers go to both partitions.
func stage2Parts(t *testing.T, parts ...int32) []string {
	t.Helper()
	s := newStage2(t, stage2Yaml, changelog{}, parts...)
	next := map[int32]int64{}
	offset := func(part int32) int64 {
		off := next[part]
		next[part]++
		return off
	}
	wm := [2]int64{math.MinInt64, math.MinInt64} // the sources' bounded watermarks
	for i := range int64(80) {
		for src := int32(0); src < 2; src++ {
			ts := 1000 + 300*i - 6000*int64(src) - 700*(i%3) // disorder within 1 s, then some late
			if slices.Contains(parts, src) {
				before := wm[src]
				wm[src] = max(wm[src], ts-1000-1)
				source := ready.Input{Topic: "in", Partition: src, KafkaPartition: src, Offset: i, Sources: 2, Before: before, After: wm[src],
					Value: []byte(fmt.Sprintf(`{"k":"k%d","t":%d}`, i%3, ts))}
				var in ready.Input
				if _, _, err := repartition.Parse(repartition.AppendData(nil, &source), source.Value, src, offset(src), nil, &in); err != nil {
					t.Fatalf("Parse: %v", err)
				}
				kind, err := s.dec.Decode(&in, &s.rec)
				s.p.Apply(&in, &s.rec, kind, err, 0)
				s.take(false)
			} else {
				wm[src] = max(wm[src], ts-1000-1)
			}
		}
		if i%10 == 9 {
			for _, r := range parts {
				for src := int32(0); src < 2; src++ {
					s.mark(r, offset(r), src, 2, wm[src], false)
				}
			}
		}
	}
	s.p.Flush()
	s.take(false)
	return s.outputs()
}

// Stage 2: two repartition partitions on one processor give, partition by
// partition, the outputs each gives on a processor of its own (each follows
// its own table of sources, whatever else the instance holds).
func TestStage2PartitionsAlone(t *testing.T) {
	both := perPartition(stage2Parts(t, 0, 1))
	for id := range int32(2) {
		key := fmt.Sprintf("p%d", id)
		alone := perPartition(stage2Parts(t, id))
		if len(alone[key]) == 0 {
			t.Fatalf("partition %d emitted nothing: the test tests nothing", id)
		}
		if !slices.Equal(both[key], alone[key]) {
			t.Errorf("repartition partition %d with the other on one processor:\n%s", id, firstDiff(both[key], alone[key]))
		}
	}
}

// Changing watermark.scope between runs: a changelog written with one
// scope restores into the other (the position's watermark is the merged
// one, or the partition's own), and every window's results go on with
// rising revisions, none twice; the records after the change are judged
// by the new scope.
func TestScopeChangeRestores(t *testing.T) {
	const parts = 3
	ins := laggingStream(21, 200, parts)
	yaml := scopeConfigs["scope_tumbling"]
	for _, from := range []string{"global", "partition"} {
		to := map[string]string{"global": "partition", "partition": "global"}[from]
		t.Run(from+"_to_"+to, func(t *testing.T) {
			c := newCluster()
			a := newShell(t, withScope(yaml, from), true, c, allParts(parts)...)
			if a.run(ins[:len(ins)/2], -1, noCrash) {
				t.Fatal("crashed")
			}
			before := len(c.outputs)
			b := newShell(t, withScope(yaml, to), true, c, allParts(parts)...)
			b.run(ins, -1, noCrash)
			if len(c.outputs) == before {
				t.Fatal("nothing after the change: the test tests nothing")
			}
			checkRevisions(t, c.outputs)
		})
	}
}
