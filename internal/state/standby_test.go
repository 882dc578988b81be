package state_test

import (
	"slices"
	"testing"

	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// A copy fed a changelog a fetch at a time, some records fetched twice
// and offsets skipping ahead (compaction, transaction markers), finishes
// as a restore that read the log at once.
func TestStandbyMatchesRestore(t *testing.T) {
	for name, tt := range orphanLogs {
		t.Run(name, func(t *testing.T) {
			want := restore(t, tt.log)
			for chunk := 1; chunk <= len(tt.log)+1; chunk++ {
				s := state.NewStandby(0, 0)
				offset := func(i int) int64 { return int64(3 * i) } // every record two offsets after the last
				for lo := 0; lo < len(tt.log); lo += chunk {
					from := max(lo-1, 0) // the last record of the fetch before, again
					for i := from; i < min(lo+chunk, len(tt.log)); i++ {
						x := tt.log[i]
						if err := s.Add(offset(i), x.key, x.value, x.tag); err != nil {
							t.Fatalf("chunk %d: Add(log[%d]) = %v", chunk, i, err)
						}
					}
					s.Skip(offset(min(lo+chunk, len(tt.log))-1) + 1) // a commit marker
				}
				if got := s.Next(); got != offset(len(tt.log)-1)+2 && len(tt.log) > 0 {
					t.Errorf("chunk %d: Next() = %d, want %d", chunk, got, offset(len(tt.log)-1)+2)
				}
				var got []*windowing.Entry
				res, err := s.Restorer().Finish(func(en *windowing.Entry) error {
					c := *en
					got = append(got, &c)
					return nil
				})
				if err != nil {
					t.Fatalf("chunk %d: Finish() = %v", chunk, err)
				}
				if g, w := briefs(got), briefs(want.entries); !slices.Equal(g, w) {
					t.Errorf("chunk %d: entries %q, want %q", chunk, g, w)
				}
				if g, w := briefRepairs(t, res.Repairs), briefRepairs(t, want.res.Repairs); !slices.Equal(g, w) || res.NextTag != want.res.NextTag || res.Position.Offset != want.res.Position.Offset || res.HasPosition != want.res.HasPosition {
					t.Errorf("chunk %d: repairs %q next tag %d position %v %d, want %q %d %v %d", chunk, g, res.NextTag, res.HasPosition, res.Position.Offset, w, want.res.NextTag, want.res.HasPosition, want.res.Position.Offset)
				}
			}
		})
	}
}

func TestStandbyLag(t *testing.T) {
	s := state.NewStandby(5, 1000)
	if r, ms, known := s.Lag(1500); known || ms != 500 || r != 0 {
		t.Errorf("before an end was seen: Lag = %d, %d, %v; want unknown, 500 ms since it was made", r, ms, known)
	}
	s.Skip(9)
	s.Seen(40, 2000)
	s.Seen(60, 2400)
	if r, ms, known := s.Lag(2500); !known || r != 50 || ms != 500 {
		t.Errorf("50 behind: Lag = %d, %d, %v; want 50 records, 500 ms (since end 40 was seen)", r, ms, known)
	}
	s.Skip(44)
	if r, ms, _ := s.Lag(2500); r != 15 || ms != 100 {
		t.Errorf("past end 40: Lag = %d, %d; want 15 records, 100 ms (since end 60 was seen)", r, ms)
	}
	s.Skip(59)
	s.Seen(60, 3000)
	if r, ms, known := s.Lag(3100); !known || r != 0 || ms != 0 {
		t.Errorf("caught up: Lag = %d, %d, %v; want 0, 0", r, ms, known)
	}
	s.Seen(70, 4000) // the owner committed 10 more
	if r, ms, known := s.Lag(4200); !known || r != 10 || ms != 200 {
		t.Errorf("10 behind: Lag = %d, %d, %v; want 10 records, 200 ms", r, ms, known)
	}
	for i := range int64(200) { // far behind, an end seen each 10 ms: the oldest merge
		s.Seen(100+i, 5000+10*i)
	}
	if r, ms, _ := s.Lag(7000); r != 239 || ms != 3000 {
		t.Errorf("far behind: Lag = %d, %d; want 239 records, 3000 ms (since end 70 was seen)", r, ms)
	}
}
