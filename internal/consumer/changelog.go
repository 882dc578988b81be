package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/pipeline"
	"aggregator/internal/state"
)

// The fetch sizes of a restore's changelog readers. A client decodes a
// fetch whole before it hands a record over, so a large fetch makes the
// first records wait and the reading come in bursts: 16 MiB fetches (8
// MiB a partition) held the first records back for seconds and read no
// faster (docs/benchmarks.md, Restore). A fetch of 4 MiB (kgo's default is
// 50 MiB) also keeps what a reader holds of one (the records decompressed
// and their kgo.Record structs, several times the changelog's bytes)
// small beside the state it restores.
const (
	restoreFetchBytes          = 4 << 20
	restorePartitionFetchBytes = 1 << 20
)

// restoreProgressEvery is how often a restore logs its progress.
const restoreProgressEvery = 5 * time.Second

// changelogRead is one restore's read of the changelog: each changelog
// partition into a Restorer of its own, by readers that run in parallel,
// each with its own client.
type changelogRead struct {
	c     *Consumer
	topic string
	parts map[int32]*partRead
	total int64 // records to read: the partitions' end offsets less their start offsets
	// idle is how long a reader may read nothing (and not be stalled)
	// before the restore fails (and is tried again from the start): the
	// brokers do not answer. The restore itself may take as long as its
	// records take.
	idle time.Duration

	read atomic.Int64 // records read so far
	done atomic.Int32 // partitions handed to finish
}

// partRead is one changelog partition's read.
type partRead struct {
	p          *partition
	r          *state.Restorer
	start, end int64
	next       int64 // the next offset to read (the reader's only)
	held       bool  // it holds a place of changelogRead's bound
	sent       bool  // handed to finish
	// base is how many records r held before this read: a read goes on
	// from a standby copy (copied), or from where a read that stalled
	// on an open transaction stopped.
	base   int
	copied bool
	// warm is the standby copy's built state (copied): the read's tail
	// goes into r, its Restorer, and finish builds it (Core.BuildWarm).
	warm *pipeline.Warm
	// records is how many records this read added to r (finish notes
	// it before r is spent).
	records int
}

// goOn is the read of p that goes on from r, read up to next (a standby
// copy's, or a stalled read's).
func goOn(p *partition, r *state.Restorer, next int64, copied bool) *partRead {
	return &partRead{p: p, r: r, start: next, base: r.Records(), copied: copied}
}

// restoreReaders is how many readers a restore runs: one a core (each
// decodes what its client fetches on a core of its own), at least two.
func restoreReaders(partitions int) int {
	return min(partitions, max(2, runtime.GOMAXPROCS(0)))
}

// readChangelog reads the changelog partitions of ps from their start
// (those in from, from where their read goes on: a standby copy, a read
// that stalled) to
// their end into a Restorer each, and hands each partition read to its
// end to finish, in the order they end, on one of as many goroutines as
// there are readers (so that partitions are restored while the others
// are read, several at once: finish may run concurrently). Each
// reader takes the partitions one at a time from a queue, and takes the
// next only while fewer than two per reader wait for finish or are read:
// so the Restorers held at once are a few partitions' (not the sum of
// all), and the first partitions are restored while the last are read.
// The partitions whose last stable offset is below their end (an open
// transaction) are read last, each reader's together: when a reader has
// seen nothing new for restoreStall and every such partition of its own
// not at its end has its last stable offset at its read position, it
// leaves them: stalled, which it returns. A partition a rebalance
// callback dropped meanwhile is left out. An error of finish ends the
// read.
//
// It is called without c.mu, which its readers never take (finish does):
// a slow read holds up no one else that takes c.mu.
func (c *Consumer) readChangelog(ctx context.Context, ps []*partition, from map[int32]*partRead, finish func(*partRead) error) (*changelogRead, map[int32]stall, error) {
	cr := &changelogRead{c: c, topic: c.cfg.State.ChangelogTopic, parts: map[int32]*partRead{}, idle: c.cfg.State.TransactionTimeout + commitTimeout}
	clients := make([]*kgo.Client, restoreReaders(len(ps)))
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	pools := &restorePools{}
	for i := range clients {
		cl, err := kgo.NewClient(append(c.kafka.readOpts[:len(c.kafka.readOpts):len(c.kafka.readOpts)],
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.WithPools(pools),
			kgo.FetchMaxBytes(restoreFetchBytes), kgo.FetchMaxPartitionBytes(restorePartitionFetchBytes))...)
		if err != nil {
			return nil, nil, fmt.Errorf("kafka client: %w", err)
		}
		clients[i] = cl
	}
	adm := kadm.NewClient(clients[0])
	lctx, lcancel := context.WithTimeout(ctx, cr.idle)
	defer lcancel()
	starts, err := adm.ListStartOffsets(lctx, cr.topic)
	if err != nil {
		return nil, nil, fmt.Errorf("start offsets of %s: %w", cr.topic, err)
	}
	ends, err := adm.ListEndOffsets(lctx, cr.topic)
	if err != nil {
		return nil, nil, fmt.Errorf("end offsets of %s: %w", cr.topic, err)
	}
	lsos, err := adm.ListCommittedOffsets(lctx, cr.topic)
	if err != nil {
		return nil, nil, fmt.Errorf("last stable offsets of %s: %w", cr.topic, err)
	}
	var queue, open []*partRead // to read: the stable ones one at a time, then those with an open transaction
	for _, p := range ps {
		s, _ := starts.Lookup(cr.topic, p.id)
		e, ok := ends.Lookup(cr.topic, p.id)
		if !ok || e.Err != nil {
			return nil, nil, fmt.Errorf("end offset of %s[%d]: %v", cr.topic, p.id, e.Err)
		}
		pr := &partRead{p: p, r: state.NewRestorer(), start: max(s.Offset, 0), end: e.Offset}
		if on := from[p.id]; on != nil && on.start >= pr.start {
			// (Its records below the log's start would be gone: the
			// changelog is compacted, so its start does not move.)
			on.end = e.Offset
			pr = on
		}
		cr.parts[p.id] = pr
		switch l, ok := lsos.Lookup(cr.topic, p.id); {
		case pr.end <= pr.start:
		case ok && l.Err == nil && l.Offset < pr.end:
			open = append(open, pr)
		default:
			queue = append(queue, pr)
		}
		cr.total += max(pr.end-pr.start, 0)
	}
	ids := make([]int32, 0, len(queue)+len(open))
	for _, pr := range slices.Concat(queue, open) {
		ids = append(ids, pr.p.id)
	}
	slices.Sort(ids)
	if cr.total > 0 { // a partition without state restores in silence
		c.log.Info().Str("changelog_topic", cr.topic).Int("partitions", len(ps)).Ints32("changelog_partitions", ids).
			Int64("changelog_records", cr.total).Int("readers", min(len(clients), len(ids))).Msg("restore started: reading the changelog")
	}

	var wg sync.WaitGroup
	var mu sync.Mutex // guards stalled, firstErr and queue
	stalled := map[int32]stall{}
	var firstErr error
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			rcancel() // the others stop: the restore starts again
		}
	}
	// held bounds the partitions read or waiting for finish: a reader
	// takes a place before it reads one, finish gives it back.
	held := make(chan struct{}, 2*len(clients))
	// done takes the partitions read to their end, for finish; it has
	// room for all of them, so no reader waits on it. As many finishers
	// as readers take them: each builds its partition's windows without
	// the lock, beside the others and the readers, and takes it only to
	// attach them (restore.go).
	done := make(chan *partRead, len(ps))
	var finishers sync.WaitGroup
	for range len(clients) {
		finishers.Go(func() {
			for pr := range done {
				if rctx.Err() == nil {
					if err := finish(pr); err != nil {
						fail(err)
					}
				}
				cr.done.Add(1)
				if pr.held {
					<-held
				}
			}
		})
	}
	for _, p := range ps {
		if pr := cr.parts[p.id]; pr.end <= pr.start {
			done <- pr // nothing to read
		}
	}
	stop := cr.progress(ctx)
	defer stop()
	for i, cl := range clients {
		var mine map[int32]*partRead // the open ones this reader reads last
		for j := i; j < len(open); j += len(clients) {
			if mine == nil {
				mine = map[int32]*partRead{}
			}
			mine[open[j].p.id] = open[j]
		}
		wg.Go(func() {
			note := func(st map[int32]stall, err error) bool {
				if err != nil {
					fail(err)
					return false
				}
				mu.Lock()
				defer mu.Unlock()
				for id, s := range st {
					stalled[id] = s
				}
				return true
			}
			for {
				select {
				case held <- struct{}{}:
				case <-rctx.Done():
					return
				}
				mu.Lock()
				var pr *partRead
				if len(queue) > 0 {
					pr, queue = queue[0], queue[1:]
				}
				mu.Unlock()
				if pr == nil {
					<-held
					break
				}
				pr.held = true
				st, err := cr.readPartitions(rctx, cl, adm, map[int32]*partRead{pr.p.id: pr}, done)
				if !pr.sent {
					<-held // dropped or stalled: finish never sees it
				}
				if !note(st, err) {
					return
				}
			}
			if len(mine) > 0 {
				note(cr.readPartitions(rctx, cl, adm, mine, done))
			}
		})
	}
	wg.Wait()
	close(done)
	finishers.Wait()
	if firstErr != nil {
		return nil, nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", cr.topic, err)
	}
	return cr, stalled, nil
}

// readPartitions is one reader's loop: it reads parts with cl until each
// is at its end (then handed to done), dropped, or stalled (see
// readChangelog). The records' memory goes back to the client's pools
// (restorePools) once added.
func (cr *changelogRead) readPartitions(ctx context.Context, cl *kgo.Client, adm *kadm.Client, parts map[int32]*partRead, done chan<- *partRead) (map[int32]stall, error) {
	from := map[int32]kgo.Offset{}
	for id, pr := range parts {
		pr.next = pr.start
		from[id] = kgo.NewOffset().At(pr.start)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{cr.topic: from})
	defer cl.RemoveConsumePartitions(map[string][]int32{cr.topic: slices.Collect(maps.Keys(parts))})
	left := maps.Clone(parts)
	moved := time.Now() // the last record read, or the last stall check
	last := moved       // the last record read
	for len(left) > 0 {
		pctx, pcancel := context.WithTimeout(ctx, restoreStall/4)
		fs := cl.PollFetches(pctx)
		pcancel()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", cr.topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) { // the poll's own deadline
				ferr = fmt.Errorf("read %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		for id, pr := range left {
			if pr.p.dropped.Load() {
				delete(left, id) // dropped meanwhile: its records are not read
			}
		}
		var aerr error
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			defer r.Recycle()
			pr := left[r.Partition]
			if pr == nil || aerr != nil {
				return
			}
			pr.next = r.Offset + 1
			n++
			if r.Attrs.IsControl() {
				return
			}
			var tag []byte
			for _, h := range r.Headers {
				if h.Key == pipeline.TagHeader {
					tag = h.Value
				}
			}
			if err := pr.r.Add(r.Key, r.Value, tag); err != nil {
				aerr = fmt.Errorf("%s[%d] offset %d: %w", cr.topic, r.Partition, r.Offset, err)
			}
		})
		if aerr != nil {
			return nil, aerr
		}
		if n > 0 {
			moved, last = time.Now(), time.Now()
			cr.read.Add(int64(n))
		} else if time.Since(last) > cr.idle {
			return nil, fmt.Errorf("read %s: no record for %v", cr.topic, cr.idle)
		}
		for id, pr := range left {
			if pr.next >= pr.end {
				delete(left, id)
				pr.sent = true
				done <- pr
			}
		}
		if len(left) == 0 || time.Since(moved) < restoreStall {
			continue
		}
		// Nothing new for restoreStall: the partitions left may wait on
		// open transactions (read_committed reads up to the last stable
		// offset). If every one does, the others are restored and these
		// wait, paused (see blockedRestore).
		moved = time.Now()
		lsos, err := adm.ListCommittedOffsets(ctx, cr.topic)
		if err != nil {
			continue
		}
		stalled := map[int32]stall{}
		for id, pr := range left {
			if o, ok := lsos.Lookup(cr.topic, id); ok && o.Err == nil && o.Offset <= pr.next {
				stalled[id] = stall{lso: o.Offset, end: pr.end}
			}
		}
		if len(stalled) == len(left) {
			return stalled, nil
		}
	}
	return nil, nil
}

// restorePools recycles the memory a restore's clients decode fetched
// record batches into (kgo.PoolRecords, kgo.PoolDecompressBytes): the
// records, and the batches decompressed. A Restorer copies what it keeps,
// so each record is recycled once added: a read of millions of records
// reuses a few fetches' worth of memory instead of leaving it all to the
// garbage collector.
type restorePools struct{ records, bytes sync.Pool }

func (p *restorePools) GetRecords(n int) []kgo.Record {
	if s, ok := p.records.Get().(*[]kgo.Record); ok && cap(*s) >= n {
		return (*s)[:0]
	}
	return make([]kgo.Record, 0, n)
}

func (p *restorePools) PutRecords(s []kgo.Record) { p.records.Put(&s) }

func (p *restorePools) GetDecompressBytes(compressed []byte, _ kgo.CompressionCodecType) []byte {
	if s, ok := p.bytes.Get().(*[]byte); ok && cap(*s) >= 4*len(compressed) {
		return *s
	}
	return make([]byte, 0, 4*len(compressed))
}

func (p *restorePools) PutDecompressBytes(b []byte) { p.bytes.Put(&b) }

// progress logs the read's progress every restoreProgressEvery until the
// returned func is called.
func (cr *changelogRead) progress(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		began := time.Now()
		t := time.NewTicker(restoreProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				read, secs := cr.read.Load(), time.Since(began).Seconds()
				cr.c.log.Info().Str("changelog_topic", cr.topic).Int32("partitions_done", cr.done.Load()).Int("partitions", len(cr.parts)).
					Int64("changelog_records_read", read).Int64("changelog_records", cr.total).
					Float64("records_per_second", float64(int64(float64(read)/secs))).Msg("restore in progress")
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
