package demo

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Row is the latest result of one group key, as read from the results topic.
type Row struct {
	Key        string // the key's values, for display
	Start, End int64  // the window, ms since the epoch
	Count      int64
	Aggregates map[string]string // name → the JSON number as written
	Firing     string
	Revision   int64
	Watermark  int64
	// Version is the state.config_version of the generation of windows
	// that computed it (the header aggregator.config_version); "" if the
	// record has none.
	Version string
	// Seen orders the rows by activity: the number of results observed
	// when this key's latest one arrived.
	Seen int64
}

// Tally is what the output topics said so far.
type Tally struct {
	Rows        []Row // latest window per key, in key order
	Results     int64 // result records, every revision
	LateFirings int64 // results with firing "late"
	Retractions int64 // tombstones: sessions withdrawn by a merge
	Late        int64 // records in the late topic
	DeadLetters int64 // records in the dead-letter topic
	// ByVersion counts the results by Row.Version: after a config change
	// both generations' results arrive for a while.
	ByVersion map[string]int64
}

// Board tallies the service's output topics. It is safe for concurrent
// use: Watch feeds it while the view reads Snapshots.
type Board struct {
	results, late, deadLetter string // topic names

	mu    sync.Mutex
	rows  map[string]Row
	tally Tally
	// fresh are the results observed since the last TakeFresh, in order,
	// at most maxFresh (those past it are counted in skipped).
	fresh   []Row
	skipped int64
}

// maxFresh bounds the results a Board keeps for TakeFresh: a view that
// never takes them (a terminal's, which shows the latest per key) costs
// no more than this.
const maxFresh = 1000

// NewBoard returns an empty Board for the given output topics.
func NewBoard(resultsTopic, lateTopic, deadLetterTopic string) *Board {
	return &Board{results: resultsTopic, late: lateTopic, deadLetter: deadLetterTopic, rows: map[string]Row{}, tally: Tally{ByVersion: map[string]int64{}}}
}

// result is the results-topic value (docs/results.md#the-results-topic), the parts the view shows.
type result struct {
	Key         map[string]json.RawMessage `json:"key"`
	WindowStart *int64                     `json:"window_start"` // null: a global window
	WindowEnd   *int64                     `json:"window_end"`
	Count       int64                      `json:"count"`
	Aggregates  map[string]json.Number     `json:"aggregates"`
	Firing      string                     `json:"firing"`
	Revision    int64                      `json:"revision"`
	Seq         *int64                     `json:"seq"` // count windows only
	Watermark   int64                      `json:"watermark"`
}

// Observe counts one output record. A results-topic value that is not a
// result is an error: the service wrote something docs/results.md does not allow.
func (b *Board) Observe(topic string, value []byte) error { return b.ObserveVersion(topic, value, "") }

// ObserveVersion is Observe of a record whose header
// aggregator.config_version is version ("": none).
func (b *Board) ObserveVersion(topic string, value []byte, version string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch topic {
	case b.late:
		b.tally.Late++
	case b.deadLetter:
		b.tally.DeadLetters++
	case b.results:
		if value == nil { // a retracted session; its merged session's result follows
			b.tally.Retractions++
			return nil
		}
		return b.observeResult(value, version)
	}
	return nil
}

func (b *Board) observeResult(value []byte, version string) error {
	var r result
	if err := json.Unmarshal(value, &r); err != nil {
		return fmt.Errorf("results topic value %q: %w", value, err)
	}
	b.tally.Results++
	b.tally.ByVersion[version]++
	if r.Firing == "late" {
		b.tally.LateFirings++
	}
	row := Row{Key: keyText(r.Key), Start: math.MinInt64, End: math.MaxInt64, Count: r.Count,
		Aggregates: map[string]string{}, Firing: r.Firing, Revision: r.Revision, Watermark: r.Watermark, Version: version, Seen: b.tally.Results}
	if r.WindowStart != nil && r.WindowEnd != nil {
		row.Start, row.End = *r.WindowStart, *r.WindowEnd
	}
	for name, v := range r.Aggregates {
		row.Aggregates[name] = v.String()
	}
	if len(b.fresh) < maxFresh {
		b.fresh = append(b.fresh, row)
	} else {
		b.skipped++
	}
	// A late firing of an older window does not replace the newer one; a
	// merged session replaces the sessions it covers.
	if old, ok := b.rows[row.Key]; !ok || old.Start < row.Start || old.Start == row.Start && old.Revision <= row.Revision ||
		row.Start <= old.Start && old.End <= row.End {
		b.rows[row.Key] = row
	}
	return nil
}

// Snapshot returns a copy of the tally, rows sorted by key.
func (b *Board) Snapshot() Tally {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tally
	t.ByVersion = maps.Clone(b.tally.ByVersion)
	keys := slices.SortedFunc(maps.Keys(b.rows), naturalCompare)
	t.Rows = make([]Row, len(keys))
	for i, k := range keys {
		t.Rows[i] = b.rows[k]
	}
	return t
}

// TakeFresh returns the results observed since its last call, in the
// order they were read, and how many more there were past the ones it
// kept (maxFresh).
func (b *Board) TakeFresh() (rows []Row, skipped int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rows, skipped = b.fresh, b.skipped
	b.fresh, b.skipped = nil, 0
	return rows, skipped
}

// keyText shows a group key by its values: sid_1 for {"sid":"sid_1"},
// a=1 b=x for several fields (by name), (global) for {}.
func keyText(key map[string]json.RawMessage) string {
	names := slices.Sorted(maps.Keys(key))
	if len(names) == 0 {
		return "(global)"
	}
	parts := make([]string, len(names))
	for i, name := range names {
		v := string(key[name])
		if s, err := strconv.Unquote(v); err == nil {
			v = s
		}
		parts[i] = v
		if len(names) > 1 {
			parts[i] = name + "=" + v
		}
	}
	return strings.Join(parts, " ")
}

// naturalCompare orders strings with runs of digits compared as numbers,
// so sid_2 comes before sid_10.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digitPrefix(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}
