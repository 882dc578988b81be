package cluster

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Logger adapts zerolog to kgo.Logger, so the Kafka client's messages go
// to the service log with a component field and the service's level. The
// client's info messages (every transaction, commit and metadata refresh:
// dozens a second while idle) are logged at debug; its warnings and errors
// keep their level.
type Logger struct {
	log zerolog.Logger
	// retried: the caller retries this client's failed requests and logs
	// each attempt with its cause, so kgo's line per failed dial is debug.
	retried bool
}

// dialFailed is kgo's message for a broker connection that failed.
const dialFailed = "unable to open connection to broker"

// Retried returns l for a client whose failed requests the caller
// retries and logs, one line an attempt with the cause (the connect and
// restore retries): kgo's own line per failed dial would say it twice.
func (l *Logger) Retried() *Logger { return &Logger{log: l.log, retried: true} }

var _ kgo.Logger = (*Logger)(nil)

// NewLogger returns a kgo.Logger writing to log with component set.
func NewLogger(log zerolog.Logger, component string) *Logger {
	return &Logger{log: log.With().Str("component", component).Logger()}
}

// Level maps the zerolog level (the stricter of the logger's and the
// global one) to kgo's, so kgo skips building messages nobody will see.
func (l *Logger) Level() kgo.LogLevel {
	lvl := max(l.log.GetLevel(), zerolog.GlobalLevel())
	switch {
	case lvl <= zerolog.DebugLevel:
		return kgo.LogLevelDebug
	case lvl <= zerolog.WarnLevel: // kgo's info lines are debug here
		return kgo.LogLevelWarn
	case lvl <= zerolog.PanicLevel:
		return kgo.LogLevelError
	}
	return kgo.LogLevelNone
}

// Log writes one kgo message; keyvals are kgo's alternating keys and values.
func (l *Logger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if l.retried && msg == dialFailed {
		level = kgo.LogLevelDebug
	}
	e := l.log.WithLevel(zerologLevel(level))
	if e == nil {
		return
	}
	for i := 0; i < len(keyvals); i += 2 {
		key, ok := keyvals[i].(string)
		if !ok {
			key = fmt.Sprint(keyvals[i])
		}
		if i+1 == len(keyvals) {
			e = e.Interface("extra", keyvals[i]) // an odd count is kgo's bug; keep the value
			break
		}
		e = field(e, key, keyvals[i+1])
	}
	e.Msg(msg)
}

func zerologLevel(level kgo.LogLevel) zerolog.Level {
	switch level {
	case kgo.LogLevelError:
		return zerolog.ErrorLevel
	case kgo.LogLevelWarn:
		return zerolog.WarnLevel
	case kgo.LogLevelInfo, kgo.LogLevelDebug:
		return zerolog.DebugLevel
	}
	return zerolog.Disabled
}

// field renders errors and durations as text: zerolog's default JSON
// encoding would print an error as {} and a duration in nanoseconds. A
// Kafka error code (kgo logs some as error_code) becomes its kerr name.
func field(e *zerolog.Event, key string, v any) *zerolog.Event {
	switch v := v.(type) {
	case int16:
		if strings.HasSuffix(key, "error_code") {
			return e.Str(key, ErrorName(v))
		}
	case error:
		return e.AnErr(key, v)
	case time.Duration:
		return e.Str(key, v.String())
	case fmt.Stringer:
		return e.Stringer(key, v)
	}
	return e.Interface(key, v)
}

// ErrorName is the name of a Kafka error code (UNKNOWN_MEMBER_ID for 25),
// "NONE" for 0, and "error code N" only for a code kerr does not know.
func ErrorName(code int16) string {
	err := kerr.ErrorForCode(code)
	var ke *kerr.Error
	switch {
	case err == nil:
		return "NONE"
	case errors.As(err, &ke) && ke.Code == code:
		return ke.Message
	}
	return fmt.Sprintf("error code %d", code)
}
