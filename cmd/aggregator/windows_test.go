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
func TestReplayWindowKinds(t *testing.T) {
	for _, name := range []string{"top_k"} {
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
