package pipeline_test

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"aggregator/internal/ready"
	"aggregator/internal/state"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/before_generations_count_sum.txt")

const (
	countSumYAML = `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: tumbling, size: 10s}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}]
`
	// countSumMaxYAML adds a max after the sum: the sum's value counter's
	// slot in countSumYAML's entries.
	countSumMaxYAML = `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: tumbling, size: 10s}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}, {name: m, fn: max, field: v}]
`
	beforeGenerations = "testdata/before_generations_count_sum.txt"
)

// TestRestoreBeforeGenerationsAggregatesChanged (issue 37): a changelog
// written before generations (the golden: the bytes of the release
// before generations, count and sum, whose entries hold the sum's value
// counter) records no settings. Restored under the config that wrote it,
// its windows go on; under one that adds a max after the sum, whose
// slots are as many as an entry written before value counters has, the
// restore is refused with the aggregate slots' error: the counter would
// read as the max.
func TestRestoreBeforeGenerationsAggregatesChanged(t *testing.T) {
	if *updateGolden {
		writeBeforeGenerations(t)
	}
	log := readBeforeGenerations(t)

	p, out := newProcessor(t, countSumYAML)
	p.Assign(0, 0)
	if _, err := p.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatalf("Restore under the config that wrote it = %v", err)
	}
	in := ready.Input{Offset: 3, Value: []byte(`{"k": "z", "t": 60000, "v": 1}`)}
	p.Process(&in, math.MaxInt64)
	got := map[string]string{}
	for _, r := range out.results {
		got[r.Key] = fmt.Sprintf("n=%d s=%v", r.Count, r.Aggregates[1].Num)
	}
	if want := map[string]string{`{"k":"a"}`: "n=2 s=7", `{"k":"b"}`: "n=1 s=5"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("results after the restore = %v, want %v", got, want)
	}

	q, _ := newProcessor(t, countSumMaxYAML)
	q.Assign(0, 0)
	_, err := q.Restore(0, log.restorer(t, 0), 0)
	if err == nil || !strings.Contains(err.Error(), "aggregate slots") || !strings.Contains(err.Error(), "no value counters") {
		t.Errorf("Restore under a config with a max after the sum = %v, want the aggregate slots' refusal", err)
	}
}

// readBeforeGenerations reads the golden changelog partition: one record
// a line, key, value (- for a tombstone) and tag header in hex.
func readBeforeGenerations(t *testing.T) changelog {
	t.Helper()
	f, err := os.Open(beforeGenerations)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log := changelog{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		fields := strings.Fields(sc.Text())
		hexes := make([][]byte, len(fields))
		for i, h := range fields {
			if h == "-" {
				continue
			}
			if hexes[i], err = hex.DecodeString(h); err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
		}
		rec := logRecord{key: hexes[0], value: hexes[1]}
		if rec.value == nil {
			rec.tag = binary.BigEndian.Uint64(hexes[2]) // a tombstone's tag header
		}
		log[0] = append(log[0], rec)
	}
	return log
}

// writeBeforeGenerations writes the golden: the changelog this release
// writes for countSumYAML, less its generation record (a changelog of
// one generation differs from one written before generations by that
// record only: docs/design.md, "Generations in the changelog"). Run once,
// under -update; the file is the old release's bytes from then on.
func writeBeforeGenerations(t *testing.T) {
	p, _ := newProcessor(t, countSumYAML)
	p.Assign(0, 0)
	if _, err := p.Restore(0, state.NewRestorer(), 0); err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{`{"k": "a", "t": 1000, "v": 3}`, `{"k": "b", "t": 2000, "v": 5}`, `{"k": "a", "t": 3000, "v": 4}`} {
		in := ready.Input{Offset: int64(i), Value: []byte(v)}
		p.Process(&in, math.MaxInt64)
	}
	log := changelog{}
	log.commit(p)
	var b strings.Builder
	b.WriteString("# A changelog partition as the release before generations wrote it: key, value (- for a tombstone), tag header.\n")
	b.WriteString("# tumbling 10s, count and sum (its value counter in each slice); one commit: a 3, b 5, a 4 at 1-3 s.\n")
	for _, rec := range log[0] {
		if rec.key[1] == 'g' {
			continue // the generation record: none before generations
		}
		v, tag := "-", "-"
		if rec.value != nil {
			v = hex.EncodeToString(rec.value)
		} else {
			tag = hex.EncodeToString(state.AppendTag(nil, rec.tag))
		}
		fmt.Fprintf(&b, "%s %s %s\n", hex.EncodeToString(rec.key), v, tag)
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(beforeGenerations, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
