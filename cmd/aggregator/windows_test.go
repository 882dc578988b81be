package main

import (
	"os"
	"testing"
)

// TestReplayWindowKinds runs replay on the hand-worked examples of
// docs/windows.md: testdata/windows/NAME.{yaml,jsonl} against NAME.golden,
// whose lines were written from the manual's rules, not from a run.
//   - top_k: in [0s,10s) /home and /cart twice each, /buy and /about once,
//     a null skipped but counted: k=2 gives the tie by code point, /cart
//     first. In [10s,20s) 7 and 7.0 are one number (2), "7" a string (2),
//     true once: the number comes first.
//   - top_k_spellings: "A" and "\u0041" are one string, 1e2, 100 and
//     100.0 one number; "a\"b" once is cut by k=2.
//   - calendar_berlin: days in Europe/Berlin; 31 March 2030 is 23 hours
//     ([23:00Z, 22:00Z)), 27 October 25 hours ([22:00Z, 23:00Z)); both
//     02:30s of 27 October are that day; start and end carry the offset
//     of their instant.
//   - calendar_havana: 10 March 2030 has no midnight in Havana (00:00 -05
//     is 01:00 -04): the day starts at 01:00-04:00 and 9 March ends there.
//   - early_event: every 3s of event time, ticks at W = 2999, 5999, …; the
//     first W (999) only sets where they count from. W 1999 → 3499
//     crosses 2999: [0s,10s) early (3). W 3499 → 8999 crosses 5999 and
//     8999 (not [0s,10s)'s maxTimestamp 9999): one early firing (4). W
//     9499 → 20499: [0s,10s) on time at its 9999 (revision 2), then
//     [20s,30s), changed and not due, early at the first tick crossed,
//     11999; at the flush it fires on time as revision 1.
//   - early_processing: the same with processing time: replay has no
//     clock, so no early firing.
//   - global: every 10s of event time; W 4999 → 11999 crosses 9999: u1
//     (3). W 15999 → 34999 crosses 19999 and 29999: u1 (5), then u2 (1),
//     by key. The end of input is a tick: u1 changed (6); u2 did not.
//   - count: u1's first 3 records (times 1s, 3s, 2s) fire [1000, 3001)
//     with the W before the third (2999); its 4th waits: no timeout, so
//     nothing fires at the end of input.
//   - count_timeout (3, timeout 5s): u1 fills window 0 at 6.5s; u2's
//     window 0 (first record 2s) times out when W reaches 7999 ≥ 7000 with
//     2; u1's next record (at 1s, due 6s ≤ W 8499) times out at once; at
//     the end of input u2's window 1 times out.
//   - count_sliding_3_2 (co-prime: slices of 1 record): after records 2,
//     4 and 6, the last min(3, seen): 1–2, 2–4, 4–6.
//   - count_sliding_4_2 (slices of 2): 1–2, 1–4, 3–6.
//   - count_timeout_ties (3, timeout 10ms, --no-flush): a@100, b@100,
//     a@105 leave a's and b's windows both due at 110; c@200 makes W 199:
//     by due time, then window end, b [100, 101) before a [100, 106).
//   - missing_field: v present (2), absent, null: one window, count 3,
//     sum 2.
//   - no_values: [0, 10) has no v (absent, null): count 2, count(v) and
//     count_distinct 0, top_k [], the others null; its on-time firing
//     comes from the record at 11, which has no v either (it moves W to
//     10). "x" for a sum is a dead letter. [10, 20): v 4 at 12 and 2 at
//     13, none at 11: count 3, count(v) 2, sum 6, min 2, max 4, avg 3,
//     first 4, last 2, p50 rank ceil(0.5·2) = 1 of {2, 4}: 2.
//   - quantile_exact (sliding 20ms by 10ms): [-10, 10) holds {10, 30}:
//     ranks 1, 1, 2; [0, 20) {10, 20, 30, 40, 50}: ranks 2, 3, 5;
//     [10, 30) {20, 40, 50}: ranks 1, 2, 3.
//   - global_processing: no clock in replay, so the flush (a tick) fires
//     each key once, early, by key: u1 (1), u2 (2).
//   - early_first_watermark: W −∞ → 6999 crosses no tick; 6999 → 7999
//     none (both below 8999); 7999 → 9499 crosses 8999: early (3); the
//     flush fires it on time (revision 1).
func TestReplayWindowKinds(t *testing.T) {
	for _, name := range []string{"top_k", "top_k_spellings", "calendar_berlin", "calendar_havana", "early_event", "early_processing", "global",
		"count", "count_timeout", "count_sliding_3_2", "count_sliding_4_2", "count_timeout_ties", "missing_field", "no_values",
		"quantile_exact", "global_processing", "early_first_watermark"} {
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile("testdata/windows/" + name + ".jsonl")
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"--config", "testdata/windows/" + name + ".yaml"}
			if name == "count_timeout_ties" {
				args = append(args, "--no-flush")
			}
			got := runReplay(t, string(in), args...)
			checkGolden(t, "testdata/windows/"+name+".golden", got, false)
		})
	}
}
