package pipeline

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"aggregator/internal/config"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// This file is the config generations of docs/changing-config.md in the window stage:
// which generations a state partition restores, what the config does to
// them (config.PlanAgainst, decided at the restore), and the records of a
// partition with more than one live generation.

// generation is one live generation of a state partition's windows: its
// changelog record (version, cut-over, settings) and how its records are
// decoded. With a list of operators per partition, a partition's i-th
// generation is the i-th operator of its list, the newest first.
type generation struct {
	state.Generation
	// own: its state settings are the config's, so its records are the
	// core's decoding; otherwise dec decodes them again under its own
	// filter and aggregates (the identity settings are the same).
	own bool
	dec *record.Decoder
	cfg config.Config // its config (the run settings the config's), when not own
	rec record.Record
	// What its decoding of the record in hand gave (several generations).
	kind record.Kind
	err  error
	// write: its record goes in the partition's next commit (a new
	// generation, a settings record adopted, new run settings).
	write bool
}

// GenerationReport is what a partition's last restore decided about its
// generations (docs/changing-config.md), for the shell's log line and metrics.
type GenerationReport struct {
	Verdict config.Verdict
	// Stored is the newest stored generation's state.config_version (-1:
	// none), Running the version of the generation that creates the
	// partition's new windows now.
	Stored, Running int64
	// Cutover is T of the newest generation: a new one (Verdict
	// NewGeneration), or one restored that was cut over before; 0 for a
	// partition's first generation.
	Cutover int64
	// PastCutover: state.cutover is set and the partition's state had
	// seen event times at or after it, so it took its own T.
	PastCutover bool
	Changes     []config.Change // state settings changed (NewGeneration, Older)
	Run         []config.Change // run settings changed
	Live        int             // live generations after the restore
	// Others are the live generations whose state settings are not the
	// config's, with their configs: the shell encodes their results
	// under their aggregates (JSON names, an Avro schema of their own).
	Others []GenerationConfig
}

// GenerationConfig is a live generation's state.config_version and the
// config its windows are computed under.
type GenerationConfig struct {
	Version int64
	Config  config.Config
}

// Refusal is what run's restore refuses beyond config.PlanAgainst's
// refusals, given the plan of cfg against a state partition whose newest
// stored generation's settings are known and which holds generations
// live generations (nil: none); plan prints it too. A stage 1
// (repartition) that filters with its config's source.filter
// (state.repartition_format 1 or 2, now or in the stored generation's run
// settings: an instance of the stored config may still run stage 1
// during a rollout) keeps the records only another filter accepts from
// the generations.
func Refusal(cfg config.Config, plan config.Plan, generations int) error {
	switch {
	case plan.Verdict == config.NewGeneration && !cfg.Source.ByKey():
		for _, ch := range plan.Changes {
			if strings.HasPrefix(ch.Key, "source.filter") && !filtersInStage2(cfg, plan) {
				return errFilterStage1(ch, cfg.State.RepartitionFormat)
			}
		}
	}
	return nil
}

// filtersInStage2 reports whether every stage 1 that may feed the
// partition under the config or the stored generation's forwards the
// records its filter rejects (format 3 or later): the config's format,
// and the stored run settings' (a format that changed is in plan.Run).
func filtersInStage2(cfg config.Config, plan config.Plan) bool {
	if !repartition.ForwardsFiltered(cfg.State.RepartitionFormat) {
		return false
	}
	for _, ch := range plan.Run {
		if ch.Key == "state.repartition_format" && ch.Old != "3" && ch.Old != "4" {
			return false
		}
	}
	return true
}

// errFilterStage1 refuses a new generation of another source.filter with
// source.partitioning repartition when a stage 1 filters (format 1 or 2,
// in the config or in the stored generation's): the old generation would
// not see the records only its own filter accepts.
func errFilterStage1(ch config.Change, format int32) error {
	now := "the stored generation's instances write state.repartition_format 1 or 2"
	if !repartition.ForwardsFiltered(format) {
		now = fmt.Sprintf("state.repartition_format is %d", format)
	}
	return &config.KeyError{Key: "source.filter", Value: ch.New,
		Reason: "changed (" + ch.String() + ") with source.partitioning repartition, and " + now + ": stage 1 filters records before they reach a generation's windows, so the old generation would lose the records only its filter accepts; first roll out state.repartition_format: 4 (the default) with the old filter, then change the filter"}
}

// configGeneration is the generation of the config's own settings, as a
// partition's first: its entries have version-1 keys (as before
// generations), so its record is all that the changelog gains.
func (p *Processor) configGeneration() *generation {
	cfg := p.cfg
	return &generation{Generation: state.Generation{Version: cfg.State.ConfigVersion, Cutover: state.NoCutover, LegacyKeys: true,
		Settings: cfg.StateSettings().Encode(), Identity: cfg.IdentitySettings().Encode(), Run: cfg.RunSettings().Encode()}, own: true, write: true}
}

// storedGeneration is generation g of a partition's changelog, run under
// its own state settings and the config's run settings: its operator,
// made with its cut-over as From. It reads only what New set (a
// restore's build calls it on any goroutine).
func (p *Processor) storedGeneration(g state.Generation) (*generation, windowing.Operator, error) {
	st, err := config.DecodeState(g.Settings)
	if err != nil {
		return nil, nil, fmt.Errorf("generation %d: %w", g.Version, err)
	}
	gen := &generation{Generation: g, own: st.Equal(p.cfg.StateSettings())}
	run := p.cfg.RunSettings().Encode()
	if string(g.Run) != string(run) {
		gen.Run, gen.write = run, true // the run settings it runs with from now on
	}
	cfg := p.cfg.WithState(st)
	if !gen.own {
		gen.cfg = cfg
		if gen.dec, err = record.NewDecoder(cfg.RecordSpec(), p.schemas); err != nil {
			return nil, nil, fmt.Errorf("generation %d: decoder: %w", g.Version, err)
		}
	}
	spec := WindowSpec(cfg)
	if g.Cutover != state.NoCutover {
		spec.From, spec.FromSet = g.Cutover, true
	}
	if spec.Kind == windowing.KindGlobal && spec.Early.Every == 0 {
		// A global window fires by its early firings only, which a config
		// of other windows does not have: the generation keeps the ones
		// it last ran with.
		spec.Early = storedEarly(g.Run)
		gen.Run, gen.write = g.Run, false // keep them: the next restore reads them again
	}
	op, err := windowing.New(spec, resultSink{p, g.Version})
	if err != nil {
		return nil, nil, fmt.Errorf("generation %d: %w", g.Version, err)
	}
	if p.tracking {
		op.TrackChanges()
	}
	return gen, op, nil // the watermark it follows is set when attached
}

// keepDropped makes a raised allowed_lateness bring back none of
// generation g's windows (docs/changing-config.md#three-kinds-of-key: a window dropped under the old
// lateness stays dropped). The previous owner dropped, by its watermark
// dropped, every window whose maxTimestamp is at or below dropped minus
// the lateness g last ran with (its stored run settings; the config's if
// none are stored), or below the bound g's record kept from an earlier
// restore (state.Generation.DroppedTo). While the lateness g runs with
// now would not drop those windows by itself, op judges a record for one
// late (SetDropped) and g's record keeps the bound for the next restore.
// It returns the watermark by which g's windows are dropped under the
// lateness it runs with now: dropped, or higher with the bound.
func (p *Processor) keepDropped(partition int32, g *generation, op windowing.Operator, stored state.Generation, dropped int64) int64 {
	lateness := p.cfg.Window.AllowedLateness.Milliseconds()
	old := lateness
	if r, err := config.DecodeRun(stored.Run); err == nil {
		if d, err := time.ParseDuration(r["window.allowed_lateness"]); err == nil {
			old = d.Milliseconds()
		}
	}
	to, ok := stored.DroppedTo, stored.Dropped
	if dropped != math.MinInt64 && (!ok || dropped-old > to) {
		to, ok = dropped-old, true
	}
	// to+lateness > dropped: the windows up to to are still in the
	// lateness (dropped, stored.DroppedTo and the lateness are far from
	// the int64 bounds: event times and durations in ms).
	keep := ok && (dropped == math.MinInt64 || to > dropped-lateness)
	if keep {
		op.SetDropped(partition, to+lateness)
	}
	if keep != g.Dropped || (keep && to != g.DroppedTo) {
		g.Dropped, g.DroppedTo, g.write = keep, to, true
	}
	if !keep {
		g.DroppedTo = 0
		return dropped
	}
	return to + lateness
}

// storedEarly is the early firings of a generation's stored run settings
// (none if they do not say).
func storedEarly(run []byte) windowing.EarlySpec {
	r, err := config.DecodeRun(run)
	if err != nil {
		return windowing.EarlySpec{}
	}
	every, err := time.ParseDuration(r["window.early_firings.every"])
	if err != nil {
		return windowing.EarlySpec{}
	}
	return windowing.EarlySpec{Every: every.Milliseconds(), Event: r["window.early_firings.time"] == "event"}
}

// newestStored is what config.PlanAgainst needs of gens' newest.
func newestStored(gens []state.Generation) *config.Stored {
	if len(gens) == 0 {
		return nil
	}
	g := gens[len(gens)-1]
	return &config.Stored{Version: g.Version, State: g.Settings, Identity: g.Identity, Run: g.Run}
}

// cutOver makes partition's new generation of the config's settings: its
// cut-over T is the first window start of its windows after seen (the
// latest event time the partition's state has seen), or at
// state.cutover if that is later.
func (p *Processor) cutOver(partition int32, seen int64, rep *GenerationReport) (*generation, windowing.Operator, int64, error) {
	t := seen
	if t < math.MaxInt64 {
		t++
	}
	if at, ok := p.cfg.State.CutoverMillis(); ok {
		if at > t {
			t = at
		} else {
			rep.PastCutover = true
		}
	}
	spec := WindowSpec(p.cfg)
	t = spec.CutoverStart(t)
	g := p.configGeneration()
	g.Cutover, g.LegacyKeys = t, false
	spec.From, spec.FromSet = t, true
	op, err := windowing.New(spec, resultSink{p, g.Version})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("generation %d: %w", g.Version, err)
	}
	if p.tracking {
		op.TrackChanges()
	}
	p.ops.follow(op)
	rep.Cutover = t
	return g, op, t, nil
}

// latestIn is an upper bound of the latest event time entry en of op's
// windows holds (math.MinInt64 when it tells none: count windows).
func latestIn(op windowing.Operator, en *windowing.Entry) int64 {
	switch en.Kind {
	case windowing.SessionEntry:
		if en.End > en.Start && en.End < math.MaxInt64/2 { // a global window's end says nothing
			return en.End - 1
		}
		return en.Start
	case windowing.SliceEntry, windowing.WindowEntry:
		if e, ok := op.(*windowing.Engine); ok {
			return e.EndOf(en.Start) - 1
		}
	}
	return math.MinInt64
}

// generationRecords adds to the commit the records of partition's
// generations that must be written (tag: the commit's), and reports
// whether it added any: the commit must write the partition's position.
func (p *Processor) generationRecords(partition int32, pp *partPos) bool {
	any := false
	for _, g := range pp.gens {
		if g.write {
			p.enc.Add(state.GenerationRecord(partition, g.Generation, pp.tag, false))
			g.write, any = false, true
		}
	}
	return any
}

// retire drops partition's generations past the first whose operator
// holds no window any more, with their records' tombstones in this
// commit (after their last entries' tombstones, which Changes handed out
// already). It returns the records.
func (p *Processor) retire(partition int32, pp *partPos, out []ChangelogRecord) []ChangelogRecord {
	l := p.ops.of(partition)
	for i := len(l) - 1; i >= 1; i-- {
		if l[i].op.OpenWindows() > 0 {
			continue
		}
		g := pp.gens[i]
		out = append(out, state.GenerationRecord(partition, g.Generation, pp.tag, true))
		l = append(l[:i], l[i+1:]...)
		pp.gens = append(pp.gens[:i], pp.gens[i+1:]...)
		pp.written = -2
	}
	p.ops.set(partition, l)
	pp.multi = pp.multiple()
	return out
}

// processGenerations applies a record of a partition whose generations
// are more than one, or whose one is not the config's (a partition that
// runs an older generation): to every generation whose filter accepts
// it, each under its own decoding. Its outcome is merged, so each record
// counts once: aggregated if any generation aggregated it; partially
// late, then late (one late event), if that is the best any did; a dead
// letter if every generation's decoding failed (the first error), or if
// one's did and no other took it (in the span of the one that failed);
// filtered if every one filtered it, or one did and no other took it. A
// record a generation's decoding fails and another's takes is
// aggregated (a value one generation's aggregates read and another's do
// not need).
func (p *Processor) processGenerations(in *ready.Input, rec *record.Record, kind record.Kind, decodeErr error, now int64) Outcome {
	pp := &p.parts[in.Partition]
	var first *record.Record // a decoding that went through: the time, the key
	var firstErr error
	failedAt := int64(math.MinInt64) // the time of a decoding that failed on a value
	for _, g := range pp.gens {
		if g.own {
			g.kind, g.err = kind, decodeErr
		} else {
			g.kind, g.err = g.dec.Decode(in, &g.rec)
		}
		r := p.recOf(g, rec)
		switch {
		case g.err != nil:
			if firstErr == nil {
				firstErr = g.err
			}
			if valueFailed(r, g.err) {
				failedAt = r.Time
			}
		case g.kind == record.Marker:
			return p.marker(in, r, now) // a marker is a run setting's: the same in every generation
		case g.kind != record.Filtered && first == nil:
			first = r
		}
	}
	if first == nil {
		if firstErr != nil {
			p.filtered(in.Partition, failedAt, now)
			p.deadLetter(in, firstErr)
			return DeadLetter
		}
		p.filtered(in.Partition, rec.Time, now)
		return Filtered
	}
	if err := p.checkFuture(first.Time, now); err != nil {
		p.deadLetter(in, err)
		return DeadLetter
	}
	if p.checkKeys && p.assigned > 1 {
		p.conflicts.see(first.Key, in.Partition)
	}
	if p.sources != nil {
		p.sourceMark(in, in.Before)
	}
	l := p.ops.of(in.Partition)
	best, late := Outcome(windowing.OtherGeneration), -1
	var missed windowing.Window
	filtered := false
	for i, g := range pp.gens {
		if g.err != nil || g.kind == record.Filtered {
			filtered = filtered || g.err == nil
			continue
		}
		res := l[i].op.Add(p.recOf(g, rec))
		switch res.Kind {
		case windowing.Aggregated:
			best = Aggregated
		case windowing.PartiallyLate:
			if best != Aggregated {
				best = PartiallyLate
			}
		case windowing.LateEvent:
			if late < 0 {
				late, missed = i, res.Missed
			}
		}
	}
	p.ops.added(in.Partition) // what the record made due
	if firstErr != nil && (best == Aggregated || best == PartiallyLate) {
		p.genSkips++ // aggregated by one generation, not decodable by another: aggregated, counted
	}
	switch {
	case best == windowing.OtherGeneration && late < 0 && firstErr != nil:
		// In the span of none of the generations that decoded it: of one
		// whose decoding failed (a record at or after T that only the
		// old generation's aggregates read), as a window of that
		// generation's config alone would have it. It moves the
		// watermark as any record a generation decoded does.
		best = DeadLetter
		p.filtered(in.Partition, first.Time, now)
		p.deadLetter(in, firstErr)
	case best == windowing.OtherGeneration && late < 0 && filtered:
		// In the span of none of the generations that took it: of one
		// whose filter rejected it (a record before T only the new filter
		// accepts, or one at or after T only the old filter accepts). It
		// moves the watermark as any record a generation decoded does.
		best = Filtered
		p.filtered(in.Partition, first.Time, now)
	case best == windowing.OtherGeneration:
		// Late for every generation that could take it (or in the span of
		// none: a record before T for a generation whose windows are gone).
		i := max(late, 0)
		p.late(in, first.Time, l[i].op.Judged(in.Partition), missed)
		best = LateEvent
	}
	if p.sources == nil {
		p.marks.OnEvent(in.Partition, first.Time, now)
		p.advance(in.Partition)
	} else {
		p.sourceMark(in, in.After)
	}
	return best
}

// filtered notes the event time t of a record of partition that its
// filter rejected (math.MinInt64: not read; in stage 2, it came in a
// format without it, and stage 1 filtered by the same config), or whose
// values its aggregates could not read (a dead letter, which another
// generation's aggregates may read), unless the future guard refuses it
// at now (stage 1 forwards no such record): its windows do not show it,
// and the next cut-over's T comes after it.
func (p *Processor) filtered(partition int32, t, now int64) {
	if int(partition) < len(p.parts) && !p.future(t, now) {
		pp := &p.parts[partition]
		pp.filteredMax = max(pp.filteredMax, t)
	}
}

// valueFailed reports whether err, the error of decoding rec, came after
// the group key (a value the aggregates or the session gap cannot read:
// rec.Time is the record's), not from a repartition record this release
// cannot read.
func valueFailed(rec *record.Record, err error) bool {
	var de *record.DecodeError
	return rec.Key != "" && errors.As(err, &de) && de.Reason != record.ReasonBadRepartitionRecord
}

// takeGenerationSkips returns how many records one generation aggregated
// and another's decoding failed on, since the last call.
func (p *Processor) takeGenerationSkips() int64 {
	n := p.genSkips
	p.genSkips = 0
	return n
}

// recOf is generation g's decoding of the record in hand: rec (the
// core's) for a generation of the config's settings.
func (p *Processor) recOf(g *generation, rec *record.Record) *record.Record {
	if g.own {
		return rec
	}
	return &g.rec
}

// generationReport returns what partition's last restore decided about
// its generations.
func (p *Processor) generationReport(partition int32) GenerationReport {
	if pp := p.part(partition); pp != nil {
		return pp.report
	}
	return GenerationReport{}
}

// generations counts the live generations over the assigned partitions.
func (p *Processor) generations() int {
	n := 0
	for i := range p.parts {
		if p.parts[i].assigned {
			n += max(len(p.parts[i].gens), 1)
		}
	}
	return n
}

// IsRefusal reports whether err is a restore's refusal of the config
// (exit 2): a *config.KeyError.
func IsRefusal(err error) bool { return errors.Is(err, config.ErrInvalid) }
