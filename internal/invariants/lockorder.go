package invariants

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
)

// An Order is the lock order of a set of Mutexes: what each goroutine
// holds of them, for the checks. The zero Order is ready to use.
type Order struct {
	mu   sync.Mutex
	held map[int64][]*Mutex // goroutine id → the Mutexes it holds, in the order taken
}

// A Mutex is a mutual exclusion lock that Init placed in an Order with a
// rank and a name: a goroutine that holds it may take only Mutexes of a
// higher rank.
//
// It is a channel of one slot, not a sync.Mutex, so that a goroutine
// waiting for it is durably blocked in a testing/synctest bubble: the
// consumer holds its locks across waits on the bubble's clock (an
// exactly_once commit holds fetcher.polling while kgo flushes), and a
// goroutine waiting on a sync.Mutex meanwhile kept the clock from moving
// for ever. Uncontended, it costs a few ns more than a sync.Mutex; it is
// taken per poll and per step, not per record.
type Mutex struct {
	ch    atomic.Pointer[chan struct{}] // made by the first use (in the bubble that uses it)
	order *Order                        // nil: not checked
	rank  int
	name  string
}

// slot returns m's channel, making it on first use.
func (m *Mutex) slot() chan struct{} {
	if ch := m.ch.Load(); ch != nil {
		return *ch
	}
	ch := make(chan struct{}, 1)
	if m.ch.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *m.ch.Load()
}

func (m *Mutex) lock() { m.slot() <- struct{}{} }

func (m *Mutex) unlock() {
	select {
	case <-m.slot():
	default:
		panic("invariants: unlock of an unlocked Mutex")
	}
}

// Init places m in order with rank and name (for the panic's message).
// Call it before m is first locked.
func (m *Mutex) Init(order *Order, rank int, name string) {
	m.order, m.rank, m.name = order, rank, name
}

// Lock locks m; with Enabled it first panics if the goroutine holds a
// Mutex of m's Order that m may not be taken under.
func (m *Mutex) Lock() {
	if Enabled && m.order != nil {
		m.checkedLock()
		return
	}
	m.lock()
}

// Unlock unlocks m.
func (m *Mutex) Unlock() {
	if Enabled && m.order != nil {
		m.checkedUnlock()
		return
	}
	m.unlock()
}

// TryLock tries to lock m and reports whether it did. It never waits, so
// it cannot deadlock: no order is checked, but a held m is noted.
func (m *Mutex) TryLock() bool {
	select {
	case m.slot() <- struct{}{}:
	default:
		return false
	}
	if Enabled && m.order != nil {
		m.order.taken(goid(), m)
	}
	return true
}

// checkedLock is Lock with the checks, in any build (m has an Order).
func (m *Mutex) checkedLock() {
	g := goid()
	if err := m.order.check(g, m); err != nil {
		panic(err)
	}
	m.lock()
	m.order.taken(g, m)
}

// checkedUnlock is Unlock with the checks, in any build.
func (m *Mutex) checkedUnlock() {
	m.order.released(m)
	m.unlock()
}

// check returns an error if goroutine g may not take m now.
func (o *Order) check(g int64, m *Mutex) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, h := range o.held[g] {
		if h == m {
			return fmt.Errorf("lock order: %s taken again by the goroutine that holds it", m.name)
		}
		if h.rank >= m.rank {
			return fmt.Errorf("lock order: %s (rank %d) taken while holding %s (rank %d): a goroutine holding %s takes only locks ranked above it",
				m.name, m.rank, h.name, h.rank, h.name)
		}
	}
	return nil
}

func (o *Order) taken(g int64, m *Mutex) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held == nil {
		o.held = map[int64][]*Mutex{}
	}
	o.held[g] = append(o.held[g], m)
}

// released forgets m, whichever goroutine held it (a Mutex may be
// unlocked by another goroutine than the one that locked it).
func (o *Order) released(m *Mutex) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for g, hs := range o.held {
		for i, h := range hs {
			if h == m {
				hs = append(hs[:i], hs[i+1:]...)
				if len(hs) == 0 {
					delete(o.held, g)
				} else {
					o.held[g] = hs
				}
				return
			}
		}
	}
}

// goid is the calling goroutine's id, read from its stack trace's first
// line ("goroutine 42 [running]:"); slow, and used only by the checks.
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, _ = bytes.CutPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		b = b[:i]
	}
	id, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		panic("invariants: no goroutine id in the stack trace")
	}
	return id
}
