package cluster_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
)

func TestLoggerLevel(t *testing.T) {
	tests := map[string]struct {
		level zerolog.Level
		want  kgo.LogLevel
	}{
		"trace":    {zerolog.TraceLevel, kgo.LogLevelDebug},
		"debug":    {zerolog.DebugLevel, kgo.LogLevelDebug},
		"info":     {zerolog.InfoLevel, kgo.LogLevelWarn},
		"warn":     {zerolog.WarnLevel, kgo.LogLevelWarn},
		"error":    {zerolog.ErrorLevel, kgo.LogLevelError},
		"disabled": {zerolog.Disabled, kgo.LogLevelNone},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			l := cluster.NewLogger(zerolog.New(nil).Level(tt.level), "kafka_consumer")
			if got := l.Level(); got != tt.want {
				t.Errorf("NewLogger(level %v).Level() = %v, want %v", tt.level, got, tt.want)
			}
		})
	}
}

func TestLoggerWritesFields(t *testing.T) {
	var buf bytes.Buffer
	l := cluster.NewLogger(zerolog.New(&buf), "kafka_consumer")
	l.Log(kgo.LogLevelWarn, "unable to open connection", "broker", "seed_0", "err", errors.New("refused"),
		"backoff", 250*time.Millisecond, "partition", int32(3), "dangling")

	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("log line %q is not JSON: %v", buf.String(), err)
	}
	want := map[string]any{
		"level": "warn", "message": "unable to open connection", "component": "kafka_consumer",
		"broker": "seed_0", "err": "refused", "backoff": "250ms", "partition": 3.0, "extra": "dangling",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("log field %s = %v, want %v (line %s)", k, got[k], v, buf.String())
		}
	}
}

// kgo's info lines (a transaction begun, offsets committed) are debug:
// at the service's default info level they are not written.
func TestLoggerClientInfoIsDebug(t *testing.T) {
	for _, tt := range []struct {
		level zerolog.Level
		want  string
	}{{zerolog.InfoLevel, ""}, {zerolog.DebugLevel, `"level":"debug"`}} {
		var buf bytes.Buffer
		l := cluster.NewLogger(zerolog.New(&buf).Level(tt.level), "kafka_producer")
		l.Log(kgo.LogLevelInfo, "beginning transaction", "transactional_id", "t")
		if got := buf.String(); tt.want == "" && got != "" || !bytes.Contains(buf.Bytes(), []byte(tt.want)) {
			t.Errorf("Log(kgo info) on a %v logger wrote %q, want a line containing %q", tt.level, got, tt.want)
		}
	}
}

func TestLoggerDropsBelowLevel(t *testing.T) {
	var buf bytes.Buffer
	l := cluster.NewLogger(zerolog.New(&buf).Level(zerolog.WarnLevel), "kafka_producer")
	l.Log(kgo.LogLevelInfo, "producing", "topic", "calls")
	if buf.Len() != 0 {
		t.Errorf("Log(info) on a warn logger wrote %q, want nothing", buf.String())
	}
}

func BenchmarkLoggerLog(b *testing.B) {
	for _, lvl := range []zerolog.Level{zerolog.InfoLevel, zerolog.WarnLevel} {
		b.Run(lvl.String(), func(b *testing.B) {
			l := cluster.NewLogger(zerolog.New(io.Discard).Level(lvl), "kafka_consumer")
			err := errors.New("refused")
			b.ReportAllocs()
			for b.Loop() {
				l.Log(kgo.LogLevelInfo, "unable to open connection", "broker", "seed_0", "err", err, "backoff", time.Second)
			}
		})
	}
}

// kgo logs some Kafka error codes as numbers (error_code); the log says
// their names.
func TestLoggerNamesErrorCodes(t *testing.T) {
	var buf bytes.Buffer
	l := cluster.NewLogger(zerolog.New(&buf), "kafka_consumer")
	l.Log(kgo.LogLevelWarn, "unable to commit offset for topic partition", "error_code", int16(25), "partition", int16(3))
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("log line %q is not JSON: %v", buf.String(), err)
	}
	if got["error_code"] != "UNKNOWN_MEMBER_ID" || got["partition"] != 3.0 {
		t.Errorf("Log(error_code 25, partition 3) = %s, want error_code UNKNOWN_MEMBER_ID and partition 3", buf.String())
	}
}

func TestErrorName(t *testing.T) {
	tests := map[int16]string{0: "NONE", 25: "UNKNOWN_MEMBER_ID", 10: "MESSAGE_TOO_LARGE", 58: "SASL_AUTHENTICATION_FAILED", 9999: "error code 9999"}
	for code, want := range tests {
		if got := cluster.ErrorName(code); got != want {
			t.Errorf("ErrorName(%d) = %q, want %q", code, got, want)
		}
	}
}
