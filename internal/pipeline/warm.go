package pipeline

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"aggregator/internal/config"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// Warm is a standby replica's copy of a window state partition kept as
// built window state (docs/design.md "Standby state"): the shell adds
// the changelog's records to its Restorer as it tails them, and each
// Core.Drain hands the entries they committed to the partition's own
// operators (windowing.Builder.Update), made once from the generations
// the changelog holds. A takeover reads the changelog's tail into the
// same Restorer and Core.BuildWarm finishes it into a Built, which
// Core.Attach attaches as any: the windows are built already, and only
// the tail's entries go in then.
//
// Every window operator is a windowing.Builder; replay's one list for
// every partition (never restored in the service) keeps the changelog's
// records, as a restore reads them (Warm.Built false), and builds them
// at the takeover.
// A Warm is not safe for concurrent use.
type Warm struct {
	partition int32
	r         *state.Restorer
	built     bool
	// b holds the operators, made at the first Drain that finds the
	// partition's generations (stored: those it was made for).
	b          *Built
	stored     []state.Generation
	byVersion  map[int64]int
	legacy     int64 // the version of the generation of version-1 keys
	unrecorded *windowing.Slots
	// spent are the keys of slices an Update left out (windowing.ErrSpent)
	// and no later record of theirs put back: the next commit deletes them.
	spent map[string]bool
	// unplaced are the entries the operators could not take (another
	// partition's, a generation the partition does not hold, slots that
	// do not fit), by key, until a later record of theirs: a restore
	// refuses a changelog whose entries are such, not one whose such
	// entries were deleted since.
	unplaced map[string]error
	err      error
	// handed counts the entries (puts and deletions) Drain handed the
	// operators; tail those BuildWarm did, at the takeover.
	handed, tail int
}

// ErrRebuild is wrapped by a Warm's error when the generations its
// operators were made for changed (a cut-over on the owner): the copy is
// made again from the changelog's start, and a takeover that finds it
// restores from there.
var ErrRebuild = errors.New("the changelog's generations changed since the copy's operators were made")

// newWarm returns an empty copy of partition's state.
func (p *Processor) newWarm(partition int32) *Warm {
	w := &Warm{partition: partition, spent: map[string]bool{}, unplaced: map[string]error{}}
	if _, ok := p.ops.fresh().(windowing.Builder); ok {
		w.built = !p.ops.one()
	}
	if w.built {
		w.r = state.NewDraining()
	} else {
		w.r = state.NewRestorer()
	}
	return w
}

// Restorer is where the copy's changelog records go, in log order from
// the start (Restorer.Add), and a takeover's tail.
func (w *Warm) Restorer() *state.Restorer { return w.r }

// Built reports whether the copy is built window state (else it keeps
// the changelog's records, as a Restorer does).
func (w *Warm) Built() bool { return w.built }

// Tail returns how many entries (puts and deletions) the takeover built
// (BuildWarm): the changelog tail's, or, for a copy that is not built
// or was never drained, every one.
func (w *Warm) Tail() int { return w.tail }

// Err is why the copy cannot go on: a changelog that does not fit the
// windows, a refused config, or generations that changed. The shell
// makes the copy again from the changelog's start.
func (w *Warm) Err() error { return w.err }

// drain hands the entries committed since the last drain to w's
// operators.
func (p *Processor) drain(w *Warm) error {
	if !w.built || w.err != nil {
		return w.err
	}
	ready, err := p.warmOperators(w)
	if err != nil && w.r.StopDraining() {
		// Nothing built yet: the copy keeps records, built at the
		// takeover, as a restore builds them.
		w.built = false
		return nil
	}
	if err == nil && ready {
		err = w.r.Drain(w.update)
	}
	if err != nil {
		w.err = err
	}
	return err
}

// warmOperators makes w's operators the first time the changelog holds
// generations, and checks that they are still the changelog's after.
func (p *Processor) warmOperators(w *Warm) (ready bool, err error) {
	stored, err := w.r.Generations()
	switch {
	case err != nil:
		return false, err
	case w.b != nil:
		if !slices.EqualFunc(stored, w.stored, sameGeneration) {
			return false, ErrRebuild
		}
		return true, nil
	case len(stored) == 0:
		return false, nil // nothing committed yet
	}
	b := &Built{partition: w.partition}
	if err := p.operators(b, stored, nil); err != nil {
		return false, err
	}
	if b.cutover && p.stage2 {
		// The cut-over's T comes from the latest event time in the
		// entries the restore hands over: it takes a restore's whole read.
		return false, fmt.Errorf("a cut-over of stage 2's windows is restored from the changelog: %w", ErrRebuild)
	}
	w.byVersion = make(map[int64]int, len(b.gens))
	for i, g := range b.gens {
		w.byVersion[g.Version] = i
	}
	for _, g := range stored {
		if g.LegacyKeys {
			w.legacy = g.Version
		}
	}
	for _, op := range b.ops {
		if _, ok := op.(windowing.Builder); !ok {
			return false, fmt.Errorf("an older generation's windows are not built: %w", ErrRebuild)
		}
	}
	if len(stored) == 1 && !b.known {
		s, err := windowing.NewSlots(WindowSpec(p.cfg).Aggregates)
		if err != nil {
			return false, err
		}
		w.unrecorded = &s
	}
	w.b, w.stored = b, slices.Clone(stored)
	return true, nil
}

// sameGeneration reports whether a and b are the same stored generation
// as far as the operators made for it go (its run settings and dropped
// bound, which a restore reads at its end, may change).
func sameGeneration(a, b state.Generation) bool {
	return a.Version == b.Version && a.Known() == b.Known() && a.Cutover == b.Cutover && a.LegacyKeys == b.LegacyKeys &&
		string(a.Settings) == string(b.Settings) && string(a.Identity) == string(b.Identity)
}

// update hands one drained entry to its generation's operator.
func (w *Warm) update(gen int64, en *windowing.Entry) error {
	key := state.AppendKey(nil, en)
	if gen != state.VersionOne {
		key = state.AppendGenerationKey(nil, gen, en)
	}
	err := w.place(gen, en)
	if err != nil && !en.Deleted {
		w.unplaced[string(key)] = err
		return nil
	}
	delete(w.unplaced, string(key))
	return err
}

// place hands en to its generation's operator.
func (w *Warm) place(gen int64, en *windowing.Entry) error {
	w.handed++
	if en.Partition != w.partition {
		if en.Deleted {
			return nil // nothing of it is held
		}
		return fmt.Errorf("changelog partition of %d holds an entry of partition %d (were the input topics changed?)", w.partition, en.Partition)
	}
	if w.unrecorded != nil && !en.Deleted {
		if err := w.unrecorded.Unrecorded(en); err != nil {
			return err
		}
	}
	i, err := w.generation(gen)
	if err != nil {
		if en.Deleted {
			return nil
		}
		return err
	}
	key := string(state.AppendKey(nil, en))
	err = w.b.ops[i].(windowing.Builder).Update(en)
	if errors.Is(err, windowing.ErrSpent) {
		w.spent[key] = true // as a restore's: left out, deleted by the next commit
		return nil
	}
	delete(w.spent, key)
	return err
}

// generation returns the index of the operator of generation gen
// (state.VersionOne: the one of version-1 keys).
func (w *Warm) generation(gen int64) (int, error) {
	if gen == state.VersionOne {
		gen = w.legacy
	}
	i, ok := w.byVersion[gen]
	if !ok && !w.b.known { // the implicit generation: its version is 0 in the keys
		i, ok = 0, true
	}
	if !ok {
		return 0, fmt.Errorf("an entry of generation %d, which the partition does not hold", gen)
	}
	return i, nil
}

// committed returns the value of a key's committed record as w's
// operators hold it, for a repair (state.Restorer.FinishDrained).
func (w *Warm) committed(key []byte) ([]byte, error) {
	var en windowing.Entry
	gen, err := state.EntryOf(key, &en)
	if err != nil {
		return nil, err
	}
	i, err := w.generation(gen)
	if err != nil {
		return nil, err
	}
	if !w.b.ops[i].(windowing.Builder).Held(&en) {
		return nil, nil // left out (spent): the repair deletes it, as the spent slice's does
	}
	return state.AppendValue(nil, &en, 0), nil
}

// buildWarm finishes w, after the takeover read the changelog's tail
// into its Restorer, into a Built: the tail's entries go into the
// operators, and what the previous owner had dropped by the final
// position is pruned. w is spent after it. A copy that is not built is
// built now, as Build builds a restore.
func (p *Processor) buildWarm(w *Warm) *Built {
	if !w.built {
		b := p.build(w.partition, w.r)
		w.tail = b.res.Entries
		return b
	}
	b := &Built{partition: w.partition}
	if w.err == nil {
		if _, err := p.warmOperators(w); err != nil {
			w.err = err
		}
	}
	if w.err != nil && !w.r.Drained() {
		return p.build(w.partition, w.r) // nothing built: a restore's build
	}
	if w.err != nil {
		b.err = w.err
		return b
	}
	if w.b == nil { // no generation yet: nothing committed to build
		b := p.build(w.partition, w.r)
		w.tail = b.res.Entries
		return b
	}
	stored, err := w.r.Generations() // the latest run settings and dropped bounds
	if err != nil {
		b.err = err
		return b
	}
	// What the config does to them, as a restore at the end decides it
	// (a refusal refuses; the operators are those made at the start).
	if b.err = p.operators(b, stored, nil); b.err != nil {
		return b
	}
	if b.known != w.b.known || b.cutover != w.b.cutover || len(b.gens) != len(w.b.gens) {
		b.err = ErrRebuild
		return b
	}
	b.ops = w.b.ops
	b.pos, b.hasPos = w.r.Position()
	if b.hasPos {
		for _, op := range b.ops {
			op.SetFloor(w.partition, b.pos.Floor)
		}
	}
	seen := int64(math.MinInt64)
	if b.hasPos {
		seen = max(b.pos.Latest(), b.pos.Watermark)
	}
	gone := make([]int64, len(b.ops))
	for i, op := range b.ops {
		var sg state.Generation
		if i < len(stored) && b.known {
			sg = stored[i]
		}
		gone[i] = p.keepDropped(w.partition, b.gens[i], op, sg, b.dropped())
	}
	before := w.handed
	res, err := w.r.FinishDrained(w.update, w.committed)
	w.tail = w.handed - before
	for i, op := range b.ops {
		op.(windowing.Builder).Prune(gone[i])
	}
	for _, key := range slices.Sorted(maps.Keys(w.spent)) {
		res.Repairs = append(res.Repairs, state.Repair{Key: []byte(key)})
	}
	res.Spent = len(w.spent)
	if err == nil && len(w.unplaced) > 0 {
		err = w.unplaced[slices.Min(slices.Collect(maps.Keys(w.unplaced)))]
	}
	b.res, b.seen, b.err = res, seen, err
	if len(w.stored) > 0 && !b.known {
		b.rep.Verdict = config.Unrecorded
	}
	return b
}
