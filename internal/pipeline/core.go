package pipeline

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"aggregator/internal/config"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
	"aggregator/internal/state"
	"aggregator/internal/watermark"
)

// A Core is one service instance's core: every stage its config needs,
// driven through one API. With source.partitioning by_key it holds the
// windows of the input partitions; with repartition, stage 1 (decode,
// filter and route the input partitions' records to the repartition
// topic, and its watermark markers) and stage 2 (the windows of the
// repartition partitions, whose watermarks the markers give). With
// watermark.scope global (by_key) it shares the partitions' watermarks
// through the watermark topic.
//
// The shell names a partition by its topic and Kafka partition once, at
// Assign, and by the id Assign returns from then on; it never asks which
// stage a partition belongs to. Each step hands it one ready.Ready: Step
// the outputs so far, Commit also the changelog records, positions,
// watermarks to publish and offsets of every stage (keyed by topic and
// partition), which the shell writes whole, then Accept, or Abort if any
// of it failed. A Core is not safe for concurrent use; Decode is.
type Core struct {
	layout Layout
	// win is the window state: by_key's input partitions, or stage 2's
	// repartition partitions (their ids are the changelog partitions).
	win *Processor
	// s1 is stage 1 (repartition; nil with by_key): the input
	// partitions, whose ids are layout.first on.
	s1 *repartition.Stage
	// admitted: the restores of the window partitions of the instance's
	// first assignment accepted the config (admit); until then stage 1
	// hands over nothing, so that a config they refuse writes nothing.
	// assigned: a partition was assigned.
	admitted, assigned bool
	// counts are the input topics' partition counts stage 1's markers
	// report (the layout's, or more for the last topic: Sources);
	// recount: a partition beyond them was assigned (SourcesDue).
	counts  []int32
	recount bool

	sources []ready.SourceStats // the buffers of the Readies' Stats
	parts   []ready.PartitionStats
	ids     []int32
	outs    []ready.Output // Step and Commit's merged outputs (both stages had some)
	closed  []int64        // stage 2's watermarks, by repartition partition, for stage 1's folding
	offs    []ready.Offset
}

// Spec is what a Core is made of, given once: the validated config and
// the input topics' partition counts, in source.topics order (the
// layout of partition ids).
type Spec struct {
	Config config.Config
	// Partitions are the partition counts of source.topics, in order.
	Partitions []int32
	// Schemas are the registry schemas the decoders read (see
	// record.WireSchemaID), filled by the shell; nil unless
	// source.format is a registry format.
	Schemas *record.Schemas
}

// A Layout numbers the partitions an instance reads with dense ids. With
// repartition the repartition topic's partitions come first (id =
// partition = changelog partition), then the input topics'; with by_key
// the input topics' partitions, topic after topic in source.topics
// order (id = changelog partition). An input partition's source id (its
// dense id among the input partitions: the watermark topic's and the
// markers' numbering) is its id less the repartition partitions. A
// Layout does not change once made (safe for concurrent use): the
// partitions a topic gains later are numbered on from its last.
type Layout struct {
	topics    []string // source.topics
	counts    []int32  // their partitions when the core was made
	base      []int32  // the source id of each topic's partition 0
	stages2   bool     // source.partitioning repartition: two stages
	repart    string   // the repartition topic
	first     int32    // the id of the first input partition: the repartition topic's partitions
	sourceEnd int32    // the input partitions in all
}

func newLayout(cfg config.Config, counts []int32) Layout {
	l := Layout{topics: cfg.Source.Topics, counts: slices.Clone(counts), base: make([]int32, len(counts))}
	for i, n := range counts {
		l.base[i] = l.sourceEnd
		l.sourceEnd += n
	}
	if !cfg.Source.ByKey() {
		l.stages2, l.repart, l.first = true, cfg.State.RepartitionTopic, cfg.State.RepartitionPartitions
		if l.first == 0 {
			l.first = l.sourceEnd
		}
	}
	return l
}

// Topics are the topics the group consumes: the input topics, and the
// repartition topic (both stages run in one client, as a Kafka Streams
// thread runs the tasks of both sub-topologies).
func (l Layout) Topics() []string {
	if !l.stages2 {
		return l.topics
	}
	return append(slices.Clone(l.topics), l.repart)
}

// RepartitionTopic is the repartition topic ("" with by_key), which the
// shell writes with the partitions of RepartitionPartitions and reads
// from its start where the group has no offset.
func (l Layout) RepartitionTopic() string {
	if !l.stages2 {
		return ""
	}
	return l.repart
}

// StateTopics are the topics whose partitions hold window state, a
// changelog partition each: the input topics with by_key, the
// repartition topic with repartition.
func (l Layout) StateTopics() []string {
	if !l.stages2 {
		return l.topics
	}
	return []string{l.repart}
}

// RepartitionPartitions is the repartition topic's partition count (0
// with by_key).
func (l Layout) RepartitionPartitions() int32 { return l.first }

// Changelog is the number of changelog partitions: one per partition
// that keeps window state.
func (l Layout) Changelog() int32 {
	if l.stages2 {
		return l.first
	}
	return l.sourceEnd
}

// ID is the id of partition n of topic (not checked against the
// topic's partition count: an input topic may gain partitions).
func (l Layout) ID(topic string, n int32) int32 {
	if l.stages2 && topic == l.repart {
		return n
	}
	for i, t := range l.topics {
		if t == topic {
			return l.first + l.base[i] + n
		}
	}
	return -1
}

// Source is the source id of partition n of input topic topic; ok is
// false for a topic that is not an input or a partition it does not have.
func (l Layout) Source(topic string, n int32) (id int32, ok bool) {
	for i, t := range l.topics {
		if t == topic {
			return l.base[i] + n, n >= 0 && n < l.counts[i]
		}
	}
	return 0, false
}

// SourcePartition is the input topic and partition of a source id.
func (l Layout) SourcePartition(id int32) (topic string, n int32, ok bool) {
	for i, t := range l.topics {
		if b := l.base[i]; b <= id && id < b+l.counts[i] {
			return t, id - b, true
		}
	}
	return "", 0, false
}

// partition is the topic and Kafka partition of an id.
func (l Layout) partition(id int32) (topic string, n int32) {
	if l.stages2 && id < l.first {
		return l.repart, id
	}
	src := id - l.first
	for i := len(l.topics) - 1; i >= 0; i-- {
		if src >= l.base[i] {
			return l.topics[i], src - l.base[i]
		}
	}
	return "", id
}

// NewCore builds the core of a validated config for an instance whose
// input topics have spec.Partitions.
func NewCore(spec Spec) (*Core, error) {
	cfg := spec.Config
	c := &Core{layout: newLayout(cfg, spec.Partitions), counts: slices.Clone(spec.Partitions)}
	var err error
	mode := Mode{Repartitioned: c.layout.stages2, Checkpointed: true}
	if cfg.PublishesWatermarks() {
		mode.Group = c.layout.sourceEnd
	}
	// Both stages' decoders read one Schemas: the one the shell fills, or
	// (a core made to check a config) one of their own.
	schemas := spec.Schemas
	if schemas == nil && cfg.RecordSpec().Format.Registry() {
		schemas = record.NewSchemas()
	}
	if c.win, err = newProcessor(cfg, mode, schemas); err != nil {
		return nil, err
	}
	if c.layout.stages2 {
		s1 := repartition.Spec{Config: cfg, Sources: c.layout.sourceEnd, Partitions: c.layout.RepartitionPartitions(), Windows: WindowSpec(cfg), Schemas: schemas}
		if c.s1, err = repartition.New(s1); err != nil {
			return nil, fmt.Errorf("repartition: %w", err)
		}
	}
	return c, nil
}

// Layout is the numbering of the instance's partitions.
func (c *Core) Layout() Layout { return c.layout }

// stage1 reports whether id is an input partition of stage 1.
func (c *Core) stage1(id int32) bool { return c.s1 != nil && id >= c.layout.first }

// Assign starts partition n of topic, and returns its id (Assign's
// partitions are restored before their records apply: Unrestored). It
// returns ok false for a partition that must not be assigned: stage 1's
// partition of an input topic other than the last that gained
// partitions since the core was made (Sources then ends the service:
// the source ids of the topics after it would change). A stage-1
// partition beyond the counts makes SourcesDue report true.
func (c *Core) Assign(topic string, n int32, now int64) (id int32, ok bool) {
	id = c.layout.ID(topic, n)
	c.assigned = true
	if c.stage1(id) {
		if i := slices.Index(c.layout.topics, topic); n >= c.counts[i] {
			c.recount = true
			if i < len(c.layout.topics)-1 {
				return id, false
			}
		}
		c.s1.Assign(id-c.layout.first, now) // ready at once: stage 1 keeps no state
		return id, true
	}
	c.win.Assign(id, now)
	return id, true
}

// Revoke drops a partition without firing its windows (their state is
// in the changelog: its next owner goes on from it).
func (c *Core) Revoke(id int32) {
	if c.stage1(id) {
		c.s1.Revoke(id - c.layout.first)
		return
	}
	c.win.revoke(id)
}

// SourcesDue reports whether the input topics' partition counts should
// be looked at now (Sources): a partition beyond them was assigned.
func (c *Core) SourcesDue() bool { return c.recount }

// Sources takes the input topics' partition counts, in source.topics
// order, as the brokers say them now (repartition: the markers report
// every source partition; by_key ignores them). When the last topic
// gained partitions the markers count them from the next commit on, and
// grew is true. When another topic changed, the source ids of the topics
// after it would change, which a running stage 1 cannot do: the error
// ends the service (its restart numbers them anew). was is the last
// topic's count before.
func (c *Core) Sources(counts []int32) (grew bool, was int32, err error) {
	if c.s1 == nil || len(counts) != len(c.counts) {
		return false, 0, nil
	}
	c.recount = false
	total := int32(0)
	for i, n := range counts {
		if n != c.counts[i] && i < len(counts)-1 {
			return false, 0, fmt.Errorf("input topic %s has %d partitions, %d when the service started: the repartition stage numbers source partitions topic after topic, and those of the topics after it in source.topics are numbered anew at a restart",
				c.layout.topics[i], n, c.counts[i])
		}
		total += n
	}
	last := len(counts) - 1
	if was = c.counts[last]; total <= c.s1.Sources() {
		return false, was, nil
	}
	c.counts[last] = counts[last]
	c.s1.SetSources(total)
	return true, was, nil
}

// RepartitionHeader is the header whose value Decode takes.
const RepartitionHeader = repartition.Header

// Decoded is one fetched record as decoded for Apply.
type Decoded struct {
	In   ready.Input
	Rec  record.Record
	Kind record.Kind // of a repartition record: record.Marker for a watermark marker (Mark)
	Err  error
	Mark watermark.Mark
	// Control: a transaction's control record (In has its partition and
	// offset).
	Control bool
	// Group is a group of partials (format 4), to merge or unfold;
	// Foreign says a repartition record was made under another config
	// (its compact form's or group's spec is not the config's).
	Group   *repartition.Group
	Foreign bool
}

// Decode decodes d, a fetched record as the shell filled it: d.In's
// Topic, KafkaPartition, Offset, Key, Value and Timestamp, its Partition
// the core's id of the partition, and d.Control for a transaction's
// control record (no data, but the position moves past it). headers
// reports whether the record has headers, header is the value of the one
// named RepartitionHeader (nil if none). dec is a record.Decoder of the
// config's record spec, with the schemas of Spec.Schemas. Decode may run
// in other goroutines than the core's, concurrently: it reads only what
// never changes.
func (c *Core) Decode(dec *record.Decoder, d *Decoded, headers bool, header []byte) {
	d.Group, d.Foreign = nil, false
	id := d.In.Partition
	if c.stage1(id) {
		d.In.Partition = id - c.layout.first
	}
	if d.Control {
		in := &d.In
		*in = ready.Input{Topic: in.Topic, Partition: in.Partition, KafkaPartition: in.KafkaPartition, Offset: in.Offset, RepartitionOffset: in.Offset}
		return
	}
	if c.s1 != nil {
		if id < c.layout.first {
			decodeRepartition(dec, headers, header, c.layout.topics, c.win.groupTag, d)
			return
		}
		if c.s1.ForwardsFiltered() {
			d.Kind, d.Err = dec.DecodeAll(&d.In, &d.Rec)
			return
		}
	}
	d.Kind, d.Err = dec.DecodeTimed(&d.In, &d.Rec)
}

// decodeRepartition parses d, a record of a repartition partition as
// fetched, back into the input record it was made from, as stage 1
// decoded it (formats 2 and 3: from the compact form in its value, with
// format 3's filter verdict, or from the value if it has no form; format
// 1, with a header: by decoding the value again, as decoding is
// deterministic), or into its watermark marker. A record this release
// cannot parse is a dead letter of stage 2.
func decodeRepartition(dec *record.Decoder, headers bool, header []byte, topics []string, groupTag uint32, d *Decoded) {
	f := d.In // as fetched: parsing writes over d.In
	var err error
	if !headers && repartition.IsGroup(f.Value) {
		g, perr := repartition.ParseGroup(f.Value, f.Partition, f.Offset, topics)
		if perr == nil {
			d.Group, d.Foreign, d.In, d.Kind, d.Err = g, g.Tag != groupTag, g.In, record.Event, nil
			return
		}
		err = &record.DecodeError{Reason: record.ReasonBadRepartitionRecord, Detail: perr.Error()}
	} else if !headers {
		var form []byte
		var filtered bool
		if form, filtered, err = repartition.ParseValue(f.Value, f.Partition, f.Offset, topics, &d.In); err == nil {
			d.Foreign = form != nil && !dec.OwnForm(form)
			d.Kind, d.Err = repartition.Decode(dec, form, filtered, f.Key, &d.In, &d.Rec)
			if d.Err == nil || !badForm(d.Err) {
				return // read; or, for a form of another config, the value's own outcome, as in format 1
			}
			err = d.Err
		} else {
			err = &record.DecodeError{Reason: record.ReasonBadRepartitionRecord, Detail: err.Error()}
		}
	} else {
		m, marker, perr := repartition.Parse(header, f.Value, f.Partition, f.Offset, topics, &d.In)
		switch {
		case perr != nil:
			err = &record.DecodeError{Reason: record.ReasonBadRepartitionRecord, Detail: perr.Error()}
		case marker:
			d.In = ready.Input{Topic: f.Topic, Partition: f.Partition, KafkaPartition: f.KafkaPartition, Offset: f.Offset, RepartitionOffset: f.Offset}
			d.Kind, d.Err, d.Mark = record.Marker, nil, m
			return
		default: // format 1: a bad value is its own dead letter, as stage 1 judged it
			d.Kind, d.Err = dec.DecodeTimed(&d.In, &d.Rec)
			return
		}
	}
	d.In = f
	d.In.SourceID, d.In.RepartitionOffset = -1, f.Offset
	d.Kind, d.Err = record.Event, err
}

// Counts are the outcomes of the records Apply applied, by Outcome.
type Counts [numOutcomes]uint64

const numOutcomes = 6

// Apply applies one fetch of partition id, its records decoded in offset
// order, with hwm the fetch's high watermark, and counts their outcomes
// into counts. Records of a partition that waits for its restore, or
// below its position (fetched again), are skipped. A record stage 1
// forwards is counted by stage 2, under the repartition topic, where its
// fate is known.
func (c *Core) Apply(id int32, recs []Decoded, hwm, now int64, counts *Counts) {
	if c.stage1(id) {
		c.closed = c.win.appendClosed(c.closed[:0], c.layout.RepartitionPartitions())
		c.s1.AllowFolding(c.win.acceptsPartials(now), c.closed)
		local := id - c.layout.first
		for i := range recs {
			d := &recs[i]
			if d.Control {
				c.s1.Skip(d.In.Partition, d.In.Offset)
				continue
			}
			if out, ok := c.s1.ProcessDecoded(&d.In, &d.Rec, d.Kind, d.Err, now); ok && out != repartition.Forwarded {
				counts[stage1Outcomes[out]]++
			}
		}
		c.s1.Fetched(local, hwm, now)
		return
	}
	repart := c.s1 != nil
	for i := range recs {
		d := &recs[i]
		if d.Control {
			c.win.skip(&d.In)
			continue
		}
		if repart && d.Kind == record.Marker && d.Err == nil {
			c.win.applyMark(id, d.In.RepartitionOffset, d.Mark)
			continue
		}
		if d.Foreign {
			c.win.noteForeign(now)
		}
		if d.Group != nil {
			if n, ok := c.win.applyGroup(d.Group, now); ok {
				counts[Aggregated] += uint64(n)
			}
			continue
		}
		if out, ok := c.win.apply(&d.In, &d.Rec, d.Kind, d.Err, now); ok {
			counts[out]++
		}
	}
	c.win.fetched(id, hwm, now)
}

// stage1Outcomes are the outcomes stage 1's count as.
var stage1Outcomes = [...]Outcome{repartition.Filtered: Filtered, repartition.Marker: Marker, repartition.DeadLetter: DeadLetter}

// Tick re-evaluates idleness with the wall clock now; windows may fire.
func (c *Core) Tick(now int64) {
	c.win.tick(now)
	if c.s1 != nil {
		c.s1.Tick(now)
	}
}

// Peer applies the latest published watermark and idleness of partition
// n of input topic topic, read from the watermark topic (by_key with
// watermark.scope global; ignored otherwise, and for a partition the
// layout does not have). Windows may fire.
func (c *Core) Peer(topic string, n int32, wm int64, idle bool) {
	if id, ok := c.layout.Source(topic, n); ok {
		c.win.peer(id, wm, idle)
	}
}

// Step hands over the outputs since the last Step or Commit, and the
// stats (valid until the next one).
func (c *Core) Step(now int64) ready.Ready {
	var rd ready.Ready
	if !c.admit() {
		rd = c.win.Step()
	} else {
		rd = c.merge(c.s1.Step(now), c.win.Step())
	}
	rd.Stats = c.stats(now)
	return rd
}

// admit reports whether stage 1 hands over its outputs and offsets: with
// two stages, once a partition was assigned and every window partition
// assigned so far has been restored, from then on. A restore checks the
// config against the partition's stored generations and refuses a
// change the config does not allow (config.PlanAgainst): until the
// restores of the instance's first assignment have accepted it, stage 1
// writes nothing, not even its watermark markers, and commits no input
// offset (it keeps what it processed meanwhile for its first Ready after;
// an Abort drops it). An instance whose first assignment has no window
// partition has nothing to check the config against, and the
// partitions assigned later are not waited for: their restores may
// still refuse the config (docs/design.md#restore).
func (c *Core) admit() bool {
	if c.s1 == nil {
		return false
	}
	if !c.admitted && c.assigned && len(c.win.unrestored()) == 0 {
		c.admitted = true
	}
	return c.admitted
}

// Commit hands over a commit: the outputs since the last Step, stage 1's
// markers after its data, the window state's changelog records and
// positions, the watermarks to publish and the offsets of every stage.
// The shell writes it whole (with exactly_once in one transaction), then
// calls Accept, or Abort if any of it failed. Its slices are valid until
// the next Step or Commit.
func (c *Core) Commit(now int64) ready.Ready {
	var rd ready.Ready
	if !c.admit() {
		rd = c.win.commit()
		rd.Offsets = c.offsets(rd.Offsets, nil)
	} else {
		rd1 := c.s1.Commit(now)
		rd = c.merge(rd1, c.win.commit())
		rd.Offsets = c.offsets(rd.Offsets, rd1.Offsets)
	}
	rd.Stats = c.stats(now)
	return rd
}

// merge is rd with rd1's outputs first (stage 1's).
func (c *Core) merge(rd1, rd ready.Ready) ready.Ready {
	switch {
	case len(rd1.Outputs) == 0:
	case len(rd.Outputs) == 0:
		rd.Outputs = rd1.Outputs
	default:
		clear(c.outs)
		c.outs = append(append(c.outs[:0], rd1.Outputs...), rd.Outputs...)
		rd.Outputs = c.outs
	}
	return rd
}

// offsets names the stages' offsets (by their own partition ids) by
// topic and Kafka partition: stage 2's (or by_key's) win, stage 1's in1.
func (c *Core) offsets(win, in1 []ready.Offset) []ready.Offset {
	offs := c.offs[:0]
	for _, o := range win {
		o.Topic, o.Partition = c.layout.partition(o.Partition)
		offs = append(offs, o)
	}
	for _, o := range in1 {
		o.Topic, o.Partition = c.layout.partition(o.Partition + c.layout.first)
		offs = append(offs, o)
	}
	c.offs = offs
	return offs
}

// Accept tells the core that the last Commit is durable.
func (c *Core) Accept() {
	c.win.accept()
	if c.s1 != nil {
		c.s1.Accept()
	}
}

// Abort tells the core that the last Commit failed (the transaction
// aborted): every stage goes back to the last accepted commit. The
// window state's partitions are restored again before their records
// apply (Unrestored); stage 1's start again from their committed offsets
// with fresh generators. The shell rewinds the client to the committed
// offsets.
func (c *Core) Abort(now int64) {
	c.win.abort(now)
	if c.s1 != nil {
		c.s1.Abort(now)
	}
}

// PositionsUnwritten tells the core that the positions of its last
// Commit were not written (at_least_once: a commit that stopped before
// them): the next Commit writes every assigned partition's position again.
func (c *Core) PositionsUnwritten() { c.win.positionsUnwritten() }

// SetCaughtUp tells whether a partition's position is at its log end
// (for a partition no fetch has returned a record of: Unfetched); only a
// caught-up partition can become idle.
func (c *Core) SetCaughtUp(id int32, caughtUp bool, now int64) {
	if c.stage1(id) {
		c.s1.SetCaughtUp(id-c.layout.first, caughtUp, now)
		return
	}
	c.win.setCaughtUp(id, caughtUp, now)
}

// Unfetched lists the partitions ready for input that no fetch has
// returned a record of since their assignment, with their positions (-1:
// none, the group's offset rules apply): the shell asks the brokers
// whether they are at their log end (SetCaughtUp), for an empty
// partition must be able to go idle too.
func (c *Core) Unfetched() map[int32]int64 {
	out := c.win.unfetched()
	if c.s1 != nil {
		for id, pos := range c.s1.Unfetched() {
			if out == nil {
				out = map[int32]int64{}
			}
			out[id+c.layout.first] = pos
		}
	}
	return out
}

// Unfolds lists the repartition partitions that wait for the records of a
// group of partials they could not merge, read back from the input
// (docs/design.md#two-phase-aggregation): the shell reads them, hands
// them to Unfold, and resumes the partition's input at the position
// Unfold returns. Meanwhile the partition's records are not applied.
func (c *Core) Unfolds() []Unfold { return c.win.unfolds() }

// Unfold applies the records a partition's unfold read (see
// Processor.Unfold), counting their outcomes into counts, and returns the
// position the partition's input resumes from (-1: it did not wait).
func (c *Core) Unfold(id int32, ins []ready.Input, now int64, counts *Counts) int64 {
	return c.win.unfold(id, ins, now, counts)
}

// Unrestored lists the assigned partitions that wait for their restore
// (their ids are their changelog partitions).
func (c *Core) Unrestored() []int32 { return c.win.unrestored() }

// Restore restores a partition that waits for its restore (Unrestored)
// from r, which holds its changelog partition's records from the start
// (docs/design.md, "Restore"): r is spent after it. The partition's input
// resumes from the restored position, if it has one.
func (c *Core) Restore(id int32, r *state.Restorer, now int64) (state.Result, error) {
	return c.win.restore(id, r, now)
}

// Build is the first half of Restore (docs/design.md#restore): it builds
// partition id's windows from r, its changelog partition's records from
// the start (r is spent after it), into operators of the partition's own
// that no core holds yet. It reads only what NewCore set: it may run on
// any goroutine, at the same time as any other method of c (Apply of
// other partitions, Step, Commit, other Builds). Its refusal of the
// config, or a changelog that does not fit the windows, is Built.Err,
// which Attach returns.
func (c *Core) Build(id int32, r *state.Restorer) *Built { return c.win.build(id, r) }

// Attach is the second half of Restore: b, built for a partition that
// waits for its restore (Unrestored), becomes its state, where the
// core's other methods are called (the consumer's lock). Windows already
// due fire, a generation the config starts is cut over to, and the
// partition's input resumes from the restored position, if it has one.
// A Built whose partition is not waiting (restored already, or not
// assigned) is refused. The core cannot tell a partition revoked and
// assigned again since its changelog was read: the caller drops such a
// Built (the consumer's partition.dropped) and builds it again.
func (c *Core) Attach(b *Built, now int64) (state.Result, error) { return c.win.attach(b, now) }

// GenerationReport returns what the last restore of a window state
// partition decided about its config generations (docs/changing-config.md), for the
// shell's log line and metrics.
func (c *Core) GenerationReport(id int32) GenerationReport { return c.win.generationReport(id) }

// badForm reports whether err says a compact form could not be read (its
// *record.DecodeError lives here, not in decodeRepartition, where it would
// be an allocation per record).
func badForm(err error) bool {
	var de *record.DecodeError
	return errors.As(err, &de) && de.Reason == record.ReasonBadRepartitionRecord
}

// stats are the core's stats as of now, for its next Ready: its gauges
// and its counts since the last Ready.
func (c *Core) stats(now int64) ready.Stats {
	w := c.win
	st := w.takeStats(now)
	parts := c.parts[:0]
	for id := range w.parts {
		if w.parts[id].assigned {
			parts = append(parts, c.partitionStats(int32(id), int32(id)))
		}
	}
	if c.s1 != nil {
		c.ids = c.s1.AppendPartitions(c.ids[:0])
		for _, id := range c.ids {
			parts = append(parts, c.partitionStats(id+c.layout.first, id))
		}
	}
	c.parts, st.Partitions = parts, parts
	src := c.sources[:0]
	switch {
	case c.s1 != nil:
		st.HasSources = true
		known := false
		for id := range w.parts {
			if !w.parts[id].assigned {
				continue
			}
			t := w.sourceTable(int32(id))
			if t.Count == 0 {
				continue
			}
			known = true
			for int(t.Count) > len(src) {
				src = append(src, ready.SourceStats{Watermark: math.MaxInt64, Reported: true})
			}
			for i, s := range t.Sources[:t.Count] {
				if !s.Reported {
					src[i].Reported = false
					continue
				}
				src[i].Watermark = min(src[i].Watermark, s.Watermark)
				src[i].Active = src[i].Active || !s.Idle
			}
		}
		if !known {
			st.Unreported = int(c.s1.Sources())
		}
	case w.group() > 0:
		st.HasSources = true
		for id := range w.group() {
			wm, idle, reported := w.groupPartition(id)
			src = append(src, ready.SourceStats{Watermark: wm, Reported: reported, Active: !idle})
		}
	}
	holderWm := int64(math.MaxInt64)
	for i, s := range src {
		if !s.Reported {
			st.Unreported++
			continue
		}
		if s.Active && s.Watermark < holderWm {
			st.Holder, holderWm = i, s.Watermark
		}
	}
	c.sources, st.Sources = src, src
	return st
}

// Partition returns the stats of partition id as they are now.
func (c *Core) Partition(id int32) ready.PartitionStats {
	if c.stage1(id) {
		return c.partitionStats(id, id-c.layout.first)
	}
	return c.partitionStats(id, id)
}

// partitionStats are the stats of partition id, local in its stage.
func (c *Core) partitionStats(id, local int32) ready.PartitionStats {
	ps := ready.PartitionStats{ID: id}
	if c.stage1(id) {
		ps.Watermark, _ = c.s1.PartitionWatermark(local)
		ps.Lag, ps.LagKnown = c.s1.Lag(local)
	} else {
		ps.Watermark, _ = c.win.PartitionWatermark(local)
		ps.Lag, ps.LagKnown = c.win.lag(local)
	}
	return ps
}

// Warm returns an empty standby copy of window state partition id's
// state, kept as built window state (docs/design.md "Standby state"):
// the shell adds the changelog's records to w.Restorer() and calls Drain.
func (c *Core) Warm(id int32) *Warm { return c.win.newWarm(id) }

// Drain builds into w the entries its records committed since the last
// Drain. Like Build it reads only what NewCore set: any goroutine, beside
// any other method of c. After an error (w.Err) the copy is made again.
func (c *Core) Drain(w *Warm) error { return c.win.drain(w) }

// BuildWarm is Build for a partition taken over from its copy w, whose
// Restorer the takeover read the changelog's tail into: only the tail's
// entries go into the operators, which hold the rest. w is spent after
// it. Attach attaches the Built.
func (c *Core) BuildWarm(w *Warm) *Built { return c.win.buildWarm(w) }
