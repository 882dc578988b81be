package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

const replayCallSchema = `{"type":"record","name":"Call","fields":[{"name":"sid","type":"string"},
	{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"d","type":"long"}]}`

// TestReplayAvro: replay reads base64 Avro values, fetches their schema
// from the registry and gives the results of the same records as JSON; a
// line that is not a value in the wire format is a dead letter with its
// line as value. The config names no source.partitioning: the default,
// auto, is the repartition stage for this key, and replay runs one stage
// whatever it says.
func TestReplayAvro(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	id, _, err := fake.RegisterSchema("calls-value", sr.Schema{Schema: replayCallSchema, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	schema := avro.MustParse(replayCallSchema)
	const conf = `
source: {format: %s, key: [sid], timestamp: {field: t, layout: unix_ms}%s}
window: {type: tumbling, size: 5s}
aggregates: [{name: total, fn: sum, field: d}]
`
	dir := t.TempDir()
	avroConf, jsonConf := filepath.Join(dir, "avro.yaml"), filepath.Join(dir, "json.yaml")
	writeFile(t, avroConf, fmt.Sprintf(conf, "avro", ", schema_registry: {url: '"+fake.URL()+"'}"))
	writeFile(t, jsonConf, fmt.Sprintf(conf, "json", ""))
	var avroIn, jsonIn strings.Builder
	for i, ms := range []int64{1000, 2000, 6000, 3000, 12000} {
		body, err := avro.Marshal(schema, map[string]any{"sid": "s" + itoa(int64(i%2)), "t": ms, "d": int64(i)})
		if err != nil {
			t.Fatal(err)
		}
		v := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), body...)
		fmt.Fprintln(&avroIn, base64.StdEncoding.EncodeToString(v))
		fmt.Fprintf(&jsonIn, `{"sid":"s%d","t":%d,"d":%d}`+"\n", i%2, ms, i)
	}
	avroIn.WriteString("bm90IGF2cm8=\n")
	jsonIn.WriteString("not json\n")
	avroLines := strings.Split(avroIn.String(), "\n")
	got := strings.Split(runReplay(t, avroIn.String(), "--config", avroConf), "\n")
	want := strings.Split(runReplay(t, jsonIn.String(), "--config", jsonConf), "\n")
	if len(got) != len(want) || len(got) < 4 {
		t.Fatalf("replay avro = %d lines, json = %d:\n%s\n%s", len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := range got {
		if strings.Contains(want[i], `"dead_letter"`) {
			const avroDead = `{"type":"dead_letter","partition":0,"offset":5,"error":"bad_wire_format: starts with byte 110, not the magic byte 0","value":"bm90IGF2cm8="}`
			if got[i] != avroDead {
				t.Errorf("dead letter = %s, want %s", got[i], avroDead)
			}
			continue
		}
		// A late event's value is its line: base64 for Avro.
		gotHead, gotValue, _ := strings.Cut(got[i], `,"value":`)
		wantHead, _, late := strings.Cut(want[i], `,"value":`)
		if gotHead != wantHead || late && gotValue != `"`+avroLines[offsetOf(t, got[i])]+`"}` {
			t.Errorf("line %d = %s, want (as JSON) %s", i, got[i], want[i])
		}
	}
}

// offsetOf returns the offset a late event line names.
func offsetOf(t *testing.T, line string) int {
	t.Helper()
	var v struct{ Offset int }
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatal(err)
	}
	return v.Offset
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReplayAvroExample: examples/calls-avro.b64 (examples/calls.csv as
// Avro, schema examples/calls.avsc as id 1) through examples/calls-avro.yaml
// gives the results of the CSV example; the late calls are late events.
//
// The registry is `aggregator broker --schema-registry-port`'s, and the
// schema is registered through its REST API, as the docs show with curl.
func TestReplayAvroExample(t *testing.T) {
	ctx, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	var broker sync.WaitGroup
	defer broker.Wait()
	defer stop()
	var brokerOut lockedBuffer
	broker.Go(func() {
		if err := run(ctx, []string{"broker", "--port", "0", "--schema-registry-port", "0"}, nil, nil, &brokerOut, &brokerOut); err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	url := "http://" + waitFor(t, ctx, &brokerOut, regexp.MustCompile(`Schema Registry \(srfake\) at http://(127\.0\.0\.1:\d+)`))
	schema, err := os.ReadFile("../../examples/calls.avsc")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	if ss, err := cl.CreateSchema(ctx, "calls-value", sr.Schema{Schema: string(schema), Type: sr.TypeAvro}); err != nil || ss.ID != 1 {
		t.Fatalf("register examples/calls.avsc = id %d, %v; want id 1", ss.ID, err)
	}
	var stdout, stderr bytes.Buffer
	env := []string{"AGGREGATOR_SOURCE_SCHEMA_REGISTRY_URL=" + url}
	args := []string{"replay", "--config", "../../examples/calls-avro.yaml", "--input", "../../examples/calls-avro.b64"}
	if err := run(t.Context(), args, env, nil, &stdout, &stderr); err != nil {
		t.Fatalf("replay: %v (stderr %q)", err, stderr.String())
	}
	want := runReplay(t, "", "--config", "../../examples/calls.yaml", "--input", "../../examples/calls.csv")
	kinds := func(out string, kind string) []string {
		var lines []string
		for line := range strings.Lines(out) {
			if strings.Contains(line, `"type":"`+kind+`"`) {
				head, _, _ := strings.Cut(line, `,"value":`)
				lines = append(lines, head)
			}
		}
		return lines
	}
	for _, kind := range []string{"result", "late"} {
		if got, want := kinds(stdout.String(), kind), kinds(want, kind); !slices.Equal(got, want) || len(want) == 0 {
			t.Errorf("%s lines:\n%s\nwant (the CSV example's)\n%s", kind, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}
