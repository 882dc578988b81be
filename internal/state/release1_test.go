package state_test

import (
	"bufio"
	"encoding/hex"
	"math"
	"os"
	"strings"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// TestRestoreRelease1Slice restores a slice as the release before exact
// quantiles and value counters wrote it (testdata, bytes of that release):
// its sketch still answers (within 1%), its sum's value counter is its
// record count, and a record added after the restore counts in every
// aggregate.
func TestRestoreRelease1Slice(t *testing.T) {
	f, err := os.Open("testdata/release1_sum_quantile_first.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var key, value []byte
	for sc := bufio.NewScanner(f); sc.Scan(); {
		name, h, _ := strings.Cut(sc.Text(), " ")
		b, err := hex.DecodeString(h)
		switch {
		case name == "#":
			continue
		case err != nil:
			t.Fatalf("%s: %v", name, err)
		case name == "key":
			key = b
		case name == "value":
			value = b
		}
	}
	r := state.NewRestorer()
	if err := r.Add(key, value, nil); err != nil {
		t.Fatalf("Add(release 1 slice) = %v", err)
	}
	pos := posRec(5, 3) // the commit's position: offsets 0-2 applied
	if err := r.Add(pos.key, pos.value, nil); err != nil {
		t.Fatalf("Add(position) = %v", err)
	}
	restored := 0
	got := &resultsOf{}
	spec := windowing.Spec{Kind: windowing.KindTumbling, Size: 10,
		Aggregates: []windowing.Aggregate{{Fn: windowing.FnSum}, {Fn: windowing.FnQuantile, Q: 0.5}, {Fn: windowing.FnFirst}}}
	e, err := windowing.NewEngine(spec, got)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Finish(func(en *windowing.Entry) error { restored++; return e.Restore(en, math.MinInt64) }); err != nil || restored != 1 {
		t.Fatalf("Finish: Restore(release 1 slice) = %v, %d entries, want 1", err, restored)
	}
	e.FinishRestore()
	n := record.Number(40)
	e.Add(&record.Record{Offset: 3, Time: 4, Key: `{"k":"a"}`, KeyFields: []record.Value{record.Text("a")}, Values: []record.Value{n, n, n}})
	e.Advance(math.MaxInt64)
	if len(got.rs) != 1 {
		t.Fatalf("results %+v, want one window", got.rs)
	}
	res := got.rs[0]
	// 10, 30, 20 restored, 40 added: sum 100; p50 is rank 2 of 4, 20 (the
	// sketch's, within 1%); first is 10 (time 1).
	if res.Count != 4 || res.Aggregates[0].Num != 100 || math.Abs(res.Aggregates[1].Num-20) > 0.2 || res.Aggregates[2].Num != 10 {
		t.Errorf("after restoring release 1's slice and adding 40: %+v, want count 4, sum 100, p50 20 within 1%%, first 10", res)
	}
}

// resultsOf keeps copies of the results.
type resultsOf struct{ rs []windowing.Result }

func (c *resultsOf) Emit(r *windowing.Result) {
	cp := *r
	cp.Aggregates = append([]record.Value(nil), r.Aggregates...)
	c.rs = append(c.rs, cp)
}
