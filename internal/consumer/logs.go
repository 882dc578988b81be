package consumer

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// What the service logs at info about its partitions and transactions:
// what changed, once (docs/operations.md lists these lines).

// note remembers partitions revoked or lost for the next rebalance line.
// Safe for concurrent use.
func (r *revocations) note(m map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logged == nil {
		r.logged = map[string][]int32{}
	}
	for topic, ns := range m {
		r.logged[topic] = append(r.logged[topic], ns...)
	}
}

// takeLogged returns the partitions noted since the last call.
func (r *revocations) takeLogged() map[string][]int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.logged
	r.logged = nil
	return m
}

// logRebalance logs one info line for a rebalance that changed this
// instance's partitions: those assigned, those revoked or lost since the
// last such line, and every partition it holds now. A rebalance that
// changed nothing here logs nothing. c.mu is held.
func (c *Consumer) logRebalance(added map[string][]int32) {
	revoked := c.revocations.takeLogged()
	if partitionCount(added) == 0 && partitionCount(revoked) == 0 {
		return
	}
	held := map[string][]int32{}
	for tp := range c.parts.byTP {
		held[tp.topic] = append(held[tp.topic], tp.partition)
	}
	c.log.Info().Str("assigned", partitionList(added)).Str("revoked", partitionList(revoked)).
		Str("held", partitionList(held)).Msg("partitions rebalanced")
}

func partitionCount(m map[string][]int32) int {
	n := 0
	for _, ps := range m {
		n += len(ps)
	}
	return n
}

// partitionList writes partitions as "calls[0,1] calls-repartition[1]",
// topics and partitions in order; "none" for none.
func partitionList(m map[string][]int32) string {
	var b strings.Builder
	for _, topic := range slices.Sorted(maps.Keys(m)) {
		ps := slices.Sorted(slices.Values(m[topic]))
		if len(ps) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(topic + "[")
		for i, p := range slices.Compact(ps) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(int(p)))
		}
		b.WriteByte(']')
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// logAborted logs a transaction that did not commit: at info when the
// group moved on (a rebalance or a lost session: kgo aborts without an
// error, and the state goes back to the last commit as it should), at
// warn with the cause otherwise.
func (c *Consumer) logAborted(err error) {
	if err == nil {
		c.log.Info().Msg("transaction aborted by a rebalance; state goes back to the last commit")
		return
	}
	c.log.Warn().Err(err).Msg("transaction aborted (fenced or a failed record); state goes back to the last commit")
}
