package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// lockedBuffer is a bytes.Buffer that a command may write while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLocalLoop is README's "Run it locally" with a Kafka client in place
// of kcat: `broker`, `run --config examples/local.yaml` against it, the
// example records produced to calls; the results topic then holds what
// `replay --no-flush` prints for the same records (run, like replay
// without the flush, leaves the windows after the last record open).
func TestLocalLoop(t *testing.T) {
	// The service stops before the broker, as a user would stop them.
	brokerCtx, stopBroker := context.WithTimeout(t.Context(), time.Minute)
	defer stopBroker()
	var broker, service sync.WaitGroup
	defer broker.Wait()
	defer stopBroker()
	var brokerOut lockedBuffer
	broker.Go(func() {
		if err := run(brokerCtx, []string{"broker", "--port", "0"}, nil, nil, &brokerOut, &brokerOut); err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	addr := waitFor(t, brokerCtx, &brokerOut, regexp.MustCompile(`at (127\.0\.0\.1:\d+), topics calls \(1 partitions each\)`))

	ctx, stopService := context.WithCancel(brokerCtx)
	defer service.Wait()
	defer stopService()
	env := []string{"AGGREGATOR_SOURCE_BROKERS=" + addr, "AGGREGATOR_HTTP_LISTEN=127.0.0.1:0"}
	var runOut lockedBuffer
	service.Go(func() {
		if err := run(ctx, []string{"run", "--config", "../../examples/local.yaml"}, env, nil, &runOut, &runOut); err != nil {
			t.Errorf("run: %v\n%s", err, runOut.String())
		}
	})

	var want []string
	for line := range strings.Lines(runReplay(t, "", "--config", "../../examples/local.yaml", "--input", "../../examples/calls.csv", "--no-flush")) {
		if result, ok := strings.CutPrefix(line, `{"type":"result",`); ok {
			want = append(want, "{"+strings.TrimSpace(result))
		}
	}
	if len(want) == 0 {
		t.Fatal("replay --no-flush printed no result")
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("calls"),
		kgo.ConsumeTopics("calls-windows"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	input, err := os.ReadFile("../../examples/calls.csv")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(input)) {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(strings.TrimSuffix(line, "\n"))).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	var got []string
	for len(got) < len(want) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("results topic:\n%s\nwant (replay --no-flush):\n%s\nrun's log:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), runOut.String())
	}
}

// waitFor looks at out every 10ms until re matches and returns its first
// group; it fails once ctx ends.
func waitFor(t *testing.T, ctx context.Context, out *lockedBuffer, re *regexp.Regexp) string {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			if m := re.FindStringSubmatch(out.String()); m != nil {
				return m[1]
			}
			t.Fatalf("no %q in the output:\n%s", re, out.String())
		}
	}
}

// TestBrokerCreatesTopicsOnFirstUse: a producer's metadata request for a
// topic the broker lacks creates it with --partitions partitions, as kcat
// -P does against Kafka with auto.create.topics.enable; --auto-create=false
// answers UNKNOWN_TOPIC_OR_PARTITION instead.
func TestBrokerCreatesTopicsOnFirstUse(t *testing.T) {
	for _, tt := range []struct {
		flag       string
		wantErr    error
		partitions int
	}{{"--auto-create=true", nil, 2}, {"--auto-create=false", kerr.UnknownTopicOrPartition, 0}} {
		t.Run(tt.flag, func(t *testing.T) {
			ctx, stop := context.WithTimeout(t.Context(), time.Minute)
			var broker sync.WaitGroup
			defer broker.Wait()
			defer stop()
			var out lockedBuffer
			broker.Go(func() {
				if err := run(ctx, []string{"broker", "--port", "0", "--partitions", "2", tt.flag}, nil, nil, &out, &out); err != nil {
					t.Errorf("broker: %v", err)
				}
			})
			addr := waitFor(t, ctx, &out, regexp.MustCompile(`at (127\.0\.0\.1:\d+)`))
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			req := kmsg.NewPtrMetadataRequest()
			req.AllowAutoTopicCreation = true // what a producer asks
			topic := kmsg.NewMetadataRequestTopic()
			topic.Topic = kmsg.StringPtr("clicks")
			req.Topics = append(req.Topics, topic)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				t.Fatal(err)
			}
			got := resp.Topics[0]
			if err := kerr.ErrorForCode(got.ErrorCode); !errors.Is(err, tt.wantErr) {
				t.Errorf("metadata for clicks: error %v, want %v", err, tt.wantErr)
			}
			if len(got.Partitions) != tt.partitions {
				t.Errorf("metadata for clicks: %d partitions, want %d", len(got.Partitions), tt.partitions)
			}
		})
	}
}

// TestBrokerCrashAbortsOpenTransactions: `broker --data-dir` killed while a
// transaction is open (the data directory as the kill left it: a copy
// taken while the broker runs), then started again from it. The restart
// aborts the transaction with an abort marker, as Kafka's coordinator
// does, and says so: the partition's last stable offset reaches its end,
// and a read_committed reader reads past the aborted records to what the
// same transactional producer commits afterwards (without the marker,
// the reader's aborted-transaction tracking took those for aborted). Both
// ways a transaction can be open at the kill: begun since the broker
// started, or open already at a clean stop before (restored then from
// its session state, so the partition's snapshot holds its open range).
func TestBrokerCrashAbortsOpenTransactions(t *testing.T) {
	for _, cleanStopFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("clean_stop_first=%v", cleanStopFirst), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			dir := filepath.Join(t.TempDir(), "data")
			b := startBroker(t, ctx, dir)
			prod := txnProducer(t, b.addr)
			for _, v := range [][]string{{"a"}, {"open-1", "open-2"}} {
				if err := prod.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				for _, x := range v {
					if err := prod.ProduceSync(ctx, kgo.StringRecord(x)).FirstErr(); err != nil {
						t.Fatalf("produce %s: %v", x, err)
					}
				}
				if x := v[0]; x == "a" {
					if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
						t.Fatal(err)
					}
				}
			}
			if cleanStopFirst {
				b.stop()
				b = startBroker(t, ctx, dir)
			}
			crashed := crashCopy(t, dir)
			b.stop()
			prod.Close()

			b = startBroker(t, ctx, crashed)
			line := waitFor(t, ctx, b.out, regexp.MustCompile(`(broker: crash recovery: t-0: aborted the transaction of producer id \d+ \(epoch \d+\) open at the crash, offsets 2 to 3, with an abort marker at 4)`))
			t.Log(line)
			prod = txnProducer(t, b.addr) // the same transactional ID: its producer ID, the next epoch
			if err := prod.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := prod.ProduceSync(ctx, kgo.StringRecord("after")).FirstErr(); err != nil {
				t.Fatalf("produce after the restart: %v", err)
			}
			if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			lso, hwm := stableOffset(t, ctx, b.addr)
			if lso != hwm {
				t.Errorf("last stable offset %d, high watermark %d: want them equal (no transaction open)", lso, hwm)
			}
			rd, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.ConsumeTopics("t"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			var got []string
			for !slices.Contains(got, "after") && rctx.Err() == nil {
				rd.PollFetches(rctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
			}
			if !slices.Equal(got, []string{"a", "after"}) {
				t.Errorf("read_committed reader read %q, want [a after]", got)
			}
		})
	}
}

// TestBrokerPurgedToEndRestarts: `broker --data-dir` with a partition
// whose records were all deleted (DeleteRecords to the high watermark, as
// the service's purge of the repartition topic does once stage 2 has
// committed all of it), killed, then started again: the partition goes on
// at its offsets (its log start offset, the high watermark then), not at
// 0, where the next records would take offsets its consumers had
// committed past (TestChaos exactly_once lost a repartition
// partition's next records so: "the client consumed to offset 178 but
// was reset to offset 0").
func TestBrokerPurgedToEndRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "data")
	b := startBroker(t, ctx, dir)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b", "c"} {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	deleteRecords(t, ctx, cl, 3)
	cl.Close()
	crashed := crashCopy(t, dir)
	b.stop()

	b = startBroker(t, ctx, crashed)
	if lso, hwm := stableOffset(t, ctx, b.addr); lso != 3 || hwm != 3 {
		t.Errorf("after the restart: last stable offset %d, high watermark %d; want 3, 3", lso, hwm)
	}
	cl, err = kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r, err := cl.ProduceSync(ctx, kgo.StringRecord("next")).First()
	if err != nil {
		t.Fatal(err)
	}
	if r.Offset != 3 {
		t.Errorf("the next record after the restart is at offset %d, want 3", r.Offset)
	}
}

// TestBrokerCrashKeepsPurged: `broker --data-dir` with records deleted
// from a partition's start (DeleteRecords below the high watermark, as the
// service's purge of the repartition topic deletes what stage 2
// committed), killed, then started again: the deleted records stay
// deleted (the partition starts at its log start offset, and a reader
// from the start reads only what is after it), whether the load replays
// the segments (a crash) or takes a clean stop's snapshot whose segments
// have not changed since, and records produced after the restart follow
// on. Before the fix the replay started the log at its first batch: the
// purged records came back below every committed offset, for a reader
// without one.
func TestBrokerCrashKeepsPurged(t *testing.T) {
	for _, cleanStopFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("clean_stop_first=%v", cleanStopFirst), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			dir := filepath.Join(t.TempDir(), "data")
			b := startBroker(t, ctx, dir)
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.DefaultProduceTopic("t"))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{"a", "b", "c", "d", "e"} {
				if err := cl.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			deleteRecords(t, ctx, cl, 2)
			want := []string{"c", "d", "e"}
			if cleanStopFirst {
				// The clean stop's snapshot has log start 2; the purge
				// to 3 after the restart changes no segment file.
				cl.Close()
				b.stop()
				b = startBroker(t, ctx, dir)
				if cl, err = kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.DefaultProduceTopic("t")); err != nil {
					t.Fatal(err)
				}
				deleteRecords(t, ctx, cl, 3)
				want = want[1:]
			}
			cl.Close()
			crashed := crashCopy(t, dir)
			b.stop()

			b = startBroker(t, ctx, crashed)
			if start := startOffset(t, ctx, b.addr); start != int64(5-len(want)) {
				t.Errorf("after the restart: log start offset %d, want %d", start, 5-len(want))
			}
			cl, err = kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.DefaultProduceTopic("t"), kgo.ConsumeTopics("t"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := cl.ProduceSync(ctx, kgo.StringRecord("next")).FirstErr(); err != nil {
				t.Fatal(err)
			}
			want = append(want, "next")
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			var got []string
			for !slices.Contains(got, "next") && rctx.Err() == nil {
				cl.PollFetches(rctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
			}
			if !slices.Equal(got, want) {
				t.Errorf("a reader from the start read %q, want %q", got, want)
			}
		})
	}
}

// crashCopy is a copy of the data directory dir as the broker's kill
// would leave it now: what it wrote, without what a clean stop adds.
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	crashed := filepath.Join(t.TempDir(), "crashed")
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatalf("copy the data directory: %v", err)
	}
	return crashed
}

// deleteRecords deletes the records of t[0] below offset.
func deleteRecords(t *testing.T, ctx context.Context, cl *kgo.Client, offset int64) {
	t.Helper()
	dreq := kmsg.NewPtrDeleteRecordsRequest()
	dt := kmsg.NewDeleteRecordsRequestTopic()
	dt.Topic = "t"
	dp := kmsg.NewDeleteRecordsRequestTopicPartition()
	dp.Partition, dp.Offset = 0, offset
	dt.Partitions = append(dt.Partitions, dp)
	dreq.Topics = append(dreq.Topics, dt)
	dresp, err := dreq.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(dresp.Topics[0].Partitions[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("delete records of t[0] to %d: %v", offset, err)
	}
}

// startOffset is partition t[0]'s log start offset (ListOffsets earliest).
func startOffset(t *testing.T, ctx context.Context, addr string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	o, ok := starts.Lookup("t", 0)
	if !ok || o.Err != nil {
		t.Fatalf("list the start offset of t[0]: %v", o.Err)
	}
	return o.Offset
}

// TestBrokerCrashTwiceFences: `broker --data-dir` killed with a
// transaction open, started again (the restart aborts it and bumps the
// producer's epoch), and killed again before the producer sent anything.
// The producer, never told, goes on in its transaction after the second
// restart: it must be fenced, not commit the rest of a transaction whose
// first part the first restart aborted (records lost, the commit
// reported done).
func TestBrokerCrashTwiceFences(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := filepath.Join(t.TempDir(), "data")
	b := startBrokerAt(t, ctx, dir, port)
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.DefaultProduceTopic("t"), kgo.TransactionalID("p"),
		kgo.RecordRetries(3), kgo.RetryTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, kgo.StringRecord("open")).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	crashed := crashCopy(t, dir)
	b.stop()
	b = startBrokerAt(t, ctx, crashed, port)
	waitFor(t, ctx, b.out, regexp.MustCompile(`(broker: crash recovery: t-0: aborted the transaction)`))
	again := filepath.Join(t.TempDir(), "again")
	if err := os.CopyFS(again, os.DirFS(crashed)); err != nil {
		t.Fatalf("copy the data directory: %v", err)
	}
	b.stop()
	b = startBrokerAt(t, ctx, again, port)

	err = prod.ProduceSync(ctx, kgo.StringRecord("late")).FirstErr()
	if err == nil {
		err = prod.EndTransaction(ctx, kgo.TryCommit)
	}
	if err == nil {
		t.Fatalf("the producer committed its transaction after two crashes (the first restart aborted its first record): want it fenced")
	}
	t.Logf("the producer after two crashes: %v", err)
	if !errors.Is(err, kerr.InvalidProducerEpoch) && !errors.Is(err, kerr.ProducerFenced) {
		t.Errorf("the producer after two crashes: %v, want INVALID_PRODUCER_EPOCH or PRODUCER_FENCED", err)
	}
}

// TestBrokerCrashCompletesCommit: `broker --data-dir` killed while EndTxn
// (commit) wrote its markers: the marker of one partition written, not
// the other's, nor the transaction's offset commit (the data directory
// as the kill left it: the partition, the producer log up to its prepare
// entry, from a copy taken after the commit; the rest from one taken
// before it). The restart completes the commit, as Kafka's coordinator
// completes a PrepareCommit: both records are read_committed, the offset
// commit is the group's. Aborting the partition not reached (as a
// transaction open at the crash) commits half a transaction: a
// changelog's state without its results, or the other way round.
func TestBrokerCrashCompletesCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "data")
	b := startBroker(t, ctx, dir)
	prod := txnProducer(t, b.addr)
	creq := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "u", 1, 1
	creq.Topics = append(creq.Topics, ct)
	if cresp, err := creq.RequestWith(ctx, prod); err != nil || cresp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic u: %v %v", err, cresp)
	}
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*kgo.Record{{Topic: "t", Value: []byte("x")}, {Topic: "u", Value: []byte("y")}} {
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", r.Value, err)
		}
	}
	id, epoch, err := prod.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oreq := kmsg.NewPtrTxnOffsetCommitRequest() // v5: adds the group to the transaction
	oreq.TransactionalID, oreq.Group, oreq.ProducerID, oreq.ProducerEpoch, oreq.Generation = "p", "g", id, epoch, -1
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("t")
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, prod)
	if err != nil {
		t.Fatal(err)
	}
	ot := kmsg.NewTxnOffsetCommitRequestTopic()
	ot.Topic, ot.TopicID = "t", mresp.Topics[0].TopicID // by name to v5, by ID from v6
	op := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	op.Partition, op.Offset, op.LeaderEpoch = 0, 7, -1
	ot.Partitions = append(ot.Partitions, op)
	oreq.Topics = append(oreq.Topics, ot)
	oresp, err := oreq.RequestWith(ctx, prod)
	if err == nil {
		err = kerr.ErrorForCode(oresp.Topics[0].Partitions[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("offset commit in the transaction: %v", err)
	}
	before := filepath.Join(t.TempDir(), "before")
	if err := os.CopyFS(before, os.DirFS(dir)); err != nil {
		t.Fatalf("copy the data directory: %v", err)
	}
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	after := filepath.Join(t.TempDir(), "after")
	if err := os.CopyFS(after, os.DirFS(dir)); err != nil {
		t.Fatalf("copy the data directory: %v", err)
	}
	b.stop()
	prod.Close()

	crashed := before
	part := filepath.Join("partitions", "t-0")
	if err := os.RemoveAll(filepath.Join(crashed, part)); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(crashed, part), os.DirFS(filepath.Join(after, part))); err != nil {
		t.Fatal(err)
	}
	pids, err := os.ReadFile(filepath.Join(after, "pids.log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed, "pids.log"), pidsLogThroughPrepare(t, pids), 0o644); err != nil {
		t.Fatal(err)
	}

	b = startBroker(t, ctx, crashed)
	line := waitFor(t, ctx, b.out, regexp.MustCompile(`(broker: crash recovery: u-0: committed the transaction of producer id \d+ \(epoch \d+\) whose commit was under way at the crash, offsets 0 to 0, with a commit marker at 1)`))
	t.Log(line)
	rd, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.ConsumeTopics("t", "u"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	var got []string
	for len(got) < 2 && rctx.Err() == nil {
		rd.PollFetches(rctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if slices.Sort(got); !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("read_committed reader read %q, want [x y] (the whole transaction)", got)
	}
	freq := kmsg.NewPtrOffsetFetchRequest()
	freq.Group = "g"
	fresp, err := freq.RequestWith(ctx, rd)
	if err != nil {
		t.Fatal(err)
	}
	var off int64 = -1
	for _, ft := range fresp.Topics {
		for _, fp := range ft.Partitions {
			if ft.Topic == "t" && fp.Partition == 0 {
				off = fp.Offset
			}
		}
	}
	if off != 7 {
		t.Errorf("group g's committed offset of t[0] = %d, want 7 (the transaction's offset commit)", off)
	}
}

// pidsLogThroughPrepare is kfake's producer log cut after its prepare
// entry: as a crash while the markers were written leaves it (entries:
// 4 bytes length, 4 bytes CRC, then length bytes: 2 of version, the JSON).
func pidsLogThroughPrepare(t *testing.T, raw []byte) []byte {
	t.Helper()
	for pos := 0; pos+8 <= len(raw); {
		end := pos + 8 + int(binary.LittleEndian.Uint32(raw[pos:]))
		if end > len(raw) {
			break
		}
		if bytes.Contains(raw[pos+10:end], []byte(`"type":"prepare"`)) {
			return raw[:end]
		}
		pos = end
	}
	t.Fatalf("no prepare entry in the producer log:\n%q", raw)
	return nil
}

// runningBroker is `aggregator broker` run in the test's process.
type runningBroker struct {
	addr string
	out  *lockedBuffer
	stop func() // a clean stop (SIGTERM), waited for
}

// startBroker runs `aggregator broker --data-dir dir` with topic t.
func startBroker(t *testing.T, ctx context.Context, dir string) *runningBroker {
	t.Helper()
	return startBrokerAt(t, ctx, dir, 0)
}

// startBrokerAt is startBroker on port (0: any).
func startBrokerAt(t *testing.T, ctx context.Context, dir string, port int) *runningBroker {
	t.Helper()
	bctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	b := &runningBroker{out: &lockedBuffer{}}
	wg.Go(func() {
		if err := run(bctx, []string{"broker", "--port", fmt.Sprint(port), "--data-dir", dir, "--topics", "t"}, nil, nil, b.out, b.out); err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	b.stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(b.stop)
	b.addr = waitFor(t, ctx, b.out, regexp.MustCompile(`at (127\.0\.0\.1:\d+), topics t`))
	return b
}

// txnProducer is a transactional producer of topic t, transactional ID p.
func txnProducer(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"), kgo.TransactionalID("p"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// stableOffset is partition t[0]'s last stable offset (what a
// read_committed ListOffsets answers) and high watermark.
func stableOffset(t *testing.T, ctx context.Context, addr string) (lso, hwm int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i, level := range []int8{1, 0} {
		req := kmsg.NewPtrListOffsetsRequest()
		req.IsolationLevel = level
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = 0, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			lso = p.Offset
		} else {
			hwm = p.Offset
		}
	}
	return lso, hwm
}
