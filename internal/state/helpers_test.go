package state_test

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"aggregator/internal/record"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// groupID returns the Entry ID and Split of the group key {field: s} as
// the engine builds them: the key's sort key (a string field: 2, its bytes
// with NUL escaped as 0 0xFF, then 0 0), then its JSON.
func groupID(field, s string) (id string, split int) {
	sk := []byte{2}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			sk = append(sk, 0, 0xFF)
			continue
		}
		sk = append(sk, s[i])
	}
	sk = append(sk, 0, 0)
	return string(sk) + `{"` + field + `":` + record.Text(s).Raw + `}`, len(sk)
}

// sketch returns a quantile sketch holding vs, made as the engine makes
// them (internal/windowing/aggregate.go).
func sketch(t testing.TB, vs ...float64) *ddsketch.DDSketch {
	t.Helper()
	m, err := mapping.NewDefaultMapping(0.01)
	if err != nil {
		t.Fatalf("mapping.NewDefaultMapping(0.01) = %v", err)
	}
	sk := ddsketch.NewDDSketchFromStoreProvider(m, store.DefaultProvider)
	for _, v := range vs {
		if err := sk.Add(v); err != nil {
			t.Fatalf("DDSketch.Add(%v) = %v", v, err)
		}
	}
	return sk
}

// quantiles are where describe reads a sketch.
var quantiles = []float64{0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1}

// describe writes every field of en that the changelog keeps, so that two
// entries are equal when their descriptions are: floats by their bits
// (NaN, -0), sets sorted, sketches by accuracy, counts and quantiles. A
// nil slice and an empty one read the same.
func describe(en *windowing.Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kind=%d part=%d id=%q split=%d start=%d end=%d deleted=%v rev=%d early_only=%v changed=%v lo=%d hi=%d first=%d count=%d nums=[",
		en.Kind, en.Partition, en.ID, en.Split, en.Start, en.End, en.Deleted, en.Revision, en.EarlyOnly, en.Changed, en.Lo, en.Hi, en.First, en.Count)
	for _, f := range en.Nums {
		b.WriteString(num(f) + " ")
	}
	b.WriteString("] picks=[")
	for _, p := range en.Picks {
		fmt.Fprintf(&b, "{isNum=%v null=%v num=%s str=%q raw=%q t=%d seq=%d} ", p.Value.IsNum, p.Value.Null, num(p.Value.Num), p.Value.Str, p.Value.Raw, p.Time, p.Seq)
	}
	b.WriteString("] sets=[")
	for _, s := range en.Sets {
		fmt.Fprintf(&b, "%q ", slices.Sorted(maps.Keys(s)))
	}
	b.WriteString("] sketches=[")
	for _, sk := range en.Sketches {
		b.WriteString(describeSketch(sk) + " ")
	}
	b.WriteString("] exact=[")
	for _, vs := range en.Exact {
		for _, f := range vs {
			b.WriteString(num(f) + ",")
		}
		b.WriteString(" ")
	}
	b.WriteString("] tops=[")
	for _, m := range en.Tops {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, "%q:%d,", k, m[k])
		}
		b.WriteString(" ")
	}
	b.WriteString("]")
	return b.String()
}

func describeAll(ens []*windowing.Entry) []string {
	out := make([]string, len(ens))
	for i, en := range ens {
		out[i] = describe(en)
	}
	return out
}

// num writes f exactly: NaN with its bits, -0 as -0.
func num(f float64) string {
	if math.IsNaN(f) {
		return fmt.Sprintf("NaN(%#x)", math.Float64bits(f))
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func describeSketch(sk *ddsketch.DDSketch) string {
	if sk == nil {
		return "<nil>"
	}
	qs, err := sk.GetValuesAtQuantiles(quantiles)
	return fmt.Sprintf("{acc=%v n=%v zero=%v q=%v err=%v}", sk.RelativeAccuracy(), sk.GetCount(), sk.GetZeroCount(), qs, err)
}

// rec is a changelog record as a consumer reads it.
type rec struct{ key, value, tag []byte }

func (r rec) String() string { return fmt.Sprintf("{key %q value %q tag %q}", r.key, r.value, r.tag) }

// entryRec is en's changelog record in a commit tagged tag, as
// Processor.Checkpoint writes it: a tombstone for a deleted entry.
func entryRec(en *windowing.Entry, tag uint64) rec {
	if en.Deleted {
		return rec{key: state.AppendKey(nil, en), tag: state.AppendTag(nil, tag)}
	}
	return rec{key: state.AppendKey(nil, en), value: state.AppendValue(nil, en, tag)}
}

// posRec is partition 0's position record of the commit tagged tag.
func posRec(tag uint64, offset int64) rec {
	return rec{key: state.PositionKey(nil, 0), value: state.AppendPosition(nil, state.Position{Offset: offset}, tag)}
}

// restored is what Finish made of a log.
type restored struct {
	entries []*windowing.Entry // in the order Finish handed them
	res     state.Result
}

// restore feeds log to a new Restorer and finishes it.
func restore(t testing.TB, log []rec) restored {
	t.Helper()
	r := state.NewRestorer()
	for i, x := range log {
		if err := r.Add(x.key, x.value, x.tag); err != nil {
			t.Fatalf("Add(log[%d] = %v) = %v, want nil", i, x, err)
		}
	}
	var out restored
	res, err := r.Finish(func(en *windowing.Entry) error {
		out.entries = append(out.entries, kept(en)) // en is lent
		return nil
	})
	if err != nil {
		t.Fatalf("Finish() = %v, want nil", err)
	}
	out.res = res
	return out
}

// kept returns a copy of en that shares no memory with it: what Finish
// hands out is lent for the call only.
func kept(en *windowing.Entry) *windowing.Entry {
	c := *en
	c.ID = strings.Clone(en.ID)
	c.Nums, c.Picks, c.Sketches = slices.Clone(en.Nums), slices.Clone(en.Picks), slices.Clone(en.Sketches)
	c.Sets, c.Tops, c.Exact = nil, nil, nil
	for _, m := range en.Sets {
		c.Sets = append(c.Sets, maps.Clone(m))
	}
	for _, m := range en.Tops {
		c.Tops = append(c.Tops, maps.Clone(m))
	}
	for _, vs := range en.Exact {
		c.Exact = append(c.Exact, slices.Clone(vs))
	}
	return &c
}

// valueTag returns the commit tag a changelog value starts with (after
// the version byte), or -1 for a tombstone.
func valueTag(v []byte) int64 {
	if v == nil {
		return -1
	}
	tag, _ := binary.Uvarint(v[1:])
	return int64(tag)
}

// e1 is the first tag of epoch 1: the NextTag of a log of epoch 0 (tags
// below 1<<32, as the tests write them).
const e1 = 1 << 32
