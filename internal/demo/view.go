package demo

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
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
	// Width is the terminal's width: Render wraps the lines above the table
	// between their parts, and narrows the table (short headings, then
	// columns dropped by priority) so that no line is wider. 0 = no limit.
	Width int
	// Sessions says the windows are sessions: there a record generated too
	// late for its own window still joins a session of its key that is
	// open, so the view does not promise it is a late event.
	Sessions bool
	// NothingLate says why no record is late, e.g. "nothing is late in
	// count windows": the generator's stragglers and too-late records are
	// then aggregated like the others. "": windows with lateness.
	NothingLate string
	// Zone is calendar days' time zone: the table shows each window as
	// its local day and length, the watermark as a local time (the event
	// clock runs far from the wall clock). nil: times in UTC.
	Zone *time.Location

	Sent          Counts  // what the generator produced, by class
	SentRate      float64 // records/s over the last refresh
	Processed     float64 // aggregator_records_total, every outcome
	ProcessedRate float64
	// Watermark is the merged watermark in ms; math.MinInt64 before the
	// first one.
	Watermark int64
	// Instances are the service instances (demo --instances), with the
	// partitions each holds; the view lists them when there are several.
	Instances []Instance
	// Stage2 says the repartition stage runs: the instances list their
	// repartition partitions too.
	Stage2 bool
	// Waiting is what the demo waits for, e.g. "the group to settle
	// before the generator starts: #2 holds no partition"; "" when
	// nothing holds it up.
	Waiting string
	// Check is the comparison with the reference run, a replay of the
	// input in one process; nil when there is none, and then CheckNote
	// says why.
	Check     *CheckTally
	CheckNote string
	// Change is what `demo --change-at` changes, and once it has, where
	// each partition cut over; "" without a change. With one, the table
	// shows each result's config version, and the output line counts the
	// results of each.
	Change string

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
	wrap(&b, s.Width, " · ", "", "aggregator demo", "Kafka: "+s.Brokers, "metrics: "+s.MetricsURL)
	wrap(&b, s.Width, " · ", "", append(strings.Split(s.Settings, " · "), "Ctrl-C to stop")...)
	b.WriteString("\n")
	wrap(&b, s.Width, "   ", "", "elapsed "+s.Elapsed.Truncate(time.Second).String(),
		fmt.Sprintf("produced %d (%.1f/s)", s.Sent.Total(), s.SentRate),
		fmt.Sprintf("processed %.0f (%.1f/s)", s.Processed, s.ProcessedRate))
	tooLate := fmt.Sprintf("%d too late", s.Sent[TooLate])
	switch {
	case s.Sessions:
		tooLate = fmt.Sprintf("%d too late for their own window (late events unless they join an open session)", s.Sent[TooLate])
	case s.NothingLate != "":
		tooLate = fmt.Sprintf("%d too late (%s: these and the stragglers are aggregated)", s.Sent[TooLate], s.NothingLate)
	}
	wrap(&b, s.Width, ", ", "    ", "  generated: "+strconv.FormatInt(s.Sent[OnTime], 10)+" on time",
		fmt.Sprintf("%d stragglers", s.Sent[Straggler]), tooLate,
		fmt.Sprintf("%d malformed", s.Sent[Malformed]), fmt.Sprintf("%d filtered out", s.Sent[Filtered]))
	wm := "watermark"
	if len(s.Instances) > 1 {
		wm = "watermark (the lowest instance's)"
	}
	wrap(&b, s.Width, " ", "  ", wm, watermarkText(s.Watermark, s.Now, s.Zone))
	if len(s.Instances) > 1 {
		parts := []string{fmt.Sprintf("%d instances", len(s.Instances))}
		for _, in := range s.Instances {
			parts = append(parts, instanceText(in, s.Stage2))
		}
		wrap(&b, s.Width, " · ", "  ", parts...)
	}
	if s.Waiting != "" && len(s.Rows) > 0 {
		wrap(&b, s.Width, " ", "  ", "waiting for", s.Waiting)
	}
	if s.Change != "" {
		wrap(&b, s.Width, " ", "  ", s.Change)
	}
	if s.Check != nil || s.CheckNote != "" {
		wrap(&b, s.Width, " ", "  ", checkText(s.Check, s.CheckNote)...)
	}
	if s.Retractions > 0 {
		wrap(&b, s.Width, " ", "  ", fmt.Sprintf("sessions: %d retracted", s.Retractions),
			"(tombstones of sessions that a late record merged after they fired)")
	}
	output := []string{fmt.Sprintf("output: %d %s (%d late %s)", s.Results, plural(s.Results, "result", "results"),
		s.LateFirings, plural(s.LateFirings, "firing", "firings")),
		fmt.Sprintf("%d late %s", s.Late, plural(s.Late, "event", "events")), fmt.Sprintf("%d dead %s", s.DeadLetters, plural(s.DeadLetters, "letter", "letters"))}
	if s.Change != "" {
		output = append(output, "results by config version: "+versionsText(s.ByVersion, ": ", ", "))
	}
	wrap(&b, s.Width, " · ", "", output...)
	b.WriteString("\n")
	switch {
	case len(s.Rows) == 0 && s.Waiting != "":
		wrap(&b, s.Width, " ", "  ", "no results yet: waiting for", s.Waiting)
		return b.String()
	case len(s.Rows) == 0:
		wrap(&b, s.Width, " ", "", "no results yet:", "the first window fires once the watermark passes its end")
		return b.String()
	}
	// Less the lines above, the heading line, the table's header, the "+N
	// more" line and the line the cursor ends on.
	rows, more := fitRows(s.Rows, s.Lines, s.Lines-strings.Count(b.String(), "\n")-4)
	table, hidden := fitTable(s.Columns, rows, s.Width, s.Zone, s.Change != "")
	if hidden > 0 {
		wrap(&b, s.Width, " ", "", "latest result per key", fmt.Sprintf("(%d columns hidden: a wider terminal shows them):", hidden))
	} else {
		b.WriteString("latest result per key:\n")
	}
	b.WriteString(table)
	if more > 0 {
		wrap(&b, s.Width, " ", "", fmt.Sprintf("+%d more keys", more), fmt.Sprintf("(showing the %d with the latest results)", len(rows)))
	}
	return b.String()
}

// wrap writes parts joined by sep as one line, or, when width > 0 and
// they do not fit, on as many lines as they need, breaking between parts
// and, within a part wider than a line, between its words; continuation
// lines start with indent. Only a word wider than a line is cut, with
// "…". Every line ends in a newline.
func wrap(b *strings.Builder, width int, sep, indent string, parts ...string) {
	line := ""
	for _, p := range parts {
		switch {
		case line == "":
			line = p
		case width <= 0 || runes(line)+runes(sep)+runes(p) <= width:
			line += sep + p
		default:
			b.WriteString(cut(line, width) + "\n")
			line = indent + p
		}
		for width > 0 && runes(line) > width {
			head, rest, ok := breakWords(line, width, runes(indent))
			if !ok {
				break
			}
			b.WriteString(head + "\n")
			line = indent + rest
		}
	}
	b.WriteString(cut(line, width) + "\n")
}

// breakWords splits line at its last space that leaves at most width
// runes before it and more than skip (the indent): ok is false if there
// is none.
func breakWords(line string, width, skip int) (head, rest string, ok bool) {
	r := []rune(line)
	for i := min(width, len(r)-1); i > skip; i-- {
		if r[i] == ' ' {
			return strings.TrimRight(string(r[:i]), " "), strings.TrimLeft(string(r[i+1:]), " "), true
		}
	}
	return "", "", false
}

func runes(s string) int { return utf8.RuneCountInString(s) }

// cut shortens s to width runes, ending in "…"; width <= 0 keeps it whole.
func cut(s string, width int) string {
	if width <= 0 || runes(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:max(width-1, 0)]) + "…"
}

// A column of the results table.
type column struct {
	head, short string // the heading, and the one used when space is short
	cell        func(Row) string
}

// fitTable renders the table of rows in width columns (0: no limit): with
// every column if it fits, else with short headings, else dropping
// columns by priority (revision, then the aggregates from the last, then
// the config version, then firing; key, window and count stay). It
// returns the table and how many columns it left out; lines still too
// wide are cut. versions adds the column of each row's config version.
func fitTable(aggregates []string, rows []Row, width int, zone *time.Location, versions bool) (string, int) {
	key := column{"key", "key", func(r Row) string { return r.Key }}
	window := column{"window (UTC)", "window", func(r Row) string { return windowText(r.Start, r.End) }}
	if zone != nil {
		window = column{"day (" + zone.String() + ")", "day", func(r Row) string { return dayText(r.Start, r.End, zone) }}
	}
	count := column{"count", "n", func(r Row) string { return strconv.FormatInt(r.Count, 10) }}
	firing := column{"firing", "firing", func(r Row) string { return r.Firing }}
	revision := column{"revision", "rev", func(r Row) string { return strconv.FormatInt(r.Revision, 10) }}
	aggs := make([]column, len(aggregates))
	for i, name := range aggregates {
		decimals := fractional(rows, name)
		aggs[i] = column{name, name, func(r Row) string { return numberText(r.Aggregates[name], decimals) }}
	}
	// dropOrder lists the columns that may go, the first to go first.
	dropOrder := []string{revision.head}
	for i := len(aggs) - 1; i >= 0; i-- {
		dropOrder = append(dropOrder, aggs[i].head)
	}
	all := append(append([]column{key, window, count}, aggs...), firing, revision)
	if versions {
		version := column{"config", "v", func(r Row) string { return cmp.Or(r.Version, "-") }}
		dropOrder = append(dropOrder, version.head)
		all = append([]column{version}, all...)
	}
	dropOrder = append(dropOrder, firing.head)

	short, dropped := false, 0
	for {
		var cols []column
		for _, c := range all {
			if !slices.Contains(dropOrder[:dropped], c.head) {
				cols = append(cols, c)
			}
		}
		table := renderTable(cols, rows, short)
		if width <= 0 || tableWidth(table) <= width || dropped == len(dropOrder) {
			var b strings.Builder
			for line := range strings.Lines(table) {
				b.WriteString(cut(strings.TrimSuffix(line, "\n"), width) + "\n")
			}
			return b.String(), dropped
		}
		if !short {
			short = true
		} else {
			dropped++
		}
	}
}

func renderTable(cols []column, rows []Row, short bool) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, c := range cols {
		head := c.head
		if short {
			head = c.short
		}
		fmt.Fprintf(tw, "%s\t", head)
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		for _, c := range cols {
			fmt.Fprintf(tw, "%s\t", c.cell(r))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	return b.String()
}

func tableWidth(table string) int {
	w := 0
	for line := range strings.Lines(table) {
		w = max(w, runes(strings.TrimSuffix(line, "\n")))
	}
	return w
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

// instanceText is an instance's partitions: with the repartition stage,
// those of the input topic (stage 1) and of the repartition topic (stage
// 2, where its windows are).
func instanceText(in Instance, stage2 bool) string {
	if !stage2 {
		return "#" + in.Name + ": " + partitionsPhrase("", in.Partitions)
	}
	return "#" + in.Name + ": " + partitionsPhrase("input ", in.Partitions) + ", " + partitionsPhrase("repartition ", in.Stage2)
}

// partitionsPhrase names partitions of a kind ("input ", "repartition
// ", or "" for any) as a reader says them: "partition 2", "partitions 0,
// 2", "no partition".
func partitionsPhrase(kind string, ps []int32) string {
	switch len(ps) {
	case 0:
		return "no " + kind + "partition"
	case 1:
		return kind + "partition " + strconv.Itoa(int(ps[0]))
	}
	return kind + "partitions " + strings.ReplaceAll(partitionsText(ps), ",", ", ")
}

func partitionsText(ps []int32) string {
	if len(ps) == 0 {
		return "none"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = strconv.Itoa(int(p))
	}
	return strings.Join(parts, ",")
}

// checkText is the line that compares the results with the reference
// run, a replay of the input in one process, in parts to wrap.
func checkText(c *CheckTally, note string) []string {
	const claim = "results equal a replay of the input:"
	switch {
	case c == nil:
		return []string{"replay check:", note}
	case c.Compared == 0:
		return []string{claim, "none closed yet", fmt.Sprintf("(%d windows open)", c.Pending)}
	case c.Differ == 0:
		return []string{claim, "yes", fmt.Sprintf("(%d windows compared, %d open)", c.Compared, c.Pending)}
	}
	return []string{claim, fmt.Sprintf("NO, %d of %d windows differ;", c.Differ, c.Compared), "first: " + c.FirstDiff}
}

// Legend is what a stdout that is not a terminal gets first: the demo's
// settings and where Kafka and the metrics are, then what the lines that
// follow say (ResultLine's and Summary's, with the fields of s's setup
// and of that many instances), a line each.
func Legend(s State, instances int) string {
	var b strings.Builder
	b.WriteString("aggregator demo · Kafka: " + s.Brokers + " · metrics: " + s.MetricsURL + "\n")
	b.WriteString(s.Settings + " · Ctrl-C to stop\n")
	b.WriteString(`lines: "result" for each result the results topic gets: its key, window (UTC), count, aggregates, firing (on_time; late: revised for a late record; early; final) and revision` + "\n")
	b.WriteString(`  "demo:" every second: records produced (by the generator) and processed (by the service), results, late_firings, retractions (sessions a late record merged), late events, dead_letters, keys with a result, the watermark` + "\n")
	if instances > 1 {
		b.WriteString("  instances, partitions (of the input topic)")
		if s.Stage2 {
			b.WriteString(", repartition (of the repartition topic)")
		}
		b.WriteString(": the partitions each instance holds, as instance:partitions;...\n")
	}
	if s.Change != "" {
		b.WriteString("  versions: results by config version; change: the config change and the partitions' cut-overs\n")
	}
	if s.Check != nil {
		b.WriteString("  replay_compared: windows whose last result was compared with that of a replay of the input in one process; replay_differ: how many of them differ (0: every one equal)\n")
	} else if s.CheckNote != "" {
		b.WriteString("  no comparison with a replay of the input: " + s.CheckNote + "\n")
	}
	b.WriteString("  waiting_for: what the demo waits for, while it does\n")
	return b.String()
}

// ResultLine is one result for a stdout that is not a terminal: its key,
// window, count, aggregates (columns, in config order), firing and
// revision, and with versions its config version.
func ResultLine(r Row, columns []string, zone *time.Location, versions bool) string {
	var b strings.Builder
	b.WriteString("result")
	window := windowText(r.Start, r.End)
	if zone != nil {
		window = dayText(r.Start, r.End, zone)
	}
	field(&b, "key", r.Key)
	field(&b, "window", strings.ReplaceAll(window, ", ", ","))
	field(&b, "count", strconv.FormatInt(r.Count, 10))
	for _, name := range columns {
		field(&b, name, numberText(r.Aggregates[name], false))
	}
	field(&b, "firing", r.Firing)
	field(&b, "revision", strconv.FormatInt(r.Revision, 10))
	if versions {
		field(&b, "config", cmp.Or(r.Version, "-"))
	}
	return b.String()
}

// field appends " name=value", the value quoted if it has a space or a
// quote.
func field(b *strings.Builder, name, value string) {
	if strings.ContainsAny(value, " \"") {
		value = strconv.Quote(value)
	}
	b.WriteString(" " + name + "=" + value)
}

// Summary is one plain line for a stdout that is not a terminal (Legend
// says what its fields are). Each line says where Kafka and the metrics
// are, so any line read alone (a log tail) tells how to look further.
func Summary(s State) string {
	line := fmt.Sprintf("demo: elapsed=%s produced=%d processed=%.0f results=%d late_firings=%d retractions=%d late=%d dead_letters=%d keys=%d watermark=%s",
		s.Elapsed.Truncate(time.Second), s.Sent.Total(), s.Processed, s.Results, s.LateFirings, s.Retractions,
		s.Late, s.DeadLetters, len(s.Rows), timeText(s.Watermark, time.RFC3339Nano))
	if len(s.Instances) > 1 {
		parts := make([]string, len(s.Instances))
		for i, in := range s.Instances {
			parts[i] = in.Name + ":" + partitionsText(in.Partitions)
		}
		line += fmt.Sprintf(" instances=%d partitions=%s", len(s.Instances), strings.Join(parts, ";"))
		if s.Stage2 {
			for i, in := range s.Instances {
				parts[i] = in.Name + ":" + partitionsText(in.Stage2)
			}
			line += " repartition=" + strings.Join(parts, ";")
		}
	}
	if s.Waiting != "" {
		line += fmt.Sprintf(" waiting_for=%q", s.Waiting)
	}
	if s.Change != "" {
		line += fmt.Sprintf(" versions=%s change=%q", versionsText(s.ByVersion, ":", ","), s.Change)
	}
	if c := s.Check; c != nil {
		line += fmt.Sprintf(" replay_compared=%d replay_differ=%d", c.Compared, c.Differ)
		if c.Differ > 0 {
			line += fmt.Sprintf(" replay_first_diff=%q", c.FirstDiff)
		}
	}
	return line + fmt.Sprintf(" kafka=%q metrics=%s", s.Brokers, s.MetricsURL)
}

// versionsText is the results counted by config version, in version
// order ("-" for results without one): "1: 40, 2: 12" with sep ": " and
// join ", "; "none yet" when there are none.
func versionsText(by map[string]int64, sep, join string) string {
	if len(by) == 0 {
		return "none yet"
	}
	vs := slices.SortedFunc(maps.Keys(by), naturalCompare)
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = cmp.Or(v, "-") + sep + strconv.FormatInt(by[v], 10)
	}
	return strings.Join(parts, join)
}

func watermarkText(wm int64, now time.Time, zone *time.Location) string {
	switch wm {
	case math.MinInt64:
		return "none yet (every partition needs a record, or to go idle)"
	case math.MaxInt64:
		return "end of input"
	}
	if zone != nil {
		return time.UnixMilli(wm).In(zone).Format("Mon 2 Jan 2006 15:04:05 MST")
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

// windowText is a window's bounds: to the second, or to the millisecond
// when a bound has milliseconds (sessions, count windows), so that a
// window never reads as empty.
func windowText(start, end int64) string {
	if start == math.MinInt64 && end == math.MaxInt64 {
		return "global (all time)"
	}
	layout := time.TimeOnly
	if start%1000 != 0 || end%1000 != 0 {
		layout = "15:04:05.000"
	}
	return "[" + timeText(start, layout) + ", " + timeText(end, layout) + ")"
}

// dayText is a calendar day's window: its local date and its length,
// which is not 24h on the days the clocks change.
func dayText(start, end int64, zone *time.Location) string {
	hours := strconv.FormatFloat(float64(end-start)/3600e3, 'f', -1, 64)
	return time.UnixMilli(start).In(zone).Format("Mon 2 Jan") + " (" + hours + "h)"
}

// fractional reports whether a row's value of the aggregate name has a
// fraction: its column then shows every number with one decimal.
func fractional(rows []Row, name string) bool {
	for _, r := range rows {
		if f, err := strconv.ParseFloat(r.Aggregates[name], 64); err == nil && f != math.Trunc(f) && !math.IsInf(f, 0) {
			return true
		}
	}
	return false
}

// numberText is a number of a column: with one decimal in a column that
// has fractions (decimals), else as written; "-" for none. What is not a
// number stays as written.
func numberText(raw string, decimals bool) string {
	if raw == "" {
		return "-"
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || !decimals || math.IsInf(f, 0) || math.IsNaN(f) {
		return raw
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}
