package consumer

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/invariants"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/record"
)

// A poll is one PollRecords result on its way from the fetcher to the
// engine goroutine, decoded by its own workers meanwhile. Its buffers are
// reused: the engine goroutine hands it back once applied.
type poll struct {
	fetchedAt time.Time
	epoch     uint64 // Consumer.epoch when polled: a poll from before an abort is dropped
	rewinds   uint64 // fetcher.rewinds when polled
	closed    bool   // the client was closed
	// unresolved: ctx ended while the schemas its records name were being
	// fetched; none of it is applied (nor committed: read again later).
	unresolved bool
	fatal      error // a poll error that retrying cannot fix
	recs       []pipeline.Decoded
	parts      []polledPart      // the partitions with records, in poll order
	decs       []*record.Decoder // one per decoding worker
	core       *pipeline.Core    // decodes: set by prepare
	decoding   sync.WaitGroup    // the workers decoding recs
}

// polledPart is one partition's records in a poll, in offset order:
// records, decoded into recs[lo:hi].
type polledPart struct {
	tp      topicPartition
	id      int32 // the core's partition id (pipeline.Layout)
	hwm     int64
	lo, hi  int
	records []*kgo.Record
}

// pollsInFlight is how many polls exist at once: one being applied by the
// engine goroutine, the next ones being decoded, and one being polled. The
// client fetches from a broker again only once its last fetch is polled
// empty; enough polls in flight keep that fetch going while the engine
// goroutine applies.
const pollsInFlight = 4

// parallelMin is the number of records below which a poll is decoded by
// one worker: more workers cost more than they save.
const parallelMin = 256

// A fetcher polls ahead of the engine goroutine and has each poll decoded
// in parallel, so that fetching and decoding the next polls overlap with
// applying this one.
//
// Rebalance safety: the group client uses kgo.BlockRebalanceOnPoll, so no
// OnPartitions* callback runs between a non-empty poll and AllowRebalance.
// The fetcher is the only goroutine that polls or calls AllowRebalance, and
// it calls AllowRebalance only while it holds every poll buffer, that is
// while no polled record is being decoded or waits to be applied or is
// being applied: a callback therefore never runs while a polled record is
// unapplied, exactly as when polling and applying alternated on one
// goroutine (commits on revocation see every polled record applied, and a
// revoked partition's records are never applied after it is dropped). As
// polling ahead keeps the client's poll block held, the fetcher stops
// polling ahead and lets the engine goroutine finish whenever kgo signals
// that a rebalance waits (OnPartitionsCallbackBlocked), and allows
// rebalances whenever the engine goroutine is idle.
type fetcher struct {
	c *Consumer
	// polling is held by the fetcher while it polls; with exactly_once a
	// commit holds it, as a transaction must not end during a poll.
	polling invariants.Mutex
	// epoch counts transaction aborts: a poll taken before the last abort
	// holds records past the rewound positions and is dropped.
	epoch atomic.Uint64
	// rewinds counts fetch positions set back (see partition.rewound).
	rewinds atomic.Uint64
	// rebalanceWaits is set when kgo signals that a rebalance waits for the
	// polled records to be applied.
	rebalanceWaits atomic.Bool

	free  chan *poll // polls neither decoding nor held by the engine goroutine; cap pollsInFlight
	ready chan *poll // polls in poll order; cap pollsInFlight, so the fetcher never waits to send; closed when the fetcher ends

	// A commit that needs c.fetch.polling (exactly_once) ends the poll under
	// way rather than wait up to tickInterval for records to arrive.
	commitWaits atomic.Bool
	cancelMu    invariants.Mutex
	cancelPoll  context.CancelFunc // of the poll under way; nil between polls
}

// interrupt ends the poll under way, and the next one at once if it
// begins before the commit has c.fetch.polling.
func (f *fetcher) interrupt() {
	f.commitWaits.Store(true)
	f.cancelMu.Lock()
	defer f.cancelMu.Unlock()
	if f.cancelPoll != nil {
		f.cancelPoll()
	}
}

func (f *fetcher) setCancel(cancel context.CancelFunc) {
	f.cancelMu.Lock()
	defer f.cancelMu.Unlock()
	f.cancelPoll = cancel
	if cancel != nil && f.commitWaits.Load() {
		cancel()
	}
}

func newFetcher(c *Consumer) (*fetcher, error) {
	f := &fetcher{c: c, free: make(chan *poll, pollsInFlight)}
	for range pollsInFlight {
		p := &poll{}
		for range max(runtime.GOMAXPROCS(0), 1) {
			dec, err := record.NewDecoder(c.cfg.RecordSpec(), c.schemas.decoded)
			if err != nil {
				return nil, fmt.Errorf("decoder: %w", err)
			}
			p.decs = append(p.decs, dec)
		}
		f.free <- p
	}
	return f, nil
}

// run polls until ctx is canceled or the client is closed, and sends each
// poll to ready while it decodes.
func (f *fetcher) run(ctx context.Context) {
	defer close(f.ready)
	for {
		p, err := f.next(ctx)
		if p == nil {
			return
		}
		if err != nil {
			// The commit before a rebalance failed: the engine goroutine
			// ends the session with the error instead of a poll.
			p.failed(err)
			f.ready <- p
			return
		}
		f.poll(ctx, p)
		f.ready <- p // never blocks: ready has room for every poll
		if p.closed || p.unresolved {
			return
		}
	}
}

// next returns a poll buffer for the next poll, or nil once ctx is
// canceled. First, if a rebalance waits or the engine goroutine is idle,
// it waits until the engine goroutine holds no poll and allows rebalances.
// A commit before a rebalance that fails for good (a fenced producer, say)
// is returned with a buffer, and the rebalance is not let in: without a
// transaction nothing can be written, and the engine goroutine ends the
// session (a fenced one is made again), as after a commit of its own.
func (f *fetcher) next(ctx context.Context) (*poll, error) {
	waits := f.c.fetch.rebalanceWaits.Swap(false)
	if !waits && len(f.free) < cap(f.free) {
		select {
		case p := <-f.free:
			return p, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
	held := make([]*poll, 0, cap(f.free))
	for len(held) < cap(held) {
		select {
		case p := <-f.free:
			held = append(held, p)
		case <-ctx.Done():
			for _, p := range held {
				f.free <- p
			}
			return nil, nil
		}
	}
	var err error
	if waits {
		err = f.c.commitBeforeRebalance(ctx)
	}
	if err == nil {
		f.c.kafka.cl.AllowRebalance()
	}
	for _, p := range held[1:] {
		f.free <- p
	}
	return held[0], err
}

// failed makes p a poll of no records that carries err, which retrying
// cannot fix.
func (p *poll) failed(err error) {
	p.closed, p.unresolved, p.fatal = false, false, err
	p.recs, p.parts = p.recs[:0], p.parts[:0]
}

// poll fills p with the next PollRecords result and starts decoding it.
func (f *fetcher) poll(ctx context.Context, p *poll) {
	pctx, cancel := context.WithTimeout(ctx, tickInterval)
	f.c.fetch.polling.Lock()
	f.setCancel(cancel)
	p.epoch, p.rewinds = f.epoch.Load(), f.rewinds.Load()
	fs := f.c.kafka.cl.PollRecords(pctx, maxPollRecords)
	f.setCancel(nil)
	f.c.fetch.polling.Unlock()
	cancel()
	p.fetchedAt = f.c.clock()
	p.closed = fs.IsClientClosed()
	p.fatal = f.c.fetchErrors(fs)
	f.prepare(p, fs)
	if p.unresolved = f.resolve(ctx, p) != nil; !p.unresolved {
		p.decode()
	}
}

// resolve fetches the registry schemas that the poll's records name and
// the decoders do not have yet. While the registry is out of reach it
// waits (and so does every partition: records stay in order), handing the
// engine goroutine an empty poll every tickInterval meanwhile, so that it
// still judges idleness and commits (an exactly_once transaction must not
// stay open past its timeout). It returns only ctx's error.
func (f *fetcher) resolve(ctx context.Context, p *poll) error {
	schemas := f.c.schemas.decoded // nil unless the input is a registry format (sink.format avro needs the client alone)
	if schemas == nil || !missingSchemas(schemas, p) {
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- f.c.schemas.registry.Resolve(ctx, schemas, p.values)
	}()
	t := time.NewTicker(tickInterval)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			f.tick()
		}
	}
}

// missingSchemas reports whether a record of p names a schema id that
// schemas does not have (runs of one id are looked up once).
func missingSchemas(schemas *record.Schemas, p *poll) bool {
	last, known, missing := uint32(0), false, false
	p.values(func(v []byte) bool {
		id, ok := record.WireSchemaID(v)
		if !ok || known && id == last {
			return true
		}
		last, known = id, schemas.Has(id)
		missing = !known
		return !missing
	})
	return missing
}

// values yields the value that decoding each record of p may read with a
// registry format's schemas (pipeline.Core.InputValue: a repartition
// record's is the input value it carries), until yield returns false.
func (p *poll) values(yield func([]byte) bool) {
	for _, pp := range p.parts {
		for _, r := range pp.records {
			if r.Attrs.IsControl() {
				continue
			}
			if !yield(p.core.InputValue(pp.id, r.Value, len(r.Headers) > 0)) {
				return
			}
		}
	}
}

// tick sends the engine goroutine an empty poll, if a buffer is free.
func (f *fetcher) tick() {
	select {
	case e := <-f.free:
		e.epoch, e.rewinds, e.fetchedAt, e.closed, e.fatal, e.unresolved = f.epoch.Load(), f.rewinds.Load(), f.c.clock(), false, nil, false
		e.recs, e.parts = e.recs[:0], e.parts[:0]
		f.ready <- e // never blocks: ready has room for every poll
	default:
	}
}

// prepare sizes p for the poll's records and notes where each partition's
// records go; decoding fills them in.
func (f *fetcher) prepare(p *poll, fs kgo.Fetches) {
	n := fs.NumRecords()
	if cap(p.recs) < n {
		p.recs = append(p.recs[:cap(p.recs)], make([]pipeline.Decoded, n-cap(p.recs))...)
	}
	p.recs, p.parts = p.recs[:n], p.parts[:0]
	p.core = f.c.core // made before the fetcher started, and not replaced
	l := p.core.Layout()
	i := 0
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		tp := topicPartition{fp.Topic, fp.Partition}
		p.parts = append(p.parts, polledPart{tp: tp, id: l.ID(fp.Topic, fp.Partition), hwm: fp.HighWatermark,
			lo: i, hi: i + len(fp.Records), records: fp.Records})
		i += len(fp.Records)
	})
}

// decode starts decoding the poll's records, split in one contiguous chunk
// per worker; each worker also copies its records in, while they are in
// cache. p.decoding is done once all are decoded.
func (p *poll) decode() {
	n := len(p.recs)
	if n == 0 {
		return
	}
	workers := min(len(p.decs), max(n/parallelMin, 1))
	chunk := (n + workers - 1) / workers
	for w := range workers {
		lo, hi := w*chunk, min((w+1)*chunk, n)
		p.decoding.Go(func() { decodeRange(p.decs[w], p, lo, hi) })
	}
}

// decodeRange fills and decodes p.recs[lo:hi].
func decodeRange(dec *record.Decoder, p *poll, lo, hi int) {
	j := 0
	for j < len(p.parts) && p.parts[j].hi <= lo {
		j++
	}
	for i := lo; i < hi; i++ {
		for p.parts[j].hi <= i {
			j++
		}
		pp := &p.parts[j]
		r, d := pp.records[i-pp.lo], &p.recs[i]
		d.In = ready.Input{Topic: r.Topic, Partition: pp.id, KafkaPartition: r.Partition, Offset: r.Offset,
			Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli()}
		d.Control = r.Attrs.IsControl()
		var header []byte
		for _, h := range r.Headers {
			if h.Key == pipeline.RepartitionHeader {
				header = h.Value
			}
		}
		p.core.Decode(dec, d, len(r.Headers) > 0, header)
	}
}
