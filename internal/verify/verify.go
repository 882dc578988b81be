package verify

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"

	"github.com/hamba/avro/v2"

	"aggregator/internal/config"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// A Source is where an input record was read: the late and dead-letter
// topics' source headers.
type Source struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// A Late is a late event as the late topic records it.
type Late struct {
	Source
	EventTime, Watermark int64
	Missed               windowing.Window
}

// A Range bounds the windows compared, in event time (ms): those that
// start at or after From and end at or before To. math.MinInt64 and
// math.MaxInt64: no bound.
type Range struct{ From, To int64 }

// Whole is the range without bounds.
var Whole = Range{math.MinInt64, math.MaxInt64}

// A Diff is one unexplained difference: what the recomputation expected
// and what the topics hold (null when absent).
type Diff struct {
	Kind     string          `json:"kind"`
	Key      json.RawMessage `json:"key,omitempty"`
	Window   *WindowBounds   `json:"window,omitempty"`
	Source   *Source         `json:"source,omitempty"`
	Expected any             `json:"expected"`
	Found    any             `json:"found"`
}

// WindowBounds are a window's start and end (null for a global or count
// window), and a count window's seq.
type WindowBounds struct {
	Start *int64 `json:"start"`
	End   *int64 `json:"end"`
	Seq   *int64 `json:"seq,omitempty"`
}

// The kinds of Diff.
const (
	WindowDiffers    = "window_differs"    // both hold the window, with other values
	WindowPartial    = "window_partial"    // differs, and by_key input had the key in several partitions
	WindowMissing    = "window_missing"    // recomputed, not on the results topic
	WindowUnexpected = "window_unexpected" // on the results topic, not recomputed
	LateMissing      = "late_missing"      // late in the recomputation, on time live, no window shows it
	LateUnexpected   = "late_unexpected"   // on the late topic, not late in the recomputation, and its watermark does not justify it
	DeadMissing      = "dead_letter_missing"
	DeadUnexpected   = "dead_letter_unexpected"
)

// Summary counts what was compared (docs/verify.md#reading-the-output).
type Summary struct {
	Windows WindowCounts `json:"windows"`
	// ByGeneration counts the windows compared by the state.config_version
	// of the generation that owns them (docs/verify.md#config-generations), when the changelog
	// holds generations.
	ByGeneration map[string]int `json:"windows_compared_by_generation,omitempty"`
	LeftOut      map[string]int `json:"windows_left_out"` // by reason
	// OtherVersions counts the results read whose header
	// aggregator.config_version names no generation verify recomputes (a
	// generation retired from the changelog, or a version it never held),
	// by version: their windows cannot be recomputed.
	OtherVersions map[string]int `json:"results_of_other_versions,omitempty"`
	Late          EventCounts    `json:"late_events"`
	DeadLetters   EventCounts    `json:"dead_letters"`
	Unexplained   int            `json:"unexplained"`
}

// WindowCounts counts the (key, window) pairs compared.
type WindowCounts struct {
	Compared          int `json:"compared"`
	Equal             int `json:"equal"`
	Differing         int `json:"differing"`
	Partial           int `json:"partial"`
	Missing           int `json:"missing"`
	Unexpected        int `json:"unexpected"`
	ExplainedByTiming int `json:"explained_by_timing"`
}

// EventCounts counts late events or dead letters by source.
type EventCounts struct {
	Equal             int `json:"equal"`
	Missing           int `json:"missing"`
	Unexpected        int `json:"unexpected"`
	ExplainedByTiming int `json:"explained_by_timing,omitempty"`
	NotWritten        int `json:"not_written,omitempty"` // dead letters without a dead-letter topic
	// NotRecomputed: late events of records whose time lies before the
	// cut-over of their state partition's oldest live generation (a
	// retired generation's span), which verify cannot judge.
	NotRecomputed int `json:"not_recomputed,omitempty"`
}

// Reasons a window is left out (Summary.LeftOut).
const (
	BeforeRange = "starts_before_range" // its first records may lie before --from
	AfterRange  = "ends_after_range"    // it ends after --to
	NotClosed   = "not_closed"          // not closed by the watermark at the range's end
	NeverCloses = "never_closes"        // a global window
	NoBounds    = "count_window_in_range"
	// Config generations (docs/verify.md#config-generations):
	Retired          = "retired_generation"       // it starts before the cut-over of its state partition's oldest live generation, or its result names no live generation
	SessionAtCutover = "session_at_cutover"       // a session that spans a cut-over: the seam cuts it live, the recomputation cannot
	CountGenerations = "count_window_generations" // a count window of a state partition that cut over: cut by arrival at the cut-over, which the input does not show
)

// A Generation is a generation of windows verify recomputes (docs/verify.md#config-generations):
// its state.config_version and the config its windows are computed under
// (the deployment's, with the generation's state settings).
type Generation struct {
	Version int64
	Config  config.Config
}

// A Seam is a live generation of a state partition: its index in
// Generations.Gens and its cut-over (math.MinInt64: the partition's first
// generation, which holds windows of every time).
type Seam struct {
	Gen     int
	Cutover int64
}

// Generations are what a deployment's changelog holds (docs/changing-config.md#generations-and-the-cut-over).
type Generations struct {
	Gens []Generation // one recomputation each, in the order RecordGenerations takes them
	// Seams are each state partition's live generations, oldest first
	// (index: the state partition; none: it has no state, and its windows
	// belong to the newest generation of Gens).
	Seams [][]Seam
	// Partition is the state partition of a group key (JSON): with
	// source.partitioning repartition, the repartition partitioner's. Nil
	// with by_key: the input partition of the key's first record.
	Partition func(key string) int32
}

// Trivial reports whether g is one generation that owns every window:
// the recomputation of one config, compared with Record.
func (g *Generations) Trivial() bool {
	if len(g.Gens) != 1 {
		return false
	}
	for _, ss := range g.Seams {
		if len(ss) > 1 || len(ss) == 1 && ss[0].Cutover != math.MinInt64 {
			return false
		}
	}
	return true
}

// gens is a Comparer's view of the generations.
type gens struct {
	Generations
	perPartition bool             // by_key with watermark.scope partition: a result's Partition is its state partition
	firstPart    map[string]int32 // by_key: a key's first input partition
	keyDec       *record.Decoder  // the identity settings, no filter: a record's key and time
	krec         record.Record
	atSeam       map[string][]windowing.Window // sessions left out at a cut-over, by key
}

// settings are what a window is computed and written with: its
// generation's (docs/verify.md#config-generations).
type settings struct {
	version  int64
	lateness int64
	kind     config.WindowKind
	enc      *producer.Encoder         // the Kafka key
	values   producer.ResultEncoder    // the value, as the service writes it
	canon    func([]byte) (any, error) // a value's compared fields
}

// A Comparer compares found outputs with a recomputation.
type Comparer struct {
	sets      []settings      // by generation, as Generations.Gens
	gens      *gens           // nil: one generation of the config's, everywhere
	live      map[string]bool // the versions of sets
	versions  []string        // the versions of the results read
	rng       Range
	dec       *record.Decoder
	rec       record.Record
	deadTopic bool             // sink.dead_letter_topic is set: dead letters are compared
	trackKeys bool             // by_key over several partitions: note the keys met in more than one
	keyParts  map[string]int32 // group key → its partition, or -1 once met in two
	found     map[string]foundResult
	late      map[Source]Late
	dead      map[Source]bool
	pending   map[string]*window // recomputed, not closed yet
	closing   closing
	suspects  []suspect          // differing windows: judged at Finish, once every timing mark is known
	marks     map[string][]int64 // group key → event times judged differently live and here
	lateMaybe []maybeLate        // late here, on time live: explained if a window shows it
	liveMaybe []maybeLate        // late live, on time here: explained if the input reaches its watermark
	maxW      int64
	s         Summary
	diffs     []Diff
	maxDiffs  int
	buf       []byte
}

type window struct {
	gen    int    // its generation: an index of Comparer.sets
	key    string // the group key
	w      windowing.Window
	seq    int64
	value  []byte // encoded as the service writes it
	closes int64
}

// foundResult is the latest result of a (key, window) on the results topic.
type foundResult struct {
	value   []byte // nil: a tombstone
	version string // its aggregator.config_version header ("": none)
}

type suspect struct {
	kind   string
	kafka  string
	key    string
	w      windowing.Window
	seq    int64
	global bool
	exp    any
	found  any
}

type maybeLate struct {
	src  Source
	key  string
	t    int64
	live Late // liveMaybe: the late event
}

// New returns a Comparer for cfg's outputs over rng, every window
// computed under cfg (one generation, version cfg.State.ConfigVersion).
// schemas are the input's registry schemas (nil for other formats),
// filled before each Record; partitions is the number of input
// partitions read. At most maxDiffs differences are kept for Diffs.
func New(cfg config.Config, schemas *record.Schemas, partitions int, rng Range, maxDiffs int) (*Comparer, error) {
	return NewGenerations(cfg, nil, schemas, partitions, rng, maxDiffs)
}

// NewGenerations is New for the generations g of the changelog (nil: one
// generation of cfg): each window is compared under the generation that
// owns it in its state partition.
func NewGenerations(cfg config.Config, g *Generations, schemas *record.Schemas, partitions int, rng Range, maxDiffs int) (*Comparer, error) {
	dec, err := record.NewDecoder(cfg.RecordSpec(), schemas)
	if err != nil {
		return nil, err
	}
	c := &Comparer{
		rng: rng, dec: dec, deadTopic: cfg.Sink.DeadLetterTopic != "",
		trackKeys: cfg.Source.ByKey() && cfg.Watermark.GlobalScope() && partitions > 1,
		keyParts:  map[string]int32{},
		found:     map[string]foundResult{}, late: map[Source]Late{}, dead: map[Source]bool{},
		pending: map[string]*window{}, marks: map[string][]int64{}, live: map[string]bool{},
		closing: closing{heaps: make([]closeHeap, 1), wms: []int64{math.MinInt64}, perPart: cfg.Source.ByKey() && !cfg.Watermark.GlobalScope()},
		maxW:    math.MinInt64, maxDiffs: maxDiffs,
		s: Summary{LeftOut: map[string]int{}},
	}
	if g == nil {
		g = &Generations{Gens: []Generation{{cfg.State.ConfigVersion, cfg}}}
	} else {
		c.s.ByGeneration = map[string]int{}
	}
	for _, gen := range g.Gens {
		set, err := settingsOf(gen.Config, gen.Version)
		if err != nil {
			return nil, fmt.Errorf("generation %d: %w", gen.Version, err)
		}
		c.sets = append(c.sets, set)
		c.live[strconv.FormatInt(gen.Version, 10)] = true
	}
	if !g.Trivial() {
		ident := cfg
		ident.Source.Filter = nil // the key and time of every record, whatever a generation's filter
		kd, err := record.NewDecoder(ident.RecordSpec(), schemas)
		if err != nil {
			return nil, err
		}
		c.gens = &gens{Generations: *g, perPartition: cfg.Source.ByKey() && !cfg.Watermark.GlobalScope(),
			firstPart: map[string]int32{}, keyDec: kd, atSeam: map[string][]windowing.Window{}}
	}
	return c, nil
}

// settingsOf are the settings of the generation of version whose config
// is cfg.
func settingsOf(cfg config.Config, version int64) (settings, error) {
	set := settings{
		version:  version,
		lateness: cfg.Window.AllowedLateness.Milliseconds(),
		kind:     cfg.Window.Kind(),
		enc:      producer.EncoderFor(cfg),
		values:   producer.EncoderFor(cfg),
		canon:    canonJSON,
	}
	if cfg.Sink.Format == config.FormatAvro {
		schema, err := avro.Parse(producer.AvroSchema(cfg))
		if err != nil {
			return settings{}, fmt.Errorf("results schema: %w", err)
		}
		set.values = producer.NewAvroEncoder(cfg, 0)
		set.canon = func(b []byte) (any, error) { return canonAvro(schema, b) }
	}
	return set, nil
}

// settingsOfVersion returns the settings of the generation a result's
// version header names, or the newest generation's.
func (c *Comparer) settingsOfVersion(version string) *settings {
	for i := range c.sets {
		if strconv.FormatInt(c.sets[i].version, 10) == version {
			return &c.sets[i]
		}
	}
	return &c.sets[len(c.sets)-1]
}

// resultKey is the Kafka key of a result, as parsed for the range.
type resultKey struct {
	Key         json.RawMessage `json:"key"`
	WindowStart *int64          `json:"window_start"`
	WindowEnd   *int64          `json:"window_end"`
	Seq         *int64          `json:"seq"`
}

// FoundResult notes a record of the results topic (value nil: a
// tombstone) and its aggregator.config_version header (nil: none), in
// offset order: the latest per key wins. Results of windows outside the
// range are not kept; results of a version verify does not recompute are
// counted (Summary.OtherVersions).
func (c *Comparer) FoundResult(key, value, versionHeader []byte) error {
	var k resultKey
	if err := json.Unmarshal(key, &k); err != nil {
		return fmt.Errorf("results topic: key %q: %w", key, err)
	}
	switch {
	case k.WindowStart != nil && (*k.WindowStart < c.rng.From || *k.WindowEnd > c.rng.To):
		return nil
	case k.WindowStart == nil && c.rng.From != math.MinInt64:
		// A count or global window of a bounded range: never compared,
		// so not kept (the recomputation counts the left out).
		return nil
	}
	version := c.intern(versionHeader)
	if value != nil {
		value = slices.Clone(value) // not the fetch's buffer, which it would keep whole
		if version != "" && !c.live[version] {
			if c.s.OtherVersions == nil {
				c.s.OtherVersions = map[string]int{}
			}
			c.s.OtherVersions[version]++
		}
	}
	c.found[string(key)] = foundResult{value, version}
	return nil
}

// intern returns b as a string, one per version met (a results topic
// holds a few versions, and a string per result would be garbage).
func (c *Comparer) intern(b []byte) string {
	for _, v := range c.versions {
		if v == string(b) {
			return v
		}
	}
	v := string(b)
	c.versions = append(c.versions, v)
	return v
}

// FoundLate notes a late event of the range.
func (c *Comparer) FoundLate(l Late) { c.late[l.Source] = l }

// FoundDeadLetter notes a dead letter of the range.
func (c *Comparer) FoundDeadLetter(src Source) { c.dead[src] = true }

// Record takes what the recomputation did with in: rd holds the outputs
// processing it emitted (its own late event or dead letter among them),
// wm the recomputation's watermark after it (with watermark.scope
// partition and by_key, in's partition's). One generation: its index 0.
func (c *Comparer) Record(in *record.Input, rd *ready.Ready, wm int64) {
	var own *ready.Event
	var dead bool
	for i := range rd.Outputs {
		out := &rd.Outputs[i]
		switch out.Kind {
		case ready.Result:
			c.result(&out.Result, 0)
		case ready.Late:
			own = out.Event
		case ready.DeadLetter:
			dead = true
		}
	}
	c.judge(in, own, dead, false, wm)
}

// RecordGenerations is Record for the recomputation of every generation:
// rds[i] is what generation i's (Generations.Gens[i]) did with in, wm the
// lowest of their watermarks (of in's partition, as for Record). A window is compared when the generation
// that owns it in its state partition computed it (time windows by their
// start, sessions by their first record's time: the generation whose
// cut-over is the latest at or before it); the record is late when the
// generation that owns its time judged it so, a dead letter when every
// generation did or the one that owns its time did (the service gives
// it to no other: pipeline's processGenerations; except a sliding
// window of the old generation that holds a time past T, which the
// service aggregates, here a dead letter).
func (c *Comparer) RecordGenerations(in *record.Input, rds []ready.Ready, wm int64) {
	g := c.gens
	if g == nil {
		c.Record(in, &rds[0], wm)
		return
	}
	kind, err := g.keyDec.Decode(in, &g.krec)
	event := err == nil && kind == record.Event
	owner := -1
	if event {
		if g.Partition == nil {
			if _, ok := g.firstPart[g.krec.Key]; !ok {
				g.firstPart[g.krec.Key] = in.Partition
			}
		}
		owner = g.ownerOf(g.seamsOf(c.recordPartition(g.krec.Key, in.Partition)), g.krec.Time)
	}
	var own *ready.Event
	dead, ownerDead := true, false
	for i := range rds {
		d := false
		for j := range rds[i].Outputs {
			out := &rds[i].Outputs[j]
			switch out.Kind {
			case ready.Result:
				c.genResult(&out.Result, i)
			case ready.Late:
				if i == owner {
					own = out.Event
				}
			case ready.DeadLetter:
				d = true
			}
		}
		dead = dead && d
		ownerDead = ownerDead || d && i == owner
	}
	c.judge(in, own, dead || ownerDead, event && owner < 0, wm)
}

// recordPartition is the state partition of a record of key read from
// input partition p.
func (c *Comparer) recordPartition(key string, p int32) int32 {
	if c.gens.Partition != nil {
		return c.gens.Partition(key)
	}
	return p
}

// keyPartition is the state partition of a result of key (-1: unknown).
func (c *Comparer) keyPartition(key string) int32 {
	if c.gens.Partition != nil {
		return c.gens.Partition(key)
	}
	if p, ok := c.gens.firstPart[key]; ok {
		return p
	}
	return -1
}

// seamsOf are state partition s's live generations (nil: none known).
func (g *gens) seamsOf(s int32) []Seam {
	if s < 0 || int(s) >= len(g.Seams) {
		return nil
	}
	return g.Seams[s]
}

// seamAt is the index in seams of the generation that owns a window that
// starts at t: the one whose cut-over is the latest at or before t; -1
// when t is before the oldest's (a retired generation's window).
func seamAt(seams []Seam, t int64) int {
	k := -1
	for i, s := range seams {
		if s.Cutover <= t {
			k = i
		}
	}
	return k
}

// ownerOf is the generation (an index of Gens) that owns time t among
// seams: the newest generation when seams are none; -1 for a retired
// generation's time.
func (g *gens) ownerOf(seams []Seam, t int64) int {
	if len(seams) == 0 {
		return len(g.Gens) - 1
	}
	if k := seamAt(seams, t); k >= 0 {
		return seams[k].Gen
	}
	return -1
}

// cutOver reports whether seams hold a cut-over: a window of a
// generation that does not hold every time.
func cutOver(seams []Seam) bool {
	return len(seams) > 1 || len(seams) == 1 && seams[0].Cutover != math.MinInt64
}

// genResult takes a firing of generation i's recomputation: compared if
// generation i owns its window in its state partition, left out with the
// reason if no generation's recomputation can match the service's.
func (c *Comparer) genResult(r *windowing.Result, i int) {
	g := c.gens
	var s int32
	if g.perPartition {
		s = r.Partition
	} else {
		s = c.keyPartition(r.Key)
	}
	seams := g.seamsOf(s)
	in := func(gen int) bool { return slices.ContainsFunc(seams, func(s Seam) bool { return s.Gen == gen }) }
	switch {
	case len(seams) == 0:
		if i == len(g.Gens)-1 {
			c.result(r, i)
		}
	case r.Window.IsGlobal(): // count and global windows: no start to own them by
		switch {
		case !in(i):
		case c.sets[i].kind == config.Count && cutOver(seams):
			if r.Firing != windowing.Retract && i == seams[len(seams)-1].Gen {
				c.s.LeftOut[CountGenerations]++
			}
		case i == seams[len(seams)-1].Gen:
			c.result(r, i)
		}
	default:
		k := seamAt(seams, r.Window.Start)
		if c.sets[i].kind == config.Session && r.Firing != windowing.Retract {
			// The oldest generation's cut-over too, if it has one: the
			// retired generation's side is not recomputed, and the
			// recomputation's session across it is none of the service's.
			for j := range seams {
				cut := seams[j].Cutover
				if r.Window.Start < cut && cut < r.Window.End && (i == seams[j].Gen || j > 0 && i == seams[j-1].Gen) {
					if !slices.Contains(g.atSeam[r.Key], r.Window) {
						g.atSeam[r.Key] = append(g.atSeam[r.Key], r.Window)
						c.s.LeftOut[SessionAtCutover]++
					}
					return
				}
			}
		}
		switch {
		case k < 0:
			if i == seams[0].Gen && r.Firing != windowing.Retract {
				c.s.LeftOut[Retired]++
			}
		case seams[k].Gen == i:
			c.result(r, i)
		}
	}
}

// judge compares the live judgement of in with the recomputation's: own
// is its late event there, dead whether it was a dead letter there;
// unjudged says its lateness cannot be recomputed (a retired
// generation's time).
func (c *Comparer) judge(in *record.Input, own *ready.Event, dead, unjudged bool, wm int64) {
	src := Source{in.Topic, in.KafkaPartition, in.Offset}
	if c.trackKeys && !dead {
		if kind, err := c.dec.Decode(in, &c.rec); err == nil && kind == record.Event {
			c.notePartition(c.rec.Key, in.Partition)
		}
	}
	if unjudged && !dead {
		if _, ok := c.late[src]; ok {
			delete(c.late, src)
			c.s.Late.NotRecomputed++
		}
	}
	lv, liveLate := c.late[src]
	delete(c.late, src)
	liveDead := c.dead[src]
	delete(c.dead, src)
	switch {
	case dead && liveDead:
		c.s.DeadLetters.Equal++
	case dead && !c.deadTopic:
		c.s.DeadLetters.NotWritten++
	case dead:
		c.s.DeadLetters.Missing++
		c.diff(Diff{Kind: DeadMissing, Source: &src, Expected: "dead_letter", Found: c.liveJudgement(liveLate)})
	case liveDead:
		c.s.DeadLetters.Unexpected++
		c.diff(Diff{Kind: DeadUnexpected, Source: &src, Expected: c.ownJudgement(own), Found: "dead_letter"})
	}
	switch {
	case dead || liveDead:
		if liveLate { // dead here, late live: the dead letter's diff says it
			c.s.Late.Unexpected++
		}
	case own != nil && liveLate:
		c.s.Late.Equal++
	case own != nil:
		// Late here, on time live: explained if a window of its key shows
		// it (judged at Finish); else the late event is missing.
		if key, ok := c.key(in); ok {
			c.mark(key, own.EventTime)
			c.lateMaybe = append(c.lateMaybe, maybeLate{src: src, key: key, t: own.EventTime})
		}
	case liveLate:
		// Late live, on time here: explained if the recorded watermark
		// justifies it, one the input reaches (known at Finish).
		key, ok := c.key(in)
		if !ok || !c.justified(lv, c.rec.Time) {
			c.s.Late.Unexpected++
			c.diff(Diff{Kind: LateUnexpected, Source: &src, Expected: "on_time", Found: lateJSON(lv)})
			break
		}
		c.liveMaybe = append(c.liveMaybe, maybeLate{src, key, lv.EventTime, lv})
	}
	c.advance(in.Partition, wm)
}

// key decodes in's group key (and event time, into c.rec).
func (c *Comparer) key(in *record.Input) (string, bool) {
	kind, err := c.dec.Decode(in, &c.rec)
	return c.rec.Key, err == nil && kind == record.Event
}

// justified reports whether a late event's recorded watermark justifies
// judging a record with event time t late (docs/verify.md#explained-by-timing): the window it missed
// holds t and was past its cleanup time at that watermark. (Finish checks
// that the input reaches that watermark.)
func (c *Comparer) justified(l Late, t int64) bool {
	return l.EventTime == t && l.Missed.Start <= t && t < l.Missed.End &&
		l.Missed.CleanupTime(c.sets[0].lateness) <= l.Watermark // lateness is a run setting: every generation's
}

func (c *Comparer) notePartition(key string, p int32) {
	switch q, ok := c.keyParts[key]; {
	case !ok:
		c.keyParts[key] = p
	case q != p:
		c.keyParts[key] = -1
	}
}

func (c *Comparer) mark(key string, t int64) { c.marks[key] = append(c.marks[key], t) }

// marked reports whether a record of key judged differently live lies in w
// (any of them, for a global or count window).
func (c *Comparer) marked(key string, w windowing.Window, global bool) bool {
	return slices.ContainsFunc(c.marks[key], func(t int64) bool { return global || w.Start <= t && t < w.End })
}

// result takes a recomputed firing of generation gen's: the window's
// latest value so far.
func (c *Comparer) result(r *windowing.Result, gen int) {
	set := &c.sets[gen]
	c.buf = set.enc.AppendKey(c.buf[:0], r)
	kafka := string(c.buf)
	if r.Firing == windowing.Retract {
		delete(c.pending, kafka) // a merged session: no result under its key
		return
	}
	w := c.pending[kafka]
	if w == nil {
		switch {
		case r.Window.IsGlobal() && set.kind == config.Global:
			c.s.LeftOut[NeverCloses]++
			return
		case r.Window.IsGlobal() && c.rng.From != math.MinInt64:
			c.s.LeftOut[NoBounds]++
			return
		case !r.Window.IsGlobal() && r.Window.Start < c.rng.From:
			c.s.LeftOut[BeforeRange]++
			return
		case !r.Window.IsGlobal() && r.Window.End > c.rng.To:
			c.s.LeftOut[AfterRange]++
			return
		}
		w = &window{gen: gen, key: r.Key, w: r.Window, seq: r.Seq, closes: math.MinInt64} // a count window closes when it fires
		if !r.Window.IsGlobal() {
			w.closes = r.Window.CleanupTime(set.lateness)
		}
		c.pending[kafka] = w
		heap.Push(c.closing.of(r.Partition), closeAt{w.closes, kafka})
	}
	w.value = set.values.AppendResult(w.value[:0], r)
}

// advance compares the windows the watermark wm of partition p (any with
// one heap) closed.
func (c *Comparer) advance(p int32, wm int64) {
	c.maxW = max(c.maxW, wm)
	h := c.closing.at(p, wm)
	for len(*h) > 0 && (*h)[0].at <= wm {
		kafka := heap.Pop(h).(closeAt).key
		if w := c.pending[kafka]; w != nil {
			delete(c.pending, kafka)
			c.compare(kafka, w)
		}
	}
}

// closing orders the pending windows by closing time: one heap, or with
// perPart one per partition, whose own watermark closes its windows
// (watermark.scope partition with by_key: each partition's windows
// follow its own watermark, in the service and the recomputation).
type closing struct {
	heaps   []closeHeap
	perPart bool
	wms     []int64 // each partition's watermark so far (perPart)
}

// of is the heap of partition p's windows.
func (cl *closing) of(p int32) *closeHeap {
	if !cl.perPart || p < 0 {
		return &cl.heaps[0]
	}
	for int(p) >= len(cl.heaps) {
		cl.heaps = append(cl.heaps, nil)
		cl.wms = append(cl.wms, math.MinInt64)
	}
	return &cl.heaps[p]
}

// at is the heap of partition p's windows, its watermark now wm.
func (cl *closing) at(p int32, wm int64) *closeHeap {
	h := cl.of(p)
	if cl.perPart && p >= 0 {
		cl.wms[p] = max(cl.wms[p], wm)
	}
	return h
}

func (c *Comparer) compare(kafka string, w *window) {
	set := &c.sets[w.gen]
	c.s.Windows.Compared++
	if c.s.ByGeneration != nil {
		c.s.ByGeneration[strconv.FormatInt(set.version, 10)]++
	}
	f, ok := c.found[kafka]
	value := f.value
	delete(c.found, kafka)
	exp, err := set.canon(w.value)
	if err != nil { // our own encoding: cannot fail
		panic(err)
	}
	s := suspect{kafka: kafka, key: w.key, w: w.w, seq: w.seq, global: w.w.IsGlobal(), exp: exp}
	if !ok || value == nil {
		s.kind = WindowMissing
		c.suspects = append(c.suspects, s)
		return
	}
	got, err := set.canon(value)
	if err != nil {
		s.kind, s.found = WindowDiffers, fmt.Sprintf("undecodable: %v", err)
		c.suspects = append(c.suspects, s)
		return
	}
	if equal(exp, got) {
		c.s.Windows.Equal++
		return
	}
	s.kind, s.found = WindowDiffers, got
	c.suspects = append(c.suspects, s)
}

// Finish compares what is left once the input is read: windows still open
// are left out, results no recomputed window closed are unexpected when
// their window closed by the end, and the differing windows are judged
// against the timing marks. wm is the recomputation's final watermark;
// open counts the windows still open in the recomputation.
func (c *Comparer) Finish(wm int64, open int) Summary {
	c.advance(0, wm)
	for p, pwm := range c.closing.wms { // with perPart: each partition's windows at its own watermark
		c.advance(int32(p), pwm)
	}
	for _, l := range c.liveMaybe {
		if l.live.Watermark > c.maxW {
			c.s.Late.Unexpected++
			c.diff(Diff{Kind: LateUnexpected, Source: &l.src, Expected: "on_time", Found: lateJSON(l.live)})
			continue
		}
		c.s.Late.ExplainedByTiming++
		c.mark(l.key, l.t)
	}
	c.s.LeftOut[NotClosed] += len(c.pending) + open
	for kafka, f := range c.found {
		if f.value == nil {
			continue
		}
		if f.version != "" && !c.live[f.version] {
			c.s.LeftOut[Retired]++ // Summary.OtherVersions counts it by version
			continue
		}
		var k resultKey
		_ = json.Unmarshal([]byte(kafka), &k) // parsed by FoundResult
		set := c.settingsOfVersion(f.version)
		s := suspect{kind: WindowUnexpected, kafka: kafka, key: string(k.Key), seq: -1}
		if k.Seq != nil {
			s.seq = *k.Seq
		}
		if reason := c.leftOutFound(&k, set); reason != "" {
			c.s.LeftOut[reason]++
			continue
		}
		switch {
		case k.WindowStart == nil && set.kind == config.Global:
			c.s.LeftOut[NeverCloses]++
			continue
		case k.WindowStart == nil: // a count window; with --from, not kept
			s.global = true
		default:
			s.w = windowing.Window{Start: *k.WindowStart, End: *k.WindowEnd}
			if s.w.CleanupTime(set.lateness) > wm {
				c.s.LeftOut[NotClosed]++
				continue
			}
		}
		got, err := set.canon(f.value)
		if err != nil {
			got = fmt.Sprintf("undecodable: %v", err)
		}
		s.found = got
		c.s.Windows.Compared++
		c.suspects = append(c.suspects, s)
	}
	slices.SortFunc(c.suspects, func(a, b suspect) int {
		return cmp.Or(cmp.Compare(a.w.Start, b.w.Start), cmp.Compare(a.kafka, b.kafka))
	})
	var explained []suspect
	for _, s := range c.suspects {
		if c.marked(s.key, s.w, s.global) {
			c.s.Windows.ExplainedByTiming++
			explained = append(explained, s)
			continue
		}
		kind := s.kind
		switch kind {
		case WindowMissing:
			c.s.Windows.Missing++
		case WindowUnexpected:
			c.s.Windows.Unexpected++
		default:
			if c.keyParts[s.key] == -1 {
				kind = WindowPartial
				c.s.Windows.Partial++
			} else {
				c.s.Windows.Differing++
			}
		}
		c.diff(Diff{Kind: kind, Key: json.RawMessage(s.key), Window: bounds(s), Expected: s.exp, Found: s.found})
	}
	for _, l := range c.lateMaybe {
		if slices.ContainsFunc(explained, func(s suspect) bool {
			return s.key == l.key && (s.global || s.w.Start <= l.t && l.t < s.w.End)
		}) {
			c.s.Late.ExplainedByTiming++
			continue
		}
		c.s.Late.Missing++
		c.diff(Diff{Kind: LateMissing, Source: &l.src, Key: json.RawMessage(l.key), Expected: "late", Found: "on_time"})
	}
	for src, l := range c.late {
		c.s.Late.Unexpected++
		c.diff(Diff{Kind: LateUnexpected, Source: &src, Expected: "not read", Found: lateJSON(l)})
	}
	for src := range c.dead {
		c.s.DeadLetters.Unexpected++
		c.diff(Diff{Kind: DeadUnexpected, Source: &src, Expected: "not read", Found: "dead_letter"})
	}
	return c.s
}

// leftOutFound is why a result no recomputed window matched is left out
// with config generations ("": it is not): a count window of a state
// partition that cut over, a window before its partition's oldest live
// generation, a session at a cut-over whose recomputation was left out.
func (c *Comparer) leftOutFound(k *resultKey, set *settings) string {
	g := c.gens
	if g == nil {
		return ""
	}
	key := string(k.Key)
	seams := g.seamsOf(c.keyPartition(key))
	if k.WindowStart == nil {
		if set.kind == config.Count && cutOver(seams) {
			return CountGenerations
		}
		return ""
	}
	w := windowing.Window{Start: *k.WindowStart, End: *k.WindowEnd}
	switch {
	case len(seams) > 0 && w.Start < seams[0].Cutover:
		return Retired
	case slices.ContainsFunc(g.atSeam[key], func(s windowing.Window) bool { return s.Start < w.End && w.Start < s.End }):
		return SessionAtCutover
	}
	return ""
}

// Diffs returns the first maxDiffs unexplained differences.
func (c *Comparer) Diffs() []Diff { return c.diffs }

func (c *Comparer) diff(d Diff) {
	c.s.Unexplained++
	if len(c.diffs) < c.maxDiffs {
		c.diffs = append(c.diffs, d)
	}
}

func (c *Comparer) liveJudgement(late bool) string {
	if late {
		return "late"
	}
	return "on_time"
}

func (c *Comparer) ownJudgement(e *ready.Event) string {
	if e != nil {
		return "late"
	}
	return "on_time"
}

func bounds(s suspect) *WindowBounds {
	b := &WindowBounds{}
	if !s.global {
		b.Start, b.End = &s.w.Start, &s.w.End
	}
	if s.seq >= 0 && s.global {
		b.Seq = &s.seq
	}
	return b
}

func lateJSON(l Late) map[string]int64 {
	return map[string]int64{"event_time": l.EventTime, "watermark": l.Watermark, "window_start": l.Missed.Start, "window_end": l.Missed.End}
}

// closeAt is when a pending window closes.
type closeAt struct {
	at  int64
	key string
}

// closeHeap orders pending windows by closing time.
type closeHeap []closeAt

func (h closeHeap) Len() int           { return len(h) }
func (h closeHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h closeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *closeHeap) Push(x any)        { *h = append(*h, x.(closeAt)) }
func (h *closeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// notCompared are the fields of a result that are not compared.
var notCompared = []string{"revision", "watermark", "firing"}

// canonJSON is a JSON result's compared fields.
func canonJSON(b []byte) (any, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return compared(m), nil
}

// compared drops the fields that are not compared.
func compared(m map[string]any) map[string]any {
	for _, f := range notCompared {
		delete(m, f)
	}
	return m
}

// canonAvro is an Avro result's compared fields (after the wire header).
func canonAvro(schema avro.Schema, b []byte) (any, error) {
	if len(b) < 5 || b[0] != 0 {
		return nil, fmt.Errorf("not in the Schema Registry wire format")
	}
	var m map[string]any
	if err := avro.Unmarshal(schema, b[5:], &m); err != nil {
		return nil, err
	}
	return compared(m), nil
}

// equal compares decoded results; numbers to a relative 1e-9, as floating
// sums taken in another order may differ in their last bits.
func equal(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		return ok && slices.EqualFunc(a, b, equal)
	case float64:
		b, ok := b.(float64)
		return ok && (a == b || math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b)))
	}
	return reflect.DeepEqual(a, b)
}
