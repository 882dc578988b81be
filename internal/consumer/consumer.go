package consumer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
	"aggregator/internal/invariants"
	"aggregator/internal/metrics"
	"aggregator/internal/pipeline"
	"aggregator/internal/placement"
	"aggregator/internal/producer"
	"aggregator/internal/record"
	"aggregator/internal/registry"
)

const (
	// tickInterval bounds how long a poll waits, so idleness is judged
	// and commits happen while no record arrives.
	tickInterval = 100 * time.Millisecond
	// commitTimeout bounds a commit: flushing outputs and state, and
	// committing offsets (or the transaction).
	commitTimeout = 30 * time.Second
	// endAbortTry bounds one try to abort a transaction End left open
	// in the client, and endAbortBackoff is the wait before the next.
	endAbortTry     = 5 * time.Second
	endAbortBackoff = time.Second
	// unjoinedLeave bounds the wait to leave a group never joined, so
	// that SIGTERM ends the process within a second before it joins.
	unjoinedLeave = 500 * time.Millisecond
	// fetchMaxWait bounds how long the brokers hold a fetch that finds
	// nothing new (Kafka's consumer default is 500 ms).
	fetchMaxWait = 250 * time.Millisecond
	// maxPollRecords bounds one batch, so a rebalance waits little.
	maxPollRecords = 10_000
)

// Consumer consumes source.topics in a group, drives a pipeline.Core
// and writes its Readies. It holds the clients; the topic layout and the
// partitions' progress are the core's.
type Consumer struct {
	cfg    config.Config
	log    zerolog.Logger
	m      *metrics.Metrics
	clock  func() time.Time
	kafka  clients
	writer *producer.Writer
	// encoded are the generations whose result encoders writer has
	// (encodeGenerations); a new writer has none.
	encoded map[int64]bool
	fetch   *fetcher
	schemas schemaSource
	// peers reads the watermark topic (by_key with watermark.scope
	// global; nil otherwise).
	peers *peerReader

	// balancer places partitions and standby copies in the group, made
	// with the clients (placement.Balancer).
	balancer *placement.Balancer
	// standby are the standby copies this instance keeps warm
	// (state.standby_replicas; none with 0).
	standby *standbys

	// repart is the repartition topic's purge and the input topics'
	// partition counts (source.partitioning repartition; nil otherwise).
	repart *repartitionTopic

	// locks is the order of the consumer's locks (lockorder.go).
	locks invariants.Order
	mu    invariants.Mutex // guards what follows; the engine goroutine holds it while processing
	// core is made by connect, once the input topics' partitions are
	// known; it is not replaced after (the fetcher's decoders read it).
	core  *pipeline.Core
	parts partitions
	cycle cycle

	revocations revocations
	health      health
	join        joinWatch // engine goroutine only
	uncommitted uncommitted
	// blocked are the partitions whose restore waits on an open
	// transaction in their changelog partition (guarded by mu).
	blocked map[int32]*blockedRestore
}

// schemaSource is where registry-format records find their schemas: the
// registry client fetches the schemas that records name into decoded, the
// schemas the core's decoders read (nil, both, unless source.format is a
// registry format; the client alone with sink.format avro).
type schemaSource struct {
	registry *registry.Client
	decoded  *record.Schemas
}

// cycle is where the commit cycle stands (guarded by Consumer.mu).
type cycle struct {
	lastCommit time.Time
	closing    bool // Drain or Close began: rebalance callbacks commit nothing more
	// refused: a restore refused the config (a change it does not
	// allow): Drain commits nothing of the run, as nothing may be written
	// under a config the state refuses.
	refused   bool
	inTxn     bool      // exactly_once: a transaction is open
	gone      bool      // at_least_once: the coordinator said the member is gone; commits write no position until lost, assigned or a new generation
	goneGen   int32     // the generation gone was said in
	unfetched time.Time // last end-offset check of never-fetched partitions
	idle      idleCommit
	// blockedChecked is the last check of the blocked restores' last stable offsets.
	blockedChecked time.Time
}

// clients are the Kafka clients and what watches them.
type clients struct {
	sess     *kgo.GroupTransactSession // exactly_once; nil with at_least_once
	cl       *kgo.Client               // the group consumer (the session's client with exactly_once)
	pr       *kgo.Client               // produces outputs and changelog records (= cl with exactly_once)
	readOpts []kgo.Opt                 // for the clients that read the changelog at restore
	extra    []kgo.Opt                 // applied last to every client
	root     zerolog.Logger            // the service's, for the clients and the writer: they name their own component
	reg      prometheus.Registerer
	access   *cluster.Access       // how every client reaches the brokers: TLS, SASL (one cached OAuth token), rack
	auth     *cluster.AuthWatch    // notices brokers refusing the SASL credentials
	reach    *cluster.Reachability // notices brokers not answering
	// limits and avroResults are what connect found, for the writer of
	// a client made again (renew).
	limits      map[string]int32
	avroResults *producer.AvroEncoder
	// renewals are the times the exactly_once session was made again
	// after its producer was fenced (renew), within renewWindow.
	renewals []time.Time
}

// health is what /readyz and aggregator_ready say.
type health struct {
	ready  atomic.Bool
	joined atomic.Bool // partitions were assigned once
	// brokersDown is what noteReach last saw (engine goroutine only).
	brokersDown bool
}

// New returns a Consumer of cfg; it does no I/O: Run connects. extra is
// applied last to every Kafka client (tests point them at kfake).
func New(cfg config.Config, log zerolog.Logger, reg prometheus.Registerer, extra ...kgo.Opt) (*Consumer, error) {
	return NewWithClock(cfg, log, reg, time.Now, extra...)
}

// NewWithClock is New with the wall clock the pipeline judges idleness
// and future timestamps by; tests pass a clock they move.
func NewWithClock(cfg config.Config, log zerolog.Logger, reg prometheus.Registerer, clock func() time.Time, extra ...kgo.Opt) (*Consumer, error) {
	c := &Consumer{cfg: cfg, log: log.With().Str("component", "consumer").Logger(), m: metrics.New(reg), clock: clock,
		parts:       partitions{byTP: map[topicPartition]*partition{}, byID: map[int32]*partition{}},
		uncommitted: uncommitted{deferred: cfg.ExactlyOnce()}, standby: newStandbys(),
		kafka: clients{root: log, reg: reg, auth: cluster.NewAuthWatch(cfg.Source), reach: cluster.NewReachability(time.Now)}}
	// The core is made at connect, with the input topics' layout; its
	// config is checked here.
	if _, err := pipeline.NewCore(pipeline.Spec{Config: cfg}); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	if cfg.RecordSpec().Format.Registry() {
		c.schemas.decoded = record.NewSchemas()
	}
	if !cfg.Source.ByKey() {
		c.repart = &repartitionTopic{topic: cfg.State.RepartitionTopic}
	}
	var err error
	if cfg.PublishesWatermarks() {
		c.peers = &peerReader{topic: cfg.State.WatermarkTopic}
	}
	if cfg.UsesRegistry() {
		if c.schemas.registry, err = registry.New(cfg.Source.SchemaRegistry, log, reg); err != nil {
			return nil, err
		}
	}
	if c.fetch, err = newFetcher(c); err != nil {
		return nil, err
	}
	c.initLocks()
	if c.kafka.access, err = cluster.NewAccess(cfg.Source, log, reg); err != nil {
		return nil, err
	}
	base := c.kafka.access.ClientOpts(log, "kafka_restore")
	// Its dials fail only within the connect and restore retries, which
	// log each attempt with the cause.
	base = append(base, kgo.WithLogger(cluster.NewLogger(log, "kafka_restore").Retried()))
	// Every client reports to c.kafka.auth and c.kafka.reach; extra comes last.
	c.kafka.extra = append([]kgo.Opt{kgo.WithHooks(c.kafka.auth, c.kafka.reach)}, extra...)
	c.kafka.readOpts = append(base, c.kafka.extra...)
	return c, nil
}

// connect checks the input topics, creates missing outputs and the
// changelog, reads the outputs' size limits, and makes the clients (which
// join the group). It retries what may heal (brokers unreachable, not
// answering, moving) with capped exponential backoff and a warn line per
// attempt, until ctx ends (it returns ctx's error then); it fails at once
// on what retrying cannot fix (cluster.Permanent).
func (c *Consumer) connect(ctx context.Context) error {
	var limits map[string]int32
	err := cluster.Retry(ctx, c.log, "connect to Kafka", c.kafka.auth, func(ctx context.Context) error {
		admin, err := kgo.NewClient(c.kafka.readOpts...)
		if err != nil {
			return fmt.Errorf("kafka admin: %w", err)
		}
		defer admin.Close()
		adm := kadm.NewClient(admin)
		// Before anything is created or written: a cluster that cannot do
		// what the config asks is refused here.
		if err := cluster.CheckSupport(ctx, adm, c.cfg, transactionalID(c.cfg.Source)); err != nil {
			return err
		}
		if err := c.checkTopics(ctx, adm); err != nil {
			return err
		}
		limits, err = cluster.MaxMessageBytes(ctx, adm, c.outputTopics()...)
		return err
	})
	if err != nil {
		return err
	}
	var avroResults *producer.AvroEncoder
	if c.cfg.Sink.Format == config.FormatAvro {
		subject := c.cfg.Sink.ResultsTopic + "-value" // TopicNameStrategy
		id, err := c.schemas.registry.Register(ctx, subject, producer.AvroSchema(c.cfg))
		if err != nil {
			return err
		}
		avroResults = producer.NewAvroEncoder(c.cfg, id)
		c.log.Info().Str("subject", subject).Uint32("schema_id", id).Msg("results are Avro")
	}
	c.kafka.limits, c.kafka.avroResults = limits, avroResults
	if err = c.newClients(limits); err != nil {
		return err
	}
	c.newWriter()
	c.log.Debug().Interface("max_message_bytes", limits).Msg("connected; joining the group")
	if c.kafka.sess == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begin()
}

// newWriter makes the writer of the producing client.
func (c *Consumer) newWriter() {
	c.writer = producer.NewWriter(c.kafka.pr, c.cfg, c.m, c.clock, producer.Limits(c.kafka.limits), c.kafka.root)
	c.encoded = nil
	if n := c.core.Layout().RepartitionPartitions(); n > 0 {
		c.writer.SetRepartitionPartitions(n)
	}
	if c.kafka.avroResults != nil {
		c.writer.EncodeResults(c.kafka.avroResults)
	}
}

// outputTopics are the topics the service writes: their limits bound the
// records it produces.
func (c *Consumer) outputTopics() []string {
	topics := []string{c.cfg.Sink.ResultsTopic, c.cfg.Sink.LateTopic}
	if c.cfg.Sink.DeadLetterTopic != "" {
		topics = append(topics, c.cfg.Sink.DeadLetterTopic)
	}
	topics = append(topics, c.cfg.State.ChangelogTopic)
	if c.peers != nil {
		topics = append(topics, c.peers.topic)
	}
	if c.repart != nil {
		topics = append(topics, c.repart.topic)
	}
	return topics
}

// checkTopics verifies the inputs, makes the core with their partition
// counts, creates missing outputs and checks (or creates) the changelog.
func (c *Consumer) checkTopics(ctx context.Context, adm *kadm.Client) error {
	if err := cluster.VerifyInputs(ctx, adm, c.cfg.Source.Topics); err != nil {
		return err
	}
	counts, err := cluster.InputPartitions(ctx, adm, c.cfg.Source.Topics)
	if err != nil {
		return err
	}
	core, err := pipeline.NewCore(pipeline.Spec{Config: c.cfg, Partitions: counts, Schemas: c.schemas.decoded})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.core = core
	c.mu.Unlock()
	if err := cluster.EnsureOutputs(ctx, adm, c.cfg.Sink); err != nil {
		return err
	}
	if c.peers != nil {
		if err := cluster.EnsureWatermarks(ctx, adm, c.peers.topic, c.cfg.Sink); err != nil {
			return err
		}
	}
	l := core.Layout()
	if r := l.RepartitionTopic(); r != "" {
		c.repart.lastCount = time.Now()
		if err := cluster.EnsureRepartition(ctx, adm, r, l.RepartitionPartitions(), c.cfg.Sink); err != nil {
			return err
		}
	}
	// The changelog has a partition per partition that keeps window
	// state: changelog partition i holds partition i's (the repartition
	// partitions' with source.partitioning repartition).
	return cluster.EnsureChangelog(ctx, adm, c.cfg.State.ChangelogTopic, l.Changelog(), l.RepartitionTopic(), c.cfg.Sink)
}

// newClients makes the group consumer and the producer: one transactional
// session with exactly_once, two clients with at_least_once.
func (c *Consumer) newClients(limits map[string]int32) error {
	reg, extra := c.kafka.reg, c.kafka.extra
	var err error
	group := c.groupOpts()
	prod := producerOpts(c.cfg, c.kafka.access, c.kafka.root, limits)
	manual := changelogPartitioner{changelog: c.cfg.State.ChangelogTopic, watermarks: c.cfg.State.WatermarkTopic, outputs: kgo.UniformBytesPartitioner(64<<10, true, true, nil)}
	if c.repart != nil {
		manual.repartition = c.repart.topic // the writer picks the partition: murmur2 of the group key, or every one for a marker
	}
	prod = append(prod, kgo.RecordPartitioner(manual))
	if c.cfg.ExactlyOnce() {
		// One client consumes and produces: it logs, like its metrics, as
		// the group's consumer (prod's logger would label group joins
		// kafka_producer).
		opts := append(append(group, prod...),
			kgo.WithLogger(cluster.NewLogger(c.kafka.root, "kafka_consumer")),
			kgo.TransactionalID(transactionalID(c.cfg.Source)),
			kgo.TransactionTimeout(c.cfg.State.TransactionTimeout),
			metrics.KafkaHooks(reg, "kafka_consumer"))
		if c.kafka.sess, err = kgo.NewGroupTransactSession(append(opts, extra...)...); err != nil {
			return fmt.Errorf("kafka client: %w", err)
		}
		c.kafka.cl, c.kafka.pr = c.kafka.sess.Client(), c.kafka.sess.Client()
		return nil
	}
	if c.kafka.pr, err = kgo.NewClient(append(append(prod, metrics.KafkaHooks(reg, "kafka_producer")), extra...)...); err != nil {
		return fmt.Errorf("kafka producer: %w", err)
	}
	if c.kafka.cl, err = kgo.NewClient(append(append(group, metrics.KafkaHooks(reg, "kafka_consumer")), extra...)...); err != nil {
		c.kafka.pr.Close()
		return fmt.Errorf("kafka consumer: %w", err)
	}
	return nil
}

// changelogPartitioner sends a changelog record to the partition it
// names (its input partition's dense id) and the outputs as kgo's default
// partitioner does (by key: a result's revisions stay in one partition).
type changelogPartitioner struct {
	changelog, repartition, watermarks string
	outputs                            kgo.Partitioner
}

func (p changelogPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.changelog || topic == p.repartition && p.repartition != "" || topic == p.watermarks && p.watermarks != "" {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return p.outputs.ForTopic(topic)
}

// transactionalID is unique per process: with KIP-447 the group
// generation, not the transactional ID, fences a zombie's commits. A
// static member's is its instance ID's, the same across restarts: a
// restarted member's producer then aborts at once the transaction its
// previous run left open, instead of it holding back read_committed
// readers (the member's own restore among them) until
// state.transaction_timeout.
func transactionalID(src config.Source) string {
	group := src.Group
	if src.InstanceID != "" {
		return group + "-" + src.InstanceID
	}
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%s-%d-%x", group, host, os.Getpid(), b)
}

// producerOpts are the options of the client that produces outputs. A
// topic's batches are bounded by its max.message.bytes (limits), so that
// no batch is too large for it.
func producerOpts(cfg config.Config, access *cluster.Access, log zerolog.Logger, limits map[string]int32) []kgo.Opt {
	return append(access.ClientOpts(log, "kafka_producer"),
		kgo.ProducerBatchCompression(codecs[cfg.Sink.Codec()]),
		kgo.ProducerLinger(cfg.Sink.Linger),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent: the kgo default, which needs all acks
		kgo.MaxBufferedRecords(100_000),
		kgo.ProducerBatchMaxBytesFn(producer.Limits(limits).Batch),
	)
}

// codecs are kgo's codecs of sink.compression.
var codecs = [...]kgo.CompressionCodec{
	config.NoCompression: kgo.NoCompression(),
	config.Gzip:          kgo.GzipCompression(),
	config.Snappy:        kgo.SnappyCompression(),
	config.Lz4:           kgo.Lz4Compression(),
	config.Zstd:          kgo.ZstdCompression(),
}

// groupOpts are the options of the group consumer.
func (c *Consumer) groupOpts() []kgo.Opt {
	opts := c.kafka.access.ClientOpts(c.kafka.root, "kafka_consumer")
	start := kgo.NewOffset().AtStart()
	if c.cfg.Source.StartAtLatest() {
		start = kgo.NewOffset().AtEnd()
	}
	if id := c.cfg.Source.InstanceID; id != "" {
		opts = append(opts, kgo.InstanceID(id))
	}
	if c.repart != nil && c.cfg.Source.StartAtLatest() {
		opts = append(opts, kgo.AdjustFetchOffsetsFn(c.repartitionFromStart))
	}
	if c.balancer == nil {
		c.balancer = placement.NewBalancer(c.core.Layout().StateTopics(), c.cfg.State.StandbyReplicas, c.copyLags, time.Now, c.log)
	}
	st := c.cfg.Source.SessionTimeout
	return append(opts,
		kgo.SessionTimeout(st),
		kgo.HeartbeatInterval(heartbeatInterval(st)),
		kgo.ConsumerGroup(c.cfg.Source.Group),
		kgo.ConsumeTopics(c.consumeTopics()...),
		// Ours first; cooperative-sticky while members of a release
		// without it are in the group (placement.Protocol).
		kgo.Balancers(c.balancer, kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(start),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A partition assigned while a fetch is under way is fetched
		// with the next one: kgo's default wait of 5 s for a fetch with
		// nothing new held a taken-over partition's input back for up
		// to that long.
		kgo.FetchMaxWait(fetchMaxWait),
		// A transaction's control record takes an offset: kept, the
		// position moves past it, so that a partition written by a
		// transactional producer (the repartition topic with exactly_once)
		// is at its log end once read, for its lag and its idleness.
		kgo.KeepControlRecords(),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { c.fetch.rebalanceWaits.Store(true) }),
	)
}

// heartbeatInterval is how often the member heartbeats: a fiftieth of
// the session timeout, from 100 ms to 1 s (kgo's default is 3 s). A
// member's session expires the timeout after its last heartbeat, at most
// an interval before it died, and a rebalance reaches the survivors with
// their next heartbeat's answer, at most an interval after: a takeover
// waits the session timeout, give or take an interval
// (docs/scaling.md#standby-state). At 200 ms for a 10 s timeout that is
// five heartbeats a second to the coordinator from each member (a
// twentieth, 500 ms, left 10.0–10.5 s to the detection alone).
func heartbeatInterval(session time.Duration) time.Duration {
	return min(max(session/50, 100*time.Millisecond), time.Second)
}

// repartitionFromStart starts stage 2 at the earliest retained record of
// every assigned repartition partition the group has no committed offset
// for, whatever source.start_offset says (kgo's reset offset is one for
// the client): stage 1 wrote those records from input the group consumed,
// perhaps before this partition's first owner read them (it died, or the
// partition moved to another instance first), and starting at the end
// would lose them. kgo passes a partition without a committed offset the
// reset offset, whose offset is negative (AtEnd).
func (c *Consumer) repartitionFromStart(_ context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	for p, o := range offs[c.repart.topic] {
		if o.EpochOffset().Offset < 0 {
			offs[c.repart.topic][p] = kgo.NewOffset().AtStart()
		}
	}
	return offs, nil
}

// consumeTopics are the topics the group consumes: the core's.
func (c *Consumer) consumeTopics() []string { return c.core.Layout().Topics() }

// Serving reports whether the group is joined, every assigned partition is
// restored, the brokers and the schema registry answer, the service has
// valid credentials (an OAuth token), and the consumer is not shutting
// down (/readyz).
func (c *Consumer) Serving() bool {
	return c.health.ready.Load() && !c.kafka.reach.Down() && (c.schemas.registry == nil || !c.schemas.registry.Down()) &&
		c.kafka.access.Unavailable() == nil
}

func (c *Consumer) setReady(ok bool) {
	c.health.ready.Store(ok)
	c.setReadyGauge()
}

func (c *Consumer) setReadyGauge() {
	if c.Serving() {
		c.m.Ready.Set(1)
	} else {
		c.m.Ready.Set(0)
	}
}

// noteReach logs the brokers going silent and answering again (kgo logs
// each failed attempt), and keeps aggregator_ready in step with Ready.
// Engine goroutine only.
func (c *Consumer) noteReach() {
	if down := c.kafka.reach.Down(); down != c.health.brokersDown {
		c.health.brokersDown = down
		if down {
			c.log.Warn().Msg("the brokers have not answered for 10s: not ready (/readyz 503); the client keeps retrying")
		} else {
			c.log.Info().Msg("the brokers answer again")
		}
	}
	c.setReadyGauge()
}

// Drain ends the service after Run returned: it fires nothing early,
// commits the state, outputs and offsets, and leaves the group (a static
// member too). Open windows are in the changelog: the partition's next
// owner continues them. After a restore refused the config, it commits
// nothing (an open transaction is aborted) and leaves.
func (c *Consumer) Drain(ctx context.Context) error {
	c.setReady(false)
	if c.writer == nil {
		return nil // never connected: nothing to commit or leave
	}
	c.mu.Lock()
	c.cycle.closing = true
	refused := c.cycle.refused
	c.mu.Unlock()
	if refused {
		c.close(ctx, true) // the open transaction, if any, is aborted
		return nil
	}
	err := c.lockedCommit(ctx)
	if err != nil && cluster.Transient(err) {
		// Nothing is lost: the partitions' next owner processes again
		// from the last commit.
		c.log.Warn().Err(err).Msg("drain: the last commit failed, the brokers cannot be reached; the next owner goes on from the commit before")
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("drain: %w", err)
	}
	c.close(ctx, true)
	return err
}

// Close leaves the group (a static member stays in it) and closes the
// clients without committing (a crash, as far as state and offsets are
// concerned).
func (c *Consumer) Close() {
	c.setReady(false)
	if c.writer == nil {
		return
	}
	c.mu.Lock()
	c.cycle.closing = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.close(ctx, false)
}

// close leaves the group and closes the clients, waiting for the brokers
// no longer than ctx allows (shutdown_timeout: with the brokers gone, the
// group coordinator expires the member after source.session_timeout).
func (c *Consumer) close(ctx context.Context, leaveStatic bool) {
	// A join still under way (the coordinator holds it) is not waited for
	// long: kgo waits for it to answer before it leaves.
	outer, joined := ctx, c.health.joined.Load()
	if !joined {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, unjoinedLeave)
		defer cancel()
	}
	if c.kafka.sess != nil {
		// Closing does not end a transaction: abort it, or it holds back
		// read_committed readers (and restores) until the broker times it out.
		c.mu.Lock()
		open := c.cycle.inTxn
		c.cycle.inTxn = false
		c.mu.Unlock()
		if open {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if _, err := c.kafka.sess.End(actx, kgo.TryAbort); err != nil {
				c.log.Warn().Err(err).Msg("abort the open transaction")
			}
			cancel()
		}
	}
	// Leaves the group (a static member stays: its restart takes its
	// partitions back); the revoke callback sees closing.
	if err := c.kafka.cl.LeaveGroupContext(ctx); err != nil && c.health.joined.Load() {
		c.log.Warn().Err(err).Msg("leave the group")
	}
	c.writer.Close() // drops what was not handed to the producer: uncommitted
	closed := make(chan struct{})
	go func() { // kgo's Close has no context: it waits for a join in flight
		defer close(closed)
		if c.kafka.sess != nil {
			c.kafka.sess.Close() // c.kafka.pr too
			return
		}
		c.kafka.cl.Close()
		c.kafka.pr.Close()
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		// The process is about to exit; the goroutine ends with the
		// join's answer (or the process).
		c.log.Warn().Msg("the Kafka client did not close in time (a group join in flight); going on")
	}
	if leaveStatic && c.cfg.Source.InstanceID != "" {
		// Also with a join under way: the coordinator holds it as the
		// instance's member (or still has the member of its previous
		// run), and the group's next rebalance would wait for it, up to
		// the rebalance timeout (TestChaos exactly_once seed 12: an
		// instance SIGTERMed while it joined kept a fresh one out of
		// the group for a minute).
		lctx := outer
		if !joined {
			var cancel context.CancelFunc
			lctx, cancel = context.WithTimeout(outer, unjoinedLeave)
			defer cancel()
		}
		c.leaveStatic(lctx)
	}
}

// leaveStatic takes a static member out of the group, as Kafka Streams'
// close with leaveGroup does: a pod stopped for good (a rollout, a scale
// down) does not leave its partitions waiting for source.session_timeout.
// The client is closed first: it would join again otherwise.
func (c *Consumer) leaveStatic(ctx context.Context) {
	cl, err := kgo.NewClient(c.kafka.readOpts...)
	if err != nil {
		c.log.Warn().Err(err).Msg("leave the group as a static member")
		return
	}
	defer cl.Close()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = c.cfg.Source.Group
	m := kmsg.NewLeaveGroupRequestMember()
	m.InstanceID = &c.cfg.Source.InstanceID
	m.Reason = kmsg.StringPtr("aggregator shutting down")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
		for _, m := range resp.Members {
			err = errors.Join(err, kerr.ErrorForCode(m.ErrorCode))
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		c.log.Warn().Err(err).Str("instance_id", c.cfg.Source.InstanceID).Msg("leave the group as a static member")
	}
}

// newPartition is an assigned partition, id its core id.
func (c *Consumer) newPartition(tp topicPartition, id int32) *partition {
	labels := []string{tp.topic, strconv.Itoa(int(tp.partition))}
	p := &partition{tp: tp, id: id, firstDropped: -1,
		lag: c.m.ConsumerLag.WithLabelValues(labels...), wm: c.m.PartitionWatermark.WithLabelValues(labels...)}
	for _, o := range pipeline.Outcomes() {
		p.records[o] = c.m.Records.WithLabelValues(tp.topic, labels[1], o.String())
	}
	return p
}

func (c *Consumer) forgetMetrics(p *partition) {
	labels := []string{p.tp.topic, strconv.Itoa(int(p.tp.partition))}
	c.m.ConsumerLag.DeleteLabelValues(labels...)
	c.m.PartitionWatermark.DeleteLabelValues(labels...)
}
