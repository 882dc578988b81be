package pipeline

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"aggregator/internal/config"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
	"aggregator/internal/state"
	"aggregator/internal/watermark"
	"aggregator/internal/windowing"
)

// Outcome is what became of one input record: windowing's one enum of
// record outcomes.
type Outcome = windowing.Outcome

const (
	Aggregated    = windowing.Aggregated
	PartiallyLate = windowing.PartiallyLate
	LateEvent     = windowing.LateEvent
	Filtered      = windowing.Filtered
	Marker        = windowing.Marker
	DeadLetter    = windowing.DeadLetter
)

// Outcomes lists every outcome, for pre-creating metric series.
func Outcomes() []Outcome { return windowing.Outcomes() }

// Processor runs the per-record path for all assigned partitions.
type Processor struct {
	cfg     config.Config
	recSpec record.Spec
	schemas *record.Schemas // registry formats: filled by the shell before decoding; else nil
	dec     *record.Decoder
	rec     record.Record
	marks   *watermark.Merged
	// sources is the watermark of a processor that reads a repartition
	// topic (source.partitioning repartition; nil otherwise): the markers'
	// table of source partitions per repartition partition. Its records
	// do not move a generator, and stage 1 dead-lettered what had to be.
	sources *watermark.Sources
	// stage2: sources is not nil, said once (a restore's build reads it on
	// any goroutine; Abort makes sources anew).
	stage2 bool
	share  *sharing // by_key with watermark.scope global in the service (Mode.Group); nil otherwise
	// ops is the window state: operators per partition and generation,
	// following the merged watermark or the partition's own: see
	// operators.
	ops      operators
	spec     windowing.Spec
	tracking bool      // Mode.Checkpointed: the operators note their changes
	futureMs int64     // 0 = no future guard
	parts    []partPos // by partition id
	assigned int       // partitions assigned

	// checkKeys turns on the by_key check: a group key on two partitions
	// of this instance is counted (see TakeConflicts). oneState (replay)
	// keeps one window state per group key across partitions instead.
	checkKeys, oneState bool
	conflicts           conflicts
	// genSkips counts the records a generation aggregated and another's
	// decoding failed on, since the last Ready's stats.
	genSkips int64

	// Two-phase aggregation (stage 2, partials.go): groupTag is the tag
	// of the groups it merges (0: none); foreignAt the wall clock it last
	// read a repartition record of another config (math.MinInt64: never);
	// unfolded the records Unfold applied since the last Ready; folded
	// the records of the group being merged (reused).
	groupTag  uint32
	foreignAt int64
	unfolded  int64
	folded    []repartition.Folded

	// What the next Ready hands over: the outputs in emission order, and
	// the results' aggregates (copied: the engine's are valid only
	// during Emit).
	outs, spareOuts []ready.Output
	vals, spareVals []record.Value

	// enc encodes the changelog records of each commit, and recycles
	// their buffer once the commit is accepted.
	enc state.Encoder
}

// partPos is what the changelog needs of one partition besides its windows.
type partPos struct {
	assigned bool
	restored bool  // Restore ran: its records are applied from now on
	next     int64 // offset of the next record to apply: after the last one, or the restored position; -1 none
	written  int64 // next as of the last checkpoint
	hwm      int64 // the high watermark of the last fetch with its records; -1 none since assignment
	// merged is the watermark its windows followed at its last position
	// record (the merged one, or with one operator per partition its
	// own): the windows it dropped are not restored, so a position must
	// be written again when the watermark moves on, even with no record of
	// its own (a sliding window dropped by another partition's progress
	// leaves no changelog record: its slices live on in later windows).
	merged  int64
	tag     uint64 // the tag of its next checkpoint
	repairs []state.Repair
	// gens are its live generations (docs/changing-config.md), the newest first: with
	// one operator list per partition, its list's operators in the same
	// order; with the shared list, one, the config's. multi: its records
	// take processGenerations (more than one, or one not the config's).
	gens   []*generation
	multi  bool
	report GenerationReport // what its last restore decided
	// unfolding is the group of partials the partition waits on (nil:
	// none): its records are read back from the input (Unfold).
	unfolding *unfolding
	// filteredMax is the latest event time of a record read that its
	// filter rejected, or whose values its aggregates could not read (a
	// dead letter) (math.MinInt64: none known), which no window in
	// state shows: the next cut-over's T comes after it, so a record the
	// old generation's filter rejected before the change is not one the
	// new generation's windows should have held. In stage 2 it is the
	// position's MaxTimestamp, which stage 2 has no other use for; with
	// by_key the position's FilteredLead past the generator's.
	filteredMax int64
}

// Mode is how a Processor runs, given once to New: its zero value is one
// stage of the config's source.partitioning whose state is not
// checkpointed (replay of a by_key config).
type Mode struct {
	// Repartitioned is stage 2 of source.partitioning repartition: the
	// partitions are repartition partitions, the records repartition
	// records (ready.Input's SourceID and RepartitionOffset set) and the
	// watermark comes from the markers (ApplyMark), not from a generator;
	// stage 1 already dead-lettered what had to be. Each repartition
	// partition has its own operator, whose windows follow that
	// partition's own watermark (the minimum over its table of sources),
	// so its results do not depend on which others share the instance.
	// Without it a processor is one stage whatever source.partitioning
	// says (replay of a repartition config: the offline twin of both
	// stages is one state per group key, see OneState).
	Repartitioned bool
	// OneState keeps one window state per group key across all the
	// partitions, as if the input were partitioned by the group key; the
	// merged watermark is still the minimum over the partitions. This is
	// replay of a dump of every partition (the offline twin of a service
	// that meets a key's records in one place); its state is not
	// checkpointed. It keeps one operator even with watermark.scope
	// partition (whose replay does not set it: there each partition
	// follows its own watermark).
	OneState bool
	// Checkpointed: the operators note the changes of their state, for
	// the changelog records of each commit Ready.
	Checkpointed bool
	// Group, when not 0, makes the processor one instance of a group
	// whose input has Group partitions in all (dense ids 0 to Group-1),
	// sharing watermarks through the watermark topic (by_key with
	// watermark.scope global): its merged watermark is the minimum over
	// every partition of the group that is not idle, its own by their
	// generators and the others by the latest value Peer gave (minus
	// infinity until one did); each commit Ready's Watermarks hold its
	// restored partitions whose watermark or idleness changed since they
	// were last published.
	Group int32
}

// New builds a Processor of mode from a validated config.
func New(cfg config.Config, mode Mode) (*Processor, error) { return newProcessor(cfg, mode, nil) }

// newProcessor is New with the registry schemas its decoders read (made
// here if nil and source.format is a registry format).
func newProcessor(cfg config.Config, mode Mode, schemas *record.Schemas) (*Processor, error) {
	recSpec := cfg.RecordSpec()
	if schemas == nil && recSpec.Format.Registry() {
		schemas = record.NewSchemas()
	}
	dec, err := record.NewDecoder(recSpec, schemas)
	if err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	p := &Processor{cfg: cfg, recSpec: recSpec, schemas: schemas, dec: dec, marks: watermark.NewMerged(cfg.Watermark),
		futureMs: cfg.Watermark.MaxFutureSkew.Milliseconds(), spec: WindowSpec(cfg),
		checkKeys: cfg.Source.ByKey(), conflicts: conflicts{cur: map[string]int32{}},
		tracking: mode.Checkpointed, oneState: mode.OneState, foreignAt: math.MinInt64}
	p.groupTag = groupTag(dec, p.spec, mode.Repartitioned)
	// By_key with scope partition: each partition's windows follow its
	// own watermark, in a list of operators of its own; so do stage 2's.
	// By_key with scope global: the merged watermark, in one operator
	// for the partitions of one generation and a list of its own for a
	// partition of several, or of one it cut over to. Replay's one state
	// per group key is one list.
	shape := mergedWatermark
	switch {
	case mode.Repartitioned:
		p.sources, p.stage2, p.futureMs, p.checkKeys, shape = watermark.NewSources(cfg.Watermark), true, 0, false, ownWatermark
	case mode.OneState:
		p.checkKeys, shape = false, oneList
	case cfg.Source.ByKey() && !cfg.Watermark.GlobalScope():
		shape = ownWatermark
	}
	if p.ops, err = newOperators(p.spec, resultSink{p, cfg.State.ConfigVersion}, shape, mode.Checkpointed); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if mode.Group > 0 {
		p.marks.SharePeers(mode.Group)
		p.share = &sharing{announce: watermark.NewChangeAnnouncer()}
	}
	return p, nil
}

// WindowSpec is the engine's part of a validated config, in ms.
func WindowSpec(cfg config.Config) windowing.Spec {
	w := cfg.Window
	s := windowing.Spec{
		Size: w.Size.Milliseconds(), Slide: w.Slide.Milliseconds(), Offset: w.Offset.Milliseconds(),
		Gap: w.Gap.Milliseconds(), Lateness: w.AllowedLateness.Milliseconds(), OnClose: w.OnClose(),
	}
	switch w.Kind() {
	case config.Sliding:
		s.Kind = windowing.KindSliding
	case config.Session:
		s.Kind = windowing.KindSession
	}
	windowKindSpec(w, &s)
	for _, a := range cfg.Aggregates {
		fn := aggFns[a.Func()]
		if fn == windowing.FnCount && a.Field != "" {
			fn = windowing.FnCountField
		}
		s.Aggregates = append(s.Aggregates, windowing.Aggregate{Fn: fn, Q: a.Q, K: a.K})
	}
	return s
}

// resultSink keeps the engine's firings for the next Ready, each marked
// with the config_version of the generation whose operator fired it. It
// lends the operators the room of the results' aggregates (a
// windowing.Buffer): they are written there once, not copied.
type resultSink struct {
	p       *Processor
	version int64
}

// Room is windowing.Buffer's: n values at the end of the Ready's
// aggregates (an append that moves them leaves the results before it
// their values in the old array).
func (s resultSink) Room(n int) []record.Value {
	p := s.p
	lo := len(p.vals)
	p.vals = slices.Grow(p.vals, n)[:lo+n]
	return p.vals[lo : lo+n : lo+n]
}

func (s resultSink) Emit(r *windowing.Result) {
	p := s.p
	p.outs = append(p.outs, ready.Output{Kind: ready.Result, Result: *r})
	p.outs[len(p.outs)-1].Result.Generation = s.version
}

func (p *Processor) late(in *ready.Input, eventTime, wm int64, missed windowing.Window) {
	p.outs = append(p.outs, ready.Output{Kind: ready.Late, Event: &ready.Event{In: *in, EventTime: eventTime, Watermark: wm, Missed: missed}})
}

func (p *Processor) deadLetter(in *ready.Input, err error) {
	p.outs = append(p.outs, ready.Output{Kind: ready.DeadLetter, Event: &ready.Event{In: *in, Err: err}})
}

// newDecoder returns a decoder for this configuration, for decoding in
// another goroutine before ProcessDecoded.
func (p *Processor) newDecoder() (*record.Decoder, error) {
	return record.NewDecoder(p.recSpec, p.schemas)
}

// Schemas returns the registry schemas the decoders share, for the shell
// to fill before it decodes records that need them (see
// record.WireSchemaID); nil unless source.format is a registry format.
func (p *Processor) Schemas() *record.Schemas { return p.schemas }

// Assign starts a partition with fresh state; Restore may follow.
// Partition ids are small and dense (they index a slice).
func (p *Processor) Assign(partition int32, now int64) {
	for int(partition) >= len(p.parts) {
		p.parts = append(p.parts, partPos{})
	}
	if !p.parts[partition].assigned {
		p.assigned++
	}
	p.parts[partition] = partPos{assigned: true, next: -1, written: -1, hwm: -1, tag: 1, gens: []*generation{p.configGeneration()},
		filteredMax: math.MinInt64}
	p.marks.Assign(partition, now)
	if p.sources != nil {
		p.sources.Assign(partition)
	}
	p.ops.start(partition)
}

// revoke drops a partition's windows and generator without firing them.
// The partition no longer holds the merged watermark back, so windows of
// the others may fire (with one operator for all partitions).
func (p *Processor) revoke(partition int32) {
	p.marks.Revoke(partition)
	if p.sources != nil {
		p.sources.Revoke(partition)
	}
	p.ops.remove(partition)
	if int(partition) < len(p.parts) {
		if p.parts[partition].assigned {
			p.assigned--
		}
		p.parts[partition] = partPos{}
	}
	p.conflicts.forget(partition)
	p.sharedRevoke(partition)
	p.advance(partition)
}

// setCaughtUp tells whether the partition's position is at its log end;
// only a caught-up partition can become idle.
func (p *Processor) setCaughtUp(partition int32, caughtUp bool, now int64) {
	p.marks.SetCaughtUp(partition, caughtUp, now)
	p.advance(partition)
}

// Process decodes one record and applies it.
func (p *Processor) Process(in *ready.Input, now int64) Outcome {
	kind, err := p.dec.DecodeTimed(in, &p.rec)
	return p.processDecoded(in, &p.rec, kind, err, now)
}

// processDecoded applies a record that was decoded elsewhere (kind and
// decodeErr are what its decoder's DecodeTimed returned: the time of a
// record the filter rejects counts for the next cut-over; Decode's
// leaves it out), in offset order per partition.
func (p *Processor) processDecoded(in *ready.Input, rec *record.Record, kind record.Kind, decodeErr error, now int64) Outcome {
	if int(in.Partition) < len(p.parts) {
		pp := &p.parts[in.Partition]
		pp.next = p.offset(in) + 1
		if pp.multi {
			return p.processGenerations(in, rec, kind, decodeErr, now)
		}
	}
	if decodeErr != nil {
		if valueFailed(rec, decodeErr) {
			p.filtered(in.Partition, rec.Time, now) // a generation of other aggregates may read it
		}
		p.deadLetter(in, decodeErr)
		return DeadLetter
	}
	switch kind {
	case record.Filtered:
		p.filtered(in.Partition, rec.Time, now)
		return Filtered
	case record.Marker:
		return p.marker(in, rec, now)
	}
	if err := p.checkFuture(rec.Time, now); err != nil {
		p.deadLetter(in, err)
		return DeadLetter
	}
	switch {
	case p.oneState:
		rec.Partition = 0
	case p.checkKeys && p.assigned > 1:
		p.conflicts.see(rec.Key, in.Partition)
	}
	if p.sources != nil {
		// The record is judged as its source saw it: by the source's
		// watermark just before it, which the markers may not have said yet.
		p.sourceMark(in, in.Before)
	}
	op := p.ops.at(rec.Partition)
	res := op.Add(rec)
	if p.ops.merged {
		p.ops.added(rec.Partition) // what the record made due
	}
	if res.Kind == windowing.LateEvent || res.Kind == windowing.OtherGeneration {
		// OtherGeneration: before the cut-over of a generation whose
		// older ones have retired, their windows dropped: late.
		res.Kind = LateEvent
		p.late(in, rec.Time, op.Judged(rec.Partition), res.Missed)
	}
	if p.sources == nil {
		p.marks.OnEvent(in.Partition, rec.Time, now)
		p.advance(in.Partition)
	} else {
		p.sourceMark(in, in.After)
	}
	return res.Kind
}

// genAt is the partition's i-th generation (nil: none, a partition
// never assigned).
func (pp *partPos) genAt(i int) *generation {
	if i < len(pp.gens) {
		return pp.gens[i]
	}
	return nil
}

// marker applies a punctuated watermark's marker record.
func (p *Processor) marker(in *ready.Input, rec *record.Record, now int64) Outcome {
	if p.sources != nil {
		return Marker // stage 1 does not forward them
	}
	if err := p.checkFuture(rec.Time, now); err != nil {
		p.deadLetter(in, err)
		return DeadLetter
	}
	p.marks.OnMarker(in.Partition, rec.Time, now)
	p.advance(in.Partition)
	return Marker
}

// offset is where in is in its state partition's log: the input offset,
// or for a repartition record its offset in the repartition partition.
func (p *Processor) offset(in *ready.Input) int64 {
	if p.sources != nil {
		return in.RepartitionOffset
	}
	return in.Offset
}

// applyMark applies a watermark marker read from a repartition partition
// at offset (source.partitioning repartition), unless the partition waits
// for its restore or the marker is in its state already; applied is
// false then.
func (p *Processor) applyMark(partition int32, offset int64, m watermark.Mark) (applied bool) {
	pp := p.part(partition)
	if p.sources == nil || pp == nil || !pp.restored || pp.unfolding != nil || offset < pp.next {
		return false
	}
	pp.next = offset + 1
	p.sources.Mark(partition, m)
	p.advance(partition)
	return true
}

// sourceMark raises the watermark of a repartition record's source in
// its repartition partition to wm, as a marker would (a data record
// tells its source's watermark to the partition it lands on; the markers
// tell every partition), and fires what that makes due (nothing, when
// the source's watermark stayed: most records).
func (p *Processor) sourceMark(in *ready.Input, wm int64) {
	if in.Sources > 0 && p.sources.Mark(in.Partition, watermark.Mark{Source: in.SourceID, Count: in.Sources, Watermark: wm}) {
		p.advance(in.Partition)
	}
}

// future reports whether the future guard (docs/semantics.md#watermarks) refuses eventTime
// at the wall clock now.
func (p *Processor) future(eventTime, now int64) bool {
	// replay passes now = math.MaxInt64: no wall clock, no guard
	return p.futureMs != 0 && now <= math.MaxInt64-p.futureMs && eventTime > now+p.futureMs
}

// checkFuture is the future guard (docs/semantics.md#watermarks): a record too far ahead of the
// wall clock would drag the watermark into the future.
func (p *Processor) checkFuture(eventTime, now int64) error {
	if !p.future(eventTime, now) {
		return nil
	}
	return &record.DecodeError{Reason: "future_timestamp", Field: p.cfg.Source.Timestamp.Field,
		Detail: "event time " + strconv.FormatInt(eventTime, 10) + " is more than " +
			p.cfg.Watermark.MaxFutureSkew.String() + " ahead of the wall clock " + strconv.FormatInt(now, 10)}
}

// advance hands the watermark to the operators of partition, which may
// have changed it: the merged watermark to every list (one compare
// unless it went up), or the partition's own to its list (no other
// partition's watermark moves by it). An operator ignores a watermark
// unless it went up.
func (p *Processor) advance(partition int32) {
	if p.ops.merged {
		p.ops.advanceMerged(p.merged()) // per record: no call unless it went up
		return
	}
	if p.ops.one() {
		wm := p.merged()
		p.ops.cur.Advance(wm) // per record: no call more than the operator's
		for _, s := range p.ops.shared[1:] {
			s.op.Advance(wm)
		}
		return
	}
	if p.ops.of(partition) != nil {
		p.ops.advance(partition, p.own(partition))
	}
}

// advanceAll is advance for every partition at a tick of the wall clock
// now: with one operator per partition, an idle partition's windows move
// with it if idle_advance is on.
func (p *Processor) advanceAll(now int64) {
	if p.ops.merged {
		p.ops.advanceMerged(p.merged())
		return
	}
	if p.ops.one() {
		p.ops.advance(0, p.merged())
		return
	}
	for id := range p.parts {
		if !p.parts[id].assigned {
			continue
		}
		wm := p.own(int32(id))
		if p.idleAdvances(int32(id)) {
			wm = max(wm, watermark.IdleWatermark(p.cfg.Watermark, now))
		}
		p.ops.at(int32(id)) // makes its list if it has none
		p.ops.advance(int32(id), wm)
	}
}

// own is a partition's own watermark, which its operator follows with one
// operator per partition: its generator's, or in stage 2 the minimum over
// its sources that are not idle (math.MinInt64 when all are: the windows
// wait, unless idle_advance moves them).
func (p *Processor) own(partition int32) int64 {
	wm, idle := p.ownMark(partition)
	if idle && p.sources != nil {
		return math.MinInt64
	}
	return wm
}

// ownMark is a partition's own watermark and idleness: its generator's,
// or a repartition partition's (the minimum over its sources, idle when
// all of them are).
func (p *Processor) ownMark(partition int32) (wm int64, idle bool) {
	if p.sources != nil {
		return p.sources.Partition(partition)
	}
	return p.marks.Partition(partition)
}

// idleAdvances reports whether idle_advance moves the partition's windows
// with the wall clock (one operator per partition): it is idle (in stage
// 2: every source of it is), as every partition must be for the merged
// watermark to move so.
func (p *Processor) idleAdvances(partition int32) bool {
	if !p.cfg.Watermark.IdleAdvance || p.cfg.Watermark.IdleTimeout <= 0 {
		return false
	}
	_, idle := p.ownMark(partition)
	return idle
}

// merged is the merged watermark: the generators', or the markers'.
func (p *Processor) merged() int64 {
	if p.sources != nil {
		return p.sources.Current()
	}
	return p.marks.Current()
}

// tick re-evaluates idleness with the wall clock; windows may fire.
func (p *Processor) tick(now int64) {
	p.marks.Tick(now)
	if p.sources != nil {
		p.sources.Tick(now)
	}
	p.advanceAll(now)
	p.ops.each(func(op windowing.Operator) { op.ProcessingTime(now) })
	p.ops.redue()
}

// Flush is the end of a bounded input: the watermark goes to the end of
// time and every open window fires.
func (p *Processor) Flush() { p.ops.flush() }

// Watermark is the watermark the windows follow: the merged one the
// operator has acted on, or with one operator per partition the lowest
// of the partitions' (math.MinInt64 with no partition).
func (p *Processor) Watermark() int64 { return p.ops.watermark() }

// PartitionWatermark reports a partition's own watermark and whether it
// is idle (a repartition partition's: the minimum over its sources, idle
// when all of them are). With one operator per partition it is the
// watermark the partition's windows follow: its own, never going down,
// moved by idle_advance while the partition is idle.
func (p *Processor) PartitionWatermark(partition int32) (wm int64, idle bool) {
	wm, idle = p.ownMark(partition)
	if p.ops.ownWm && p.part(partition) != nil {
		wm = p.ops.at(partition).Watermark()
	}
	return wm, idle
}

// sourceTable returns a repartition partition's table of source
// partitions, as its markers reported them (zero for other partitions);
// its slice is valid until the next record or marker.
func (p *Processor) sourceTable(partition int32) watermark.Table {
	if p.sources == nil {
		return watermark.Table{}
	}
	return p.sources.Table(partition)
}

// partitions lists the assigned partitions, sorted.
func (p *Processor) partitions() []int32 { return p.marks.Partitions() }

// OpenWindows counts open (key, window) pairs.
func (p *Processor) OpenWindows() int { return p.ops.openWindows() }

// takeStats returns the window stage's gauges and its counts since the
// last call, for a Ready's Stats (the core adds the partitions' and the
// sources').
func (p *Processor) takeStats(now int64) ready.Stats {
	st := ready.Stats{Watermark: p.Watermark(), OpenWindows: p.OpenWindows(), Generations: p.generations(),
		SessionMerges: p.takeSessionMerges(), IdlePartitions: p.idleCount(), Holder: -1,
		GenerationSkips: p.takeGenerationSkips(), Unfolded: p.takeUnfolded()}
	st.KeyConflicts, st.Conflict, st.LogConflict = p.takeConflicts(now)
	return st
}

// takeSessionMerges returns how many records bridged two sessions or more
// since the last call (0 for other windows).
func (p *Processor) takeSessionMerges() int64 { return p.ops.takeMerges() }

// idleCount counts idle partitions (repartition partitions whose every
// source is idle).
func (p *Processor) idleCount() int {
	if p.sources == nil {
		return p.marks.IdleCount()
	}
	n := 0
	for _, id := range p.sources.Partitions() {
		if _, idle := p.sources.Partition(id); idle {
			n++
		}
	}
	return n
}

// ChangelogRecord is one record for the changelog partition of an input
// partition.
type ChangelogRecord = ready.Changelog

// checkpoint returns the changelog records of everything that changed
// since the last checkpoint: the window state (data) and the position of
// every partition that moved (positions). With at least once delivery the
// positions must be written after the data is acknowledged (see package
// state). Each partition that wrote something moves to its next tag.
func (p *Processor) checkpoint() (data, positions []ChangelogRecord) {
	p.enc.Begin()
	for id := range p.parts {
		pp := &p.parts[id]
		for _, r := range pp.repairs {
			p.enc.Add(ChangelogRecord{Partition: int32(id), Key: r.Key, Value: r.Value, Tag: pp.tag})
		}
		if len(pp.repairs) > 0 {
			pp.written = -2 // a repair needs a position record to count
			pp.repairs = nil
		}
	}
	for id := range p.parts {
		if pp := &p.parts[id]; pp.assigned && pp.next >= 0 && p.generationRecords(int32(id), pp) {
			pp.written = -2 // a generation's record counts with its commit's position
		}
	}
	gen := 0                             // the generation, by its index in its partition's list, of the operator whose changes are handed out
	entry := func(en *windowing.Entry) { // one closure for every operator's changes
		pp := &p.parts[en.Partition]
		if g := pp.genAt(gen); g == nil || g.LegacyKeys {
			p.enc.Entry(en, pp.tag)
		} else {
			p.enc.GenerationEntry(g.Version, en, pp.tag)
		}
		pp.written = -2 // its position must be written too
	}
	for _, s := range p.ops.shared { // every partition's in it holds one generation
		s.op.Changes(entry)
	}
	for _, l := range p.ops.per {
		for i, s := range l {
			gen = i
			s.op.Changes(entry)
		}
	}
	data = p.enc.Finish()
	for id := range p.parts {
		if pp := &p.parts[id]; pp.assigned && len(pp.gens) > 1 && p.ops.of(int32(id)) != nil {
			data = p.retire(int32(id), pp, data)
		}
	}
	for id := range p.parts {
		pp := &p.parts[id]
		if !pp.assigned {
			continue
		}
		op := p.ops.current(int32(id))
		w := op.Watermark() // the merged watermark, or the partition's own
		if pp.next < 0 || pp.next == pp.written && pp.merged == w {
			continue
		}
		gen := p.marks.Snapshot(int32(id))
		var table watermark.Table
		if p.sources != nil {
			table = p.sources.Table(int32(id))
			gen.MaxTimestamp = pp.filteredMax
			gen.Watermark, _ = p.sources.Partition(int32(id))
		}
		pos := state.Position{Offset: pp.next, MaxTimestamp: gen.MaxTimestamp, Sources: table, FilteredLead: state.LeadOf(gen.MaxTimestamp, pp.filteredMax),
			// The merged watermark is a floor of the partition's own: its
			// records were judged against it, and its next owner goes on from there.
			Watermark: max(gen.Watermark, op.Judged(int32(id))), Merged: w, Floor: op.Judged(int32(id))}
		positions = append(positions, state.PositionRecord(int32(id), pos, pp.tag))
		pp.written, pp.merged = pp.next, w
		pp.tag++
	}
	return data, positions
}

// positionsUnwritten tells the core that the positions of its last
// Checkpoint were not written (at_least_once: a commit that stopped
// before them): the next Checkpoint writes every assigned partition's
// position again.
func (p *Processor) positionsUnwritten() {
	for id := range p.parts {
		if pp := &p.parts[id]; pp.assigned {
			pp.written = -2
		}
	}
}

// lowerFor lowers the watermark to wm, the watermark of a partition being
// restored, if it is above: else the partition's windows fire early and
// its on-time records are judged against the others' watermark. The
// other partitions' records keep being judged against the one they had.
func (p *Processor) lowerFor(partition int32, wm int64) {
	if p.ops.ownWm || wm >= p.ops.watermark() {
		return // with a list per partition following its own watermark, the partition's starts afresh
	}
	var others []int32
	for id, o := range p.parts {
		if id != int(partition) && o.assigned && o.restored {
			others = append(others, int32(id))
		}
	}
	p.marks.Lower(wm)
	if p.sources != nil {
		p.sources.Lower(wm)
	}
	p.ops.each(func(op windowing.Operator) { op.Rewind(wm, others) })
	p.ops.lower(wm) // what the lists of the partitions' own follow (mergedWatermark)
}
