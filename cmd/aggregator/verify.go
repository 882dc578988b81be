package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/recompute"
	"aggregator/internal/registry"
	"aggregator/internal/verify"
	"aggregator/internal/windowing"
)

// errDiffs is returned when verify found unexplained differences: exit 1.
var errDiffs = errors.New("unexplained differences")

// progressEvery is how often the progress line is redrawn, at most.
const progressEvery = 200 * time.Millisecond

func verifyCmd(ctx context.Context, args []string, env []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	path := fs.String("config", "", "config `FILE` of the deployment (YAML, docs/configuration.md); AGGREGATOR_* variables override its keys")
	from := fs.String("from", "", "read the input from the first record at or after `TIME` (RFC 3339, or a duration before now such as -24h); default: the earliest")
	to := fs.String("to", "", "read the input up to the records before `TIME` (RFC 3339, or a duration before now); default: the end offsets at start")
	maxDiffs := fs.Int("max-diffs", 20, "print at most `N` unexplained differences")
	if err := parseFlags(fs, args, stderr); err != nil {
		return ignoreHelp(err)
	}
	start := time.Now()
	rng := verify.Whole
	var err error
	if rng.From, err = parseTime(*from, start, math.MinInt64); err != nil {
		return fmt.Errorf("%w: verify: --from: %v", errUsage, err)
	}
	if rng.To, err = parseTime(*to, start, math.MaxInt64); err != nil {
		return fmt.Errorf("%w: verify: --to: %v", errUsage, err)
	}
	if rng.From >= rng.To {
		return fmt.Errorf("%w: verify: --from must be before --to", errUsage)
	}
	if *maxDiffs < 0 {
		return fmt.Errorf("%w: verify: --max-diffs %d: want 0 or more", errUsage, *maxDiffs)
	}
	cfg, err := loadConfig(fs, *path, env)
	if err != nil {
		return err
	}
	if err := cfg.ValidateKafka(); err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	v := &verifier{cfg: cfg, log: log, rng: rng, read: map[string]int64{}}
	if isTerminal(stderr) {
		v.progress = stderr
	}
	sum, diffs, err := v.run(ctx, *maxDiffs)
	if err != nil {
		return err
	}
	if len(sum.OtherVersions) > 0 {
		log.Warn().Interface("results_of_other_versions", sum.OtherVersions).
			Msg("the results topic holds results of config versions that are no live generation in the changelog (retired, their settings gone, or never stored): verify cannot recompute their windows and counts them apart, not as differences; a --from after the old generation retired leaves them out (docs/verify.md)")
	}
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	if err := enc.Encode(map[string]any{"summary": report{RecordsRead: v.read, Summary: sum}}); err != nil {
		return err
	}
	for _, d := range diffs {
		if err := enc.Encode(d); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if sum.Unexplained > 0 {
		return fmt.Errorf("verify: %d %w", sum.Unexplained, errDiffs)
	}
	return nil
}

// report is the summary line.
type report struct {
	RecordsRead map[string]int64 `json:"records_read"` // by topic
	verify.Summary
}

// parseTime reads a --from or --to: RFC 3339, or a negative duration
// from now; "" is none.
func parseTime(s string, now time.Time, none int64) (int64, error) {
	if s == "" {
		return none, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d > 0 {
			return 0, fmt.Errorf("%q: a duration is before now, and negative (-24h)", s)
		}
		return now.Add(d).UnixMilli(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q: want RFC 3339 (2026-12-01T00:00:00Z) or a negative duration (-24h)", s)
	}
	return t.UnixMilli(), nil
}

// verifier is one verify run: a client that reads, no group, no writes.
type verifier struct {
	cfg      config.Config
	log      zerolog.Logger
	rng      verify.Range
	cl       *kgo.Client
	read     map[string]int64 // records read by topic
	progress io.Writer        // the terminal, or nil
	drawn    time.Time        // when the progress line was last drawn
}

// generations reads the generations of every state partition's changelog
// (docs/changing-config.md) as `aggregator plan` does, read_committed, with no group:
// each one's version, state settings and cut-over. Nil when the changelog
// holds none (no changelog yet): every window is the config's.
func (v *verifier) generations(ctx context.Context) (*verify.Generations, error) {
	parts, err := readStatePartitions(ctx, v.cfg, v.log)
	if err != nil {
		return nil, fmt.Errorf("changelog %s: %w", v.cfg.State.ChangelogTopic, err)
	}
	g := &verify.Generations{}
	index := map[int64]int{}
	settings := map[int64]string{}
	for _, p := range parts {
		for _, sg := range p.res.Generations {
			if s, ok := settings[sg.Version]; ok && s != string(sg.Settings) {
				return nil, fmt.Errorf("changelog %s: generation %d has other state settings in partition %d than in another", v.cfg.State.ChangelogTopic, sg.Version, p.id)
			}
			settings[sg.Version] = string(sg.Settings)
		}
	}
	if len(settings) == 0 {
		return nil, nil
	}
	versions := slices.Sorted(maps.Keys(settings))
	for i, version := range versions {
		cfg := v.cfg // a changelog written before generations: its settings are not stored, the config's run it
		if s := settings[version]; s != "" {
			st, err := config.DecodeState([]byte(s))
			if err != nil {
				return nil, fmt.Errorf("changelog %s: generation %d's settings cannot be read by this release: %w", v.cfg.State.ChangelogTopic, version, err)
			}
			cfg = v.cfg.WithState(st)
		}
		index[version] = i
		g.Gens = append(g.Gens, verify.Generation{Version: version, Config: cfg})
	}
	for _, p := range parts {
		for int(p.id) >= len(g.Seams) {
			g.Seams = append(g.Seams, nil)
		}
		for _, sg := range p.res.Generations {
			g.Seams[p.id] = append(g.Seams[p.id], verify.Seam{Gen: index[sg.Version], Cutover: sg.Cutover})
		}
	}
	if newest := versions[len(versions)-1]; v.cfg.State.ConfigVersion > newest {
		v.log.Warn().Int64("config_version", v.cfg.State.ConfigVersion).Int64("newest_generation", newest).
			Msg("the config's state.config_version is not in the changelog yet (no instance has run it): verify recomputes the generations the changelog holds, under their own settings")
	}
	if !v.cfg.Source.ByKey() {
		// Stage 1's choice: the repartition partitioner of the group key,
		// over the repartition topic's partitions (one changelog
		// partition each).
		n := v.cfg.State.RepartitionPartitions
		if n == 0 {
			n = int32(len(parts))
		}
		keys := kgo.StickyKeyPartitioner(nil).ForTopic(v.cfg.State.RepartitionTopic)
		g.Partition = func(key string) int32 { return producer.RepartitionPartition(keys, []byte(key), n) }
	}
	return g, nil
}

// span is the offsets read of a partition: [start, end).
type span struct{ start, end int64 }

func (v *verifier) run(ctx context.Context, maxDiffs int) (verify.Summary, []verify.Diff, error) {
	opts, err := cluster.ClientOpts(v.cfg.Source, v.log, "kafka_verify")
	if err != nil {
		return verify.Summary{}, nil, err
	}
	// read_committed; control records kept, so that a partition whose
	// last offset is a transaction marker is seen to be read to its end.
	// Fetches of at most 4 MiB: the records in hand are a small part of
	// what verify holds (the windows compared).
	watch := cluster.NewAuthWatch(v.cfg.Source)
	opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(4<<20), kgo.FetchMaxPartitionBytes(1<<20), kgo.WithHooks(watch))
	if v.cl, err = kgo.NewClient(opts...); err != nil {
		return verify.Summary{}, nil, fmt.Errorf("kafka client: %w", err)
	}
	defer v.cl.Close()
	adm := kadm.NewClient(v.cl)
	// Where to read, with run's retries: brokers not reachable yet are
	// retried with backoff, refused credentials, denied ACLs and missing
	// topics are not.
	var inputs, outputs map[string]map[int32]span
	sink := v.cfg.Sink
	err = cluster.Retry(ctx, v.log, "list the topics' offsets", watch, func(ctx context.Context) error {
		if _, err := cluster.InputPartitions(ctx, adm, v.cfg.Source.Topics); err != nil {
			return err
		}
		var err error
		if inputs, err = v.inputSpans(ctx, adm); err != nil {
			return err
		}
		topics := []string{sink.ResultsTopic, sink.LateTopic}
		if sink.DeadLetterTopic != "" { // none: dead letters are only counted
			topics = append(topics, sink.DeadLetterTopic)
		}
		outputs, err = v.spans(ctx, adm, nil, topics...)
		return err
	})
	if err != nil {
		return verify.Summary{}, nil, err
	}
	var reg *registry.Client
	if v.cfg.UsesRegistry() {
		if reg, err = registry.New(v.cfg.Source.SchemaRegistry, v.log, prometheus.NewRegistry()); err != nil {
			return verify.Summary{}, nil, err
		}
	}
	// Dense state ids: the partitions of the input topics one after
	// another, in source.topics order, as the service numbers them.
	ids := map[string]map[int32]int32{}
	var assigned []int32
	var base int32
	for _, topic := range v.cfg.Source.Topics {
		ids[topic] = map[int32]int32{}
		ps := partitionsOfSpans(inputs[topic])
		for _, p := range ps {
			ids[topic][p] = base + p
			if s := inputs[topic][p]; s.start < s.end {
				assigned = append(assigned, base+p)
			}
		}
		if len(ps) > 0 {
			base += slices.Max(ps) + 1
		}
	}
	gens, err := v.generations(ctx)
	if err != nil {
		return verify.Summary{}, nil, err
	}
	// One recomputation per generation; one only when a generation owns
	// every window (the config's, when the changelog holds none).
	cfgs := []config.Config{v.cfg}
	switch {
	case gens != nil && gens.Trivial():
		cfgs[0] = gens.Gens[0].Config
	case gens != nil:
		cfgs = cfgs[:0]
		vs := make([]int64, len(gens.Gens))
		for i, g := range gens.Gens {
			cfgs = append(cfgs, g.Config)
			vs[i] = g.Version
		}
		v.log.Info().Ints64("generations", vs).Msg("verify recomputes each window under the generation that owns it in the changelog")
	}
	engs := make([]*recompute.Engine, len(cfgs))
	for i, cfg := range cfgs {
		if engs[i], err = recompute.New(cfg, reg, assigned); err != nil {
			return verify.Summary{}, nil, err
		}
	}
	cmp, err := verify.NewGenerations(v.cfg, gens, engs[0].Schemas(), len(assigned), v.rng, maxDiffs)
	if err != nil {
		return verify.Summary{}, nil, err
	}
	inRange := func(src verify.Source) bool {
		s, ok := inputs[src.Topic][src.Partition]
		return ok && s.start <= src.Offset && src.Offset < s.end
	}
	// What the deployment wrote first, then the input, streamed.
	err = v.consume(ctx, map[string]map[int32]span{sink.ResultsTopic: outputs[sink.ResultsTopic]}, func(r *kgo.Record) error {
		var version []byte
		for _, h := range r.Headers {
			if h.Key == producer.HeaderConfigVersion {
				version = h.Value
			}
		}
		return cmp.FoundResult(r.Key, r.Value, version)
	})
	if err != nil {
		return verify.Summary{}, nil, err
	}
	err = v.consume(ctx, map[string]map[int32]span{sink.LateTopic: outputs[sink.LateTopic]}, func(r *kgo.Record) error {
		l, ok := lateOf(r)
		if ok && inRange(l.Source) {
			cmp.FoundLate(l)
		}
		return nil
	})
	if err != nil {
		return verify.Summary{}, nil, err
	}
	// Without a dead-letter topic, outputs holds none and nothing is read.
	err = v.consume(ctx, map[string]map[int32]span{sink.DeadLetterTopic: outputs[sink.DeadLetterTopic]}, func(r *kgo.Record) error {
		if src, ok := sourceOf(r); ok && inRange(src) {
			cmp.FoundDeadLetter(src)
		}
		return nil
	})
	if err != nil {
		return verify.Summary{}, nil, err
	}
	one := gens == nil || gens.Trivial() // one generation owns every window: compared as they come
	var in ready.Input
	rds := make([]ready.Ready, len(engs))
	err = v.consume(ctx, inputs, func(r *kgo.Record) error {
		in = ready.Input{Topic: r.Topic, Partition: ids[r.Topic][r.Partition], KafkaPartition: r.Partition,
			Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli()}
		if one {
			rd, err := engs[0].Process(ctx, &in)
			if err != nil {
				return err
			}
			cmp.Record(&in, &rd, engs[0].PartitionWatermark(in.Partition))
			return nil
		}
		wm := int64(math.MaxInt64)
		for i, eng := range engs {
			var err error
			if rds[i], err = eng.Process(ctx, &in); err != nil {
				return err
			}
			wm = min(wm, eng.PartitionWatermark(in.Partition))
		}
		cmp.RecordGenerations(&in, rds, wm)
		return nil
	})
	if err != nil {
		return verify.Summary{}, nil, err
	}
	if v.progress != nil {
		fmt.Fprintf(v.progress, "\rverify: %s\n", v.progressLine())
	}
	open := 0
	for _, eng := range engs {
		open += eng.OpenWindows()
	}
	return cmp.Finish(watermarkOf(engs), open), cmp.Diffs(), nil
}

// watermarkOf is the lowest watermark of the recomputations: the same in
// each unless their filters differ (docs/verify.md).
func watermarkOf(engs []*recompute.Engine) int64 {
	wm := engs[0].Watermark()
	for _, eng := range engs[1:] {
		wm = min(wm, eng.Watermark())
	}
	return wm
}

// inputSpans are the input partitions' offsets in the range: from the
// earliest (or the first at or after --from) to the end at start (or the
// first at or after --to), read_committed.
func (v *verifier) inputSpans(ctx context.Context, adm *kadm.Client) (map[string]map[int32]span, error) {
	var starts kadm.ListedOffsets
	var err error
	if v.rng.From != math.MinInt64 {
		starts, err = listed(adm.ListOffsetsAfterMilli(ctx, v.rng.From, v.cfg.Source.Topics...))
	} else {
		starts, err = listed(adm.ListStartOffsets(ctx, v.cfg.Source.Topics...))
	}
	if err != nil {
		return nil, fmt.Errorf("the input's start offsets: %w", err)
	}
	spans, err := v.spans(ctx, adm, starts, v.cfg.Source.Topics...)
	if err != nil || v.rng.To == math.MaxInt64 {
		return spans, err
	}
	ends, err := listed(adm.ListOffsetsAfterMilli(ctx, v.rng.To, v.cfg.Source.Topics...))
	if err != nil {
		return nil, fmt.Errorf("the input's offsets at --to: %w", err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := spans[o.Topic][o.Partition]; ok && o.Offset >= 0 {
			s.end = max(s.start, min(s.end, o.Offset))
			spans[o.Topic][o.Partition] = s
		}
	})
	return spans, nil
}

// spans are topics' partitions from starts (nil: their start offsets) to
// their last stable offsets now.
func (v *verifier) spans(ctx context.Context, adm *kadm.Client, starts kadm.ListedOffsets, topics ...string) (map[string]map[int32]span, error) {
	var err error
	if starts == nil {
		if starts, err = listed(adm.ListStartOffsets(ctx, topics...)); err != nil {
			return nil, err
		}
	}
	ends, err := listed(adm.ListCommittedOffsets(ctx, topics...))
	if err != nil {
		return nil, err
	}
	out := map[string]map[int32]span{}
	for _, t := range topics {
		out[t] = map[int32]span{}
	}
	ends.Each(func(o kadm.ListedOffset) {
		s := span{end: o.Offset}
		if st, ok := starts.Lookup(o.Topic, o.Partition); ok {
			s.start = min(st.Offset, o.Offset)
		}
		out[o.Topic][o.Partition] = s
	})
	return out, nil
}

// listed is a listing of offsets, or its error: for topics that do not
// exist, one wrapping cluster.ErrTopicsMissing that names them (not
// retried; exit 2).
func listed(ls kadm.ListedOffsets, err error) (kadm.ListedOffsets, error) {
	if err == nil {
		err = ls.Error()
	}
	if err == nil {
		return ls, nil
	}
	var missing []string
	ls.Each(func(o kadm.ListedOffset) {
		if o.Partition == -1 && errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			missing = append(missing, o.Topic)
		}
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("%w: %s", cluster.ErrTopicsMissing, strings.Join(missing, ", "))
	}
	return nil, fmt.Errorf("list offsets: %w", err)
}

func partitionsOfSpans(m map[int32]span) []int32 {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// consume reads the spans read_committed, with no group, and hands fn
// each record in offset order per partition.
func (v *verifier) consume(ctx context.Context, spans map[string]map[int32]span, fn func(*kgo.Record) error) error {
	offsets := map[string]map[int32]kgo.Offset{}
	ends := map[string]map[int32]int64{} // the partitions not read to their end yet
	left := 0
	for t, ps := range spans {
		ends[t] = map[int32]int64{}
		for p, s := range ps {
			if s.start < s.end {
				ends[t][p] = s.end
				if offsets[t] == nil {
					offsets[t] = map[int32]kgo.Offset{}
				}
				offsets[t][p] = kgo.NewOffset().At(s.start)
				left++
			}
		}
	}
	if left == 0 {
		return nil
	}
	v.cl.AddConsumePartitions(offsets)
	defer v.cl.PurgeTopicsFromConsuming(slices.Collect(func(yield func(string) bool) {
		for t := range offsets {
			if !yield(t) {
				return
			}
		}
	})...)
	for left > 0 {
		fs := v.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		fs.EachError(func(topic string, p int32, e error) {
			if err == nil && !errors.Is(e, context.Canceled) {
				err = fmt.Errorf("read %s partition %d: %w", topic, p, e)
			}
		})
		if err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := ends[r.Topic][r.Partition]
			if err != nil || !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				left--
				delete(ends[r.Topic], r.Partition) // done: later records are past the range
			}
			if r.Attrs.IsControl() {
				return
			}
			v.read[r.Topic]++
			err = fn(r)
		})
		if err != nil {
			return err
		}
		if v.progress != nil && time.Since(v.drawn) >= progressEvery { // once a fetch, not a record
			v.drawn = time.Now()
			fmt.Fprintf(v.progress, "\rverify: %s", v.progressLine())
		}
	}
	return nil
}

// progressLine is records read per topic.
func (v *verifier) progressLine() string {
	var b strings.Builder
	for i, t := range slices.Sorted(func(yield func(string) bool) {
		for t := range v.read {
			if !yield(t) {
				return
			}
		}
	}) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", t, v.read[t])
	}
	return b.String() + " records read"
}

// header returns a record's header value.
func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func headerInt(r *kgo.Record, key string) (int64, bool) {
	s, ok := header(r, key)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// sourceOf is a late event's or dead letter's source, from its headers.
func sourceOf(r *kgo.Record) (verify.Source, bool) {
	topic, ok1 := header(r, producer.HeaderSourceTopic)
	p, ok2 := headerInt(r, producer.HeaderSourcePartition)
	off, ok3 := headerInt(r, producer.HeaderSourceOffset)
	return verify.Source{Topic: topic, Partition: int32(p), Offset: off}, ok1 && ok2 && ok3
}

// lateOf is a late event, from its headers.
func lateOf(r *kgo.Record) (verify.Late, bool) {
	src, ok := sourceOf(r)
	t, ok1 := headerInt(r, producer.HeaderEventTime)
	wm, ok2 := headerInt(r, producer.HeaderWatermark)
	ws, ok3 := headerInt(r, producer.HeaderWindowStart)
	we, ok4 := headerInt(r, producer.HeaderWindowEnd)
	return verify.Late{Source: src, EventTime: t, Watermark: wm, Missed: windowing.Window{Start: ws, End: we}},
		ok && ok1 && ok2 && ok3 && ok4
}
