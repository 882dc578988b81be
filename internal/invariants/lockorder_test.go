package invariants

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Three Mutexes of one Order, ranked a < b < c.
func ranked() (a, b, c *Mutex) {
	var o Order
	a, b, c = new(Mutex), new(Mutex), new(Mutex)
	a.Init(&o, 1, "a")
	b.Init(&o, 2, "b")
	c.Init(&o, 3, "c")
	return a, b, c
}

// Taken in rank order, released in any order, and taken again: no panic.
func TestLockOrderKept(t *testing.T) {
	a, b, c := ranked()
	a.checkedLock()
	b.checkedLock()
	c.checkedLock()
	a.checkedUnlock()
	c.checkedUnlock()
	c.checkedLock() // b is held: c ranks above it
	c.checkedUnlock()
	b.checkedUnlock()
	b.checkedLock() // nothing held
	b.checkedUnlock()
	if n := len(a.order.held); n != 0 {
		t.Errorf("after every unlock %d goroutines hold a lock, want 0", n)
	}
}

// A lock taken under one of the same or a higher rank panics, naming
// both, before it waits (the other order could deadlock); so does one
// taken again by its holder.
func TestLockOrderBroken(t *testing.T) {
	tests := map[string]struct {
		held []int // indexes into a, b, c, taken in this order
		take int
		want string
	}{
		"lower under higher":    {[]int{1}, 0, "a (rank 1) taken while holding b (rank 2)"},
		"lowest under two":      {[]int{1, 2}, 0, "a (rank 1) taken while holding b (rank 2)"},
		"taken again":           {[]int{0}, 0, "a taken again"},
		"same rank, other lock": {nil, -1, "d (rank 3) taken while holding c (rank 3)"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			a, b, c := ranked()
			ms := []*Mutex{a, b, c}
			var take *Mutex
			if tt.take < 0 { // d ranks with c
				tt.held = []int{2}
				take = new(Mutex)
				take.Init(a.order, 3, "d")
			} else {
				take = ms[tt.take]
			}
			for _, i := range tt.held {
				ms[i].checkedLock()
			}
			got := panicked(func() { take.checkedLock() })
			if !strings.Contains(got, tt.want) {
				t.Errorf("lock with %v held: panic %q, want one containing %q", tt.held, got, tt.want)
			}
			select { // unchecked: the check panicked before locking
			case take.slot() <- struct{}{}:
				take.unlock()
			default:
				if tt.take != 0 || tt.held[0] != 0 {
					t.Errorf("the lock that broke the order is held after its panic")
				}
			}
		})
	}
}

// Lock checks the order exactly when Enabled: taken against it, a
// Mutex panics with the checks (-race, -tags invariants) and is a plain
// lock without them.
func TestLockChecksWhenEnabled(t *testing.T) {
	a, b, _ := ranked()
	b.Lock()
	defer b.Unlock()
	got := panicked(func() {
		a.Lock()
		a.Unlock()
	})
	if Enabled && !strings.Contains(got, "a (rank 1) taken while holding b (rank 2)") {
		t.Errorf("Lock against the order with the checks: panic %q, want one naming a and b", got)
	}
	if !Enabled && got != "" {
		t.Errorf("Lock against the order without the checks: panic %q, want none", got)
	}
}

// Unlocked by another goroutine than the one that locked it, a Mutex is
// no longer held by the first.
func TestLockOrderUnlockedElsewhere(t *testing.T) {
	a, b, _ := ranked()
	b.checkedLock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.checkedUnlock()
	}()
	<-done
	if got := panicked(func() { a.checkedLock() }); got != "" {
		t.Fatalf("lock after the higher one was unlocked elsewhere: panic %q, want none", got)
	}
	a.checkedUnlock()
}

// The checks are on in this build exactly when the race detector or the
// invariants tag is (race_on_test.go, race_off_test.go).
func TestEnabled(t *testing.T) {
	if Enabled != raceOrTag {
		t.Errorf("Enabled = %v, want %v", Enabled, raceOrTag)
	}
}

func panicked(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = strings.TrimSpace(toString(r))
		}
	}()
	f()
	return ""
}

func toString(r any) string {
	if err, ok := r.(error); ok {
		return err.Error()
	}
	s, _ := r.(string)
	return s
}

// A goroutine waiting for a Mutex is durably blocked in a synctest
// bubble, so the bubble's clock moves on while another goroutine holds
// the lock across a timed wait (an exactly_once commit holds
// fetcher.polling while kgo flushes). With a sync.Mutex this test hangs:
// the sleep never ends.
func TestMutexWaitIsDurablyBlocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, b, _ := ranked()
		b.Lock()
		done := make(chan struct{})
		go func() {
			b.Lock()
			b.Unlock()
			close(done)
		}()
		synctest.Wait() // the goroutine waits for b
		time.Sleep(time.Second)
		b.Unlock()
		<-done
		if !b.TryLock() {
			t.Fatal("b is held after every goroutine unlocked it")
		}
		b.Unlock()
	})
}
