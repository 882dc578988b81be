package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Side names the two runs a Check compares.
type Side uint8

const (
	Service   Side = iota // the service instances' results topic
	Reference             // the one-instance reference over the same input
)

// Check compares the service's results with a reference run's, window
// by window, once both have settled the window: a window of a key is
// settled on a side once that side has written a result for the key
// whose watermark is at or past the window's cleanup time (its end - 1 +
// allowed lateness), after the window's own results. The reference
// writes its results in order. The service writes a key's results in
// order too, but each window's to the results partition of its record
// key (group key and window): there only a later result of the key in
// the same partition settles the window, as a reader may read one
// partition ahead of another. By then the side has written every result
// of the window, late firings included, and will write no other. Only the latest result of each
// window is compared, by count and aggregates (firing and revision may
// differ: the runs' watermarks move at other moments). Windows without a
// time (global and count windows) are not compared. A Check is safe for
// concurrent use.
type Check struct {
	lateness   int64 // ms
	partitions int   // of the service's results topic
	partition  kgo.TopicPartitioner

	mu      sync.Mutex
	sides   [2]checkSide
	verdict CheckTally
}

type checkSide struct {
	windows map[string]checkWindow // by record key: group key and window
	// settled is the highest watermark of the results of a group key
	// (its JSON) in a results partition (-1 for the reference's).
	settled map[settledKey]int64
}

type settledKey struct {
	group     string
	partition int32
}

type checkWindow struct {
	group     string // the group key's JSON
	partition int32  // of its record key in the service's results topic
	end       int64
	result    string // count and aggregates, as compared
}

// CheckTally is what a Check found so far.
type CheckTally struct {
	Compared int64 // windows settled on both sides
	Differ   int64 // of those, with other results, or a result on one side only
	Pending  int   // windows one side has a result for, not settled on both yet
	// FirstDiff describes the first window that differed, "" if none.
	FirstDiff string
}

// NewCheck returns a Check for windows with this allowed lateness (ms)
// and a results topic of that many partitions.
func NewCheck(lateness int64, partitions int) *Check {
	c := &Check{lateness: lateness, partitions: partitions, partition: kgo.StickyKeyPartitioner(nil).ForTopic("")}
	for i := range c.sides {
		c.sides[i] = checkSide{windows: map[string]checkWindow{}, settled: map[settledKey]int64{}}
	}
	return c
}

// resultsPartition is the results partition of a record key, as the
// service's producer picks it (murmur2 of the key, as Kafka's).
func (c *Check) resultsPartition(key []byte) int32 {
	return int32(c.partition.Partition(&kgo.Record{Key: key}, c.partitions))
}

// checkKey is the results-topic record key (docs/results.md#the-results-topic).
type checkKey struct {
	Key json.RawMessage `json:"key"`
}

// Observe takes one results-topic record of side: its key and value (nil:
// a retraction, which withdraws that window's result). It returns an
// error for a record that is not a result.
func (c *Check) Observe(side Side, key, value []byte) error {
	var k checkKey
	if err := json.Unmarshal(key, &k); err != nil {
		return fmt.Errorf("result key %q: %w", key, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.sides[side]
	if value == nil {
		delete(s.windows, string(key))
		return nil
	}
	var r result
	if err := json.Unmarshal(value, &r); err != nil {
		return fmt.Errorf("results topic value %q: %w", value, err)
	}
	group, part := string(compact(k.Key)), c.resultsPartition(key)
	sk := settledKey{group, part}
	if side == Reference {
		sk.partition = -1
	}
	s.settled[sk] = max(s.settled[sk], r.Watermark)
	if r.WindowEnd == nil || r.Seq != nil { // global and count windows have no cleanup time
		return nil
	}
	names := slices.Sorted(maps.Keys(r.Aggregates))
	var b strings.Builder
	fmt.Fprintf(&b, "count %d", r.Count)
	for _, n := range names {
		fmt.Fprintf(&b, ", %s %s", n, r.Aggregates[n])
	}
	s.windows[string(key)] = checkWindow{group: group, partition: part, end: *r.WindowEnd, result: b.String()}
	return nil
}

func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// Tally compares the windows settled on both sides since the last call
// and returns the totals.
func (c *Check) Tally() CheckTally {
	c.mu.Lock()
	defer c.mu.Unlock()
	svc, ref := &c.sides[Service], &c.sides[Reference]
	settled := func(w checkWindow) bool {
		cleanup := w.end - 1 + c.lateness
		return svc.settled[settledKey{w.group, w.partition}] >= cleanup && ref.settled[settledKey{w.group, -1}] >= cleanup
	}
	for _, key := range slices.Sorted(maps.Keys(svc.windows)) {
		w := svc.windows[key]
		if !settled(w) {
			continue
		}
		c.verdict.Compared++
		if r, ok := ref.windows[key]; !ok || r.result != w.result {
			c.differ(key, w.result, r.result)
		}
		delete(svc.windows, key)
		delete(ref.windows, key)
	}
	for _, key := range slices.Sorted(maps.Keys(ref.windows)) { // those the service has no result for
		if w := ref.windows[key]; settled(w) {
			c.verdict.Compared++
			c.differ(key, "", w.result)
			delete(ref.windows, key)
		}
	}
	t := c.verdict
	t.Pending = len(svc.windows)
	for key := range ref.windows {
		if _, ok := svc.windows[key]; !ok {
			t.Pending++
		}
	}
	return t
}

func (c *Check) differ(key, service, reference string) {
	c.verdict.Differ++
	if c.verdict.FirstDiff == "" {
		c.verdict.FirstDiff = fmt.Sprintf("%s: service %s, reference %s", key, orNone(service), orNone(reference))
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
