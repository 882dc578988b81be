package state

// A Standby is a standby copy of one changelog partition
// (state.standby_replicas, docs/design.md "Standby state"): a Restorer
// that the partition's records are added to as they are committed, in
// log order, and how far it has read. Its owner never writes: when the
// partition moves to its instance, the restore reads only the records
// from Next on into Restorer, and the core finishes it as any restore.
//
// A Standby is not safe for concurrent use.
type Standby struct {
	r    *Restorer
	next int64 // the offset of the next record to add
	// seen are ends the changelog partition had (its last stable offset:
	// what a read_committed reader can reach) and when they were seen, the
	// oldest first, those the copy has not reached yet and the last one.
	seen []seen
	made int64 // when the copy was made (ms)
}

type seen struct{ end, at int64 }

// maxSeen bounds the ends a copy keeps: past it the oldest two merge (the
// later end at the earlier time: the lag in seconds errs long).
const maxSeen = 64

// NewStandby returns an empty copy that reads from offset from (the
// changelog partition's start), made at now (ms).
func NewStandby(from, now int64) *Standby { return NewStandbyOf(NewRestorer(), from, now) }

// NewStandbyOf is NewStandby whose records go into r (a draining one, for
// a copy kept as built window state).
func NewStandbyOf(r *Restorer, from, now int64) *Standby {
	return &Standby{r: r, next: from, made: now}
}

// Add takes the record at offset (tag: the value of its TagHeader
// header, nil if none). A record below Next (fetched again) is skipped;
// offsets may skip ahead (compaction, transaction markers).
func (s *Standby) Add(offset int64, key, value, tag []byte) error {
	if offset < s.next {
		return nil
	}
	s.next = offset + 1
	return s.r.Add(key, value, tag)
}

// Skip moves past a record that holds no state (a transaction's control
// record).
func (s *Standby) Skip(offset int64) { s.next = max(s.next, offset+1) }

// Seen records the partition's end (its last stable offset) as a fetch
// or a listing saw it at now (ms).
func (s *Standby) Seen(end, now int64) {
	if n := len(s.seen); n > 0 && end <= s.seen[n-1].end {
		return
	}
	s.prune()
	if len(s.seen) == maxSeen {
		s.seen[1].at = s.seen[0].at
		s.seen = append(s.seen[:0], s.seen[1:]...)
	}
	s.seen = append(s.seen, seen{end, now})
}

// prune drops the ends the copy has reached, but the last.
func (s *Standby) prune() {
	i := 0
	for i < len(s.seen)-1 && s.seen[i].end <= s.next {
		i++
	}
	s.seen = append(s.seen[:0], s.seen[i:]...)
}

// Next is the offset of the next record the copy needs: a takeover reads
// from there.
func (s *Standby) Next() int64 { return s.next }

// Lag returns how many records the copy is behind the latest end seen,
// and how long ago (ms, as of now) the oldest end it has not reached was
// seen: the age of what it lacks (0, 0 when it holds everything seen).
// known is false before any end was seen (ms is then its age).
func (s *Standby) Lag(now int64) (records, ms int64, known bool) {
	if len(s.seen) == 0 {
		return 0, now - s.made, false
	}
	s.prune()
	last := s.seen[len(s.seen)-1]
	if last.end <= s.next {
		return 0, 0, true
	}
	return last.end - s.next, max(now-s.seen[0].at, 0), true
}

// Restorer is what the copy holds: a takeover adds the records from
// Next on and hands it to the core's restore. The copy is spent then.
func (s *Standby) Restorer() *Restorer { return s.r }
