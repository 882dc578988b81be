package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
	"aggregator/internal/consumer"
)

// pairRun is one pairwise case running: its broker and registry, its
// configs (by generation), its stream and the instances of the service
// running now.
type pairRun struct {
	t       *testing.T
	c       pairCase
	brokers []string
	reg     *switchableRegistry // nil unless the case needs one
	cfgs    []config.Config
	stream  *pairStream
	format  pairFormat
	refs    []pairRef // replay of each generation's config
	live    []*pairInstance
	gen     int             // the generation the live instances run
	ends    map[int32]int64 // records produced, by input partition
	auth    auth            // how the service and the test's clients authenticate
	cl      *kgo.Client
	adm     *kadm.Client
	// cut are the cut-overs of generation 2, by state partition (ms).
	cut map[string]int64
	log zerolog.Logger // the instances' (-pairwise.logs), each with its number
	n   int            // instances started
}

// pairInstance is one instance of the service, on a goroutine.
type pairInstance struct {
	c      *consumer.Consumer
	reg    *prometheus.Registry
	fz     *freezer
	cancel context.CancelFunc
	done   chan error
	exited error // what Run returned, once it did
	over   bool
}

// pairWait bounds each wait of a case.
const pairWait = 60 * time.Second

func runPairCase(t *testing.T, c pairCase, seed uint64) {
	begin := time.Now()
	step := func(what string) { t.Logf("%6.1fs %s", time.Since(begin).Seconds(), what) }
	r := newPairRun(t, c, seed)
	r.startAll(1)
	step("started")
	for i, kind := range r.stream.kinds {
		ph := r.stream.phases[i]
		if i == changeAt && c.change != "none" {
			r.changeConfig()
			step("config changed")
		}
		if i == changeAt && c.fault != "none" {
			half := len(ph) / 2
			r.produce(ph[:half])
			r.fault()
			step(c.fault)
			ph = ph[half:]
		}
		r.produce(ph)
		r.settle(i, kind)
		step(fmt.Sprintf("phase %d settled", i))
	}
	check := newPairCheck(r)
	check.waitComplete()
	step("complete")
	r.stopAll()
	check.run()
	step("checked")
}

func newPairRun(t *testing.T, c pairCase, seed uint64) *pairRun {
	t.Helper()
	a := authSetup(t, c.auth)
	kc, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(pairParts, inTopic),
		kfake.SeedTopics(1, resultsTopic, lateTopic, dlqTopic), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, a.broker...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(kc.Close)
	r := &pairRun{t: t, c: c, brokers: kc.ListenAddrs(), auth: a, ends: map[int32]int64{}, log: zerolog.Nop()}
	if *pairLogs != "" {
		f, err := os.Create(filepath.Join(*pairLogs, fmt.Sprintf("case_%02d.log", c.n)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		r.log = zerolog.New(zerolog.SyncWriter(f)).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	}
	r.cl = client(t, r.brokers, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, a.client...)...)
	r.adm = kadm.NewClient(r.cl)
	url := "http://registry.invalid:8081"
	r.format = newPairFormat(t, c.format)
	if c.registry() {
		r.reg = newRegistry(t)
		url = r.reg.URL()
		registerPairSchemas(t, r.reg, r.format)
	}
	for gen := 1; gen <= c.generations(); gen++ {
		cfg, err := config.Parse([]byte(c.yaml(gen, url)), pairEnv(r.brokers))
		if err == nil {
			a.source(&cfg.Source)
			err = cfg.ValidateKafka()
		}
		if err != nil {
			t.Fatalf("generation %d's config: %v", gen, err)
		}
		r.cfgs = append(r.cfgs, cfg)
	}
	r.stream = newPairStream(seed, c.spread(), c.scale(), c.streamBase())
	r.stream.encode(r.format)
	for _, cfg := range r.cfgs {
		r.refs = append(r.refs, pairReference(t, r, cfg))
	}
	return r
}

// startAll starts the case's instances with generation gen's config.
func (r *pairRun) startAll(gen int) {
	r.gen = gen
	for range r.c.instances {
		r.live = append(r.live, r.start())
	}
	r.waitSplit()
}

// start starts an instance of the running generation. With a lost
// session to come, its connections can be frozen, and it (and every
// other) has a session of 3 s, so that the group drops a paused member
// soon (and not one that a loaded machine slows down).
func (r *pairRun) start() *pairInstance {
	r.t.Helper()
	in := &pairInstance{reg: prometheus.NewRegistry(), fz: &freezer{}, done: make(chan error, 1)}
	r.n++
	log := r.log.With().Int("instance", r.n).Logger()
	opts := []kgo.Opt{kgo.FetchMaxWait(50 * time.Millisecond)}
	if r.c.fault == "lost_session" {
		opts = append(opts, kgo.SessionTimeout(3*time.Second), kgo.HeartbeatInterval(300*time.Millisecond))
		opts = append(opts, r.freezable(in.fz)...)
	}
	var err error
	in.c, err = consumer.NewWithClock(r.cfgs[r.gen-1], log, in.reg, time.Now, opts...)
	if err != nil {
		r.t.Fatalf("consumer.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	go func() { in.done <- in.c.Run(ctx) }()
	r.t.Cleanup(func() {
		in.fz.thaw()
		if !in.over {
			in.cancel()
			<-in.done
			in.c.Close()
		}
	})
	return in
}

// freezable are the options that make an instance's connections go
// through fz. kgo takes a Dialer or a TLS config, not both: with TLS
// (mTLS), fz's connections are wrapped in TLS here, with the config the
// service builds from source.tls, in place of the service's own dialing.
func (r *pairRun) freezable(fz *freezer) []kgo.Opt {
	r.t.Helper()
	src := r.cfgs[r.gen-1].Source
	if !src.TLS.Enabled {
		return []kgo.Opt{kgo.Dialer(fz.dial)}
	}
	certs, err := cluster.NewCerts("source.tls", src.TLS, r.log, cluster.ReloadFailures(nil))
	if err != nil {
		r.t.Fatalf("source.tls: %v", err)
	}
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		c, err := fz.dial(ctx, network, host)
		if err != nil {
			return nil, err
		}
		tc := certs.Config()
		if tc.ServerName, _, err = net.SplitHostPort(host); err != nil {
			c.Close()
			return nil, err
		}
		tlsConn := tls.Client(c, tc)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return tlsConn, nil
	}
	return []kgo.Opt{kgo.DialTLSConfig(nil), kgo.Dialer(dial)}
}

// stop is a graceful end (SIGTERM): Run returns, Drain commits and leaves.
func (r *pairRun) stop(in *pairInstance) {
	r.t.Helper()
	in.cancel()
	err := in.exited
	if !in.over {
		err = <-in.done
	}
	in.over = true
	if err != nil {
		r.t.Errorf("Run = %v, want nil", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := in.c.Drain(ctx); err != nil {
		r.t.Errorf("Drain = %v, want nil", err)
	}
}

func (r *pairRun) stopAll() {
	for _, in := range r.live {
		r.stop(in)
	}
	r.live = nil
}

// waitUntil waits for cond, failing the case after pairWait, or at once
// when an instance's Run returns.
func (r *pairRun) waitUntil(what func() string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(pairWait)
	tick := time.NewTicker(50 * time.Millisecond) // its conditions ask the broker: not too often
	defer tick.Stop()
	for !cond() {
		for _, in := range r.live {
			select {
			case err := <-in.done:
				in.exited, in.over = err, true
				in.c.Close()
				r.t.Fatalf("an instance stopped on its own (Run = %v) while waiting for %s", err, what())
			default:
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not after %v", what(), pairWait)
		}
		<-tick.C
	}
}

// waitSplit waits, with two instances, until each holds an even share of
// the partitions (input and repartition topic's).
func (r *pairRun) waitSplit() {
	r.t.Helper()
	if len(r.live) < 2 {
		return
	}
	each := pairParts / 2
	if r.c.spread() {
		each *= 2
	}
	r.waitUntil(func() string { return fmt.Sprintf("the group split over %d instances", len(r.live)) }, func() bool {
		gs, err := r.adm.DescribeGroups(context.Background(), r.cfgs[0].Source.Group)
		g, ok := gs[r.cfgs[0].Source.Group]
		if err != nil || !ok || g.State != "Stable" || len(g.Members) != len(r.live) {
			return false
		}
		for _, m := range g.Members {
			c, _ := m.Assigned.AsConsumer()
			n := 0
			for _, tp := range c.Topics {
				n += len(tp.Partitions)
			}
			if n != each {
				return false
			}
		}
		return true
	})
}

// produce writes records to the input topic, in order.
func (r *pairRun) produce(recs []pairRecord) {
	r.t.Helper()
	var krs []*kgo.Record
	for _, rec := range recs {
		krs = append(krs, &kgo.Record{Topic: inTopic, Partition: rec.partition, Key: []byte(rec.key), Value: rec.value,
			Timestamp: time.UnixMilli(pairKafkaTimestamp)})
		r.ends[rec.partition]++
	}
	if err := r.cl.ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
		r.t.Fatalf("produce: %v", err)
	}
}

// pairKafkaTimestamp is every input record's Kafka timestamp.
const pairKafkaTimestamp = 1_700_000_000_000

// settle waits until the service has taken phase i in: its input offsets
// committed, and after a phase that moves event time on, the watermark
// replay has after it reached every state partition (on each instance,
// with the watermark topic), so that the next phase is judged against
// it whatever the instances and the interleaving.
func (r *pairRun) settle(i, kind int) {
	r.t.Helper()
	r.waitCommitted()
	if kind == phaseLate {
		return
	}
	want := int64(math.MaxInt64)
	for _, ref := range r.refs {
		want = min(want, ref.watermarks[i])
	}
	var low int64
	r.waitUntil(func() string {
		return fmt.Sprintf("phase %d: the watermark at %d everywhere (lowest %d)", i, want, low)
	}, func() bool {
		low = r.lowestWatermark()
		return low >= want
	})
}

// waitCommitted waits until the group committed every record produced,
// and with the repartition stage every record stage 1 wrote: stage 2 has
// read them too (with a change, the generation that takes a record in
// stage 2 is the one that reads it there).
func (r *pairRun) waitCommitted() {
	r.t.Helper()
	group, rt := r.cfgs[0].Source.Group, r.cfgs[0].State.RepartitionTopic
	var got, want map[string]int64
	r.waitUntil(func() string { return fmt.Sprintf("offsets %v committed (now %v)", want, got) }, func() bool {
		got, want = map[string]int64{}, map[string]int64{}
		for p, n := range r.ends {
			want[fmt.Sprintf("%s/%d", inTopic, p)] = n
		}
		if r.c.spread() {
			ends, err := r.adm.ListEndOffsets(context.Background(), rt)
			if err != nil {
				return false
			}
			ends.Each(func(o kadm.ListedOffset) { want[fmt.Sprintf("%s/%d", rt, o.Partition)] = o.Offset })
		}
		offs, err := r.adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return false
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil {
				got[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.At
			}
		})
		for tp, n := range want {
			if got[tp] < n {
				return false
			}
		}
		return true
	})
}

// lowestWatermark is the lowest watermark, in ms, that a window of the
// live instances follows: by_key with scope global, each instance's
// merged watermark; otherwise each state partition's (the input
// partitions with scope partition, the repartition topic's with the
// repartition stage), from the instance with the highest (a partition's
// earlier owner keeps the value it had).
func (r *pairRun) lowestWatermark() int64 {
	low := int64(math.MaxInt64)
	if r.cfgs[0].PublishesWatermarks() {
		for _, in := range r.live {
			low = min(low, gaugeMs(gauge(r.t, in.reg, "aggregator_watermark_seconds")))
		}
		return low
	}
	topic := inTopic
	if r.c.spread() {
		topic = r.cfgs[0].State.RepartitionTopic
	}
	for p := range int32(pairParts) {
		high := int64(math.MinInt64)
		for _, in := range r.live {
			high = max(high, gaugeMs(partitionGauge(r.t, in.reg, "aggregator_partition_watermark_seconds", topic, p)))
		}
		low = min(low, high)
	}
	return low
}

// gaugeMs is a gauge in seconds as ms.
func gaugeMs(s float64) int64 {
	if math.IsInf(s, -1) {
		return math.MinInt64
	}
	return int64(math.Round(s * 1000))
}

// changeConfig replaces every instance with one of generation 2's config
// (a Recreate rollout: each drains, as on SIGTERM), and waits until every
// state partition is restored; those that held windows cut over
// (pairRun.cut), the others start with the new generation.
func (r *pairRun) changeConfig() {
	r.t.Helper()
	old := len(r.live)
	r.stopAll()
	r.live = nil
	r.gen = 2
	for range old {
		r.live = append(r.live, r.start())
	}
	r.waitSplit()
	// Every state partition restored: each counts a generation or more
	// (aggregator_generations) once its restore decided.
	var gens, restoring float64
	r.waitUntil(func() string {
		return fmt.Sprintf("every state partition restored (generations %v, restoring %v)", gens, restoring)
	}, func() bool {
		gens, restoring = 0, 0
		for _, in := range r.live {
			gens += gauge(r.t, in.reg, "aggregator_generations")
			restoring += gauge(r.t, in.reg, "aggregator_restoring_partitions")
		}
		return gens >= pairParts && restoring == 0
	})
	r.cut = map[string]int64{}
	for _, in := range r.live {
		maps.Copy(r.cut, cutovers(r.t, in.reg))
	}
}

// fault is the case's fault, half-way through the second main phase:
// the first instance drains and starts again (SIGTERM and a restart), or
// it pauses (all its connections frozen) until the group has dropped it,
// then goes on.
func (r *pairRun) fault() {
	r.t.Helper()
	switch r.c.fault {
	case "restart":
		r.waitCommitted()
		r.stop(r.live[0])
		r.live[0] = r.start()
		r.waitSplit()
	case "lost_session":
		in := r.live[0]
		in.fz.freeze()
		group := r.cfgs[0].Source.Group
		r.waitUntil(func() string { return "the group without the paused instance" }, func() bool {
			gs, err := r.adm.DescribeGroups(context.Background(), group)
			g, ok := gs[group]
			return err == nil && ok && g.Err == nil && len(g.Members) == len(r.live)-1
		})
		in.fz.thaw()
	}
}

// partitionGauge is the value of a gauge of name for the topic's
// partition (-Inf: none).
func partitionGauge(t testing.TB, reg *prometheus.Registry, name, topic string, p int32) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["topic"] == topic && labels["partition"] == fmt.Sprint(p) {
				return m.GetGauge().GetValue()
			}
		}
	}
	return math.Inf(-1)
}
