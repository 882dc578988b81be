package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/state"
)

// TestPlan: plan against a changelog that run wrote (before generations:
// one generation of unknown settings), then against the same changelog
// with generation records written through the state codec, for each
// verdict; it changes nothing (the changelog's offsets stay where they
// were, and no group is made).
func TestPlan(t *testing.T) {
	t.Parallel() // its own broker; mostly waits on run's commits
	ctx, stop := context.WithTimeout(t.Context(), 2*time.Minute)
	defer stop()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "calls"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	addr := kc.ListenAddrs()[0]
	env := []string{"AGGREGATOR_SOURCE_BROKERS=" + addr, "AGGREGATOR_HTTP_LISTEN=:0"}
	const example = "../../examples/local.yaml"

	plan := func(t *testing.T, cfgPath string, extra ...string) (string, error) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := run(ctx, []string{"plan", "--config", cfgPath}, append(append([]string{}, env...), extra...), nil, &stdout, &stderr)
		return stdout.String(), err
	}
	// No changelog yet.
	out, err := plan(t, example)
	if err != nil || !strings.Contains(out, "no changelog topic yet: every state partition starts with this config as generation 0") {
		t.Fatalf("plan before any run = %v:\n%s", err, out)
	}

	// run writes a changelog, as the release before generations did.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("calls"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range 40 {
		line := fmt.Sprintf("sid_%d,success,2030-12-01 10:10:%02d,%d", i%4, i, i)
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("sid_%d", i%4)), Value: []byte(line)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	out1 := new(lockedBuffer)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, []string{"run", "--config", example}, env, nil, out1, out1) }()
	adm := kadm.NewClient(cl)
	const changelog = "calls-local-changelog"
	for {
		lsos, err := adm.ListCommittedOffsets(ctx, changelog)
		n := int64(0)
		lsos.Each(func(o kadm.ListedOffset) { n += o.Offset })
		if err == nil && n > 8 && len(lsos[changelog]) == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no changelog written:\n%s", out1.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	waitFor(t, ctx, out1, regexp.MustCompile(`(INF ready)`))
	stopRun()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out1.String())
	}
	// run records its generation (version 0); a changelog written before
	// generations has no such record: delete them, in a commit of their
	// own (the tombstones and a position under the next tag).
	{
		cfg, err := config.Load(example, lookupEnv(env))
		if err != nil {
			t.Fatal(err)
		}
		parts, err := readStatePartitions(ctx, cfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for _, p := range parts {
			if len(p.res.Generations) != 1 || !p.res.Generations[0].Known() {
				t.Fatalf("partition %d: run wrote generations %+v, want its one generation's record", p.id, p.res.Generations)
			}
			tag := p.res.NextTag
			recs = append(recs,
				&kgo.Record{Topic: changelog, Partition: p.id, Key: state.GenerationKey(nil, p.id, 0),
					Headers: []kgo.RecordHeader{{Key: state.TagHeader, Value: state.AppendTag(nil, tag)}}},
				&kgo.Record{Topic: changelog, Partition: p.id, Key: state.PositionKey(nil, p.id), Value: state.AppendPosition(nil, p.res.Position, tag)})
		}
		wcl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		if err := wcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		wcl.Close()
	}
	ends := func() string {
		lsos, err := adm.ListEndOffsets(ctx, changelog)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(lsos)
	}
	before := ends()
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	// variant writes local.yaml with old replaced by new.
	variant := func(t *testing.T, old, new string) string {
		t.Helper()
		data, err := os.ReadFile(example)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte(old)) {
			t.Fatalf("%s has no %q", example, old)
		}
		path := filepath.Join(dir, fmt.Sprintf("%d.yaml", time.Now().UnixNano()))
		if err := os.WriteFile(path, bytes.Replace(data, []byte(old), []byte(new), 1), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const aggs = "  - {name: total_duration, fn: sum, field: duration}\n"
	moreAggs := aggs + "  - {name: longest, fn: max, field: duration}\n"

	check := func(t *testing.T, out string, err error, refused bool, want ...string) {
		t.Helper()
		if got := errors.Is(err, config.ErrInvalid); got != refused || !refused && err != nil {
			t.Errorf("plan = %v, want refused %v:\n%s", err, refused, out)
		}
		if refused && exitCode(err) != 2 {
			t.Errorf("exit %d, want 2", exitCode(err))
		}
		for _, w := range want {
			if !regexp.MustCompile(w).MatchString(out) {
				t.Errorf("plan's output:\n%s\nwant a match of %q", out, w)
			}
		}
	}

	t.Run("before generations", func(t *testing.T) {
		out, err := plan(t, example)
		check(t, out, err, false, `(?m)^partition 0: written before generations: its windows fit this config .* as generation 0`,
			`(?m)^partition 1: written before generations`)
		// A quantile more: the slices have no sketch for it.
		out, err = plan(t, variant(t, aggs, aggs+"  - {name: p99, fn: quantile, field: duration, q: 0.99}\n"))
		check(t, out, err, true, `(?m)^partition \d: refused: written before generations .*aggregate slots.*new source.group`)
		// A max after the sum: the slices' sum and its value counter
		// would read as the sum and the max (issue 37).
		out, err = plan(t, variant(t, aggs, moreAggs))
		check(t, out, err, true, `(?m)^partition \d: refused: written before generations .*aggregate slots.*no value counters.*new source.group`)
		out, err = plan(t, example, "AGGREGATOR_SOURCE_KEY=callType")
		check(t, out, err, true, `(?m)^partition \d: refused: source.key: the state's group keys have the fields \[sid\], this config \[callType\]`)
	})

	// The wiring's first run records the generation the old changelog
	// holds: a generation record per partition, with the config's settings.
	cfg, err := config.Load(example, lookupEnv(append([]string{"AGGREGATOR_STATE_CONFIG_VERSION=3"}, env...)))
	if err != nil {
		t.Fatal(err)
	}
	parts, err := readStatePartitions(ctx, cfg, zerolog.Nop())
	if err != nil || len(parts) != 2 {
		t.Fatalf("readStatePartitions = %d partitions, %v", len(parts), err)
	}
	var gens []*kgo.Record
	for _, p := range parts {
		tag := p.res.NextTag
		g := state.Generation{Version: 3, Cutover: state.NoCutover, LegacyKeys: true,
			Settings: cfg.StateSettings().Encode(), Identity: cfg.IdentitySettings().Encode(), Run: cfg.RunSettings().Encode()}
		gens = append(gens,
			&kgo.Record{Topic: changelog, Partition: p.id, Key: state.GenerationKey(nil, p.id, 3), Value: state.AppendGeneration(nil, g, tag)},
			&kgo.Record{Topic: changelog, Partition: p.id, Key: state.PositionKey(nil, p.id), Value: state.AppendPosition(nil, p.res.Position, tag)})
	}
	wcl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer wcl.Close()
	if err := wcl.ProduceSync(ctx, gens...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	before = ends()

	tests := map[string]struct {
		path    string
		env     []string
		refused bool
		want    string
	}{
		"nothing":        {example, []string{"AGGREGATOR_STATE_CONFIG_VERSION=3"}, false, `nothing: the settings of generation 3`},
		"nothing, later": {example, []string{"AGGREGATOR_STATE_CONFIG_VERSION=4"}, false, `nothing: the settings of generation 3`},
		"run settings":   {example, []string{"AGGREGATOR_STATE_CONFIG_VERSION=3", "AGGREGATOR_WINDOW_ALLOWED_LATENESS=0s"}, false, `run settings: window.allowed_lateness: 2s -> 0s, applied to every window of generation 3`},
		"new generation": {example, []string{"AGGREGATOR_STATE_CONFIG_VERSION=4", "AGGREGATOR_WINDOW_SIZE=1m"}, false,
			`new generation 4 \(window.size: 5s -> 1m\), cut-over T at 2030-12-01T10:11:00.000Z at the earliest .*; generation 3 finishes its windows that start before it`},
		"state.cutover": {example, []string{"AGGREGATOR_STATE_CONFIG_VERSION=4", "AGGREGATOR_WINDOW_SIZE=1m", "AGGREGATOR_STATE_CUTOVER=2030-12-01T11:00:30Z"}, false,
			`cut-over T = 2030-12-01T11:01:00.000Z \(state.cutover\)`},
		"state.cutover passed": {example, []string{"AGGREGATOR_STATE_CONFIG_VERSION=4", "AGGREGATOR_WINDOW_SIZE=1m", "AGGREGATOR_STATE_CUTOVER=2030-12-01T09:00:00Z"}, false,
			`the partition has seen event times past state.cutover, so it takes its own T`},
		"new aggregate":  {variant(t, aggs, moreAggs), []string{"AGGREGATOR_STATE_CONFIG_VERSION=4"}, false, `new generation 4 \(aggregates\[1\] added \(\{name: longest, fn: max, field: duration\}\)\)`},
		"equal version":  {variant(t, aggs, moreAggs), []string{"AGGREGATOR_STATE_CONFIG_VERSION=3"}, true, `refused: state.config_version = "3": the state's newest generation has this version and other state settings \(aggregates\[1\] added .*\): raise state.config_version`},
		"lower version":  {example, []string{"AGGREGATOR_STATE_CONFIG_VERSION=2", "AGGREGATOR_WINDOW_SIZE=1m"}, false, `older: state.config_version 2 is below generation 3's: the partition runs generation 3`},
		"key changed":    {example, []string{"AGGREGATOR_STATE_CONFIG_VERSION=9", "AGGREGATOR_SOURCE_KEY=callType"}, true, `refused: source.key = "\[callType\]": changed against a non-empty state \(source.key: \[sid\] -> \[callType\]\)`},
		"filter changed": {variant(t, "    - {field: callType, equals: success}\n", "    - {field: callType, equals: failure}\n"), []string{"AGGREGATOR_STATE_CONFIG_VERSION=3"}, true, `refused: state.config_version .*source.filter: \[callType="success"\] -> \[callType="failure"\]`},
		"new filter": {variant(t, "    - {field: callType, equals: success}\n", "    - {field: callType, equals: failure}\n"), []string{"AGGREGATOR_STATE_CONFIG_VERSION=4"}, false,
			`new generation 4 \(source.filter: \[callType="success"\] -> \[callType="failure"\]\), cut-over T at`},
		"new filter, format 2": {variant(t, "    - {field: callType, equals: success}\n", "    - {field: callType, equals: failure}\n"), []string{"AGGREGATOR_STATE_CONFIG_VERSION=4", "AGGREGATOR_STATE_REPARTITION_FORMAT=2"}, true,
			`refused: source.filter = .*state.repartition_format is 2: stage 1 filters records`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := plan(t, tt.path, tt.env...)
			check(t, out, err, tt.refused, `(?m)^partition 0: .*`+tt.want, `(?m)^partition 1: .*`+tt.want)
		})
	}
	if after := ends(); after != before {
		t.Errorf("the changelog's end offsets moved: %s, then %s", before, after)
	}
	after, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(groups) {
		t.Errorf("groups before plan %v, after %v: plan joined a group", groups.Groups(), after.Groups())
	}
}

// TestPlanPartition: what plan says of a partition's generations, without
// a broker: several live generations, an identity change against a
// changelog written before generations, an empty partition.
func TestPlanPartition(t *testing.T) {
	cfg, err := config.Load("../../examples/local.yaml", lookupEnv([]string{"AGGREGATOR_STATE_CONFIG_VERSION=5", "AGGREGATOR_WINDOW_SIZE=1m"}))
	if err != nil {
		t.Fatal(err)
	}
	old, err := config.Load("../../examples/local.yaml", lookupEnv([]string{"AGGREGATOR_STATE_CONFIG_VERSION=4"}))
	if err != nil {
		t.Fatal(err)
	}
	gen := func(c config.Config, cutover int64) state.Generation {
		return state.Generation{Version: c.State.ConfigVersion, Cutover: cutover, Settings: c.StateSettings().Encode(),
			Identity: c.IdentitySettings().Encode(), Run: c.RunSettings().Encode()}
	}
	g3 := gen(old, state.NoCutover)
	g3.Version = 3
	tests := map[string]struct {
		p    statePartition
		ok   bool
		want string
	}{
		"empty": {statePartition{}, true, "no windows in state: starts generation 5"},
		"two live generations, the newest's settings": {statePartition{res: state.Result{Generations: []state.Generation{g3, gen(cfg, 1000)}}}, true,
			"nothing: the settings of generation 5 (live generations 3, 5)"},
		"two live generations, a new one": {statePartition{seen: 1_922_350_230_000, res: state.Result{Generations: []state.Generation{g3, gen(old, 1000)}}}, true,
			"new generation 5 (window.size: 5s -> 1m), cut-over T at 2030-12-01T10:11:00.000Z at the earliest (the first window start after the latest event time in state); generation 4 (live generations 3, 4) finishes its windows that start before it"},
		"before generations, another key": {statePartition{keyFields: []string{"caller"}, res: state.Result{Generations: []state.Generation{{LegacyKeys: true, Cutover: state.NoCutover}}}}, false,
			"refused: source.key: the state's group keys have the fields [caller], this config [sid]"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := planPartition(cfg, &tt.p)
			if ok != tt.ok || !strings.HasPrefix(got, tt.want) {
				t.Errorf("planPartition = %q, %v; want %q..., %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
