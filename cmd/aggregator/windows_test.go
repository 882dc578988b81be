package main

import (
	"os"
	"testing"
)

// TestReplayWindowKinds runs replay on the hand-worked examples of
// docs/windows.md: testdata/windows/NAME.{yaml,jsonl} against NAME.golden,
// whose lines were written from the SPEC's rules, not from a run.
//   - top_k: in [0s,10s) /home and /cart twice each, /buy and /about once,
//     a null skipped but counted: k=2 gives the tie by code point, /cart
//     first. In [10s,20s) 7 and 7.0 are one number (2), "7" a string (2),
//     true once: the number comes first.
//   - calendar_berlin: days in Europe/Berlin; 31 March 2030 is 23 hours
//     ([23:00Z, 22:00Z)), 27 October 25 hours ([22:00Z, 23:00Z)); both
//     02:30s of 27 October are that day; start and end carry the offset
//     of their instant.
//   - calendar_havana: 10 March 2030 has no midnight in Havana (00:00 -05
//     is 01:00 -04): the day starts at 01:00-04:00 and 9 March ends there.
func TestReplayWindowKinds(t *testing.T) {
	for _, name := range []string{"top_k", "calendar_berlin", "calendar_havana"} {
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile("testdata/windows/" + name + ".jsonl")
			if err != nil {
				t.Fatal(err)
			}
			got := runReplay(t, string(in), "--config", "testdata/windows/"+name+".yaml")
			checkGolden(t, "testdata/windows/"+name+".golden", got, false)
		})
	}
}
