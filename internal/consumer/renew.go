package consumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

const (
	// renewWindow and maxRenewals bound renew: fenced more often than
	// that, another producer keeps taking the transactional ID (two
	// instances with one source.instance_id), and the service ends.
	renewWindow = 5 * time.Minute
	maxRenewals = 5
)

// errRenew wraps an error that ends the exactly_once session's producer
// for good but not the service: Run makes the session again (renew).
var errRenew = errors.New("the transactional producer was fenced")

// fenced reports whether err ends the transactional producer for good:
// the brokers bumped its epoch (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH:
// a transaction the broker aborted at its timeout while the process was
// stopped, or a broker restart that aborted it), which no call of the
// client recovers from. Kafka Streams treats it as a migrated task. So
// is INVALID_TXN_STATE: the coordinator ended the transaction the
// producer would end (a commit of one it aborted at its timeout, with
// the epoch KIP-890 bumped: in TestChaos exactly_once seed 7, a
// process stopped past the transaction timeout exited 1 at SIGCONT).
func fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.InvalidTxnState)
}

// renew replaces the exactly_once session whose producer was fenced, as
// Kafka Streams closes a migrated task's producer and rejoins: the state
// goes back to the last commit and every partition is dropped, the
// session and the writer are closed (the group is left: a static member
// takes its partitions back at once when it joins again), and a new
// session (producer ID initialized again, which fences its old epoch for
// good) joins the group; the partitions assigned restore from the
// changelog. Run's fetcher is stopped meanwhile. Fenced more than
// maxRenewals times within renewWindow, it returns an error that ends the
// service.
func (c *Consumer) renew(cause error) error {
	now := time.Now()
	kept := c.kafka.renewals[:0]
	for _, t := range c.kafka.renewals {
		if now.Sub(t) < renewWindow {
			kept = append(kept, t)
		}
	}
	c.kafka.renewals = append(kept, now)
	if len(c.kafka.renewals) > maxRenewals {
		return fmt.Errorf("%w, %d times within %v: another producer keeps taking its transactional ID (two instances with source.instance_id %q?)",
			cause, len(c.kafka.renewals), renewWindow, c.cfg.Source.InstanceID)
	}
	c.log.Warn().Err(cause).Msg("the transactional producer was fenced (the process was stopped longer than state.transaction_timeout, or a broker restart aborted its transaction): closing it and joining the group again; the partitions restore from the last commit")
	c.mu.Lock()
	c.cycle.inTxn = false
	c.abort()
	all := make([]*partition, 0, len(c.parts.byTP))
	for _, p := range c.parts.byTP {
		all = append(all, p)
	}
	c.drop(all)
	c.revocations.take()
	c.revocations.disownAll() // the new client owns nothing until it is assigned
	c.mu.Unlock()
	c.writer.Close()
	closed := make(chan struct{})
	go func() { // kgo's Close has no context: it waits for a join in flight
		defer close(closed)
		c.kafka.sess.Close()
	}()
	select {
	case <-closed:
	case <-time.After(c.cfg.Source.SessionTimeout):
		c.log.Warn().Msg("the fenced Kafka client did not close in time; going on")
	}
	if err := c.newClients(c.kafka.limits); err != nil {
		return err
	}
	c.newWriter()
	c.m.Renewals.Inc()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begin()
}
