package placement

import (
	"errors"
	"maps"
	"slices"
	"testing"
)

func TestUserDataRoundTrip(t *testing.T) {
	lags := map[Partition]int64{{"in", 0}: 0, {"in", 7}: CaughtUp, {"rep", 3}: Unknown, {"a-much-longer-topic", 300}: 1 << 40}
	got, err := parseLags(appendLags(nil, lags))
	if err != nil || !maps.Equal(got, lags) {
		t.Errorf("parseLags(appendLags(%v)) = %v, %v", lags, got, err)
	}
	copies := []Copy{{Partition{"rep", 3}, true}, {Partition{"in", 0}, false}, {Partition{"in", 2}, false}}
	back, err := parseCopies(appendCopies(nil, copies))
	want := []Copy{{Partition{"in", 0}, false}, {Partition{"in", 2}, false}, {Partition{"rep", 3}, true}}
	if err != nil || !slices.Equal(back, want) {
		t.Errorf("parseCopies(appendCopies(%v)) = %v, %v; want %v", copies, back, err, want)
	}
	if got, err := parseLags(nil); err != nil || len(got) != 0 {
		t.Errorf("parseLags(nil) = %v, %v; want none (a cooperative-sticky member's metadata)", got, err)
	}
}

func TestUserDataRefused(t *testing.T) {
	good := appendLags(nil, map[Partition]int64{{"in", 1}: 5})
	tests := map[string][]byte{
		"another version": append([]byte{2}, good[1:]...),
		"truncated":       good[:len(good)-1],
		"trailing bytes":  append(slices.Clone(good), 0),
		"a huge count":    {userDataVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
	}
	for name, b := range tests {
		if _, err := parseLags(b); !errors.Is(err, errUserData) {
			t.Errorf("%s: parseLags(%x) = %v, want errUserData", name, b, err)
		}
	}
}

func FuzzParseUserData(f *testing.F) {
	f.Add(appendLags(nil, map[Partition]int64{{"in", 1}: 5, {"rep", 0}: Unknown}))
	f.Add(appendCopies(nil, []Copy{{Partition{"in", 1}, true}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if lags, err := parseLags(b); err == nil {
			again, err := parseLags(appendLags(nil, lags))
			if err != nil || !maps.Equal(again, lags) {
				t.Errorf("parseLags(appendLags(%v)) = %v, %v", lags, again, err)
			}
		} else if !errors.Is(err, errUserData) {
			t.Errorf("parseLags(%x) = %v, want errUserData", b, err)
		}
		if _, err := parseCopies(b); err != nil && !errors.Is(err, errUserData) {
			t.Errorf("parseCopies(%x) = %v, want errUserData", b, err)
		}
	})
}
