package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"golang.org/x/term"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
	"aggregator/internal/consumer"
	// Aliased: func demo, the subcommand main.go calls, takes the name.
	demopkg "aggregator/internal/demo"
)

// demoFlags are the options of `aggregator demo`.
type demoFlags struct {
	rate         float64
	keys         int
	partitions   int
	instances    int
	partitioning string
	duration     time.Duration
	lateFraction float64
	speed        float64
	seed         uint64
	listen       string
	brokers      string
	window       string
	format       string
	early        time.Duration
	changeAt     time.Duration
}

func parseDemoFlags(args []string, stderr io.Writer) (demoFlags, error) {
	var f demoFlags
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Float64Var(&f.rate, "rate", 50, "records per second to generate")
	fs.IntVar(&f.keys, "keys", 8, "distinct keys (sid_0, sid_1, ...)")
	fs.IntVar(&f.partitions, "partitions", 3, "partitions of the input and output topics")
	fs.IntVar(&f.instances, "instances", 1, "service instances to run in one group, sharing the input's partitions (at most --partitions)")
	fs.StringVar(&f.partitioning, "partitioning", partitionByKey, "source.partitioning: by_key (calls keyed by their sid, one stage), or repartition (calls keyed by a call id, so every sid is on every partition; the repartition stage brings each sid's calls together)")
	fs.DurationVar(&f.duration, "duration", 0, "stop after this long (0: run until Ctrl-C)")
	fs.Float64Var(&f.lateFraction, "late-fraction", 0.02, "share of records generated too late for their windows (late events, in the late topic; with --window session only those that join no open session of their key), and as many stragglers (late firings)")
	fs.Float64Var(&f.speed, "speed", 1, "event-time seconds per wall-clock second")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed of the generator")
	fs.StringVar(&f.listen, "listen", ":9090", "`address` of /metrics, /healthz and /readyz")
	fs.StringVar(&f.brokers, "brokers", "", "comma-separated `host:port` list of an existing cluster to use instead of the in-process one")
	fs.StringVar(&f.format, "format", "json", "input `format`: json, or avro (Confluent's wire format, with an in-process Schema Registry)")
	fs.StringVar(&f.window, "window", "tumbling", "window `type`: tumbling (5s), sliding (5s every 1s), session (500ms gap; retractions when late records merge sessions), global (a running total per key, every second), count (every 10 records of a key, or what it has 5s after the first) or calendar (days in Europe/Berlin, early results every second; the event clock runs an hour a second from 21:00 on 30 March 2030, so midnights pass and 31 March has 23 hours)")
	fs.DurationVar(&f.early, "early", 0, "early firings every `duration` of wall-clock time: results of open windows while they fill (0: off; global windows: 1s)")
	fs.DurationVar(&f.changeAt, "change-at", 0, "change the config this long into the run, as an upgrade does: every instance drains and starts again with 10s windows instead of 5s and one more aggregate (max_duration), at state.config_version 2; each partition cuts over to the new generation of windows, and the view shows each result's config version (0: no change; --window tumbling only)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return f, err
	}
	switch {
	case f.rate <= 0:
		return f, fmt.Errorf("%w: demo: --rate %v: must be positive", errUsage, f.rate)
	case f.keys < 1 || f.partitions < 1:
		return f, fmt.Errorf("%w: demo: --keys and --partitions must be at least 1", errUsage)
	case f.partitioning != partitionByKey && f.partitioning != partitionRepartition:
		return f, fmt.Errorf("%w: demo: --partitioning %q: want by_key or repartition", errUsage, f.partitioning)
	case f.instances < 1 || f.instances > f.partitions:
		return f, fmt.Errorf("%w: demo: --instances %d: must be from 1 to --partitions (%d): an instance without a partition does no work", errUsage, f.instances, f.partitions)
	case f.lateFraction < 0 || f.lateFraction > 0.5:
		return f, fmt.Errorf("%w: demo: --late-fraction %v: must be in [0, 0.5]", errUsage, f.lateFraction)
	case f.speed <= 0:
		return f, fmt.Errorf("%w: demo: --speed %v: must be positive", errUsage, f.speed)
	case f.format != "json" && f.format != config.FormatAvro:
		return f, fmt.Errorf("%w: demo: --format %q: want json or avro", errUsage, f.format)
	case demoWindows[f.window] == "":
		return f, fmt.Errorf("%w: demo: --window %q: want tumbling, sliding, session, global, count or calendar", errUsage, f.window)
	case f.window == "count" && f.early != 0:
		return f, fmt.Errorf("%w: demo: --early: count windows fire when full, not early", errUsage)
	case f.early < 0 || f.early%time.Millisecond != 0:
		return f, fmt.Errorf("%w: demo: --early %v: must be 0 or a positive whole number of milliseconds", errUsage, f.early)
	case f.changeAt < 0:
		return f, fmt.Errorf("%w: demo: --change-at %v: must be 0 (no change) or positive", errUsage, f.changeAt)
	case f.changeAt > 0 && f.window != "tumbling":
		return f, fmt.Errorf("%w: demo: --change-at: with --window tumbling only (it changes the windows' size)", errUsage)
	}
	return f, nil
}

// The demo's stream and pipeline settings (docs/configuration.md names).
const (
	demoWindow   = 5 * time.Second
	demoGap      = 500 * time.Millisecond // a key at the default rate pauses that long every 20 records or so
	demoOOO      = time.Second
	demoLateness = 2 * time.Second
	// demoIdle is the idle timeout: a partition of a loaded machine's
	// generator may get no record for seconds, and an idle partition does
	// not hold the watermark back, so the others' records could make its
	// next ones late: no shorter than demoReadSkew.
	demoIdle       = demoReadSkew
	demoInputTopic = "calls"
	// The --partitioning values (source.partitioning's names).
	partitionByKey       = "by_key"
	partitionRepartition = "repartition"
	// demoReadSkew is how far (wall clock) a consumer may read one
	// partition behind another without a too-late record being judged
	// against a watermark held back that far: a loaded machine (CI) stalls
	// a consumer for seconds, and it then reads the backlog partition by
	// partition. Too-late records start demoLateAfter in, and not before
	// every instance has a watermark (until a record of each partition it
	// holds is read, or with the repartition stage one of every source,
	// it is minus infinity: nothing is late).
	demoReadSkew  = 10 * time.Second
	demoLateAfter = time.Second
)

// demoWindows is the window block of each --window type (allowed
// lateness, emit mode and early firings are added: demoWindowBlock).
var demoWindows = map[string]string{
	"tumbling": fmt.Sprintf("type: tumbling, size: %s", demoWindow),
	"sliding":  fmt.Sprintf("type: sliding, size: %s, slide: %s", demoWindow, time.Second),
	"session":  fmt.Sprintf("type: session, gap: %s", demoGap),
	"global":   "type: global",
	"count":    "type: count, size: 10, timeout: 5s",
	"calendar": "type: tumbling, calendar: day, timezone: " + demoZone,
}

// With --window calendar the event clock starts at demoOrigin and runs
// demoDaySpeed times --speed: the first local midnight comes 3s in, and
// the day after it, the spring DST change, is 23 hours (23s).
const (
	demoZone         = "Europe/Berlin"
	demoDaySpeed     = 3600
	demoDayLateness  = time.Hour
	demoOriginLayout = "2006-01-02 15:04"
	demoOriginText   = "2030-03-30 21:00"
)

// demoOrigin is the calendar demo's first event time, in demoZone.
func demoOrigin() time.Time {
	zone, err := time.LoadLocation(demoZone)
	if err != nil { // time/tzdata is linked in
		panic(err)
	}
	t, err := time.ParseInLocation(demoOriginLayout, demoOriginText, zone)
	if err != nil {
		panic(err)
	}
	return t
}

// demoWindowBlock is the demo's window config: global windows have no
// lateness or emit mode, and fire every second unless --early says.
func demoWindowBlock(f demoFlags) string {
	block, early := demoWindows[f.window], f.early
	switch f.window {
	case "global":
		early = cmp.Or(early, time.Second)
	case "count": // nothing is late in a count window
	case "calendar": // a day fills for a while: show it filling
		early = cmp.Or(early, time.Second)
		block += fmt.Sprintf(", allowed_lateness: %s, emit: on_watermark", demoDayLateness)
	default:
		block += fmt.Sprintf(", allowed_lateness: %s, emit: on_watermark", demoLateness)
	}
	if early > 0 {
		block += fmt.Sprintf(", early_firings: {every: %s, time: processing}", early)
	}
	return block
}

// demoConfigYAML is the pipeline's config: the same schema, defaults and
// validation as a file given to `aggregator run`.
const demoConfigYAML = `
source:
  brokers: [%s]
  topics: [` + demoInputTopic + `]
  group: aggregator-demo
  start_offset: earliest
  format: %s
  key: [sid]
  partitioning: %s
  timestamp: {field: callTime, layout: "2006-01-02 15:04:05", timezone: UTC}
  filter: [{field: callType, equals: success}]
watermark:
  strategy: bounded
  max_out_of_orderness: %s
  idle_timeout: %s
  idle_advance: true
window: {%s}
aggregates:
  - {name: calls, fn: count}
  - {name: total_duration, fn: sum, field: duration}
  - {name: avg_duration, fn: avg, field: duration}
  - {name: p99_duration, fn: quantile, field: duration, q: 0.99}
sink:
  results_topic: calls-windows
  late_topic: calls-late
  dead_letter_topic: calls-dlq
  create_topics: true
  partitions: %d
  replication_factor: %d
delivery: exactly_once
http: {listen: %q}
log: {level: warn, format: console}
`

// What --change-at changes: the windows' size and one aggregate more, a
// new generation at the next state.config_version.
const (
	demoChangedWindow    = 10 * time.Second
	demoChangedAggregate = "{name: max_duration, fn: max, field: duration}"
)

// demoChangeText says what --change-at changes.
func demoChangeText(f demoFlags) string {
	return fmt.Sprintf("config change at %s: window.size %s -> %s, aggregates + max_duration (state.config_version 1 -> 2)", f.changeAt, demoWindow, demoChangedWindow)
}

// demoConfig is the pipeline's config; registryURL is the in-process
// Schema Registry's with --format avro. With --change-at it is the first
// of the two configs (demoConfigChanged the second).
func demoConfig(f demoFlags, brokers []string, replication int16, registryURL string) (config.Config, error) {
	return demoConfigOf(f, brokers, replication, registryURL, false)
}

// demoConfigChanged is the config --change-at changes to.
func demoConfigChanged(f demoFlags, brokers []string, replication int16, registryURL string) (config.Config, error) {
	return demoConfigOf(f, brokers, replication, registryURL, true)
}

// demoConfigOf is demoConfig, or with changed the config --change-at
// changes to. With --change-at both have a state.config_version (1,
// then 2).
func demoConfigOf(f demoFlags, brokers []string, replication int16, registryURL string, changed bool) (config.Config, error) {
	quoted := make([]string, len(brokers))
	for i, b := range brokers {
		quoted[i] = fmt.Sprintf("%q", b)
	}
	format := f.format
	if format == config.FormatAvro { // callTime is an Avro timestamp-millis: the layout does not apply to it
		format += fmt.Sprintf("\n  schema_registry: {url: %q}", registryURL)
	}
	partitioning := "by_key # the generator keys each call by its sid: one stage is enough"
	if f.partitioning == partitionRepartition {
		partitioning = "repartition # the generator keys each call by a call id: a sid is on every partition"
	}
	window := demoWindowBlock(f)
	if changed {
		window = strings.Replace(window, "size: "+demoWindow.String(), "size: "+demoChangedWindow.String(), 1)
	}
	text := fmt.Sprintf(demoConfigYAML, strings.Join(quoted, ", "), format, partitioning, demoOOO, demoIdle, window,
		f.partitions, replication, f.listen)
	if f.changeAt > 0 {
		version := 1
		if changed {
			version = 2
			text = strings.Replace(text, "\nsink:", "\n  - "+demoChangedAggregate+"\nsink:", 1)
		}
		text += fmt.Sprintf("state: {config_version: %d}\n", version)
	}
	// No AGGREGATOR_* overrides: the demo is the same on every machine.
	return config.Parse([]byte(text), func(string) string { return "" })
}

// demo is `aggregator demo`: Kafka (in-process unless --brokers), a
// synthetic stream, the real pipeline, and a live view of its output.
// Ctrl-C on the terminal of stdin stops it (watchCtrlC).
func demo(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	f, err := parseDemoFlags(args, stderr)
	if err != nil {
		return ignoreHelp(err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer watchCtrlC(stdin)()
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	kafka, err := startKafka(f)
	if err != nil {
		return err
	}
	defer kafka.close()
	registry, err := startRegistry(f)
	if err != nil {
		return err
	}
	defer registry.close()
	cfg, err := demoConfig(f, kafka.brokers, kafka.replication, registry.url)
	if err != nil {
		return fmt.Errorf("demo config: %w", err)
	}
	var next *config.Config // --change-at's
	if f.changeAt > 0 {
		changed, err := demoConfigChanged(f, kafka.brokers, kafka.replication, registry.url)
		if err != nil {
			return fmt.Errorf("demo config after --change-at: %w", err)
		}
		next = &changed
	}
	if registry.url != "" {
		kafka.where += " · in-process Schema Registry (srfake) at " + registry.url
	}
	log := newLogger(cfg.Log, stderr)
	created, err := createInput(ctx, cfg, int32(f.partitions), kafka.replication, log)
	if err != nil {
		return err
	}
	checkNote := demoCheckNote(f)
	if !created && checkNote == "" {
		checkNote = "none: topic " + demoInputTopic + " was there before, with what an earlier run left in it"
	}
	return runDemo(ctx, stop, f, cfg, next, kafka.where, registry.schemaID, checkNote, log, stdout)
}

// demoRegistry is the Schema Registry of --format avro: srfake, an
// in-memory registry speaking the real REST API, on a loopback port.
type demoRegistry struct {
	url      string
	schemaID uint32 // of demopkg.AvroSchema, registered under calls-value
	close    func()
}

func startRegistry(f demoFlags) (demoRegistry, error) {
	if f.format != config.FormatAvro {
		return demoRegistry{close: func() {}}, nil
	}
	reg := srfake.New()
	id, _, err := reg.RegisterSchema(demoInputTopic+"-value", sr.Schema{Schema: demopkg.AvroSchema, Type: sr.TypeAvro})
	if err != nil {
		reg.Close()
		return demoRegistry{}, fmt.Errorf("in-process schema registry: %w", err)
	}
	return demoRegistry{url: reg.URL(), schemaID: uint32(id), close: reg.Close}, nil
}

// demoKafka is the cluster the demo talks to.
type demoKafka struct {
	brokers     []string
	where       string // for the view
	replication int16
	close       func()
}

// startKafka starts kfake on a loopback port, or uses --brokers.
func startKafka(f demoFlags) (demoKafka, error) {
	if f.brokers != "" {
		brokers := strings.Split(f.brokers, ",")
		return demoKafka{brokers: brokers, where: f.brokers, replication: -1, close: func() {}}, nil
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return demoKafka{}, fmt.Errorf("start in-process Kafka: %w", err)
	}
	addrs := kc.ListenAddrs()
	return demoKafka{brokers: addrs, where: "in-process kfake at " + strings.Join(addrs, ","), replication: 1, close: kc.Close}, nil
}

// createInput creates the input topic unless it exists, and reports
// whether it did; the pipeline creates its output topics itself
// (sink.create_topics).
func createInput(ctx context.Context, cfg config.Config, partitions int32, replication int16, log zerolog.Logger) (bool, error) {
	cl, err := newDemoClient(cfg, log, "kafka_demo_admin")
	if err != nil {
		return false, err
	}
	defer cl.Close()
	resp, err := kadm.AnyE(kadm.NewClient(cl).CreateTopics(ctx, partitions, replication, nil, demoInputTopic))
	if err == nil {
		err = resp.Err
	}
	switch {
	case errors.Is(err, kerr.TopicAlreadyExists):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("create topic %s: %w", demoInputTopic, err)
	}
	return true, nil
}

func newDemoClient(cfg config.Config, log zerolog.Logger, component string, opts ...kgo.Opt) (*kgo.Client, error) {
	base, err := cluster.ClientOpts(cfg.Source, log, component)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

// demoInstances are the service instances of one demo, all in one group.
type demoInstances []*consumer.Consumer

// newDemoInstances makes f.instances consumers of cfg. With several, each
// reports its metrics to reg with its own demopkg.InstanceLabel (1 to N)
// and logs with a demo_instance field.
func newDemoInstances(f demoFlags, cfg config.Config, log zerolog.Logger, reg prometheus.Registerer) (demoInstances, error) {
	pipes := make(demoInstances, 0, f.instances)
	for i := range f.instances {
		r, l := reg, log
		if f.instances > 1 {
			name := strconv.Itoa(i + 1)
			r = prometheus.WrapRegistererWith(prometheus.Labels{demopkg.InstanceLabel: name}, reg)
			l = log.With().Str(demopkg.InstanceLabel, name).Logger()
		}
		pipe, err := consumer.New(cfg, l, r)
		if err != nil {
			pipes.close()
			return nil, fmt.Errorf("consumer: %w", err)
		}
		pipes = append(pipes, pipe)
	}
	return pipes, nil
}

// waitForInstances waits until every instance is ready and, with
// several, each holds a partition (of the input topic or, with the
// repartition stage, of the repartition topic) and none is held twice:
// the generator starts then, so that no instance meets a backlog in which
// some partitions' records come before any of another's (its watermark
// then holds nothing of the other partition, and too-late records would
// be aggregated). It reports false if ctx ended first.
func waitForInstances(ctx context.Context, pipes demoInstances, g prometheus.Gatherer, stage2 string) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !pipes.ready() || unsettled(pipes, g, stage2) != "" {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// watchWatermarks sets ok once every instance has a watermark (every
// partition it holds had a record read; with the repartition stage, every
// instance holding repartition partitions heard from every source
// partition), or ctx ends.
func watchWatermarks(ctx context.Context, pipes demoInstances, g prometheus.Gatherer, stage2 string, ok *atomic.Bool) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if waitingForWatermarks(pipes, g, stage2) == "" {
			ok.Store(true)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// waitingForWatermarks says which instances have no watermark yet and
// why; "" once every instance that has windows has one.
func waitingForWatermarks(pipes demoInstances, g prometheus.Gatherer, stage2 string) string {
	if len(pipes) == 1 {
		if p, err := demopkg.ReadPipeline(g); err != nil || p.Watermark == math.MinInt64 {
			return "a watermark: a record of every partition"
		}
		return ""
	}
	ins, missing := readInstances(pipes, g, stage2)
	if missing != "" {
		return missing
	}
	return demopkg.Waiting(ins, stage2 != "")
}

// unsettled says why, with several instances, the group's assignment is
// not one the generator may start on (demopkg.Unsettled); "" when it is.
func unsettled(pipes demoInstances, g prometheus.Gatherer, stage2 string) string {
	if len(pipes) == 1 {
		return ""
	}
	ins, missing := readInstances(pipes, g, stage2)
	if missing != "" {
		return missing
	}
	return demopkg.Unsettled(ins)
}

// readInstances reads every instance's partitions and watermarks from the
// metrics; missing says what is not there yet ("" once it all is).
func readInstances(pipes demoInstances, g prometheus.Gatherer, stage2 string) (ins []demopkg.Instance, missing string) {
	ins, err := demopkg.ReadInstances(g, demoInputTopic, stage2)
	switch {
	case err != nil:
		return nil, "the metrics: " + err.Error()
	case len(ins) != len(pipes):
		return nil, "every instance's metrics"
	}
	return ins, ""
}

// ready reports whether every instance is ready (/readyz).
func (ps demoInstances) ready() bool {
	for _, p := range ps {
		if !p.Serving() {
			return false
		}
	}
	return true
}

func (ps demoInstances) close() {
	for _, p := range ps {
		p.Close()
	}
}

// run runs every instance until ctx is done; fail is told each error.
func (ps demoInstances) run(ctx context.Context, fail func(error)) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			if errs[i] = p.Run(ctx); errs[i] != nil {
				fail(errs[i])
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// drain drains every instance at once: one that left the group first
// would hand its partitions to the others while they drain.
func (ps demoInstances) drain(ctx context.Context) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = p.Drain(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// demoMetrics is the demo's /metrics, which the view reads too: the
// process's collectors and the running instances' registry, which
// --change-at replaces (an instance's metrics register once in a
// registry: the new config's instances need one of their own).
type demoMetrics struct {
	*prometheus.Registry // the process's collectors, and the HTTP handler's
	mu                   sync.Mutex
	live                 *prometheus.Registry
	// before is what the instances before the live ones processed
	// (aggregator_records_total), which the view goes on counting from:
	// the live ones count from 0, as a restarted pod does.
	before float64
}

func (m *demoMetrics) set(live *prometheus.Registry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, err := demopkg.ReadPipeline(m.live); err == nil {
		m.before += p.Processed
	}
	m.live = live
}

// processedBefore is before.
func (m *demoMetrics) processedBefore() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.before
}

// Gather gathers the process's metrics and the running instances'.
func (m *demoMetrics) Gather() ([]*dto.MetricFamily, error) {
	m.mu.Lock()
	live := m.live
	m.mu.Unlock()
	return prometheus.Gatherers{m.Registry, live}.Gather()
}

// demoService is the instances that run now: --change-at replaces them.
type demoService struct {
	mu    sync.Mutex
	pipes demoInstances
}

func (s *demoService) current() demoInstances {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pipes
}

func (s *demoService) ready() bool { return s.current().ready() }

// run runs the instances until ctx is done; fail is told each error.
// With next (--change-at), f.changeAt into the run it stops and drains
// them, as an upgrade's SIGTERM does, and runs instances of next from
// then on, with their metrics in a registry of their own (reg's live
// one); changed is set once they run. Their restores cut each partition
// over to next's generation of windows.
func (s *demoService) run(ctx context.Context, fail func(error), f demoFlags, next *config.Config, log zerolog.Logger, reg *demoMetrics, changed *atomic.Bool) error {
	if next == nil {
		return s.current().run(ctx, fail)
	}
	first, stopFirst := context.WithCancel(ctx)
	timer := time.AfterFunc(f.changeAt, stopFirst)
	defer timer.Stop()
	err := s.current().run(first, fail)
	stopFirst()
	if err != nil || ctx.Err() != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, next.ShutdownTimeout)
	err = s.current().drain(dctx)
	cancel()
	if err != nil {
		return fmt.Errorf("config change: %w", err)
	}
	live := prometheus.NewRegistry()
	pipes, err := newDemoInstances(f, *next, log, live)
	if err != nil {
		return fmt.Errorf("config change: %w", err)
	}
	s.mu.Lock()
	s.pipes = pipes
	s.mu.Unlock()
	reg.set(live)
	changed.Store(true)
	return pipes.run(ctx, fail)
}

// runDemo runs the pipeline exactly as serve does (consumer.New, Run,
// Drain), --instances times in one group, with the generator feeding it,
// the view reading its output and, unless checkNote says why not, the
// reference run (a replay of the input in one process) beside it. With
// next (--change-at) the instances change to that config halfway
// (demoService.run).
func runDemo(ctx context.Context, stop context.CancelFunc, f demoFlags, cfg config.Config, next *config.Config, where string, schemaID uint32, checkNote string, log zerolog.Logger, stdout io.Writer) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	reg := &demoMetrics{Registry: newRegistry(), live: prometheus.NewRegistry()}
	pipes, err := newDemoInstances(f, cfg, log, reg.live)
	if err != nil {
		return err
	}
	svc := &demoService{pipes: pipes}
	srv, err := serveHTTP(config.HTTP{Listen: f.listen}, reg, svc.ready)
	if err != nil {
		pipes.close()
		return busyHint(err, f.listen)
	}
	source, newGen, watcher, err := demoClients(cfg, log, f, schemaID)
	if err != nil {
		pipes.close()
		return errors.Join(err, srv.Shutdown(context.Background()))
	}
	defer source.Client.Close()
	defer watcher.Close()

	board := demopkg.NewBoard(cfg.Sink.ResultsTopic, cfg.Sink.LateTopic, cfg.Sink.DeadLetterTopic)
	var check *demopkg.Check
	if checkNote == "" {
		check = demopkg.NewCheck(cfg.Window.AllowedLateness.Milliseconds(), int(cfg.Sink.Partitions))
	}
	var work, watching sync.WaitGroup
	var runErr, sourceErr, watchErr, refErr error
	var changed atomic.Bool // the instances of next run
	work.Go(func() { runErr = svc.run(ctx, cancel, f, next, log, reg, &changed) })
	var watermarks atomic.Bool // every instance has one: too-late records may start
	var started atomic.Bool    // the generator runs
	stage2 := stage2Topic(cfg)
	work.Go(func() {
		if !waitForInstances(ctx, pipes, reg, stage2) {
			return
		}
		started.Store(true)
		go watchWatermarks(ctx, pipes, reg, stage2, &watermarks)
		source.Gen = newGen(time.Now(), watermarks.Load)
		if sourceErr = source.Run(ctx); sourceErr != nil {
			cancel(sourceErr)
		}
	})
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watching.Go(func() {
		if watchErr = demopkg.Watch(watchCtx, watcher, board, check); watchErr != nil {
			cancel(watchErr)
		}
	})
	if check != nil { // it reads the input to its end: it stops with the watcher
		watching.Go(func() {
			if refErr = runReference(watchCtx, cfg, log, check); refErr != nil {
				cancel(refErr)
			}
		})
	}

	v := newView(stdout, f, where, metricsURL(srv.Addr), cfg, source, board, reg)
	v.check, v.state.CheckNote = check, checkNote
	v.processedBefore = reg.processedBefore
	if next != nil {
		v.state.Columns = aggregateNames(*next) // its aggregates are cfg's and one more: "-" in the rows of cfg's windows
		v.change = func() string { return demoChangeState(f, changed.Load(), reg) }
	}
	v.waiting = func() string {
		if !started.Load() {
			if len(pipes) == 1 {
				return "the service to join the group before the generator starts"
			}
			if why := unsettled(pipes, reg, stage2); why != "" {
				return "the group to settle before the generator starts: " + why
			}
			return ""
		}
		if watermarks.Load() {
			return ""
		}
		if why := waitingForWatermarks(pipes, reg, stage2); why != "" && len(pipes) > 1 {
			return "watermarks: " + why
		}
		return ""
	}
	v.loop(ctx)
	work.Wait()
	stop() // from here a second Ctrl-C kills the process at once
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer dcancel()
	drainErr := svc.current().drain(dctx)
	stopWatch()
	watching.Wait()
	v.draw(true)
	return errors.Join(runErr, sourceErr, watchErr, refErr, drainErr, srv.Shutdown(dctx))
}

// stage2Topic is the repartition topic with source.partitioning
// repartition, "" by key.
func stage2Topic(cfg config.Config) string {
	if cfg.Source.ByKey() {
		return ""
	}
	return cfg.State.RepartitionTopic
}

// demoClients makes the generator's producer (a Source without its
// Generator yet: newGen makes the one that starts at a given time, with
// too-late records held back until late reports true) and
// the output reader; a schemaID other than 0 makes the generator write
// Avro with it.
func demoClients(cfg config.Config, log zerolog.Logger, f demoFlags, schemaID uint32) (src *demopkg.Source, newGen func(start time.Time, late func() bool) *demopkg.Generator, watcher *kgo.Client, err error) {
	producer, err := newDemoClient(cfg, log, "kafka_demo_producer", kgo.ProducerLinger(10*time.Millisecond))
	if err != nil {
		return nil, nil, nil, err
	}
	watcher, err = newDemoClient(cfg, log, "kafka_demo_reader",
		kgo.ConsumeTopics(cfg.Sink.ResultsTopic, cfg.Sink.LateTopic, cfg.Sink.DeadLetterTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(time.Second), // see the output topics soon after the pipeline creates them
	)
	if err != nil {
		producer.Close()
		return nil, nil, nil, err
	}
	windowSize := demoWindow // stragglers land in the latest window that fired
	switch f.window {
	case "session":
		windowSize = demoGap // a straggler's own window then reaches a fired session: a merge after firing
	case "sliding":
		// In the latest slide that fired: every window holding it is then
		// within its lateness, whatever the watermark is by then (the
		// earliest of them ends with that slide), so none of them is late
		// on one instance and open on another.
		windowSize = time.Second
	}
	gcfg := demopkg.GeneratorConfig{
		Keys: f.keys, LateFraction: f.lateFraction, StragglerFraction: f.lateFraction,
		MalformedFraction: 0.01, FilteredFraction: 0.05, Speed: f.speed,
		MaxDisorder: demoOOO * 4 / 5, OutOfOrderness: demoOOO, Lateness: demoLateness, WindowSize: windowSize,
		Seed: f.seed, AvroSchemaID: schemaID, KeyByCall: f.partitioning == partitionRepartition,
		// Too-late records are late whatever order the instances (and the
		// reference run) read the partitions in, with up to demoReadSkew
		// between them, and start once every partition has records.
		LateMargin: time.Duration(float64(demoReadSkew) * f.speed), LateAfter: time.Duration(float64(demoLateAfter) * f.speed),
	}
	if f.window == "calendar" {
		// Too late records go back two days and a lateness, past any
		// day's cleanup. The generator places stragglers in UTC-aligned
		// windows, not local days: none.
		gcfg.Speed, gcfg.Origin = f.speed*demoDaySpeed, demoOrigin()
		gcfg.Lateness, gcfg.WindowSize, gcfg.StragglerFraction = demoDayLateness, 24*time.Hour, 0
		gcfg.LateMargin, gcfg.LateAfter = 0, time.Duration(float64(demoLateAfter)*gcfg.Speed) // two days back are 48s of wall clock
	}
	src = &demopkg.Source{Client: producer, Topic: demoInputTopic, Rate: f.rate, Clock: time.Now}
	return src, func(start time.Time, late func() bool) *demopkg.Generator {
		gcfg.LateGate = late
		return demopkg.NewGenerator(gcfg, start)
	}, watcher, nil
}

// busyHint explains a busy --listen address, the one likely failure of
// the README's first command.
func busyHint(err error, addr string) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w\n  another process is listening on %s; pick a free address with --listen, e.g. --listen :9091 (or --listen 127.0.0.1:0 for any free port)", err, addr)
	}
	return err
}

// metricsURL turns a bound address into a URL a person can open.
func metricsURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr + "/metrics"
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics"
}

// view redraws the terminal once a second or, when stdout is not a
// terminal, prints the results as lines and a status line (lines).
type view struct {
	out      io.Writer
	ansi     bool
	state    demopkg.State
	start    time.Time
	source   *demopkg.Source
	board    *demopkg.Board
	reg      prometheus.Gatherer
	check    *demopkg.Check // nil: no check against the reference run
	lastTick time.Time
	waiting  func() string // what the demo waits for; "" nothing
	stage2   string        // the repartition topic; "" by key
	change   func() string // --change-at: what it changes, and where it cut over (demoChangeState); nil without
	// processedBefore is what instances before the running ones processed
	// (--change-at); nil: none.
	processedBefore func() float64
	// instances is --instances, and legend whether the lines of a stdout
	// that is not a terminal have begun with demopkg.Legend.
	instances int
	legend    bool
}

func newView(out io.Writer, f demoFlags, where, url string, cfg config.Config, source *demopkg.Source, board *demopkg.Board, reg prometheus.Gatherer) *view {
	columns := aggregateNames(cfg)
	windows := fmt.Sprintf("%s %s windows", cfg.Window.Type, cfg.Window.Size)
	switch cfg.Window.Type {
	case "sliding":
		windows = fmt.Sprintf("sliding %s windows every %s", cfg.Window.Size, cfg.Window.Slide)
	case "session":
		windows = fmt.Sprintf("sessions, %s gap", cfg.Window.Gap)
	case "global":
		windows = "global windows (a running total per key)"
	case "count":
		windows = fmt.Sprintf("count windows of %d records, timeout %s", cfg.Window.Size.Milliseconds(), cfg.Window.Timeout)
	}
	if cfg.Window.Calendar != "" {
		windows = "days in " + cfg.Window.Timezone
	}
	if ef := cfg.Window.EarlyFirings; ef.Every > 0 {
		windows += fmt.Sprintf(", early results every %s", ef.Every)
	}
	if cfg.Window.Calendar != "" {
		windows += fmt.Sprintf(" · event time from %s, %gh a second", demoOrigin().Format("Mon 2 Jan 2006 15:04 MST"), f.speed*demoDaySpeed/3600)
	}
	settings := fmt.Sprintf("%s · max_out_of_orderness %s · allowed_lateness %s · %d keys, %g records/s",
		windows, cfg.Watermark.MaxOutOfOrderness, cfg.Window.AllowedLateness, f.keys, f.rate)
	if !cfg.Source.ByKey() {
		settings += " · repartition stage (calls keyed by call id)"
	}
	now := time.Now()
	return &view{out: out, ansi: isTerminal(out), start: now, lastTick: now, source: source, board: board, reg: reg,
		waiting: func() string { return "" }, stage2: stage2Topic(cfg), instances: f.instances,
		state: demopkg.State{Stage2: !cfg.Source.ByKey(), NothingLate: nothingLate(cfg.Window.Type), Brokers: where, MetricsURL: url, Settings: settings, Columns: columns, Watermark: math.MinInt64,
			Sessions: cfg.Window.Type == "session", Zone: cfg.Window.Zone()}}
}

// aggregateNames are the names of cfg's aggregates, in its order.
func aggregateNames(cfg config.Config) []string {
	names := make([]string, len(cfg.Aggregates))
	for i, a := range cfg.Aggregates {
		names[i] = a.Name
	}
	return names
}

// demoChangeState is the view's line about --change-at: what it changes
// and, once the instances of the new config run (changed), each
// partition's cut-over T as their metrics show it.
func demoChangeState(f demoFlags, changed bool, g prometheus.Gatherer) string {
	if !changed {
		return demoChangeText(f)
	}
	text := strings.Replace(demoChangeText(f), "config change at", "config changed at", 1)
	cuts, err := demopkg.ReadCutovers(g)
	if err != nil || len(cuts) == 0 {
		return text + "; the partitions restore and cut over"
	}
	parts := make([]string, 0, len(cuts))
	for _, p := range slices.Sorted(maps.Keys(cuts)) {
		parts = append(parts, fmt.Sprintf("%d at %s", p, time.UnixMilli(cuts[p]).UTC().Format("15:04:05")))
	}
	return text + "; cut-over T (UTC) of partition " + strings.Join(parts, ", ") +
		": windows that start from T are version 2's, those before it finish under version 1"
}

// nothingLate says why no record is late in windows of type typ ("": they
// have lateness).
func nothingLate(typ string) string {
	switch typ {
	case "count":
		return "nothing is late in count windows"
	case "global":
		return "nothing is late in a global window"
	}
	return ""
}

func (v *view) loop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	v.draw(false)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			v.draw(false)
		}
	}
}

// draw refreshes the state and shows it; final marks the last frame.
func (v *view) draw(final bool) {
	now := time.Now()
	s := &v.state
	prevSent, prevProcessed := s.Sent.Total(), s.Processed
	s.Now, s.Elapsed = now, now.Sub(v.start)
	s.Sent = v.source.Sent()
	if p, err := demopkg.ReadPipeline(v.reg); err == nil {
		s.Processed, s.Watermark = p.Processed, p.Watermark
		if v.processedBefore != nil {
			s.Processed += v.processedBefore()
		}
	}
	var fresh []demopkg.Row // the results a line each, taken first: the tally counts them
	var skipped int64
	if !v.ansi {
		fresh, skipped = v.board.TakeFresh()
	}
	s.Tally = v.board.Snapshot()
	// The last frame keeps the partitions as they were before the drain:
	// the instance that leaves the group first hands its partitions to
	// those still draining.
	if ins, err := demopkg.ReadInstances(v.reg, demoInputTopic, v.stage2); err == nil && !final {
		s.Instances = ins
	}
	s.Waiting = ""
	if !final {
		s.Waiting = v.waiting()
	}
	if v.change != nil {
		s.Change = v.change()
	}
	if v.check != nil {
		t := v.check.Tally()
		s.Check = &t
	}
	s.Width, s.Lines = v.size()
	if dt := now.Sub(v.lastTick).Seconds(); dt > 0 {
		s.SentRate = float64(s.Sent.Total()-prevSent) / dt
		s.ProcessedRate = (s.Processed - prevProcessed) / dt
	}
	v.lastTick = now
	switch {
	case !v.ansi:
		v.lines(s, fresh, skipped)
	case final:
		fmt.Fprint(v.out, "\x1b[H\x1b[2J"+demopkg.Render(*s)+"\nstopped.\n")
	default:
		// Home, each line cleared to its end, then the rest of the screen: no flicker.
		frame := strings.ReplaceAll(demopkg.Render(*s), "\n", "\x1b[K\n")
		fmt.Fprint(v.out, "\x1b[H"+frame+"\x1b[J")
	}
}

// lines writes a frame for a stdout that is not a terminal: the legend
// first, then a line per result since the last frame (rows, and how many
// more there were), and the status line.
func (v *view) lines(s *demopkg.State, rows []demopkg.Row, skipped int64) {
	var b strings.Builder
	if !v.legend {
		v.legend = true
		b.WriteString(demopkg.Legend(*s, v.instances))
	}
	for _, r := range rows {
		b.WriteString(demopkg.ResultLine(r, s.Columns, s.Zone, s.Change != "") + "\n")
	}
	if skipped > 0 {
		fmt.Fprintf(&b, "(%d more results this second, not shown)\n", skipped)
	}
	b.WriteString(demopkg.Summary(*s) + "\n")
	fmt.Fprint(v.out, b.String())
}

// size is the terminal's width and height, so that a frame fits it (it is
// read at every frame: the window may be resized); 0, 0 on a stdout that
// is not a terminal.
func (v *view) size() (width, height int) {
	f, ok := v.out.(*os.File)
	if !ok || !v.ansi {
		return 0, 0
	}
	width, height, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0, 0
	}
	return width, height
}

// isTerminal reports whether w is a terminal, where the view may redraw.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
