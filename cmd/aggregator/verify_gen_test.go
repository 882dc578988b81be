package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"aggregator/internal/config"
	"aggregator/internal/producer"
)

// verifyGenYaml is the config of a change of generations (docs/changing-config.md):
// partitioning, watermark.scope, the window's shape, an aggregate more
// (or nothing) and state.config_version.
const verifyGenYaml = `
source:
  topics: [calls]
  group: verify-gen
  format: json
  key: [sid]
  partitioning: %s
  timestamp: {field: t, layout: unix_ms}
watermark: {max_out_of_orderness: 1s, scope: %s}
window: {%s, allowed_lateness: 2s}
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: calls, fn: count}
%s
sink: {results_topic: calls-windows, late_topic: calls-late, dead_letter_topic: calls-dlq, linger: 1ms}
state: {config_version: %d}
delivery: exactly_once
`

// genBase is a 5-minute boundary of event time: the tests' first record.
const genBase = 1_900_000_200_000

// genConfigs are the two generations' configs: 1-minute windows at
// version 1, then 5-minute windows with a max added at version 2.
func genConfigs(partitioning, scope string) (v1, v2 string) {
	return fmt.Sprintf(verifyGenYaml, partitioning, scope, "type: tumbling, size: 1m", "", 1),
		fmt.Sprintf(verifyGenYaml, partitioning, scope, "type: tumbling, size: 5m", "  - {name: longest, fn: max, field: d}", 2)
}

// switchConfig points s (the service it starts and verify) at yaml.
func (s *verifySetup) switchConfig(t *testing.T, yaml string) {
	t.Helper()
	s.path = filepath.Join(t.TempDir(), "verify.yaml")
	writeFile(t, s.path, yaml)
	var err error
	if s.cfg, err = config.Load(s.path, lookupEnv(s.env)); err != nil {
		t.Fatal(err)
	}
}

// genInput is one record a second from genBase+from to genBase+to (ms),
// keys u0..u3, key k in partition k % 2 (only those of parts), each
// timestamped with its event time.
func genInput(from, to int64, parts ...int32) []verifyRecord {
	var out []verifyRecord
	for ms := from; ms < to; ms += 1000 {
		k := ms / 1000 % 4
		p := int32(k % 2)
		if !slices.Contains(parts, p) {
			continue
		}
		out = append(out, verifyRecord{p, fmt.Sprintf(`{"sid":"u%d","t":%d,"d":%d}`, k, genBase+ms, ms/1000%10), genBase + ms})
	}
	return out
}

// runPhase runs the service with s's config over recs, then drains.
func (s *verifySetup) runPhase(t *testing.T, recs []verifyRecord) {
	t.Helper()
	a := s.start(t)
	s.produce(t, recs)
	s.waitProcessed(t)
	a.stop(t)
}

// resultOf is the first result on the results topic of generation version
// whose key holds sid (and whose value is an object).
func (s *verifySetup) resultOf(t *testing.T, version, sid string) *kgo.Record {
	t.Helper()
	for _, r := range s.readTopic(t, "calls-windows") {
		if v, _ := header(r, producer.HeaderConfigVersion); v == version && strings.Contains(string(r.Key), `"`+sid+`"`) && r.Value != nil {
			return r
		}
	}
	t.Fatalf("no result of generation %s for %s on the results topic", version, sid)
	return nil
}

// corrupt writes r again with a count one higher (its headers kept), and
// returns a function that writes it back as it was.
func (s *verifySetup) corrupt(t *testing.T, r *kgo.Record) (restore func()) {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.Value, &v); err != nil {
		t.Fatal(err)
	}
	v["count"] = v["count"].(float64) + 1
	b, _ := json.Marshal(v)
	write := func(value []byte) {
		if err := s.client(t).ProduceSync(context.Background(), &kgo.Record{Topic: "calls-windows", Key: r.Key, Value: value, Headers: r.Headers}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	write(b)
	return func() { write(r.Value) }
}

// wantOneDiffering checks that verify found exactly one differing window,
// the one corrupted: its key and start.
func wantOneDiffering(t *testing.T, s *verifySetup, r *kgo.Record) {
	t.Helper()
	out, err := s.verify(t)
	d := wantDiff(t, out, err, "window_differs")
	var k resultKey
	if err := json.Unmarshal(r.Key, &k); err != nil {
		t.Fatal(err)
	}
	if got := d["window"].(map[string]any)["start"]; fmt.Sprint(int64(got.(float64))) != fmt.Sprint(*k.WindowStart) || out.count("unexplained") != 1 {
		t.Errorf("want the one window corrupted (start %d) differing, nothing else:\n%s", *k.WindowStart, out.text)
	}
}

// resultKey is what the test reads of a result's Kafka key.
type resultKey struct {
	WindowStart *int64 `json:"window_start"`
}

// TestVerifyGenerationsByKey: by_key with watermark.scope partition,
// 1-minute windows at version 1, then 5-minute windows with a max added at
// version 2. Partition 1 runs on far past the change (generation 1
// retired there, generation 2's first windows closed) while partition 0
// stops at it (generation 1 keeps its open window there, so the changelog
// keeps it): verify with the new config compares windows of both
// generations in one run, each under its own settings, and counts
// partition 1's windows of generation 1 apart; a corrupted result of
// either generation is found. Once partition 0 has run on too,
// generation 1 is retired everywhere: its results are counted apart by
// version. Verified before any instance ran the new config, the windows
// are generation 1's.
func TestVerifyGenerationsByKey(t *testing.T) {
	t.Parallel()
	v1, v2 := genConfigs("by_key", "partition")
	s := newVerifySetup(t, 2, v1)
	s.runPhase(t, genInput(0, 200_000, 0, 1)) // to 3:20: windows to [2m, 3m) closed
	s.switchConfig(t, v2)
	// The new config before any instance ran it: generation 1's windows,
	// under generation 1's settings, and a warning.
	out, err := s.verify(t)
	if err != nil || out.count("windows_compared_by_generation.1") != 12 || out.count("windows.equal") != 12 ||
		!strings.Contains(out.stderr, "not in the changelog yet") {
		t.Fatalf("verify with a config not run yet = %v, want nil, 12 windows of generation 1 equal, a warning:\n%s", err, out.text)
	}
	s.runPhase(t, genInput(200_000, 720_000, 1)) // partition 1 to 12:00: generation 2's [5m, 10m) closed
	out, err = s.verify(t)
	if err != nil {
		t.Fatalf("verify = %v, want nil:\n%s", err, out.text)
	}
	// Partition 0: u0 and u2's windows [0, 1m) to [2m, 3m) under
	// generation 1 ([3m, 4m) is open). Partition 1: u1 and u3's [5m, 10m)
	// under generation 2; their 1-minute windows are generation 1's,
	// retired there.
	if out.count("windows_compared_by_generation.1") != 6 || out.count("windows_compared_by_generation.2") != 2 ||
		out.count("windows.equal") != 8 || out.count("windows_left_out.retired_generation") == 0 || out.summary["results_of_other_versions"] != nil {
		t.Fatalf("want 6 windows of generation 1 and 2 of generation 2 compared and equal, partition 1's windows of generation 1 left out as retired:\n%s", out.text)
	}
	for _, c := range []struct{ version, sid string }{{"1", "u0"}, {"2", "u1"}} {
		r := s.resultOf(t, c.version, c.sid)
		restore := s.corrupt(t, r)
		wantOneDiffering(t, s, r)
		restore()
	}

	s.runPhase(t, genInput(200_000, 720_000, 0)) // partition 0 to 12:00 too
	out, err = s.verify(t)
	if err != nil {
		t.Fatalf("after the retirement: verify = %v, want nil:\n%s", err, out.text)
	}
	if out.count("windows_compared_by_generation.2") != 4 || out.count("windows.equal") != 4 ||
		out.count("results_of_other_versions.1") < 20 || out.summary["windows_compared_by_generation"].(map[string]any)["1"] != nil {
		t.Fatalf("want 4 windows of generation 2 compared and equal, generation 1's results counted apart:\n%s", out.text)
	}
}

// TestVerifyGenerationsRepartition: the same change with
// source.partitioning repartition (state partitions are the repartition
// partitioner's). Verified while generation 1 is live (after the change,
// before its windows dropped), its windows are compared under its
// settings; once generation 1 has retired (its settings gone from the
// changelog), its results are counted apart by version and generation
// 2's windows compared; --from after the retirement leaves generation 1's
// results out. A corrupted result of either generation is found.
func TestVerifyGenerationsRepartition(t *testing.T) {
	t.Parallel()
	v1, v2 := genConfigs("repartition", "global")
	s := newVerifySetup(t, 2, v1)
	s.runPhase(t, genInput(0, 200_000, 0, 1))
	s.switchConfig(t, v2)
	s.runPhase(t, genInput(200_000, 270_000, 0, 1)) // to 4:30: the cut-over at 5:00, generation 1's [4m, 5m) open
	out, err := s.verify(t)
	if err != nil {
		t.Fatalf("verify = %v, want nil:\n%s", err, out.text)
	}
	// Four keys' windows [0, 1m) to [3m, 4m), all generation 1's.
	if out.count("windows_compared_by_generation.1") != 16 || out.count("windows.equal") != 16 {
		t.Fatalf("want 16 windows of generation 1 compared and equal:\n%s", out.text)
	}
	r1 := s.resultOf(t, "1", "u2")
	restore := s.corrupt(t, r1)
	wantOneDiffering(t, s, r1)
	restore()

	s.runPhase(t, genInput(270_000, 720_000, 0, 1)) // to 12:00: generation 1 retired, 2's [5m, 10m) closed
	out, err = s.verify(t)
	if err != nil {
		t.Fatalf("after the retirement: verify = %v, want nil:\n%s", err, out.text)
	}
	if out.count("windows_compared_by_generation.2") != 4 || out.count("windows.equal") != 4 ||
		out.count("results_of_other_versions.1") < 20 || out.count("windows_left_out.retired_generation") == 0 {
		t.Fatalf("want 4 windows of generation 2 compared and equal, generation 1's 20 results counted apart:\n%s", out.text)
	}
	if !strings.Contains(out.stderr, "no live generation in the changelog") {
		t.Errorf("no warning about results of retired generations:\n%s", out.stderr)
	}
	from := time.UnixMilli(genBase + 300_000).UTC().Format(time.RFC3339)
	out, err = s.verify(t, "--from", from)
	if err != nil || out.summary["results_of_other_versions"] != nil || out.count("windows.equal") != 4 {
		t.Fatalf("verify --from %s = %v, want nil, 4 windows equal, no results of other versions:\n%s", from, err, out.text)
	}
	r2 := s.resultOf(t, "2", "u3")
	s.corrupt(t, r2)
	wantOneDiffering(t, s, r2)
}

// TestVerifyGenerationsSessions: session windows (gap 10 s) over bursts
// of 20 s a minute, a max added at version 2, by_key with
// watermark.scope partition; partition 0 stops at the change, partition 1
// runs on. The service's sessions before the cut-over are compared under
// generation 1, those after it under generation 2; the sessions of the
// burst at the change, which reach across the cut-over, are left out; no
// difference.
func TestVerifyGenerationsSessions(t *testing.T) {
	t.Parallel()
	const (
		v1 = "type: session, gap: 10s"
		v2 = "  - {name: longest, fn: max, field: d}"
	)
	s := newVerifySetup(t, 2, fmt.Sprintf(verifyGenYaml, "by_key", "partition", v1, "", 1))
	bursts := func(recs []verifyRecord) []verifyRecord {
		var out []verifyRecord
		for _, r := range recs {
			if (r.ts-genBase)/1000%60 < 20 {
				out = append(out, r)
			}
		}
		return out
	}
	s.runPhase(t, bursts(genInput(0, 200_000, 0, 1))) // bursts from 0:00, 1:00, 2:00, 3:00 (to 3:19)
	s.switchConfig(t, fmt.Sprintf(verifyGenYaml, "by_key", "partition", v1, v2, 2))
	s.runPhase(t, bursts(genInput(200_000, 720_000, 1))) // partition 1: bursts from 4:00 to 11:00
	out, err := s.verify(t)
	if err != nil {
		t.Fatalf("verify = %v, want nil:\n%s", err, out.text)
	}
	// Partition 0 (u0, u2): the bursts of 0:00 to 2:00 under generation 1
	// (3:00's not closed at its watermark). Partition 1 (u1, u3): 4:00's
	// to 10:00's under generation 2 (11:00's not closed); before the
	// cut-over generation 1 has retired there, and the 3:00 burst's
	// sessions reach past it (their gap).
	if out.count("windows_compared_by_generation.1") != 6 || out.count("windows_compared_by_generation.2") != 14 ||
		out.count("windows.equal") != 20 || out.count("windows_left_out.session_at_cutover") != 2 {
		t.Fatalf("want 6 sessions of generation 1 and 14 of generation 2 compared and equal, 2 at the cut-over left out:\n%s", out.text)
	}
}

// TestVerifyGenerationsAvro: the by_key change of
// TestVerifyGenerationsByKey with Avro input and results: each
// generation's results are written under its own schema (generation 2's
// with the max added registers the next version), and verify decodes
// each window's under its generation's; a corrupted result of generation
// 2 is found.
func TestVerifyGenerationsAvro(t *testing.T) {
	t.Parallel()
	toAvro, encode := avroVerifyInput(t)
	v1, v2 := genConfigs("by_key", "partition")
	s := newVerifySetup(t, 2, toAvro.Replace(v1))
	s.runPhase(t, encode(genInput(0, 200_000, 0, 1)))
	s.switchConfig(t, toAvro.Replace(v2))
	s.runPhase(t, encode(genInput(200_000, 720_000, 1)))
	out, err := s.verify(t)
	if err != nil || out.count("windows_compared_by_generation.1") != 6 || out.count("windows_compared_by_generation.2") != 2 || out.count("windows.equal") != 8 {
		t.Fatalf("verify = %v, want nil, 6 windows of generation 1 and 2 of generation 2 compared and equal:\n%s", err, out.text)
	}
	r := s.resultOf(t, "2", "u1")
	results := avro.MustParse(producer.AvroSchema(s.cfg))
	var v map[string]any
	if err := avro.Unmarshal(results, r.Value[5:], &v); err != nil {
		t.Fatalf("generation 2's result in generation 2's schema: %v", err)
	}
	v["count"] = v["count"].(int64) + 1
	body, err := avro.Marshal(results, v)
	if err != nil {
		t.Fatal(err)
	}
	tampered := &kgo.Record{Topic: "calls-windows", Key: r.Key, Value: append(slices.Clone(r.Value[:5]), body...), Headers: r.Headers}
	if err := s.client(t).ProduceSync(context.Background(), tampered).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, err = s.verify(t)
	d := wantDiff(t, out, err, "window_differs")
	if got := d["found"].(map[string]any)["count"]; got != float64(v["count"].(int64)) || out.count("unexplained") != 1 {
		t.Errorf("the difference's found count is %v, want %v, and nothing else:\n%s", got, v["count"], out.text)
	}
}

// TestVerifyGenerationsRepartitionAvro: the change of
// TestVerifyGenerationsRepartition with Avro input and results: stage 2's
// partitions hold both generations after the change, each decoding the
// records under its own settings, and verify finds every window of
// either generation equal.
func TestVerifyGenerationsRepartitionAvro(t *testing.T) {
	t.Parallel()
	toAvro, encode := avroVerifyInput(t)
	v1, v2 := genConfigs("repartition", "global")
	s := newVerifySetup(t, 2, toAvro.Replace(v1))
	s.runPhase(t, encode(genInput(0, 200_000, 0, 1)))
	s.switchConfig(t, toAvro.Replace(v2))
	s.runPhase(t, encode(genInput(200_000, 270_000, 0, 1))) // to 4:30: the cut-over at 5:00, generation 1's [4m, 5m) open
	out, err := s.verify(t)
	if err != nil || out.count("windows_compared_by_generation.1") != 16 || out.count("windows.equal") != 16 {
		t.Fatalf("verify = %v, want nil, 16 windows of generation 1 compared and equal:\n%s", err, out.text)
	}
	s.runPhase(t, encode(genInput(270_000, 720_000, 0, 1))) // to 12:00: generation 1 retired, 2's [5m, 10m) closed
	out, err = s.verify(t)
	if err != nil || out.count("windows_compared_by_generation.2") != 4 || out.count("windows.equal") != 4 {
		t.Fatalf("after the retirement: verify = %v, want nil, 4 windows of generation 2 compared and equal:\n%s", err, out.text)
	}
}

// avroVerifyInput is an Avro writer's schema in a registry (srfake) for
// the test's life: what turns a JSON config of the tests into one of Avro
// input and results through it, and what turns their JSON records into
// Avro values in the wire format (and a record that is not JSON into a
// value that is not in it).
func avroVerifyInput(t *testing.T) (toAvro *strings.Replacer, encode func([]verifyRecord) []verifyRecord) {
	t.Helper()
	fake := srfake.New()
	t.Cleanup(fake.Close)
	id, _, err := fake.RegisterSchema("calls-value", sr.Schema{Schema: replayCallSchema, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	toAvro = strings.NewReplacer("format: json", "format: avro\n  schema_registry: {url: '"+fake.URL()+"'}",
		"linger: 1ms}", "linger: 1ms, format: avro}")
	schema := avro.MustParse(replayCallSchema)
	return toAvro, func(recs []verifyRecord) []verifyRecord {
		for i, r := range recs {
			var c struct {
				Sid string `json:"sid"`
				T   int64  `json:"t"`
				D   int64  `json:"d"`
			}
			if json.Unmarshal([]byte(r.value), &c) != nil {
				recs[i].value = "not avro" // a dead letter, as the record is not JSON
				continue
			}
			body, err := avro.Marshal(schema, map[string]any{"sid": c.Sid, "t": c.T, "d": c.D})
			if err != nil {
				t.Fatal(err)
			}
			recs[i].value = string(append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), body...))
		}
		return recs
	}
}
