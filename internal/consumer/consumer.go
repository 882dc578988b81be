package consumer

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
	"aggregator/internal/metrics"
	"aggregator/internal/pipeline"
	"aggregator/internal/producer"
)

const (
	// commitInterval is how often offsets are committed. A crash repeats
	// at most about this much output.
	commitInterval = time.Second
	// tickInterval bounds how long a poll waits, so idleness is judged
	// and commits happen while no record arrives.
	tickInterval = 100 * time.Millisecond
	// commitTimeout bounds a periodic commit: flushing outputs and
	// committing offsets.
	commitTimeout = 30 * time.Second
	// setupTimeout bounds the topic checks at start.
	setupTimeout = 30 * time.Second
	// maxPollRecords bounds one batch, so a rebalance waits little.
	maxPollRecords = 10_000
)

// Consumer consumes source.topics in a group and drives a pipeline.Processor.
type Consumer struct {
	cfg    config.Config
	log    zerolog.Logger
	m      *metrics.Metrics
	clock  func() time.Time
	cl     *kgo.Client // the group consumer
	pr     *kgo.Client // the idempotent producer
	writer *producer.Writer
	topics map[string]int32 // topic → index in source.topics
	bounds boundaries

	mu         sync.Mutex // guards what follows; the engine goroutine holds it while processing
	proc       *pipeline.Processor
	parts      map[topicPartition]*partition
	byID       map[int32]*partition
	lastCommit time.Time
	closing    bool // Drain or Close began: rebalance callbacks commit nothing more

	// rebalanceWaits is set when kgo signals that a rebalance waits for the
	// polled records to be applied (see fetcher).
	rebalanceWaits atomic.Bool
	fetch          *fetcher

	fetched   sync.Mutex // guards pending
	pending   map[topicPartition]fetchedOffset
	ready     atomic.Bool
	unfetched time.Time // last end-offset check of never-fetched partitions
}

// fetchedOffset is a committed offset and its metadata, as read at assignment.
type fetchedOffset struct {
	offset   int64 // -1: none
	metadata string
}

// New connects to the brokers, verifies the input topics, creates missing
// output topics, and joins the group. extra is applied last to both Kafka
// clients (tests point them at kfake).
func New(cfg config.Config, log zerolog.Logger, reg prometheus.Registerer, extra ...kgo.Opt) (*Consumer, error) {
	return NewWithClock(cfg, log, reg, time.Now, extra...)
}

// NewWithClock is New with the wall clock the pipeline judges idleness
// and future timestamps by; tests pass a clock they move.
func NewWithClock(cfg config.Config, log zerolog.Logger, reg prometheus.Registerer, clock func() time.Time, extra ...kgo.Opt) (*Consumer, error) {
	if cfg.Delivery != "at_least_once" {
		return nil, &config.KeyError{Key: "delivery", Value: cfg.Delivery,
			Reason: "only at_least_once is available in this version (exactly_once needs the changelog, not built yet); set delivery: at_least_once"}
	}
	c := &Consumer{cfg: cfg, log: log.With().Str("component", "consumer").Logger(), m: metrics.New(reg), clock: clock,
		topics: map[string]int32{}, parts: map[topicPartition]*partition{}, byID: map[int32]*partition{},
		pending: map[topicPartition]fetchedOffset{}}
	if len(cfg.Source.Topics) >= 1<<(31-partitionBits) {
		return nil, &config.KeyError{Key: "source.topics", Value: fmt.Sprint(len(cfg.Source.Topics)), Reason: "too many topics"}
	}
	c.bounds = newBoundaries(cfg.Window)
	for i, t := range cfg.Source.Topics {
		c.topics[t] = int32(i)
	}
	var err error
	if c.pr, err = newProducer(cfg, log, reg, extra); err != nil {
		return nil, err
	}
	if c.proc, err = pipeline.New(cfg, gate{c}); err != nil {
		c.pr.Close()
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	if c.fetch, err = newFetcher(c); err != nil {
		c.pr.Close()
		return nil, err
	}
	if err = c.checkTopics(); err != nil {
		c.pr.Close()
		return nil, err
	}
	c.writer = producer.NewWriter(c.pr, cfg, c.m, clock)
	if c.cl, err = c.newGroupClient(log, reg, extra); err != nil {
		c.writer.Close()
		c.pr.Close()
		return nil, err
	}
	return c, nil
}

func newProducer(cfg config.Config, log zerolog.Logger, reg prometheus.Registerer, extra []kgo.Opt) (*kgo.Client, error) {
	opts, err := cluster.ClientOpts(cfg.Source, log, "kafka_producer")
	if err != nil {
		return nil, err
	}
	codec, err := compression(cfg.Sink.Compression)
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(cfg.Sink.Linger),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent: the kgo default, which needs all acks
		kgo.MaxBufferedRecords(100_000),
		metrics.KafkaHooks(reg, "kafka_producer"),
	)
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return cl, nil
}

// compression maps sink.compression to a codec; "" means none.
func compression(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, &config.KeyError{Key: "sink.compression", Value: name, Reason: "want none, gzip, snappy, lz4 or zstd"}
}

// checkTopics verifies the inputs and creates missing outputs.
func (c *Consumer) checkTopics() error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	adm := kadm.NewClient(c.pr)
	if err := cluster.VerifyInputs(ctx, adm, c.cfg.Source.Topics); err != nil {
		return err
	}
	return cluster.EnsureOutputs(ctx, adm, c.cfg.Sink)
}

func (c *Consumer) newGroupClient(log zerolog.Logger, reg prometheus.Registerer, extra []kgo.Opt) (*kgo.Client, error) {
	opts, err := cluster.ClientOpts(c.cfg.Source, log, "kafka_consumer")
	if err != nil {
		return nil, err
	}
	start := kgo.NewOffset().AtStart()
	if c.cfg.Source.StartOffset == "latest" {
		start = kgo.NewOffset().AtEnd()
	}
	opts = append(opts,
		kgo.ConsumerGroup(c.cfg.Source.Group),
		kgo.ConsumeTopics(c.cfg.Source.Topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(start),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { c.rebalanceWaits.Store(true) }),
		kgo.OnOffsetsFetched(c.offsetsFetched),
		metrics.KafkaHooks(reg, "kafka_consumer"),
	)
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	return cl, nil
}

// Ready reports whether the group is joined and the consumer is not
// shutting down (/readyz).
func (c *Consumer) Ready() bool { return c.ready.Load() }

func (c *Consumer) setReady(ok bool) {
	c.ready.Store(ok)
	if ok {
		c.m.Ready.Set(1)
	} else {
		c.m.Ready.Set(0)
	}
}

// Drain ends the service after Run returned: it fires nothing early,
// waits for every output to be acknowledged, commits, and leaves the
// group. Open windows stay uncommitted: the partition's next owner
// rebuilds them from the committed offset.
func (c *Consumer) Drain(ctx context.Context) error {
	c.setReady(false)
	c.mu.Lock()
	c.closing = true
	err := c.commit(ctx, c.allParts())
	c.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("drain: %w", err)
	}
	c.close()
	return err
}

// Close leaves the group and closes the clients without committing (a
// crash, as far as the offsets are concerned).
func (c *Consumer) Close() {
	c.setReady(false)
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.close()
}

func (c *Consumer) close() {
	c.cl.Close()     // leaves the group; the revoke callback sees closing
	c.writer.Close() // drops what was not handed to the producer: uncommitted
	c.pr.Close()
}

func (c *Consumer) allParts() []*partition {
	ps := make([]*partition, 0, len(c.parts))
	for _, p := range c.parts {
		ps = append(ps, p)
	}
	return ps
}

// id is the engine partition id of tp.
func (c *Consumer) id(tp topicPartition) int32 {
	return c.topics[tp.topic]<<partitionBits | tp.partition
}

func (c *Consumer) newPartition(tp topicPartition) *partition {
	labels := []string{tp.topic, strconv.Itoa(int(tp.partition))}
	p := &partition{tp: tp, id: c.id(tp), next: -1, hwm: -1, start: -1,
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
