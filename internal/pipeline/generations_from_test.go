package pipeline_test

import (
	"reflect"
	"slices"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/windowing"
)

// TestGenerationCutOverFromKinds: old generations of sliding windows and
// of sessions cut over to tumbling windows (docs/changing-config.md#generations-and-the-cut-over). The old sliding
// windows that start before T are computed to their end, records from T
// on included: the old config's replay. An old session takes no record
// from T on, so those that end by T (a record from T could not have
// reached them) are the replay's; the rest close at the seam. The new
// generation's windows, from T, are the new config's replay.
func TestGenerationCutOverFromKinds(t *testing.T) {
	const parts = 2
	ins := crashStream(23, 400, parts, false)
	next := genConfig("2", "{type: tumbling, size: 2s, allowed_lateness: 1s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]")
	for name, old := range map[string]string{
		"from sliding":  genConfig("1", "{type: sliding, size: 3s, slide: 1s, allowed_lateness: 1s}", "[{name: n, fn: count}]"),
		"from sessions": genConfig("1", "{type: session, gap: 700ms, allowed_lateness: 1s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]"),
	} {
		t.Run(name, func(t *testing.T) {
			sessions := name == "from sessions"
			want1, want2 := replayOf(t, old, ins, parts), replayOf(t, next, ins, parts)
			for _, at := range []int{60, 200, 330} {
				got, second, _ := cutOverRun(t, old, next, ins, at, parts)
				for id := range int32(parts) {
					rep := second.GenerationReport(id)
					if rep.Verdict != config.NewGeneration || rep.Live != 2 {
						t.Fatalf("at %d: partition %d's restore %+v, want a new generation beside the old one", at, id, rep)
					}
					T := rep.Cutover
					oldSide := func(r windowing.Result) bool {
						return r.Partition != id || r.Window.Start >= T || sessions && r.Window.End > T
					}
					newSide := func(r windowing.Result) bool { return r.Partition != id || r.Window.Start < T }
					var mine []windowing.Result // the old generation's windows, by what it fired
					for _, r := range got {
						if r.Generation == 1 {
							mine = append(mine, r)
						}
					}
					for _, c := range []struct {
						side      string
						got, want []windowing.Result
						drop      func(windowing.Result) bool
					}{{"before", mine, want1, oldSide}, {"from", got, want2, newSide}} {
						g := sortResults(slices.DeleteFunc(slices.Clone(c.got), c.drop))
						w := sortResults(slices.DeleteFunc(slices.Clone(c.want), c.drop))
						if len(w) == 0 {
							t.Fatalf("at %d: partition %d has no window %s T=%d: the seam goes untested", at, id, c.side, T)
						}
						if !reflect.DeepEqual(g, w) {
							t.Fatalf("at %d: partition %d's windows %s T=%d differ from the replay:\n%s", at, id, c.side, T, firstDiff(g, w))
						}
					}
					for _, r := range got {
						if r.Partition == id && r.Generation == 1 && r.Window.Start >= T {
							t.Errorf("at %d: the old generation made a window %v from T=%d", at, r.Window, T)
						}
					}
				}
			}
		})
	}
}
