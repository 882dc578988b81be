package integration

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"aggregator/internal/config"
)

// TestPairwise runs the service on combinations of every feature, each
// case against kfake (and srfake for the registry formats) in this
// process, on a seeded stream (pairwise_stream_test.go), and compares
// the results, late and dead-letter topics with replay of the same input
// and configs (pairwise_check_test.go). The cases are a covering array
// (covering_test.go) over pairDimensions: every two values of every two
// dimensions are in some case, unless the product refuses them together
// (pairRefused, which TestPairwiseRefusals checks). A new dimension is a
// line in pairDimensions (and what its value does to the run).
var (
	pairSeed     = flag.Uint64("pairwise.seed", 1, "TestPairwise: the seed of the covering array and of the cases' streams")
	pairTriples  = flag.Bool("pairwise.triples", false, "TestPairwise: cover every three values of three dimensions (the long run), not every two")
	pairCaseOnly = flag.Int("pairwise.case", -1, "TestPairwise: run this case of the table only")
	pairAtOnce   = flag.Int("pairwise.parallel", 0, "TestPairwise: cases run at once (0: 6)")
	pairLogs     = flag.String("pairwise.logs", "", "TestPairwise: write each case's instances' logs (debug level) to DIR/case_N.log")
	pairSet      = flag.String("pairwise.set", "", "TestPairwise: dim=value,... set in every case run (to find which value a failure needs)")
)

// A dimension is a setting the cases vary: its name in the table, the
// config key a refusal must name, its values, and what a value does to a
// case.
type dimension struct {
	name   string
	key    string
	values []string
	apply  func(c *pairCase, v string)
}

// pairCase is one case: what each dimension set.
type pairCase struct {
	n            int
	values       []string // by dimension
	format       string   // source.format
	partitioning string   // source.partitioning
	delivery     string
	window       string // tumbling, sliding, session, count, global (with early firings), calendar (days in Europe/Berlin)
	early        string // early firings: none, event, processing
	scope        string // watermark.scope
	aggregates   string // count_sum or all (every fn)
	results      string // sink.format
	change       string // a config change between the first late phase and the second main phase: none, window, aggregate, filter
	instances    int
	fault        string // during the second main phase: none, restart (drain and start again), lost_session (one instance paused past its session)
	auth         string // how the service and the test's clients authenticate to the broker (authSetup's kinds)
	standby      int    // state.standby_replicas
}

var pairDimensions = []dimension{
	{"format", "source.format", []string{"json", "csv", config.FormatAvro, config.FormatProtobuf, config.FormatJSONSchema}, func(c *pairCase, v string) { c.format = v }},
	{"partitioning", "source.partitioning", []string{"by_key", "repartition", "auto"}, func(c *pairCase, v string) { c.partitioning = v }},
	{"delivery", "delivery", []string{"exactly_once", "at_least_once"}, func(c *pairCase, v string) { c.delivery = v }},
	{"window", "window.type", []string{"tumbling", "sliding", "session", "count", "global", "calendar"}, func(c *pairCase, v string) { c.window = v }},
	{"early", "window.early_firings", []string{"none", "event", "processing"}, func(c *pairCase, v string) { c.early = v }},
	{"scope", "watermark.scope", []string{"global", "partition"}, func(c *pairCase, v string) { c.scope = v }},
	{"aggregates", "aggregates", []string{"count_sum", "all"}, func(c *pairCase, v string) { c.aggregates = v }},
	{"results", "sink.format", []string{"json", config.FormatAvro}, func(c *pairCase, v string) { c.results = v }},
	{"change", "state.config_version", []string{"none", "window", "aggregate", "filter"}, func(c *pairCase, v string) { c.change = v }},
	{"instances", "", []string{"1", "2"}, func(c *pairCase, v string) { c.instances = int(v[0] - '0') }},
	{"fault", "", []string{"none", "restart", "lost_session"}, func(c *pairCase, v string) { c.fault = v }},
	{"auth", "source.sasl.mechanism", authKinds, func(c *pairCase, v string) { c.auth = v }},
	{"standby", "state.standby_replicas", []string{"0", "1"}, func(c *pairCase, v string) { c.standby = int(v[0] - '0') }},
}

// pairRefused are the pairs of values the product refuses together
// (config.Load exits 2 naming both dimensions' keys): the covering array
// leaves them out, and TestPairwiseRefusals checks each is refused.
var pairRefused = []struct{ a, av, b, bv string }{
	{"window", "count", "early", "event"}, // nothing is late in a count window: it fires when full
	{"window", "count", "early", "processing"},
	{"window", "global", "early", "none"}, // a global window fires only through early firings
	{"scope", "partition", "partitioning", "repartition"},
	{"scope", "partition", "partitioning", "auto"},    // auto is repartition for a key of fields
	{"results", config.FormatAvro, "window", "count"}, // the Avro schema has no seq and non-null bounds
	{"results", config.FormatAvro, "window", "global"},
}

// pairPointless are the pairs the product accepts but that test nothing
// more than another case: the covering array leaves them out, so that
// each pair with the value that needs the other is run where it means
// something (TestPairwiseRefusals checks they are accepted).
var pairPointless = []struct{ a, av, b, bv string }{
	{"standby", "1", "instances", "1"}, // one instance keeps no copy
}

// pairDim returns the index of the dimension named name.
func pairDim(name string) int {
	i := slices.IndexFunc(pairDimensions, func(d dimension) bool { return d.name == name })
	if i < 0 {
		panic("no dimension " + name)
	}
	return i
}

// pairAllowed reports whether a (partial) row of value indexes holds no
// refused or pointless pair.
func pairAllowed(row []int) bool {
	for _, r := range slices.Concat(pairRefused, pairPointless) {
		a, b := pairDim(r.a), pairDim(r.b)
		if row[a] >= 0 && row[b] >= 0 && pairDimensions[a].values[row[a]] == r.av && pairDimensions[b].values[row[b]] == r.bv {
			return false
		}
	}
	return true
}

// pairCaseOf is the case of a row of value indexes.
func pairCaseOf(n int, row []int) pairCase {
	c := pairCase{n: n}
	for d, v := range row {
		dim := pairDimensions[d]
		c.values = append(c.values, dim.values[v])
		dim.apply(&c, dim.values[v])
	}
	return c
}

func (c pairCase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "case %02d:", c.n)
	for d, v := range c.values {
		fmt.Fprintf(&b, " %s=%s", pairDimensions[d].name, v)
	}
	return b.String()
}

// pairCases is the covering array of seed, of strength 3 with triples.
func pairCases(seed uint64, triples bool) []pairCase {
	sizes := make([]int, len(pairDimensions))
	for d, dim := range pairDimensions {
		sizes[d] = len(dim.values)
	}
	strength := 2
	if triples {
		strength = 3
	}
	var cases []pairCase
	for n, row := range coveringArray(sizes, strength, pairAllowed, seed) {
		cases = append(cases, pairCaseOf(n, row))
	}
	return cases
}

func TestPairwise(t *testing.T) {
	t.Parallel() // each case has its own broker
	cases := pairCases(*pairSeed, *pairTriples)
	for _, c := range cases {
		t.Log(c) // the table: a failure names its case, -pairwise.case N runs it alone
	}
	atOnce := *pairAtOnce
	if atOnce <= 0 {
		atOnce = 6
	}
	start := time.Now()
	sem := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	for _, c := range cases {
		if *pairCaseOnly >= 0 && c.n != *pairCaseOnly {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			// t.Run from several goroutines: the cases run side by
			// side, however few -parallel allows the package's tests.
			t.Run(fmt.Sprintf("case_%02d", c.n), func(t *testing.T) {
				c := pairSetValues(t, c, *pairSet)
				t.Log(c)
				runPairCase(t, c, *pairSeed*1000+uint64(c.n))
			})
		})
	}
	wg.Wait()
	t.Logf("%d cases in %v", len(cases), time.Since(start).Round(time.Second))
}

// pairSetValues is c with the values of set ("dim=value,..."), each a
// value of its dimension.
func pairSetValues(t *testing.T, c pairCase, set string) pairCase {
	t.Helper()
	c.values = slices.Clone(c.values)
	for kv := range strings.SplitSeq(set, ",") {
		if kv == "" {
			continue
		}
		name, v, _ := strings.Cut(kv, "=")
		d := pairDim(name)
		if !slices.Contains(pairDimensions[d].values, v) {
			t.Fatalf("-pairwise.set %s: not a value of %s %v", kv, name, pairDimensions[d].values)
		}
		c.values[d] = v
		pairDimensions[d].apply(&c, v)
	}
	return c
}

// TestPairwiseRefusals: every pair of values the product refuses
// together is refused by config validation, with a message that names
// the keys of both dimensions (in a case that is otherwise allowed), and
// every case of the covering array is accepted: so a combination the
// product does not support is found by `validate`, never at run time.
func TestPairwiseRefusals(t *testing.T) {
	sizes := make([]int, len(pairDimensions))
	for d, dim := range pairDimensions {
		sizes[d] = len(dim.values)
	}
	for _, r := range pairRefused {
		c := pairCaseWith(t, r.a, r.av, r.b, r.bv)
		for gen := 1; gen <= c.generations(); gen++ {
			_, err := config.Parse([]byte(c.yaml(gen, "http://registry:8081")), pairEnv([]string{"127.0.0.1:9"}))
			keyA, keyB := pairDimensions[pairDim(r.a)].key, pairDimensions[pairDim(r.b)].key
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), keyA) || !strings.Contains(err.Error(), keyB) {
				t.Errorf("%s=%s with %s=%s (%v), generation %d: config.Parse = %v, want an invalid config naming %s and %s", r.a, r.av, r.b, r.bv, c, gen, err, keyA, keyB)
			}
		}
	}
	for _, r := range pairPointless {
		c := pairCaseWith(t, r.a, r.av, r.b, r.bv)
		for gen := 1; gen <= c.generations(); gen++ {
			if _, err := config.Parse([]byte(c.yaml(gen, "http://registry:8081")), pairEnv([]string{"127.0.0.1:9"})); err != nil {
				t.Errorf("%s=%s with %s=%s (%v), generation %d: refused (%v), but it is left out as pointless, not refused", r.a, r.av, r.b, r.bv, c, gen, err)
			}
		}
	}
	for _, c := range append(pairCases(*pairSeed, false), pairCases(*pairSeed, true)...) {
		for gen := 1; gen <= c.generations(); gen++ {
			if _, err := config.Parse([]byte(c.yaml(gen, "http://registry:8081")), pairEnv([]string{"127.0.0.1:9"})); err != nil {
				t.Errorf("%v, generation %d: refused (a pair missing from pairRefused?): %v", c, gen, err)
			}
		}
	}
}

// pairCaseWith is a case with dimension a at av and b at bv, the rest
// anything allowed with that pair left out.
func pairCaseWith(t *testing.T, a, av, b, bv string) pairCase {
	t.Helper()
	sizes := make([]int, len(pairDimensions))
	for d, dim := range pairDimensions {
		sizes[d] = len(dim.values)
	}
	da, db := pairDim(a), pairDim(b)
	row := make([]int, len(sizes))
	fill(row, -1)
	row[da], row[db] = slices.Index(pairDimensions[da].values, av), slices.Index(pairDimensions[db].values, bv)
	others := func(part []int) bool { return pairAllowed(without(part, da)) && pairAllowed(without(part, db)) }
	if !completable(sizes, row, others) {
		t.Fatalf("%s=%s with %s=%s: no case holds them", a, av, b, bv)
	}
	fillRow(sizes, row, others)
	return pairCaseOf(-1, row)
}

// without is row with dimension d unset.
func without(row []int, d int) []int {
	p := slices.Clone(row)
	p[d] = -1
	return p
}

// fillRow sets row's unset values to the first that keep it completable.
func fillRow(sizes, row []int, ok func([]int) bool) {
	for d := range row {
		if row[d] >= 0 {
			continue
		}
		for v := range sizes[d] {
			if row[d] = v; completable(sizes, row, ok) {
				break
			}
		}
	}
}
