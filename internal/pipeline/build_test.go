package pipeline_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/state"
)

// restoreRun is what a processor of yaml gave, restored from log's
// partitions 0 to parts-1 and fed ins from the restored positions: what
// each restore returned and reported, the outputs, and the changelog of
// the commit after.
type restoreRun struct {
	results []state.Result
	reports []pipeline.GenerationReport
	out     *tape
	commit  [][]pipeline.ChangelogRecord
}

// runRestored restores a processor of yaml from log and feeds it ins.
// built: every partition is built at once, each on a goroutine of its
// own, before the first is attached (then attached in order); else each
// is restored in turn (Restore).
func runRestored(t *testing.T, yaml string, log changelog, parts int32, ins []crashInput, built bool) restoreRun {
	t.Helper()
	p, out := newProcessor(t, yaml)
	for id := range parts {
		p.Assign(id, 0)
	}
	bs := make([]*pipeline.Built, parts)
	if built {
		var wg sync.WaitGroup
		for id := range parts {
			r := log.restorer(t, id)
			wg.Go(func() { bs[id] = p.Build(id, r) })
		}
		wg.Wait()
	}
	return attachAndFeed(p, out, parts, ins, func(id int32) state.Result { return attachOrRestore(t, p, log, id, bs[id]) })
}

// attachAndFeed restores partitions 0 to parts-1 in order with attach,
// feeds ins from the restored positions, and returns the run: the
// restores' results and reports, the outputs, the commit after.
func attachAndFeed(p core, out *tape, parts int32, ins []crashInput, attach func(id int32) state.Result) restoreRun {
	var run restoreRun
	from := map[int32]int64{}
	for id := range parts {
		res := attach(id)
		if res.HasPosition {
			from[id] = res.Position.Offset
		}
		run.results = append(run.results, res)
		run.reports = append(run.reports, p.GenerationReport(id))
	}
	feed(p, ins, from)
	data, positions := p.Checkpoint()
	run.commit = [][]pipeline.ChangelogRecord{data, positions}
	p.Flush()
	run.out = out
	return run
}

// attachOrRestore attaches b, partition id's build, or with none
// restores id from log.
func attachOrRestore(t *testing.T, p core, log changelog, id int32, b *pipeline.Built) state.Result {
	t.Helper()
	var res state.Result
	var err error
	if b != nil {
		res, err = p.Attach(b, 0)
	} else {
		res, err = p.Restore(id, log.restorer(t, id), 0)
	}
	if err != nil {
		t.Fatalf("restore of %d (built: %v): %v", id, b != nil, err)
	}
	return res
}

// sameAsRestore checks that building every partition at once (apart from
// the processor, on goroutines of their own) and attaching them gives
// what restoring them in turn gives, to the letter.
func sameAsRestore(t *testing.T, yaml string, log changelog, parts int32, ins []crashInput) {
	t.Helper()
	want := runRestored(t, yaml, log, parts, ins, false)
	got := runRestored(t, yaml, log, parts, ins, true)
	switch {
	case !reflect.DeepEqual(got.results, want.results):
		t.Errorf("restores returned\n%+v\nwant\n%+v", got.results, want.results)
	case !reflect.DeepEqual(got.reports, want.reports):
		t.Errorf("generation reports\n%+v\nwant\n%+v", got.reports, want.reports)
	case !reflect.DeepEqual(got.out, want.out):
		t.Errorf("outputs differ:\n%s", firstDiff(got.out.results, want.out.results))
	case !reflect.DeepEqual(got.commit, want.commit):
		t.Errorf("the commit after differs:\n%s", firstDiff(got.commit[0], want.commit[0]))
	}
	if len(want.out.results) == 0 {
		t.Error("no results: the case tests nothing")
	}
}

// TestBuildAttachIsRestore: a partition built apart (Build, before any
// other is attached) and attached later is the partition Restore gives,
// on the generation cases: a cut-over to a new generation, two and three
// live generations, a stale writer's slices repaired, a changelog
// written before generations; in both watermark scopes.
func TestBuildAttachIsRestore(t *testing.T) {
	const parts = 3
	ins := crashStream(31, 450, parts, false)
	for _, scope := range scopes {
		old, next := inScope(genOld, scope), inScope(genChanges["1s to 5s"], scope)
		third := inScope(genChanges["to sliding"], scope)
		third = strings.Replace(third, "config_version: 2", "config_version: 3", 1)
		t.Run(scope+"/cut-over", func(t *testing.T) {
			first, _ := newProcessor(t, old)
			for id := range int32(parts) {
				first.Assign(id, 0)
			}
			feed(first, ins[:200], nil)
			log := changelog{}
			log.write(first.Checkpoint())
			sameAsRestore(t, next, log, parts, ins)
		})
		t.Run(scope+"/generations", func(t *testing.T) {
			_, _, log := cutOverRun(t, old, next, ins[:160], 150, parts)
			two := runRestored(t, next, log, parts, ins[:160], false)
			if !slices.ContainsFunc(two.reports, func(r pipeline.GenerationReport) bool { return r.Live == 2 }) {
				t.Fatalf("reports %+v: no partition holds two generations", two.reports)
			}
			sameAsRestore(t, next, log, parts, ins)  // two live generations
			sameAsRestore(t, third, log, parts, ins) // and a third cut over to
		})
	}
	t.Run("stale writer", func(t *testing.T) {
		yaml := crashConfigs["tumbling"]
		one := crashStream(9, 400, 1, false)
		p1, _ := newProcessor(t, yaml)
		p1.Assign(0, 0)
		feed(p1, one[:100], nil)
		log := changelog{}
		log.write(p1.Checkpoint())
		feed(p1, one[100:], nil)
		data, positions := p1.Checkpoint()
		var kept []pipeline.ChangelogRecord
		for _, r := range data {
			if r.Value != nil {
				kept = append(kept, r) // the tombstones lost: spent slices
			}
		}
		log.write(kept, positions)
		res := runRestored(t, yaml, log, 1, one[:100], false)
		if !slices.ContainsFunc(res.commit[0], func(r pipeline.ChangelogRecord) bool { return r.Value == nil }) {
			t.Fatal("the commit after the restore deletes nothing: the repair goes untested")
		}
		sameAsRestore(t, yaml, log, 1, one)
	})
	t.Run("unrecorded", func(t *testing.T) {
		log := readBeforeGenerations(t)
		ins := []crashInput{{0, 3, `{"k": "z", "t": 60000, "v": 1}`}, {0, 4, `{"k": "a", "t": 130000, "v": 2}`}}
		sameAsRestore(t, countSumYAML, log, 1, ins)
	})
}

// TestBuildBesideApply: builds of several partitions run at the same
// time as each other and as the records of the partitions already
// restored (-race checks that they share nothing), and attached then
// they give what restoring them at that point gives.
func TestBuildBesideApply(t *testing.T) {
	const parts = 4
	yaml := crashConfigs["sliding"]
	ins := crashStream(41, 1600, parts, false)
	first, _ := newProcessor(t, yaml)
	for id := range int32(parts) {
		first.Assign(id, 0)
	}
	feed(first, ins[:800], nil)
	log := changelog{}
	log.write(first.Checkpoint())
	run := func(built bool) *tape {
		p, out := newProcessor(t, yaml)
		from := restoreFrom(t, p, log, 0, 1)
		p.Assign(2, 0)
		p.Assign(3, 0)
		var early, late []crashInput // partitions 0 and 1's records, then 2 and 3's
		for _, in := range ins {
			if in.part < 2 {
				early = append(early, in)
			} else {
				late = append(late, in)
			}
		}
		bs := make([]*pipeline.Built, parts)
		var wg sync.WaitGroup
		if built {
			for id := int32(2); id < parts; id++ {
				r := log.restorer(t, id)
				wg.Go(func() { bs[id] = p.Build(id, r) })
			}
		}
		feed(p, early[:len(early)/2], from) // beside the builds
		wg.Wait()
		for id := int32(2); id < parts; id++ {
			from[id] = attachOrRestore(t, p, log, id, bs[id]).Position.Offset
		}
		feed(p, early[len(early)/2:], from)
		feed(p, late, from)
		p.Flush()
		return out
	}
	got, want := run(true), run(false)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("built beside the records, then attached: outputs differ from a restore there:\n%s", firstDiff(got.results, want.results))
	}
	if len(want.results) == 0 {
		t.Fatal("no results: the case tests nothing")
	}
}

// TestCoreBuildBesideApply is TestBuildBesideApply through the Core, as
// the consumer drives it: partitions 2 and 3 are built on goroutines of
// their own while Apply and Step run for partitions 0 and 1 (-race checks
// that a build shares nothing with them), then attached; the outputs
// after are those of a core that restored 2 and 3 at that point.
func TestCoreBuildBesideApply(t *testing.T) {
	const parts = 4
	values := func(id int32, from, n int) []string {
		var vs []string
		for i := range n {
			vs = append(vs, fmt.Sprintf(`{"k":"k%d-%d","t":%d}`, id, (from+i)%40, 1000+(from+i)*37))
		}
		return vs
	}
	first, dec := newInstanceCore(t, "by_key", parts, 1)
	for n := range int32(parts) {
		first.Assign("calls", n, 0)
	}
	restoreAllEmpty(t, first)
	for id := range int32(parts) {
		applyValues(first, dec, "calls", id, id, values(id, 0, 300)...)
	}
	rd := first.Commit(0)
	log := changelog{}
	log.write(rd.Changelog, rd.Positions)
	first.Accept()

	run := func(built bool) []ready.Output {
		c, dec := newInstanceCore(t, "by_key", parts, 1)
		for n := range int32(parts) {
			c.Assign("calls", n, 0)
		}
		// The group's other topic, far ahead: it holds no watermark back.
		sms, _ := c.Assign("sms", 0, 0)
		if _, err := c.Restore(sms, state.NewRestorer(), 0); err != nil {
			t.Fatal(err)
		}
		applyValues(c, dec, "sms", 0, sms, `{"k":"s","t":1000000}`)
		for id := range int32(2) {
			if _, err := c.Restore(id, log.restorer(t, id), 0); err != nil {
				t.Fatalf("Restore(%d): %v", id, err)
			}
		}
		bs := make([]*pipeline.Built, parts)
		var wg sync.WaitGroup
		if built {
			for id := int32(2); id < parts; id++ {
				r := log.restorer(t, id)
				wg.Go(func() { bs[id] = c.Build(id, r) })
			}
		}
		var outs []ready.Output
		apply := func(id int32) {
			recs := make([]pipeline.Decoded, 0, 100)
			for i, v := range values(id, 300, 100) {
				recs = append(recs, pipeline.Decoded{In: ready.Input{Topic: "calls", Partition: id, KafkaPartition: id, Offset: int64(300 + i), Value: []byte(v)}})
				c.Decode(dec, &recs[i], false, nil)
			}
			var counts pipeline.Counts
			c.Apply(id, recs, 400, 0, &counts)
			outs = append(outs, c.Step(0).Outputs...)
		}
		apply(0) // beside the builds
		apply(1)
		wg.Wait()
		for id := int32(2); id < parts; id++ {
			var err error
			if built {
				_, err = c.Attach(bs[id], 0)
			} else {
				_, err = c.Restore(id, log.restorer(t, id), 0)
			}
			if err != nil {
				t.Fatalf("restore of %d (built: %v): %v", id, built, err)
			}
		}
		apply(2) // the watermark rises: every partition's windows fire
		apply(3)
		return append(outs, c.Commit(0).Outputs...)
	}
	got, want := run(true), run(false)
	t.Logf("%d outputs", len(want))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("built beside Apply, then attached: %d outputs, a restore there gives %d:\n%s", len(got), len(want), firstDiff(got, want))
	}
	if len(want) == 0 {
		t.Fatal("no outputs: the case tests nothing")
	}
}
