package pipeline

import (
	"errors"
	"fmt"
	"math"

	"aggregator/internal/config"
	"aggregator/internal/state"
	"aggregator/internal/watermark"
	"aggregator/internal/windowing"
)

// This file is a window state partition's restore in two steps
// (docs/design.md#restore): a build, which makes the partition's
// operators and hands them its changelog's entries, touching nothing of
// the Processor that changes (so it runs on any goroutine, beside the
// core's other methods and other builds), and an attach, which makes the
// built operators the partition's and does what touches the rest: the
// watermark they join, the windows already due, the cut-over, the
// position and the generator.

// Built is a window state partition's restore, built from its changelog
// (Core.Build) and waiting to be attached (Core.Attach): its
// generations' operators holding the changelog's entries, its position,
// the repairs of its changelog, and what the restore decided about its
// generations. Until attached it belongs to no core: dropping it drops
// the restore.
type Built struct {
	partition int32
	err       error
	res       state.Result
	pos       state.Position
	hasPos    bool
	// r is the Restorer whose entries go into the one list of replay
	// (oneList) at the attach: that list is every partition's.
	r *state.Restorer
	// gens and ops are the generations restored and their operators,
	// oldest first; the one the config adds (cutover) comes at the
	// attach, from seen, the latest event time the partition's state has
	// seen.
	gens    []*generation
	ops     []windowing.Operator
	known   bool // its newest stored generation has a record
	cutover bool
	seen    int64
	rep     GenerationReport
}

// Partition is the window state partition b restores.
func (b *Built) Partition() int32 { return b.partition }

// Err is why b cannot be attached (a refusal of the config, a changelog
// that does not fit the windows): Attach returns it.
func (b *Built) Err() error { return b.err }

// build builds partition's restore from r, which is spent after it. It
// reads only what New set, never the partitions, the watermarks or the
// lists: any goroutine, beside the Processor's other methods. With one
// list for every partition (replay) it only takes r: that list fills at
// the attach.
func (p *Processor) build(partition int32, r *state.Restorer) *Built {
	b := &Built{partition: partition}
	b.pos, b.hasPos = r.Position()
	if p.ops.one() {
		b.r = r
		return b
	}
	b.err = p.fill(b, r, nil)
	return b
}

// dropped is what partition's previous owner had dropped: the windows
// whose cleanup time is at or below it are not restored.
func (b *Built) dropped() int64 {
	if !b.hasPos {
		return math.MinInt64
	}
	return max(b.pos.Merged, b.pos.Floor)
}

// fill decides with config.PlanAgainst what the config does to the
// generations r holds, gives each generation an operator (shared, the
// one list's current operator, holds the config's generation with
// oneList; otherwise each is made afresh), and hands each entry to its
// generation's. It notes in b what the attach needs; the operators'
// FinishRestore is the attach's.
func (p *Processor) fill(b *Built, r *state.Restorer, shared windowing.Operator) error {
	partition := b.partition
	stored, err := r.Generations()
	if err != nil {
		return err
	}
	if err := p.operators(b, stored, shared); err != nil {
		return err
	}
	known, cutover, gens, ops := b.known, b.cutover, b.gens, b.ops
	byVersion := make(map[int64]int, len(gens))
	for i, g := range gens {
		byVersion[g.Version] = i
	}
	if b.hasPos {
		for _, op := range ops {
			op.SetFloor(partition, b.pos.Floor)
		}
	}
	// seen is the latest event time the partition's state has seen: its
	// generator's (by_key), or in stage 2, whose position keeps no
	// such time, a bound from the windows in state (the end of each:
	// a record of a window dropped since is below the watermark); and
	// the latest time of a record its filter rejected, which its
	// position keeps (Position.Latest; stage 2: its MaxTimestamp).
	seen, bound := int64(math.MinInt64), p.stage2
	if b.hasPos {
		seen = max(b.pos.Latest(), b.pos.Watermark)
	}
	// gone, by generation: the watermark by which its windows were
	// dropped, under the lateness it runs with now (keepDropped).
	gone := make([]int64, len(ops))
	for i, op := range ops {
		var sg state.Generation
		if i < len(stored) && known {
			sg = stored[i]
		}
		gone[i] = p.keepDropped(partition, gens[i], op, sg, b.dropped())
	}
	// A changelog written before generations, taken under the config's
	// settings: its entries must have the config's slots, value
	// counters included (windowing.Slots.Unrecorded).
	var unrecorded *windowing.Slots
	if len(stored) == 1 && !known {
		s, err := windowing.NewSlots(WindowSpec(p.cfg).Aggregates)
		if err != nil {
			return err
		}
		unrecorded = &s
	}
	if len(ops) == 1 {
		ops[0].Reserve(r.Keys()) // one table of the keys' size, not one doubled again and again
	}
	var spent []state.Repair
	res, err := r.FinishGenerations(func(gen int64, en *windowing.Entry) error {
		if en.Partition != partition {
			return fmt.Errorf("changelog partition of %d holds an entry of partition %d (were the input topics changed?)", partition, en.Partition)
		}
		if unrecorded != nil {
			if err := unrecorded.Unrecorded(en); err != nil {
				return err
			}
		}
		i, ok := byVersion[gen]
		if !ok && !known { // the implicit generation: its version is 0 in the keys
			i, ok = 0, true
		}
		if !ok {
			return fmt.Errorf("an entry of generation %d, which the partition does not hold", gen)
		}
		if cutover && bound {
			seen = max(seen, latestIn(ops[i], en))
		}
		err := ops[i].Restore(en, gone[i])
		if errors.Is(err, windowing.ErrSpent) {
			// A slice the engine would have deleted (a stale writer's,
			// see state.Result.Spent): left out, and deleted by the
			// next commit, so that no restore stops at it.
			spent = append(spent, state.Repair{Key: state.AppendKey(nil, en)})
			return nil
		}
		return err
	})
	res.Spent = len(spent)
	res.Repairs = append(res.Repairs, spent...)
	b.res, b.seen = res, seen
	if len(stored) > 0 && !known {
		b.rep.Verdict = config.Unrecorded
	}
	return err
}

// operators decides with config.PlanAgainst what the config does to the
// stored generations and gives each an operator (fill's first half; a
// standby's built copy makes them once, warm.go). It notes in b the
// generations, their operators and the report so far.
func (p *Processor) operators(b *Built, stored []state.Generation, shared windowing.Operator) error {
	plan, err := p.cfg.PlanAgainst(newestStored(stored))
	if err != nil {
		return err
	}
	b.rep = GenerationReport{Verdict: plan.Verdict, Stored: -1, Running: p.cfg.State.ConfigVersion, Changes: plan.Changes, Run: plan.Run}
	if len(stored) > 0 {
		b.rep.Stored = stored[len(stored)-1].Version
	}
	if plan.Verdict == config.Refused {
		return plan.Refusal
	}
	known := len(stored) > 0 && stored[len(stored)-1].Known()
	cutover := plan.Verdict == config.NewGeneration
	b.known, b.cutover = known, cutover
	if known {
		if err := Refusal(p.cfg, plan, len(stored)); err != nil {
			return err
		}
	}
	var gens []*generation
	var ops []windowing.Operator
	switch {
	case !known: // none, or a changelog written before generations: the config's settings
		g := p.configGeneration()
		if len(stored) == 1 && stored[0].Version != 0 {
			g.Version = stored[0].Version
		}
		op := shared
		if op == nil {
			op = p.ops.fresh()
		}
		gens, ops = []*generation{g}, []windowing.Operator{op}
	case shared != nil: // replay's one list, never restored in the service: the config's generation
		g, _, err := p.storedGeneration(stored[0])
		if err != nil {
			return err
		}
		gens, ops = []*generation{g}, []windowing.Operator{shared}
	default:
		for i, sg := range stored {
			g, op, err := p.storedGeneration(sg)
			if err != nil {
				return err
			}
			if i+1 < len(stored) {
				op.CutOver(stored[i+1].Cutover) // before its first Restore
			}
			gens, ops = append(gens, g), append(ops, op)
		}
	}
	b.gens, b.ops = gens, ops
	return nil
}

// attach makes b partition's restore (docs/design.md#restore): the
// partition must wait for its restore. The built operators join the
// watermark their list follows, windows already due at it fire, a
// generation the config starts is cut over to, and the position,
// generator and repairs become the partition's. It returns what the
// restore found.
func (p *Processor) attach(b *Built, now int64) (state.Result, error) {
	partition := b.partition
	if pp := p.part(partition); pp == nil || pp.restored {
		return state.Result{}, fmt.Errorf("partition %d is not waiting for its restore", partition)
	}
	if b.hasPos {
		// Its records were judged against its previous owner's watermark,
		// and go on being so at least. If this instance's watermark is
		// ahead of the partition's own, it goes back to it before the
		// restored windows are judged due (the other partitions' records
		// keep being judged against the one they had): else the
		// partition's windows fire early and its on-time records are
		// judged against the others' watermark.
		p.lowerFor(partition, b.pos.Watermark)
	} else if p.sources != nil {
		// A repartition partition no one committed yet: no source has
		// reported to it, and its records were written before the
		// markers that moved this instance's watermark (markers go to
		// every partition): they are judged from minus infinity on, as
		// its first owner would have judged them.
		p.lowerFor(partition, math.MinInt64)
	}
	if b.r != nil { // one list (replay): its entries go into it now
		b.err = p.fill(b, b.r, p.ops.cur)
		b.r = nil
	}
	if b.err != nil {
		return b.res, b.err
	}
	res, rep := b.res, b.rep
	ops, gens := b.ops, b.gens
	// The operators made for it join the watermark their list follows:
	// the merged one; a partition's own (ownWatermark) goes on from its
	// list's, for the config's generation as its list had it since the
	// assignment (a stored generation's starts afresh: its position
	// says where).
	follow := p.ops.follow
	if p.ops.ownWm && !b.known {
		if l := p.ops.of(partition); len(l) > 0 {
			wm := l[0].op.Watermark()
			follow = func(op windowing.Operator) { op.StartAt(wm) }
		}
	}
	if !p.ops.one() {
		for _, op := range ops {
			follow(op)
		}
	}
	for _, op := range ops {
		op.FinishRestore()
	}
	if b.cutover {
		g, op, t, err := p.cutOver(partition, b.seen, &rep)
		if err != nil {
			return res, err
		}
		ops[len(ops)-1].CutOver(t) // the old one's count and global windows fire Final: in the commit of g's record
		gens, ops = append(gens, g), append(ops, op)
	}
	if !p.ops.one() {
		l := make(list, len(ops))
		for i := range ops {
			l[len(ops)-1-i] = slot{op: ops[i]} // the newest first
		}
		p.ops.set(partition, l)
	}
	pp := &p.parts[partition]
	pp.gens = pp.gens[:0]
	for i := len(gens) - 1; i >= 0; i-- {
		pp.gens = append(pp.gens, gens[i])
	}
	pp.multi = pp.multiple()
	rep.Live = len(pp.gens)
	for _, g := range pp.gens {
		if !g.own {
			rep.Others = append(rep.Others, GenerationConfig{g.Version, g.cfg})
		}
	}
	if rep.Verdict != config.NewGeneration {
		rep.Running = pp.gens[0].Version
		if c := pp.gens[0].Cutover; c != state.NoCutover {
			rep.Cutover = c // the newest generation's, cut over before
		}
	}
	pp.report = rep
	pp.tag, pp.repairs, pp.restored = res.NextTag, res.Repairs, true
	if res.HasPosition {
		pp.next = res.Position.Offset
		pp.written, pp.merged = res.Position.Offset, res.Position.Merged
		if p.sources != nil {
			p.sources.Restore(partition, res.Position.Sources)
			pp.filteredMax = res.Position.MaxTimestamp
		} else {
			p.marks.Restore(partition, watermark.State{MaxTimestamp: res.Position.MaxTimestamp, Watermark: res.Position.Watermark}, now)
			if res.Position.FilteredLead != 0 {
				pp.filteredMax = res.Position.Latest()
			}
		}
		if p.ops.ownWm {
			// Its own watermark never goes down: it goes on from where
			// its windows were (a stage-2 table does not say what
			// idle_advance did; a generator's watermark is restored).
			p.ops.advance(partition, res.Position.Merged)
		}
	}
	if res.Stale > 0 || res.Spent > 0 {
		pp.written = -2 // a stale writer's position may be the log's last: the next commit writes one
	}
	p.advance(partition)
	return res, nil
}

// restore rebuilds an assigned partition from its changelog, read into r,
// before any of its input: windows, fired revisions, watermark generator.
// Windows already due at the current merged watermark fire. It is build
// and attach at once.
func (p *Processor) restore(partition int32, r *state.Restorer, now int64) (state.Result, error) {
	return p.attach(p.build(partition, r), now)
}

// multiple reports whether the partition's records take
// processGenerations: more than one generation, or one not the config's.
// A partition whose list holds the config's generation alone takes the
// one-generation path, whatever its cut-over.
func (pp *partPos) multiple() bool { return len(pp.gens) > 1 || !pp.gens[0].own }
