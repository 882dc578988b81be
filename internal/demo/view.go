package demo

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// State is everything one frame of the view shows.
type State struct {
	Now        time.Time
	Elapsed    time.Duration
	Brokers    string // where Kafka is, e.g. "in-process kfake at 127.0.0.1:40123"
	MetricsURL string
	Settings   string   // the window settings, one line
	Columns    []string // aggregate names, in config order
	// Lines is the terminal's height: Render shows only the keys that fit,
	// those with the latest results, and says how many it left out. 0 = all.
	Lines int

	Sent          Counts  // what the generator produced, by class
	SentRate      float64 // records/s over the last refresh
	Processed     float64 // aggregator_records_total, every outcome
	ProcessedRate float64
	// Watermark is the merged watermark in ms; math.MinInt64 before the
	// first one.
	Watermark int64

	Tally
}

// Counts is how many records of each Class were produced.
type Counts [Filtered + 1]int64

// Total is the number of records of every class.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// Render draws the full-screen view (without terminal control codes).
func Render(s State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "aggregator demo · Kafka: %s · metrics: %s\n", s.Brokers, s.MetricsURL)
	fmt.Fprintf(&b, "%s · Ctrl-C to stop\n\n", s.Settings)
	fmt.Fprintf(&b, "elapsed %s   produced %d (%.1f/s)   processed %.0f (%.1f/s)\n",
		s.Elapsed.Truncate(time.Second), s.Sent.Total(), s.SentRate, s.Processed, s.ProcessedRate)
	fmt.Fprintf(&b, "  generated: %d on time, %d stragglers, %d too late, %d malformed, %d filtered out\n",
		s.Sent[OnTime], s.Sent[Straggler], s.Sent[TooLate], s.Sent[Malformed], s.Sent[Filtered])
	fmt.Fprintf(&b, "watermark %s\n", watermarkText(s.Watermark, s.Now))
	if s.Retractions > 0 {
		fmt.Fprintf(&b, "sessions: %d retracted (tombstones of sessions that a late record merged after they fired)\n", s.Retractions)
	}
	fmt.Fprintf(&b, "output: %d results (%d late firings) · %d late events · %d dead letters\n\n",
		s.Results, s.LateFirings, s.Late, s.DeadLetters)
	if len(s.Rows) == 0 {
		b.WriteString("no results yet: the first window fires once the watermark passes its end\n")
		return b.String()
	}
	b.WriteString("latest result per key:\n")
	// Less the lines above, the table's header, the "+N more" line and
	// the line the cursor ends on.
	rows, more := fitRows(s.Rows, s.Lines, s.Lines-strings.Count(b.String(), "\n")-3)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "key\twindow (UTC)\tcount\t%s\tfiring\trevision\t\n", strings.Join(s.Columns, "\t"))
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t", r.Key, windowText(r.Start, r.End), r.Count)
		for _, name := range s.Columns {
			fmt.Fprintf(tw, "%s\t", numberText(r.Aggregates[name]))
		}
		fmt.Fprintf(tw, "%s\t%d\t\n", r.Firing, r.Revision)
	}
	tw.Flush()
	if more > 0 {
		fmt.Fprintf(&b, "+%d more keys (showing the %d with the latest results)\n", more, len(rows))
	}
	return b.String()
}

// fitRows keeps the n rows whose keys had results most recently, in their
// key order, and returns how many it left out. It keeps one row at least;
// lines <= 0 (no terminal height known) keeps every row.
func fitRows(rows []Row, lines, n int) ([]Row, int) {
	if lines <= 0 || n >= len(rows) {
		return rows, 0
	}
	n = max(n, 1)
	recent := slices.Clone(rows)
	slices.SortStableFunc(recent, func(a, b Row) int { return cmp.Compare(b.Seen, a.Seen) })
	kept := make(map[string]bool, n)
	for _, r := range recent[:n] {
		kept[r.Key] = true
	}
	shown := slices.DeleteFunc(slices.Clone(rows), func(r Row) bool { return !kept[r.Key] })
	return shown, len(rows) - len(shown)
}

// Summary is one plain line for a stdout that is not a terminal. Each
// line says where Kafka and the metrics are, so any line read alone (a
// log tail) tells how to look further.
func Summary(s State) string {
	return fmt.Sprintf("demo: elapsed=%s produced=%d processed=%.0f results=%d late_firings=%d retractions=%d late=%d dead_letters=%d keys=%d watermark=%s kafka=%q metrics=%s",
		s.Elapsed.Truncate(time.Second), s.Sent.Total(), s.Processed, s.Results, s.LateFirings, s.Retractions,
		s.Late, s.DeadLetters, len(s.Rows), timeText(s.Watermark, time.RFC3339Nano), s.Brokers, s.MetricsURL)
}

func watermarkText(wm int64, now time.Time) string {
	switch wm {
	case math.MinInt64:
		return "none yet (every partition needs a record, or to go idle)"
	case math.MaxInt64:
		return "end of input"
	}
	return fmt.Sprintf("%s UTC (%s)", timeText(wm, "15:04:05.000"), clockText(now.Sub(time.UnixMilli(wm))))
}

// clockText says how far the watermark is from the wall clock: behind it
// normally, ahead of it when event time runs faster (demo --speed above 1).
func clockText(lag time.Duration) string {
	switch lag = lag.Truncate(time.Millisecond); {
	case lag > 0:
		return lag.String() + " behind the wall clock"
	case lag < 0:
		return (-lag).String() + " ahead of the wall clock"
	}
	return "at the wall clock"
}

func timeText(ms int64, layout string) string {
	switch ms {
	case math.MinInt64:
		return "none"
	case math.MaxInt64:
		return "end"
	}
	return time.UnixMilli(ms).UTC().Format(layout)
}

func windowText(start, end int64) string {
	return "[" + timeText(start, time.TimeOnly) + ", " + timeText(end, time.TimeOnly) + ")"
}

// numberText shortens fractions to one decimal; integers stay as written.
func numberText(raw string) string {
	if raw == "" {
		return "-"
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || f == math.Trunc(f) {
		return raw
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}
