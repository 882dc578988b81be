package record_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// benchCall is what encoding/json unmarshals the benchmark records into:
// the same four fields the Decoder extracts.
type benchCall struct {
	Sid      string  `json:"sid"`
	CallType string  `json:"callType"`
	CallTime string  `json:"callTime"`
	Duration float64 `json:"duration"`
}

// benchRecords returns n JSON and CSV records of 100–250 bytes: 100
// distinct keys, four fields extracted, the rest skipped.
func benchRecords(n int) (jsonRecs, csvRecs [][]byte) {
	base := time.Date(2030, 12, 1, 10, 10, 0, 0, time.UTC)
	for i := range n {
		ts := base.Add(time.Duration(i) * 137 * time.Millisecond).Format("2006-01-02 15:04:05.000")
		jsonRecs = append(jsonRecs, fmt.Appendf(nil,
			`{"sid":"sid_%d","callType":"success","callTime":"%s","duration":%d,"caller":{"id":"+49301234%04d","region":"eu-west"},"tags":["a","b"],"agent":"gw-%d"}`,
			i%100, ts, i%600, i, i%7))
		csvRecs = append(csvRecs, fmt.Appendf(nil,
			`sid_%d,success,%s,%d,+49301234%04d,eu-west,gw-%d,"note, with ""quotes"""`,
			i%100, ts, i%600, i, i%7))
	}
	return jsonRecs, csvRecs
}

// pipelineCall is what encoding/json unmarshals the end-to-end
// benchmark's records into (integration/bench_test.go).
type pipelineCall struct {
	Sid string  `json:"sid"`
	T   int64   `json:"t"`
	D   float64 `json:"d"`
}

// pipelineRecords returns n records shaped as the end-to-end benchmark's:
// 100 keys, a unix_ms time, a small number and a padding string.
func pipelineRecords(n int) [][]byte {
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = fmt.Appendf(nil, `{"sid":"sid_%d","t":%d,"d":%d,"pad":"%040d"}`, i%100, 1_900_000_000_000+int64(i)*50, i%10, i)
	}
	return recs
}

// pipelineConfig is the end-to-end benchmark's source and aggregates.
func pipelineConfig() config.Config {
	return config.Config{
		Source:     config.Source{Format: "json", Key: []string{"sid"}, Timestamp: config.Timestamp{Field: "t", Layout: "unix_ms"}},
		Watermark:  config.Watermark{Strategy: "bounded"},
		Aggregates: []config.Aggregate{{Name: "total", Fn: "sum", Field: "d"}, {Name: "calls", Fn: "count"}},
	}
}

func benchConfig(format string) config.Config {
	return config.Config{
		Source: config.Source{
			Format:    format,
			CSV:       config.CSV{Columns: []string{"sid", "callType", "callTime", "duration", "caller", "region", "agent", "note"}, Delimiter: ","},
			Key:       []string{"sid"},
			Timestamp: config.Timestamp{Field: "callTime", Layout: "2006-01-02 15:04:05", Timezone: "UTC"},
			Filter:    []config.Filter{{Field: "callType", Equals: "success"}},
		},
		Watermark:  config.Watermark{Strategy: "bounded"},
		Aggregates: []config.Aggregate{{Name: "total_duration", Fn: "sum", Field: "duration"}, {Name: "calls", Fn: "count"}},
	}
}

func BenchmarkDecode(b *testing.B) {
	jsonRecs, csvRecs := benchRecords(1000)
	b.Run("json/decoder", func(b *testing.B) { benchDecoder(b, benchConfig("json"), jsonRecs) })
	b.Run("json/decoder_timed", func(b *testing.B) { benchDecoderTimed(b, benchConfig("json"), jsonRecs) })
	rejecting := benchConfig("json")
	rejecting.Source.Filter[0].Equals = "failed" // the filter rejects every record
	b.Run("json/rejected", func(b *testing.B) { benchDecoder(b, rejecting, jsonRecs) })
	b.Run("json/rejected_timed", func(b *testing.B) { benchDecoderTimed(b, rejecting, jsonRecs) })
	b.Run("json/encoding_json", func(b *testing.B) {
		var c benchCall
		benchLoop(b, jsonRecs, func(v []byte) error { return json.Unmarshal(v, &c) })
	})
	pipeRecs := pipelineRecords(1000)
	b.Run("pipeline/decoder", func(b *testing.B) { benchDecoder(b, pipelineConfig(), pipeRecs) })
	b.Run("pipeline/compact", func(b *testing.B) { benchCompact(b, pipelineConfig(), pipeRecs) })
	b.Run("pipeline/encoding_json", func(b *testing.B) {
		var c pipelineCall
		benchLoop(b, pipeRecs, func(v []byte) error { return json.Unmarshal(v, &c) })
	})
	b.Run("csv/decoder", func(b *testing.B) { benchDecoder(b, benchConfig("csv"), csvRecs) })
	b.Run("csv/encoding_csv", func(b *testing.B) {
		var in bytes.Reader
		r := csv.NewReader(&in)
		r.ReuseRecord = true
		benchLoop(b, csvRecs, func(v []byte) error {
			in.Reset(v)
			_, err := r.Read()
			return err
		})
	})
	b.Run("csv/encoding_json", func(b *testing.B) { // the same records as JSON
		var c benchCall
		benchLoop(b, jsonRecs, func(v []byte) error { return json.Unmarshal(v, &c) })
	})
}

func benchDecoder(b *testing.B, cfg config.Config, recs [][]byte) {
	d, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		b.Fatal(err)
	}
	var rec record.Record
	benchLoop(b, recs, func(v []byte) error {
		_, err := d.Decode(&record.Input{Value: v}, &rec)
		return err
	})
}

// benchDecoderTimed is benchDecoder with DecodeTimed, as by_key decodes:
// a record the filter rejects has its time read too.
func benchDecoderTimed(b *testing.B, cfg config.Config, recs [][]byte) {
	d, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		b.Fatal(err)
	}
	var rec record.Record
	benchLoop(b, recs, func(v []byte) error {
		_, err := d.DecodeTimed(&record.Input{Value: v}, &rec)
		return err
	})
}

// benchCompact reads the compact forms of recs, as stage 2 of
// source.partitioning repartition does instead of decoding them again.
func benchCompact(b *testing.B, cfg config.Config, recs [][]byte) {
	d, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		b.Fatal(err)
	}
	forms, keys := make([][]byte, len(recs)), make([][]byte, len(recs))
	var rec record.Record
	for i, v := range recs {
		if _, err := d.Decode(&record.Input{Value: v}, &rec); err != nil {
			b.Fatal(err)
		}
		forms[i], keys[i] = d.AppendCompact(nil, &rec), []byte(rec.Key)
	}
	i := 0
	benchLoop(b, forms, func(form []byte) error {
		_, err := d.DecodeCompact(keys[i%len(keys)], form, &record.Input{}, &rec)
		i++
		return err
	})
}

// benchLoop decodes one record per iteration, so ns/op is per record.
func benchLoop(b *testing.B, recs [][]byte, decode func([]byte) error) {
	var size int
	for _, r := range recs {
		size += len(r)
	}
	b.SetBytes(int64(size / len(recs)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := decode(recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkParseTime(b *testing.B) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name, layout string
		loc          *time.Location
		text         string
	}{
		{"go_layout", "2006-01-02 15:04:05", time.UTC, "2030-12-01 10:10:04.456"},
		{"go_layout_berlin", "2006-01-02 15:04:05", berlin, "2030-12-01 10:10:04.456"},
		{"rfc3339", "rfc3339", time.UTC, "2030-12-01T10:10:04.456+01:00"},
		{"unix_s", "unix_s", time.UTC, "1607654003.161"},
		{"time_parse_slow_path", "Jan _2 2006 15:04:05", time.UTC, "Dec  1 2030 10:10:04.456"},
	}
	for _, c := range cases {
		p, err := record.NewTimeParser(c.layout, c.loc)
		if err != nil {
			b.Fatal(err)
		}
		text := []byte(c.text)
		b.Run(c.name+"/parser", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Parse(text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("go_layout/time.ParseInLocation", func(b *testing.B) {
		b.ReportAllocs()
		text := []byte("2030-12-01 10:10:04.456")
		for b.Loop() {
			if _, err := time.ParseInLocation("2006-01-02 15:04:05", string(text), time.UTC); err != nil {
				b.Fatal(err)
			}
		}
	})
}
