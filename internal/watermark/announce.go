package watermark

// Heartbeat is how often, at least, a repartition stage reports a source
// partition's watermark even when nothing changed (ms), so a reader can
// tell a quiet source from a lost one and a new reader learns every
// source soon.
const Heartbeat = 10_000

// Announcer decides which markers a repartition stage writes at a
// commit: one for each owned source partition whose watermark or
// idleness changed since its last marker, or whose last marker is
// Heartbeat old (by the caller's clock). It is not safe for concurrent use.
type Announcer struct {
	last  map[int32]announced
	every int64 // the heartbeat, ms; 0: on change only
}

type announced struct {
	wm   int64
	idle bool
	at   int64
}

// NewAnnouncer returns an Announcer that has announced nothing.
func NewAnnouncer() *Announcer { return &Announcer{last: map[int32]announced{}, every: Heartbeat} }

// NewChangeAnnouncer returns an Announcer without a heartbeat: a partition
// is announced only when its watermark or idleness changed since its last
// announcement (the watermark topic is compacted and read from its start,
// so a reader learns every partition without one).
func NewChangeAnnouncer() *Announcer { return &Announcer{last: map[int32]announced{}} }

// Due appends to dst the markers due at now for the partitions parts of
// m (each with count, the number of source partitions), and takes them as
// announced: the caller writes them in the commit it is building, and
// calls Reset if that commit fails.
func (a *Announcer) Due(dst []Mark, m *Merged, parts []int32, count int32, now int64) []Mark {
	for _, p := range parts {
		wm, idle := m.Partition(p)
		last, ok := a.last[p]
		if ok && last.wm == wm && last.idle == idle && (a.every == 0 || now-last.at < a.every) {
			continue
		}
		a.last[p] = announced{wm: wm, idle: idle, at: now}
		dst = append(dst, Mark{Source: p, Count: count, Watermark: wm, Idle: idle})
	}
	return dst
}

// Forget drops what was announced for p (revoked: its next owner announces it).
func (a *Announcer) Forget(p int32) { delete(a.last, p) }

// Reset forgets every announcement: the commit that held them failed, so
// every partition is announced again at the next one.
func (a *Announcer) Reset() { clear(a.last) }
