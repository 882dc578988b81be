package producer

import (
	"context"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/ready"
	"aggregator/internal/record"
)

const (
	// batchOutputs is how many outputs a batch holds before it is handed
	// over without waiting for Send: large enough to make the hand-over
	// cost nothing per output, small enough to keep the writer busy.
	batchOutputs = 1024
	// batches is how many batches exist: one being filled, the others
	// queued or being written. With all of them queued, the engine
	// goroutine waits: the writer's backpressure.
	batches = 4
)

// A batch is outputs on their way from the engine goroutine to the writer
// goroutine, in emission order.
type batch struct {
	outs       []output
	results    []ready.WindowResult // copies of the results; Aggregates are in vals
	vals       []record.Value
	resultDone func(*kgo.Record, error) // the promise of the batch's results
	synced     chan struct{}            // if set, closed once the batch is handed to the client
}

// output is one output of a batch: rec (a late event or dead letter,
// produced with done), or else results[res] with its aggregates vals[lo:hi].
type output struct {
	rec         *kgo.Record
	done        func(*kgo.Record, error)
	alone       bool // rec is produced alone in its batch (see replacement)
	res, lo, hi int
}

func (b *batch) reset() {
	clear(b.outs) // drop the records, so they can be collected
	b.outs, b.results, b.vals, b.synced = b.outs[:0], b.results[:0], b.vals[:0], nil
}

// A batcher hands outputs from the engine goroutine to the writer
// goroutine a batch at a time, in order, and runs the writer goroutine:
// it calls write for each batch. The engine goroutine fills cur and
// calls send, sync and close; with every batch queued, send waits (the
// writer's backpressure).
type batcher struct {
	cur      *batch      // being filled by the engine goroutine
	queue    chan *batch // to the writer goroutine, in order
	free     chan *batch // back from it
	write    func(context.Context, *batch)
	cancel   context.CancelFunc // unblocks a Produce waiting on a full buffer, at close
	stopping atomic.Bool
	stopped  chan struct{}
}

// start makes the batches, the first with the promise resultDone, and
// starts the writer goroutine, which hands each batch to write.
func (q *batcher) start(resultDone func(*kgo.Record, error), write func(context.Context, *batch)) {
	q.queue, q.free, q.stopped, q.write = make(chan *batch, batches), make(chan *batch, batches), make(chan struct{}), write
	ctx, cancel := context.WithCancel(context.Background())
	q.cancel = cancel
	for range batches - 1 {
		q.free <- &batch{}
	}
	q.cur = &batch{resultDone: resultDone}
	go q.run(ctx)
}

// send hands cur to the writer goroutine; the next batch's results have
// the promise resultDone.
func (q *batcher) send(resultDone func(*kgo.Record, error)) {
	q.queue <- q.cur
	q.cur = <-q.free
	q.cur.resultDone = resultDone
}

// sync is send, and returns once the writer goroutine has handed cur to
// the client.
func (q *batcher) sync(resultDone func(*kgo.Record, error)) {
	done := make(chan struct{})
	q.cur.synced = done
	q.send(resultDone)
	<-done
}

// close stops the writer goroutine; batches not yet written are dropped.
func (q *batcher) close() {
	if q.stopping.Swap(true) {
		return
	}
	q.cancel()
	close(q.queue)
	<-q.stopped
}

// run is the writer goroutine: it encodes and produces the batches in order.
func (q *batcher) run(ctx context.Context) {
	defer close(q.stopped)
	for b := range q.queue {
		if !q.stopping.Load() {
			q.write(ctx, b)
		}
		if b.synced != nil {
			close(b.synced)
		}
		b.reset()
		q.free <- b // never blocks: free has room for every batch
	}
}
