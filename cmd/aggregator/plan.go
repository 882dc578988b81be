package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// planCmd is `aggregator plan`: what the config would do to each state
// partition (docs/changing-config.md), read from the changelog, changing nothing.
func planCmd(ctx context.Context, args []string, env []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	path := fs.String("config", "", "config `FILE` (YAML, docs/configuration.md); AGGREGATOR_* variables override its keys")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up connecting and reading the changelog after `DURATION`")
	if err := parseFlags(fs, args, stderr); err != nil {
		return ignoreHelp(err)
	}
	cfg, err := loadConfig(fs, *path, env)
	if err != nil {
		return err
	}
	if err := cfg.ValidateKafka(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	log := newLogger(cfg.Log, stderr) // stdout holds the plan
	parts, err := readStatePartitions(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	return printPlan(cfg, parts, stdout)
}

// statePartition is what plan read of one changelog partition.
type statePartition struct {
	id  int32
	res state.Result
	// seen is a lower bound of the latest event time in the partition's
	// state: its generator's maximum, or the latest window start.
	seen int64
	// keyFields are the field names of a group key in the partition's
	// entries (nil: none read), for a changelog written before
	// generations, whose identity is not stored.
	keyFields []string
	// fit is why this config cannot restore the windows of a changelog
	// written before generations ("" if it can).
	fit string
}

// empty reports whether the partition holds no window state.
func (p *statePartition) empty() bool { return len(p.res.Generations) == 0 }

// readStatePartitions reads every partition of the changelog topic from
// its start to its last stable offset (read_committed), with a client
// that joins no group. A missing changelog topic is a state with no
// partitions.
func readStatePartitions(ctx context.Context, cfg config.Config, log zerolog.Logger) ([]*statePartition, error) {
	topic := cfg.State.ChangelogTopic
	opts, err := cluster.ClientOpts(cfg.Source, log, "kafka_plan")
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", topic, err)
	}
	if td, ok := topics[topic]; !ok || td.Err != nil {
		return nil, nil
	}
	lsos, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("last stable offsets of %s: %w", topic, err)
	}
	var parts []*statePartition
	restorers := map[int32]*state.Restorer{}
	end, from := map[int32]int64{}, map[int32]kgo.Offset{}
	lsos.Each(func(o kadm.ListedOffset) {
		parts = append(parts, &statePartition{id: o.Partition})
		restorers[o.Partition] = state.NewRestorer()
		if o.Err == nil && o.Offset > 0 {
			end[o.Partition], from[o.Partition] = o.Offset, kgo.NewOffset().AtStart()
		}
	})
	if err := lsos.Error(); err != nil {
		return nil, fmt.Errorf("last stable offsets of %s: %w", topic, err)
	}
	slices.SortFunc(parts, func(a, b *statePartition) int { return int(a.id - b.id) })
	if len(from) > 0 {
		cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
	}
	for len(end) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("read %s[%d]: %w", t, p, err)) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			e, ok := end[r.Partition]
			if !ok || ferr != nil {
				return
			}
			if r.Offset+1 >= e {
				delete(end, r.Partition)
			}
			if r.Offset >= e || r.Attrs.IsControl() {
				return
			}
			var tag []byte
			for _, h := range r.Headers {
				if h.Key == state.TagHeader {
					tag = h.Value
				}
			}
			if err := restorers[r.Partition].Add(r.Key, r.Value, tag); err != nil {
				ferr = fmt.Errorf("%s[%d] offset %d: %w", topic, r.Partition, r.Offset, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
	}
	for _, p := range parts {
		if err := p.finish(cfg, restorers[p.id]); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", topic, p.id, err)
		}
	}
	return parts, nil
}

// finish restores the partition read into r: its generations, and, for a
// changelog written before generations, whether this config's window
// operator takes its windows (the check run's restore makes).
func (p *statePartition) finish(cfg config.Config, r *state.Restorer) error {
	op, err := windowing.New(pipeline.WindowSpec(cfg), discard{})
	if err != nil {
		return err
	}
	dropped := int64(math.MinInt64)
	if pos, ok := r.Position(); ok {
		dropped = max(pos.Merged, pos.Floor)
		p.seen = pos.Latest()
	}
	slots, err := windowing.NewSlots(pipeline.WindowSpec(cfg).Aggregates)
	if err != nil {
		return err
	}
	var fitErr error
	res, err := r.FinishGenerations(func(gen int64, en *windowing.Entry) error {
		p.seen = max(p.seen, en.Start)
		if p.keyFields == nil {
			p.keyFields = keyFields(en.ID[en.Split:])
		}
		switch {
		case fitErr != nil:
		case en.Partition != p.id:
			fitErr = fmt.Errorf("changelog partition of %d holds an entry of partition %d (were the input topics changed?)", p.id, en.Partition)
		default:
			if fitErr = slots.Unrecorded(en); fitErr == nil {
				fitErr = op.Restore(en, dropped)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.res = res
	if fitErr != nil {
		p.fit = fitErr.Error()
	}
	return nil
}

// keyFields returns the field names of a group key's JSON ({"sid":"a"}),
// in order, or nil if it is not a JSON object.
func keyFields(key string) []string {
	dec := json.NewDecoder(strings.NewReader(key))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	fields := []string{}
	for dec.More() {
		t, err := dec.Token()
		name, ok := t.(string)
		if err != nil || !ok {
			return nil
		}
		fields = append(fields, name)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
	}
	return fields
}

// discard is a windowing.Sink that keeps nothing: plan fires nothing it
// shows.
type discard struct{}

func (discard) Emit(*windowing.Result) {}

// printPlan writes what cfg would do to each partition and returns an
// error wrapping config.ErrInvalid when a partition refuses it.
func printPlan(cfg config.Config, parts []*statePartition, w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "plan: group %s, changelog %s, state.config_version %d\n", cfg.Source.Group, cfg.State.ChangelogTopic, cfg.State.ConfigVersion)
	if len(parts) == 0 {
		fmt.Fprintf(&b, "no changelog topic yet: every state partition starts with this config as generation %d\n", cfg.State.ConfigVersion)
	}
	refused := 0
	for _, p := range parts {
		line, ok := planPartition(cfg, p)
		if !ok {
			refused++
		}
		fmt.Fprintf(&b, "partition %d: %s\n", p.id, line)
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	if refused > 0 {
		return fmt.Errorf("%w: plan: %d of %d state partitions refuse this config (see above); nothing was changed", config.ErrInvalid, refused, len(parts))
	}
	return nil
}

// planPartition describes what cfg would do to p, and reports whether
// cfg can run there.
func planPartition(cfg config.Config, p *statePartition) (string, bool) {
	if p.empty() {
		return fmt.Sprintf("no windows in state: starts generation %d", cfg.State.ConfigVersion), true
	}
	gens := p.res.Generations
	newest := gens[len(gens)-1]
	live := ""
	if len(gens) > 1 {
		vs := make([]string, len(gens))
		for i, g := range gens {
			vs[i] = fmt.Sprint(g.Version)
		}
		live = fmt.Sprintf(" (live generations %s)", strings.Join(vs, ", "))
	}
	if !newest.Known() {
		return planUnrecorded(cfg, p)
	}
	plan, err := cfg.PlanAgainst(&config.Stored{Version: newest.Version, State: newest.Settings, Identity: newest.Identity, Run: newest.Run})
	if err != nil {
		return fmt.Sprintf("refused: generation %d's settings cannot be read by this release: %v", newest.Version, err), false
	}
	if err := pipeline.Refusal(cfg, plan, len(gens)); err != nil {
		return "refused: " + err.Error(), false
	}
	switch plan.Verdict {
	case config.Nothing:
		return fmt.Sprintf("nothing: the settings of generation %d%s", newest.Version, live), true
	case config.RunSettingsChange:
		return fmt.Sprintf("run settings: %s, applied to every window of generation %d%s from the restart on", changes(plan.Run), newest.Version, live), true
	case config.Older:
		return fmt.Sprintf("older: state.config_version %d is below generation %d's: the partition runs generation %d%s, logged at warn", cfg.State.ConfigVersion, newest.Version, newest.Version, live), true
	case config.NewGeneration:
		line := fmt.Sprintf("new generation %d (%s), cut-over %s; generation %d%s finishes its windows that start before it", cfg.State.ConfigVersion, changes(plan.Changes), cutover(cfg, p), newest.Version, live)
		if len(plan.Run) > 0 {
			line += "; run settings: " + changes(plan.Run)
		}
		return line, true
	}
	return "refused: " + plan.Refusal.Error(), false
}

// planUnrecorded is planPartition for a changelog written before
// generations: its settings are not stored, so what plan can compare is
// the group key's fields and whether this config restores its windows.
func planUnrecorded(cfg config.Config, p *statePartition) (string, bool) {
	if want := cfg.Source.Key; p.keyFields != nil && !slices.Equal(p.keyFields, want) {
		return fmt.Sprintf("refused: source.key: the state's group keys have the fields [%s], this config [%s]: a new key is a new aggregation; run it as a new source.group, or change it back",
			strings.Join(p.keyFields, ","), strings.Join(want, ",")), false
	}
	if p.fit != "" {
		return fmt.Sprintf("refused: written before generations (its settings are not stored), and this config's windows do not take its state (%s), so run would fail its restore: "+
			"keep the config that wrote it until a release that cuts over has run it (it records its settings), then change it; or run this config as a new source.group", p.fit), false
	}
	return fmt.Sprintf("written before generations: its windows fit this config (window kind, boundaries, aggregate slots), which runs them as generation %d; "+
		"plan cannot tell a change that keeps that layout (another filter, sum -> max)", cfg.State.ConfigVersion), true
}

// cutover describes where the new generation's cut-over falls.
func cutover(cfg config.Config, p *statePartition) string {
	spec := pipeline.WindowSpec(cfg)
	after := p.seen
	if after < math.MaxInt64 {
		after++
	}
	if t, ok := cfg.State.CutoverMillis(); ok {
		if t >= after {
			return "T = " + formatMillis(spec.CutoverStart(t)) + " (state.cutover)"
		}
		return fmt.Sprintf("T at %s at the earliest: the partition has seen event times past state.cutover, so it takes its own T (logged at warn)", formatMillis(spec.CutoverStart(after)))
	}
	return "T at " + formatMillis(spec.CutoverStart(after)) + " at the earliest (the first window start after the latest event time in state)"
}

func formatMillis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func changes(cs []config.Change) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}
