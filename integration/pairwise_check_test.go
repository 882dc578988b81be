package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"aggregator/internal/config"
	"aggregator/internal/producer"
	"aggregator/internal/record"
)

// What a pairwise case is held to. Against replay of its config over
// the same input (pairReference: replay --kcat's engine), to the letter,
// less what the manual leaves open, each for the reason given:
//
//   - The firing watermark of a result and the aggregator.watermark
//     header of a late event or dead letter are not compared: they say
//     when a judgement happened, which depends on how partitions
//     interleave (docs/delivery.md, at_least_once; docs/verify.md
//     compares neither).
//   - at_least_once: a result, late event or dead letter may be read
//     more than once, each repeat the same but for that watermark
//     (docs/delivery.md, at_least_once). exactly_once: no (window,
//     firing, revision) and no source record read twice.
//   - Early firings, and global windows, which fire only early: how
//     many a window gets and what each holds depend on how partitions
//     interleave (event time: the ticks one watermark advance crosses;
//     processing time: the wall clock, which replay does not have,
//     docs/windows.md, early firings), and so do the revisions of the
//     firings after them, which count them (docs/windows.md). Held to:
//     revisions 0, 1, ... in order, counts that never go down
//     (at_least_once: an early result may come again with another count,
//     docs/delivery.md), the firings that are not early equal less their
//     revision, and each window's latest equal less its revision; an
//     early session that then grew is retracted (docs/windows.md) and
//     left out on either side (durCheckEarly); with at_least_once, one
//     that an instance fired before it lost its partitions may stay
//     without its tombstone, inside the grown session (docs/delivery.md).
//     The end phase's key is left out (replay never fires its windows by
//     processing time).
//   - The repartition stage: a key's records come from every input
//     partition, and the order in which they meet decides what each late
//     firing of a late phase holds, which sessions there are on the way
//     (one a record extends before another bridges it, or the other
//     way), and for a session whether a record that only another one
//     brings within reach is late. Held to what verify compares
//     (docs/verify.md): each window's latest, less its revision and
//     firing, windows whose latest is a retraction left out on either
//     side, and a late event on one side only explained by timing: its
//     own headers justify it (the watermark that judged it at or past the
//     cleanup time of the window it missed), and the windows that differ
//     hold a record so judged (pairCheck.apart, explained).
//   - Count windows with the repartition stage take a key's records in
//     the order they are processed across partitions (docs/windows.md,
//     count windows): held to the number of windows each key's records
//     make, each full, none twice (checkCounts).
//   - A config change (docs/changing-config.md): each result is its own
//     generation's (header aggregator.config_version) and on its side of
//     its key's cut-over T (a window is the generation's whose cut-over
//     is the latest at or before its start), a window of that
//     generation's replay; sessions at a seam are left out, as verify
//     leaves them out (the seam closes the old generation's sessions,
//     the new one starts its own); count and global windows are cut by
//     arrival (the old generation fires its partial window or running
//     aggregate once more as final at the cut-over, the new one counts
//     from the records read after the change; a global window's record
//     before T read after the cut-over is late); with a filter change
//     the watermark follows the new filter's records, so a record may be
//     judged late on one side only, explained by timing as above. Late
//     events and dead letters are those of one generation's replay; a
//     late event before its key's cut-over that names no window (the
//     older generation retired: docs/results.md) is not judged, as verify
//     does not judge it (docs/verify.md, not_recomputed): the seam closed
//     the old generation's sessions, which its replay's did not.
//
// Besides: every input record is accounted for: aggregated (in the
// latest result of a window of its key that holds its time, or for count
// and global windows in the numbers above), late, filtered or
// dead-lettered, and none both late and dead.

// pairResult is a result read from the results topic, or written by a
// replay, as the checks compare it.
type pairResult struct {
	durResult
	version int64 // its generation's state.config_version
}

// pairCheck judges a case once its instances stopped.
type pairCheck struct {
	r    *pairRun
	t    *testing.T
	srCl *sr.Client // Avro results: the registry their schemas are in
	refs [][]durResult
	// before and after are replay, with a change, of the first
	// generation's config over the records read before it (with the end
	// of input), and of the second's over those read after it (global
	// windows: at or after T), for the window kinds cut by arrival.
	before, after pairRef
	accept        []func(rec pairRecord) bool // by generation: its filter keeps rec
	byProv        map[string]pairRecord       // the stream's records by source partition/offset
	reader        *kgo.Client                 // pollResults'
	polled        []pairResult
	schemas       map[uint32]avro.Schema // Avro results' schemas by id
}

func newPairCheck(r *pairRun) *pairCheck {
	k := &pairCheck{r: r, t: r.t, byProv: map[string]pairRecord{}, schemas: map[uint32]avro.Schema{}}
	offsets := map[int32]int{}
	for _, rec := range r.stream.all() {
		k.byProv[fmt.Sprintf("%d/%d", rec.partition, offsets[rec.partition])] = rec
		offsets[rec.partition]++
	}
	if r.c.results == config.FormatAvro {
		var err error
		if k.srCl, err = sr.NewClient(sr.URLs(r.reg.URL())); err != nil {
			r.t.Fatal(err)
		}
	}
	for gen, ref := range r.refs {
		var rs []durResult
		for _, v := range ref.exp.results {
			rs = append(rs, k.canonicalJSON(v))
		}
		k.refs = append(k.refs, rs)
		filter := r.cfgs[gen].Source.Filter[0]
		k.accept = append(k.accept, func(rec pairRecord) bool {
			if filter.Field == "ok" {
				return rec.ok == 1
			}
			return rec.c == filter.Equals
		})
	}
	if r.c.generations() == 2 && k.arrival() {
		global := r.c.window == "global"
		k.before = pairReferenceOf(k.t, r, r.cfgs[0], func(rec pairRecord) bool { return rec.phase < changeAt }, global)
		k.after = pairReferenceOf(k.t, r, r.cfgs[1], func(rec pairRecord) bool {
			return rec.phase >= changeAt && (!global || !rec.wellFormed() || rec.t >= k.cutOf(rec.groupKey()))
		}, global)
	}
	return k
}

// canonicalJSON is a JSON result (or a retraction as capture writes it)
// as the checks compare it: its members sorted, numbers as float64, no
// "type"; with Avro results, an aggregate that is an array or object as
// its JSON text, as the Avro schema has it (docs/schema-registry.md).
func (k *pairCheck) canonicalJSON(v string) durResult {
	k.t.Helper()
	if strings.HasPrefix(v, retractPrefix) {
		return parseDurResult(k.t, v)
	}
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(v))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		k.t.Fatalf("result %s: %v", v, err)
	}
	if k.srCl != nil {
		var raw struct {
			Aggregates map[string]json.RawMessage `json:"aggregates"`
		}
		if err := json.Unmarshal([]byte(v), &raw); err != nil {
			k.t.Fatal(err)
		}
		aggs := m["aggregates"].(map[string]any)
		for name, text := range raw.Aggregates {
			if text[0] == '[' || text[0] == '{' {
				aggs[name] = string(text)
			}
		}
	}
	return k.canonical(m)
}

// canonical is a decoded result as canonicalJSON makes it.
func (k *pairCheck) canonical(m map[string]any) durResult {
	delete(m, "type")
	text, err := json.Marshal(canonicalNumbers(m))
	if err != nil {
		k.t.Fatal(err)
	}
	return parseDurResult(k.t, string(text))
}

func canonicalNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		f, _ := strconv.ParseFloat(string(v), 64)
		return f
	case int64:
		return float64(v)
	case int32:
		return float64(v)
	case int:
		return float64(v)
	case map[string]any:
		for k, x := range v {
			v[k] = canonicalNumbers(x)
		}
	case []any:
		for i, x := range v {
			v[i] = canonicalNumbers(x)
		}
	}
	return v
}

// readResults reads the whole results topic, each result canonical.
func (k *pairCheck) readResults() []pairResult {
	k.t.Helper()
	var out []pairResult
	for _, rec := range readAllAs(k.t, k.r.brokers, k.r.auth.client, resultsTopic) {
		out = append(out, k.result(rec))
	}
	return out
}

// pollResults is the results read so far by one consumer of the topic
// (read_committed), with those a poll of up to a second adds: what
// waitComplete looks at, without reading the topic again each time.
func (k *pairCheck) pollResults() []pairResult {
	k.t.Helper()
	if k.reader == nil {
		k.reader = client(k.t, k.r.brokers, append([]kgo.Opt{kgo.ConsumeTopics(resultsTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200 * time.Millisecond)}, k.r.auth.client...)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	k.reader.PollFetches(ctx).EachRecord(func(rec *kgo.Record) { k.polled = append(k.polled, k.result(rec)) })
	return k.polled
}

// result is a record of the results topic as the checks compare it.
func (k *pairCheck) result(rec *kgo.Record) pairResult {
	k.t.Helper()
	var res durResult
	switch {
	case rec.Value == nil:
		res = parseDurResult(k.t, retractPrefix+string(rec.Key))
	case k.srCl != nil:
		res = k.canonical(k.decodeAvro(rec.Value))
	default:
		res = k.canonicalJSON(string(rec.Value))
	}
	if w := res.window(); res.Firing != "retract" && !jsonEqual(w, string(rec.Key)) {
		k.t.Errorf("result %s has Kafka key %s, want %s", res.raw, rec.Key, w)
	}
	v := int64(-1)
	for _, h := range rec.Headers {
		if h.Key == producer.HeaderConfigVersion {
			v, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	return pairResult{res, v}
}

// decodeAvro decodes an Avro result (decodeAvroResult, with each
// schema fetched and parsed once).
func (k *pairCheck) decodeAvro(v []byte) map[string]any {
	k.t.Helper()
	id, ok := record.WireSchemaID(v)
	if !ok {
		k.t.Fatalf("result % x is not in the wire format", v[:min(len(v), 8)])
	}
	schema, ok := k.schemas[id]
	if !ok {
		s, err := k.srCl.SchemaByID(context.Background(), int(id))
		if err != nil {
			k.t.Fatal(err)
		}
		schema = avro.MustParse(s.Schema)
		k.schemas[id] = schema
	}
	return decodeAvroWith(k.t, schema, v)
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// early reports whether the case's windows fire early (global windows
// only do).
func (k *pairCheck) early() bool { return k.r.c.early != "none" }

// counts reports whether count windows are judged by their numbers only
// (see above).
func (k *pairCheck) countsOnly() bool { return k.r.c.window == "count" && k.r.c.spread() }

// skip reports whether a result is left out of the comparisons: the end
// phase's key with early firings (with processing time, replay never
// fires it; with scope partition its windows on four partitions share a
// Kafka key).
func (k *pairCheck) skip(r durResult) bool {
	return k.early() && strings.Contains(string(r.Key), `"`+pairEndKey+`"`)
}

// need is what the results topic must hold before the instances stop:
// the latest result of every window of the replays, less its revision
// (with early firings), and of global windows and count windows by the
// numbers (pairCheck.complete).
func (k *pairCheck) waitComplete() {
	k.t.Helper()
	var missing []durResult
	var short []string
	var got []pairResult
	k.r.waitUntil(func() string {
		if len(missing) == 0 {
			return fmt.Sprintf("every window's result: %s", strings.Join(short, "; "))
		}
		return fmt.Sprintf("every window's result: %d missing, such as %s; the results of its key near it: %s",
			len(missing), missing[0].raw, k.near(got, missing[0]))
	}, func() bool {
		got = k.pollResults()
		missing, short = k.missing(got), k.missingCounts(got)
		return len(missing)+len(short) == 0
	})
}

// near lists got's results of want's key whose windows overlap want's,
// and replay's, to show what differs.
func (k *pairCheck) near(got []pairResult, w durResult) string {
	overlaps := func(r durResult) bool {
		return string(r.Key) == string(w.Key) && (w.Start == nil || string(r.Start) == "null" ||
			durBound(r.Start) < durBound(w.End) && durBound(w.Start) < durBound(r.End))
	}
	var b strings.Builder
	for _, g := range got {
		if overlaps(g.durResult) {
			fmt.Fprintf(&b, "\n  got v%d %s", g.version, g.raw)
		}
	}
	for gen, ref := range k.refs {
		for _, r := range ref {
			if overlaps(r) {
				fmt.Fprintf(&b, "\n  replay %d %s", gen+1, r.raw)
			}
		}
	}
	return b.String()
}

// missing are the windows whose latest result the topic does not hold
// yet (by the checks' comparison), and for windows by the numbers,
// what they lack.
func (k *pairCheck) missing(got []pairResult) []durResult {
	have := map[string]bool{}
	for _, g := range got {
		have[k.norm(g.durResult)] = true
	}
	var out []durResult
	for _, want := range k.required() {
		if !have[k.norm(want)] {
			out = append(out, want)
		}
	}
	return out
}

// missingCounts is what windows judged by the numbers lack: count
// windows with the repartition stage (each key as many as its records
// make), and with a change the finals of the first generation of count
// and global windows.
func (k *pairCheck) missingCounts(got []pairResult) []string {
	c := k.r.c
	var out []string
	want := func(gen int, recs []pairRecord) {
		if c.window != "count" || !c.spread() {
			return
		}
		size := k.r.cfgs[gen-1].Window.Size.Milliseconds()
		n, fired := map[string]int64{}, map[string]int64{}
		for _, rec := range recs {
			if rec.wellFormed() && k.accept[gen-1](rec) {
				n[rec.groupKey()]++
			}
		}
		for _, r := range durLatest(of(got, int64(gen))) {
			if r.Firing != "final" {
				fired[canonicalKey(r.Key)]++
			}
		}
		for key, m := range n {
			if fired[key] < m/size {
				out = append(out, fmt.Sprintf("generation %d, key %s: %d count windows of %d", gen, key, fired[key], m/size))
			}
		}
	}
	if c.generations() == 1 {
		want(1, k.r.stream.all())
		return out
	}
	want(1, k.r.stream.phasesUntil(changeAt))
	want(2, k.r.stream.phasesFrom(changeAt))
	if k.arrival() {
		finals := map[string]bool{}
		for _, r := range of(got, 1) {
			finals[canonicalKey(r.Key)] = finals[canonicalKey(r.Key)] || r.Firing == "final"
		}
		for key := range finals {
			if !finals[key] && key != `{"sid":"`+pairEndKey+`"}` && (c.window == "global" || k.partial(key)) {
				out = append(out, "no final of "+key)
			}
		}
	}
	return out
}

// partial reports whether key's count window holds records at the
// change: its records read before it are not a whole number of windows.
func (k *pairCheck) partial(key string) bool {
	n := int64(0)
	for _, rec := range k.r.stream.phasesUntil(changeAt) {
		if rec.wellFormed() && k.accept[0](rec) && rec.groupKey() == key {
			n++
		}
	}
	return n%k.r.cfgs[0].Window.Size.Milliseconds() > 0
}

// norm is a result as its latest is compared: less its watermark, and
// with early firings, global windows or the repartition stage less its
// revision.
func (k *pairCheck) norm(r durResult) string {
	if k.early() || k.r.c.window == "global" || k.r.c.spread() {
		return durNorm(r)
	}
	return r.value
}

// required is the latest result of each window that must be there.
func (k *pairCheck) required() []durResult {
	var out []durResult
	for gen, ref := range k.refs {
		if k.r.c.generations() == 2 || k.countsOnly() {
			out = append(out, k.requiredOfGeneration(gen)...)
			continue
		}
		for _, r := range durLatest(ref) {
			if !k.skip(r) && r.Firing != "retract" && !(k.timing() && k.explained(r, k.lateRecords())) {
				out = append(out, r)
			}
		}
	}
	return out
}

// lateRecords are the records of the late phases, as apart gives
// records: the ones whose judgement timing may change.
func (k *pairCheck) lateRecords() map[string]bool {
	out := map[string]bool{}
	for p, rec := range k.byProv {
		if k.r.stream.kinds[rec.phase] == phaseLate {
			out[p] = true
		}
	}
	return out
}

// run checks everything once the instances stopped.
func (k *pairCheck) run() {
	k.t.Helper()
	got := k.readResults()
	late, dead := k.events(lateTopic), k.events(dlqTopic)
	if k.r.c.generations() == 1 {
		apart := k.apart(late, k.r.refs[0].exp.late)
		k.checkOne(got, apart)
		k.checkEvents("late events", late, k.r.refs[0].exp.late, apart)
		k.checkEvents("dead letters", dead, k.r.refs[0].exp.dead, nil)
	} else {
		apart := k.apart(late, k.spanLate())
		k.checkGenerations(got, apart)
		k.checkEventsOf("late events", late, func(ref pairRef) []lateEvent { return ref.exp.late }, apart, k.lateAtCut)
		k.checkEventsOf("dead letters", dead, func(ref pairRef) []lateEvent { return ref.exp.dead }, nil, func(string) bool { return false })
	}
	k.t.Logf("read %d results, %d late events, %d dead letters; replay: %d, %d, %d", len(got), len(late), len(dead),
		len(k.refs[0]), len(k.r.refs[0].exp.late), len(k.r.refs[0].exp.dead))
	k.checkAccounted(got, late, dead)
	if len(k.refs[0]) == 0 || len(k.r.refs[0].exp.dead) == 0 {
		k.t.Errorf("replay gives %d results, %d dead letters: the case tests nothing", len(k.refs[0]), len(k.r.refs[0].exp.dead))
	}
}

// results are got's results of generation gen (0: every one), less the
// ones left out.
func (k *pairCheck) results(got []pairResult, version int64) []durResult {
	var out []durResult
	for _, g := range got {
		if (version == 0 || g.version == version) && !k.skip(g.durResult) {
			out = append(out, g.durResult)
		}
	}
	return out
}

// checkOne checks the results of a case without a change against its
// replay.
func (k *pairCheck) checkOne(got []pairResult, apart map[string]bool) {
	k.t.Helper()
	c := k.r.c
	for _, g := range got {
		if g.version != 1 {
			k.t.Errorf("result %s has %s %d, want 1", g.raw, producer.HeaderConfigVersion, g.version)
		}
	}
	var ref []durResult
	for _, r := range k.refs[0] {
		if !k.skip(r) {
			ref = append(ref, r)
		}
	}
	mine := k.results(got, 0)
	switch {
	case k.countsOnly():
		k.checkOnce(mine)
		k.checkCounts(mine, 1, k.r.stream.all())
	case c.spread():
		k.checkLatest(mine, ref, apart)
	case k.early() || c.window == "global":
		durCheckEarly(k.t, mine, ref, c.delivery)
	default:
		durCheckResults(k.t, mine, ref, c.delivery, true)
	}
}

// checkLatest is the check with the repartition stage, where a key's
// records come from every input partition: the order of its records in
// a late phase decides what each late firing holds, and for sessions
// which sessions there are on the way (one that a record extends before
// another bridges it, or the other way). As verify does
// (docs/verify.md), it compares the latest result of each window, less
// its revision, watermark (and firing), and leaves out the windows whose
// latest is a retraction, on either side; besides, each window's
// revisions go up in order, its counts never go down, and nothing is
// read twice with exactly_once (durEarlyRevisions).
func (k *pairCheck) checkLatest(got, ref []durResult, apart map[string]bool) {
	k.t.Helper()
	var errs []string
	for w, rs := range durResultsByWindow(got) {
		errs = append(errs, durEarlyRevisions(w, rs, k.r.c.delivery)...)
	}
	live := func(rs []durResult) map[string]string {
		out := map[string]string{}
		for w, r := range durLatest(rs) {
			if r.Firing != "retract" {
				out[w] = firingField.ReplaceAllString(durNorm(r), "")
			}
		}
		return out
	}
	g, r := live(got), live(ref)
	gotLatest, refLatest := durLatest(got), durLatest(ref)
	for _, w := range slices.Sorted(maps.Keys(r)) {
		if g[w] != r[w] && !k.explained(refLatest[w], apart) {
			errs = append(errs, fmt.Sprintf("%s: latest\n got %s\nwant %s\n%s", w, g[w], r[w], k.nearby(refLatest[w], apart)))
		}
	}
	byWindow := durResultsByWindow(got)
	for _, w := range slices.Sorted(maps.Keys(g)) {
		// at_least_once: an early session of an instance that lost its
		// partitions before it committed can be left without its
		// tombstone, inside a grown session (docs/delivery.md; durStale).
		stale := k.r.c.delivery == "at_least_once" && k.r.c.window == "session" && durStale(byWindow[w], ref)
		if _, ok := r[w]; !ok && !stale && !k.explained(gotLatest[w], apart) {
			errs = append(errs, fmt.Sprintf("%s: latest %s, not in replay", w, g[w]))
		}
	}
	if len(errs) > 0 {
		k.t.Errorf("%d windows differ from replay: %s", len(errs), strings.Join(errs[:min(len(errs), 8)], "\n"))
	}
}

var firingField = regexp.MustCompile(`,"firing":"[a-z_]+"`)

// checkOnce fails on a (window, revision) read twice with exactly_once,
// or repeated with another value with at_least_once.
func (k *pairCheck) checkOnce(got []durResult) {
	k.t.Helper()
	seen := map[string]string{}
	for _, r := range got {
		id := fmt.Sprintf("%s#%s#%d", r.window(), r.Firing, r.Revision)
		if v, ok := seen[id]; ok && (k.r.c.delivery == "exactly_once" || v != r.value) {
			k.t.Errorf("%s: result %s read twice:\n%s\n%s", k.r.c.delivery, id, v, r.value)
		}
		seen[id] = r.value
	}
}

// checkCounts checks count windows by their numbers: for each key, from
// its accepted records among recs (under generation gen's filter), the
// windows of N records it must have fired, seqs 0 to n-1, each full
// (finals, at a cut-over, are checkArrivalOld's).
func (k *pairCheck) checkCounts(got []durResult, gen int, recs []pairRecord) {
	k.t.Helper()
	size := k.r.cfgs[gen-1].Window.Size.Milliseconds()
	n := map[string]int64{}
	for _, rec := range recs {
		if rec.wellFormed() && k.accept[gen-1](rec) {
			n[rec.groupKey()]++
		}
	}
	fired := map[string]map[int64]int64{} // key → seq → count
	for _, r := range got {
		if r.Firing == "final" {
			continue
		}
		key := canonicalKey(r.Key)
		if fired[key] == nil {
			fired[key] = map[int64]int64{}
		}
		fired[key][*r.Seq] = r.Count
		if r.Count != size {
			k.t.Errorf("count window %s holds %d records, want %d", r.window(), r.Count, size)
		}
	}
	for key, c := range n {
		f := fired[key]
		if want := c / size; int64(len(f)) != want || want > 0 && f[want-1] == 0 {
			k.t.Errorf("key %s: %d accepted records, %d count windows fired (seqs %v), want %d", key, c, len(f), slices.Sorted(maps.Keys(f)), want)
		}
	}
}

// events reads a topic of late events or dead letters, by source
// record: each once (exactly_once), or repeated the same but for the
// watermark header (at_least_once).
func (k *pairCheck) events(topic string) map[string]lateEvent {
	k.t.Helper()
	out := map[string]lateEvent{}
	for _, rec := range readAllAs(k.t, k.r.brokers, k.r.auth.client, topic) {
		e := events([]*kgo.Record{rec})[0]
		p := durProvenance(rec)
		if prev, ok := out[p]; ok && (k.r.c.delivery == "exactly_once" || durSansWatermark(prev) != durSansWatermark(e)) {
			k.t.Errorf("%s: %s of the record at %s read twice:\n%v\n%v", k.r.c.delivery, topic, p, prev, e)
		}
		out[p] = e
	}
	return out
}

// checkEvents compares late events or dead letters with replay's, by
// the source record (partition/offset), less the watermark header. The
// records in apart may differ (explained by timing, see apart).
func (k *pairCheck) checkEvents(what string, got map[string]lateEvent, want []lateEvent, apart map[string]bool) {
	k.t.Helper()
	w := map[string]lateEvent{}
	for _, e := range want {
		w[eventProvenance(e)] = durSansWatermark(e)
	}
	var differ []string
	for _, p := range slices.Sorted(maps.Keys(w)) {
		if g := durSansWatermark(got[p]); g != w[p] && !apart[p] {
			differ = append(differ, fmt.Sprintf("%s: got %q, want %q", p, g, w[p]))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(got)) {
		if _, ok := w[p]; !ok && !apart[p] {
			differ = append(differ, fmt.Sprintf("%s: got %q, want none", p, got[p]))
		}
	}
	if len(differ) > 0 {
		k.t.Errorf("%s: %d of %d differ from replay's:\n%s", what, len(differ), len(w), strings.Join(differ[:min(len(differ), 5)], "\n"))
	}
}

// apart are the records judged late on one side only, when the
// interleaving may decide it (timing): the late events of the service
// that replay aggregated, each justified by its own headers (the
// watermark that judged it at or past the cleanup time of the window it
// missed), and replay's late events that the service aggregated. As
// verify explains them by timing (docs/verify.md): with the repartition
// stage a session's late records come from every input partition, and
// whether one that only a session another brings within reach takes is
// late depends on which comes first; after a filter change the
// watermark follows the new filter's records (docs/changing-config.md).
func (k *pairCheck) apart(got map[string]lateEvent, want []lateEvent) map[string]bool {
	k.t.Helper()
	out := map[string]bool{}
	if !k.timing() {
		return out
	}
	inWant := map[string]bool{}
	for _, e := range want {
		p := eventProvenance(e)
		inWant[p] = true
		if _, ok := got[p]; !ok {
			out[p] = true
		}
	}
	lateness := k.r.cfgs[0].Window.AllowedLateness.Milliseconds()
	for p, e := range got {
		if inWant[p] || k.lateAtCut(p) { // late by the cut-over, not by a watermark: checkEventsOf
			continue
		}
		h := headerMap(e.headers)
		wm, _ := strconv.ParseInt(h[producer.HeaderWatermark], 10, 64)
		end, _ := strconv.ParseInt(h[producer.HeaderWindowEnd], 10, 64)
		if wm < end-1+lateness {
			k.t.Errorf("late event of the record at %s: its watermark %d is below the cleanup time %d of the window it missed (%s)", p, wm, end-1+lateness, e.headers)
		}
		out[p] = true
	}
	return out
}

// spanLate are, with a change, the late events of the generation whose
// span holds each record (its key's cut-over T or after: the second),
// as that generation decides its fate (docs/changing-config.md): a
// record after T that the service judged late by a watermark the first
// generation's filter moved on, and the second's replay aggregated, is
// apart, its judgement checked by its own headers.
func (k *pairCheck) spanLate() []lateEvent {
	var out []lateEvent
	for gen, ref := range k.r.refs {
		for _, e := range ref.exp.late {
			rec, ok := k.byProv[eventProvenance(e)]
			if !ok || (rec.t >= k.cutOf(rec.groupKey())) == (gen == 1) {
				out = append(out, e)
			}
		}
	}
	return out
}

// timing reports whether records may be judged late on one side only
// (see apart).
func (k *pairCheck) timing() bool {
	return k.r.c.spread() && k.r.c.window == "session" || k.r.c.change == "filter"
}

func headerMap(hs string) map[string]string {
	out := map[string]string{}
	for _, h := range strings.Split(hs, ";") {
		if k, v, ok := strings.Cut(h, "="); ok {
			out[k] = v
		}
	}
	return out
}

// explained reports whether a window of key, start and end (a session's
// reach: a gap around it) holds a record judged apart.
func (k *pairCheck) explained(r durResult, apart map[string]bool) bool {
	if r.Start == nil || string(r.Start) == "null" {
		return false
	}
	reach := k.r.cfgs[0].Window.Gap.Milliseconds()
	for p := range apart {
		rec, ok := k.byProv[p]
		if ok && rec.groupKey() == canonicalKey(r.Key) && durBound(r.Start)-reach <= rec.t && rec.t < durBound(r.End)+reach {
			return true
		}
	}
	return false
}

// nearby lists the records of r's key within a session gap of r's
// window, each with its provenance, phase, event time, which
// generations' filters keep it, and whether it is apart: what a failure
// needs to tell a lost record from one judged otherwise.
func (k *pairCheck) nearby(r durResult, apart map[string]bool) string {
	if r.Start == nil || string(r.Start) == "null" {
		return ""
	}
	reach := k.r.cfgs[0].Window.Gap.Milliseconds()
	var out []string
	for _, p := range slices.Sorted(maps.Keys(k.byProv)) {
		rec := k.byProv[p]
		if rec.groupKey() != canonicalKey(r.Key) || rec.t < durBound(r.Start)-reach || rec.t >= durBound(r.End)+reach {
			continue
		}
		var kept []int
		for gen, accept := range k.accept {
			if accept(rec) {
				kept = append(kept, gen+1)
			}
		}
		out = append(out, fmt.Sprintf("  record %s phase %d t %d d %d kept by generations %v apart %v bad %q", p, rec.phase, rec.t, rec.d, kept, apart[p], rec.bad))
	}
	if k.r.c.generations() == 2 {
		out = append(out, fmt.Sprintf("  the key's cut-over %d", k.cutOf(canonicalKey(r.Key))))
	}
	return strings.Join(out, "\n")
}

// canonicalKey is a group key's JSON as pairRecord.groupKey writes it.
func canonicalKey(raw json.RawMessage) string {
	var m map[string]string
	_ = json.Unmarshal(raw, &m)
	b, _ := json.Marshal(m)
	return string(b)
}

// eventProvenance is the source partition/offset a late event's or dead
// letter's headers name (durProvenance's).
func eventProvenance(e lateEvent) string {
	var p, o string
	for _, h := range strings.Split(e.headers, ";") {
		if v, ok := strings.CutPrefix(h, producer.HeaderSourcePartition+"="); ok {
			p = v
		}
		if v, ok := strings.CutPrefix(h, producer.HeaderSourceOffset+"="); ok {
			o = v
		}
	}
	return p + "/" + o
}

// checkEventsOf checks that each late event or dead letter is one of a
// generation's replay (changes: the generation whose span holds a
// record decides its fate, docs/changing-config.md), apart (explained by
// timing), or expected by late (see lateAtCut).
func (k *pairCheck) checkEventsOf(what string, got map[string]lateEvent, of func(pairRef) []lateEvent, apart map[string]bool, late func(string) bool) {
	k.t.Helper()
	any := map[string]bool{}
	for _, ref := range k.r.refs {
		for _, c := range durComparables(of(ref)) {
			any[c] = true
		}
	}
	for p, e := range got {
		if rec, ok := k.byProv[p]; ok && noWindow(e) && rec.wellFormed() && rec.t < k.cutOf(rec.groupKey()) {
			// Late before the cut-over of a generation whose older ones
			// have retired: no window of a live generation to name
			// (docs/results.md), and as verify does not judge it
			// (docs/verify.md, late_events not_recomputed): the old
			// generation's windows (its sessions closed at the seam)
			// are gone, its replay's may not be.
			continue
		}
		if c := durComparables([]lateEvent{e})[0]; !any[c] && !apart[p] && !late(p) {
			k.t.Errorf("%s: the record at %s is in no generation's replay: %s", what, p, c)
		}
	}
}

// noWindow reports whether a late event names no window it missed (0, 0).
func noWindow(e lateEvent) bool {
	h := headerMap(e.headers)
	return h[producer.HeaderWindowStart] == "0" && h[producer.HeaderWindowEnd] == "0"
}

// lateAtCut reports whether the record at p is late by the cut-over of
// global windows: read after the change, its time before its key's T
// (docs/changing-config.md: a record before T read after the cut-over
// goes to the late topic).
func (k *pairCheck) lateAtCut(p string) bool {
	rec, ok := k.byProv[p]
	return ok && k.r.c.window == "global" && k.r.c.generations() == 2 && rec.phase >= changeAt &&
		rec.wellFormed() && rec.t < k.cutOf(rec.groupKey())
}

// checkAccounted checks that every input record is accounted for.
func (k *pairCheck) checkAccounted(got []pairResult, late, dead map[string]lateEvent) {
	k.t.Helper()
	c := k.r.c
	latest := map[string]durResult{} // by window, of every generation
	for _, g := range got {
		latest[g.window()+fmt.Sprint(g.version)] = g.durResult
	}
	windows := map[string][]durResult{} // by group key
	for _, r := range latest {
		if r.Firing != "retract" && string(r.Start) != "null" {
			windows[canonicalKey(r.Key)] = append(windows[canonicalKey(r.Key)], r)
		}
	}
	offsets := map[int32]int{}
	lost := 0
	for _, rec := range k.r.stream.all() {
		at := fmt.Sprintf("%d/%d", rec.partition, offsets[rec.partition])
		offsets[rec.partition]++
		isLate, isDead := late[at] != (lateEvent{}), dead[at] != (lateEvent{})
		delete(late, at)
		delete(dead, at)
		// With a filter change, a record one filter rejects is not
		// judged: the generation whose span holds it decides.
		accepted := !slices.ContainsFunc(k.accept, func(f func(pairRecord) bool) bool { return !f(rec) })
		switch {
		case isLate && isDead:
			k.t.Errorf("the record at %s is a late event and a dead letter", at)
		case isLate || isDead:
		case !rec.wellFormed() && accepted && rec.bad != "garbage":
			k.t.Errorf("the malformed record at %s (%+v) is no dead letter", at, rec)
		case !rec.wellFormed() || !accepted || rec.sid == pairEndKey:
		case c.window == "count" || c.window == "global" && (c.change != "window" || rec.phase < changeAt):
			// By the numbers: checkCounts, global windows' latest and
			// finals equal to replay's.
		case !slices.ContainsFunc(windows[rec.groupKey()], func(w durResult) bool {
			return durBound(w.Start) <= rec.t && rec.t < durBound(w.End)
		}):
			if lost++; lost <= 5 {
				k.t.Errorf("the record at %s (%+v) is in no window of the results, no late event, no dead letter", at, rec)
			}
		}
	}
	if lost > 5 {
		k.t.Errorf("%d records lost in all", lost)
	}
	if len(late)+len(dead) > 0 {
		k.t.Errorf("late events %v and dead letters %v of no input record", slices.Collect(maps.Keys(late)), slices.Collect(maps.Keys(dead)))
	}
}

// The generations of a case with a change. Each key's state partition
// cut over at its own T (pairRun.cut); a window belongs to the
// generation whose cut-over is the latest at or before its start
// (docs/changing-config.md). Count windows and global windows are cut
// by arrival instead: the old generation fires what it holds once more
// as final at the cut-over, and the new one counts from the records read
// after the change (global: those at or after T; a record before T read
// after the cut-over is late).

// changeAt is the index of the first phase the second generation reads.
const changeAt = 2

// cutOf is the cut-over T of the state partition of key (a group key's
// JSON), in ms: math.MinInt64 for a partition that held no window at
// the change.
func (k *pairCheck) cutOf(key string) int64 {
	p := int32(-1)
	for _, rec := range k.byProv {
		if rec.groupKey() == key {
			p = rec.partition
			break
		}
	}
	if k.r.c.spread() {
		p = int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: []byte(key)}, pairParts))
	}
	if t, ok := k.r.cut[fmt.Sprint(p)]; ok {
		return t
	}
	return math.MinInt64 // no windows at the change: every window is the new generation's
}

// arrival reports whether the case's windows are cut by arrival (count
// and global windows of the first generation).
func (k *pairCheck) arrival() bool { return k.r.c.window == "count" || k.r.c.window == "global" }

// owned are rs's results of the windows generation gen owns by their
// start, less sessions at a seam (docs/changing-config.md: the seam
// closes the old generation's sessions, the new one starts its own; as
// verify leaves them out, docs/verify.md) and every result of their key
// that overlaps one.
func (k *pairCheck) owned(rs []durResult, gen int) []durResult {
	var out []durResult
	for _, r := range rs {
		if r.Start == nil || string(r.Start) == "null" || k.skip(r) {
			continue
		}
		key := canonicalKey(r.Key)
		cut := k.cutOf(key)
		if (durBound(r.Start) < cut) != (gen == 1) || k.atSeam(key, r, cut) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// atSeam reports whether r overlaps a session of either generation's
// replay of its key that reaches across the cut-over.
func (k *pairCheck) atSeam(key string, r durResult, cut int64) bool {
	if k.r.c.window != "session" {
		return false
	}
	for _, ref := range k.refs {
		for _, s := range ref {
			if canonicalKey(s.Key) == key && durBound(s.Start) < cut && cut < durBound(s.End) &&
				durBound(s.Start) < durBound(r.End) && durBound(r.Start) < durBound(s.End) {
				return true
			}
		}
	}
	return false
}

// of is got's results of state.config_version v.
func of(got []pairResult, v int64) []durResult {
	var out []durResult
	for _, g := range got {
		if g.version == v {
			out = append(out, g.durResult)
		}
	}
	return out
}

// checkGenerations checks the results of a case with a change.
func (k *pairCheck) checkGenerations(got []pairResult, apart map[string]bool) {
	k.t.Helper()
	for _, g := range got {
		if g.version != 1 && g.version != 2 {
			k.t.Errorf("result %s has %s %d, want 1 or 2", g.raw, producer.HeaderConfigVersion, g.version)
		}
	}
	for gen := 1; gen <= 2; gen++ {
		mine := k.results(got, int64(gen))
		if len(mine) == 0 {
			k.t.Errorf("no result of generation %d", gen)
		}
		if k.arrival() && gen == 1 {
			k.checkArrivalOld(mine)
			continue
		}
		if k.r.c.window == "count" {
			k.checkWindows(mine, k.after.exp.results, apart)
			k.checkCounts(mine, 2, k.r.stream.phasesFrom(changeAt))
			continue
		}
		if k.r.c.window == "global" && k.r.c.change != "window" {
			k.checkGlobalNew(mine)
			continue
		}
		for _, r := range mine {
			if cut := k.cutOf(canonicalKey(r.Key)); (durBound(r.Start) < cut) != (gen == 1) {
				k.t.Errorf("generation %d's result %s is on the wrong side of its key's cut-over %d", gen, r.raw, cut)
			}
		}
		k.checkWindowsOf(k.owned(mine, gen), k.owned(k.refs[gen-1], gen), apart)
	}
}

// checkWindowsOf compares results with replay's as checkOne does.
func (k *pairCheck) checkWindowsOf(mine, ref []durResult, apart map[string]bool) {
	k.t.Helper()
	switch {
	case k.countsOnly():
		k.checkOnce(mine)
	case k.r.c.spread() || k.timing():
		k.checkLatest(mine, ref, apart)
	case k.early() || k.r.c.window == "global":
		durCheckEarly(k.t, mine, ref, k.r.c.delivery)
	default:
		durCheckResults(k.t, mine, ref, k.r.c.delivery, true)
	}
}

// checkWindows is checkWindowsOf against replay's results written as
// JSON.
func (k *pairCheck) checkWindows(mine []durResult, want []string, apart map[string]bool) {
	k.t.Helper()
	var ref []durResult
	for _, v := range want {
		if r := k.canonicalJSON(v); !k.skip(r) {
			ref = append(ref, r)
		}
	}
	k.checkWindowsOf(mine, ref, apart)
}

// checkArrivalOld checks the first generation of count or global
// windows: what it fired before the change is replay's of the records
// read before it, and at the cut-over each key's partial window (count:
// the records past its last full window; global: its running aggregate
// of every record) fires once more, as final.
func (k *pairCheck) checkArrivalOld(mine []durResult) {
	k.t.Helper()
	var fired, finals []durResult
	for _, r := range mine {
		if r.Firing == "final" {
			finals = append(finals, r)
		} else {
			fired = append(fired, r)
		}
	}
	before := k.r.stream.phasesUntil(changeAt)
	n := map[string]int64{}
	for _, rec := range before {
		if rec.wellFormed() && k.accept[0](rec) {
			n[rec.groupKey()]++
		}
	}
	want := map[string]int64{} // key → the final's count
	if k.r.c.window == "count" {
		k.checkWindows(fired, k.before.exp.results, nil)
		k.checkCounts(fired, 1, before)
		size := k.r.cfgs[0].Window.Size.Milliseconds()
		for key, c := range n {
			if c%size > 0 {
				want[key] = c % size
			}
		}
	} else {
		for w, rs := range durResultsByWindow(fired) {
			for _, e := range durEarlyRevisions(w, rs, k.r.c.delivery) {
				k.t.Error(e)
			}
		}
		want = n
		// Its content is replay's, with the end of input, of the
		// records read before the change.
		for _, r := range durLatest(k.ref(k.before)) {
			for _, f := range finals {
				if string(f.Key) == string(r.Key) && stripFiring(f) != stripFiring(r) {
					k.t.Errorf("final %s, want replay's running aggregate %s", f.value, r.value)
				}
			}
		}
	}
	got := map[string]int64{}
	for _, f := range finals {
		if _, ok := got[canonicalKey(f.Key)]; ok && k.r.c.delivery == "exactly_once" {
			k.t.Errorf("key %s: a second final %s", f.Key, f.raw)
		}
		got[canonicalKey(f.Key)] = f.Count
	}
	delete(want, `{"sid":"`+pairEndKey+`"}`)
	delete(got, `{"sid":"`+pairEndKey+`"}`)
	if !maps.Equal(got, want) {
		k.t.Errorf("finals at the cut-over, count by key: %v, want %v", got, want)
	}
}

// stripFiring is a result less its watermark, revision and firing.
func stripFiring(r durResult) string { return firingField.ReplaceAllString(durNorm(r), "") }

// ref is a replay's results as the checks compare them, less the ones
// left out.
func (k *pairCheck) ref(ref pairRef) []durResult {
	var out []durResult
	for _, v := range ref.exp.results {
		if r := k.canonicalJSON(v); !k.skip(r) {
			out = append(out, r)
		}
	}
	return out
}

// checkGlobalNew checks the second generation of global windows: each
// key's latest is replay's, with the end of input, of the records read
// after the change at or after its T.
func (k *pairCheck) checkGlobalNew(mine []durResult) {
	k.t.Helper()
	ref := k.ref(k.after)
	got := durLatest(mine)
	for w, r := range durLatest(ref) {
		if g, ok := got[w]; !ok || stripFiring(g) != stripFiring(r) {
			k.t.Errorf("global window %s: latest %s, want %s", w, g.value, r.value)
		}
	}
	for w, rs := range durResultsByWindow(mine) {
		for _, e := range durEarlyRevisions(w, rs, k.r.c.delivery) {
			k.t.Error(e)
		}
	}
}

// requiredOfGeneration is required for a case with a change, or for
// count windows by the numbers: the latest of each window its
// generation owns, less what timing may change.
func (k *pairCheck) requiredOfGeneration(gen int) []durResult {
	var rs []durResult
	switch {
	case k.r.c.generations() == 1: // count windows by the numbers: see missingCounts
		return nil
	case k.arrival() && gen == 0:
		if k.r.c.window == "count" && !k.r.c.spread() {
			rs = k.ref(k.before)
		}
	case k.r.c.window == "count":
		if !k.r.c.spread() {
			rs = k.ref(k.after)
		}
	case k.r.c.window == "global" && k.r.c.change != "window":
		rs = k.ref(k.after)
	default:
		rs = k.owned(k.refs[gen], gen+1)
	}
	var out []durResult
	for _, r := range durLatest(rs) {
		if r.Firing != "retract" && !(k.timing() && k.explained(r, k.lateRecords())) {
			out = append(out, r)
		}
	}
	return out
}
