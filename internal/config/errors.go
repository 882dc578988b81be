package config

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every error Load, Parse and ValidateKafka return
// for a bad config; main turns it into exit status 2.
var ErrInvalid = errors.New("invalid config")

// A KeyError names the config key and the offending value. Env is the
// environment variable the value came from, if it did not come from the file.
// An empty Value from the file is a key that is missing or empty: the
// message then shows no value, rather than a default the user never wrote.
type KeyError struct{ Key, Value, Reason, Env string }

func (e *KeyError) Error() string {
	switch {
	case e.Value == "" && e.Env == "":
		return fmt.Sprintf("%s: %s", e.Key, e.Reason)
	case e.Env != "":
		return fmt.Sprintf("%s = %q (from %s): %s", e.Key, e.Value, e.Env, e.Reason)
	}
	return fmt.Sprintf("%s = %q: %s", e.Key, e.Value, e.Reason)
}

func (e *KeyError) Unwrap() error { return ErrInvalid }

// SessionTimeoutRefused is the error of a source.session_timeout the
// brokers refuse (INVALID_SESSION_TIMEOUT): outside their
// group.min.session.timeout.ms to group.max.session.timeout.ms, lo to hi
// (zero: not known, their defaults are said).
func SessionTimeoutRefused(st, lo, hi time.Duration) *KeyError {
	bounds := "the brokers' defaults are 6s to 30m"
	if lo > 0 && hi > 0 {
		bounds = "the brokers allow " + formatDuration(lo) + " to " + formatDuration(hi)
	}
	return &KeyError{Key: "source.session_timeout", Value: formatDuration(st),
		Reason: "the brokers refuse it (INVALID_SESSION_TIMEOUT): " + bounds +
			" (group.min.session.timeout.ms, group.max.session.timeout.ms)"}
}

// Errors is every problem Parse found in a config, in the order of the
// keys in Config (unknown keys first), when it found more than one: one
// a line. Each is a *KeyError, and Errors wraps ErrInvalid through them.
type Errors []error

func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, err := range e {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

func (e Errors) Unwrap() []error { return e }

// collect makes one error of errs: nil, the error itself, or Errors. It
// leaves out nil ones and those that repeat another: a key named already
// or inside one named (source.csv.columns after source.csv), and a key
// "required" that an unknown key was taken for (window.size after
// "window.sizee: unknown key (did you mean window.size?)").
func collect(errs []*KeyError) error {
	var out Errors
	var named []*KeyError
	repeats := func(err *KeyError) bool {
		for _, n := range named {
			inside := strings.HasPrefix(err.Key, n.Key) && len(err.Key) > len(n.Key) && strings.ContainsRune(".[", rune(err.Key[len(n.Key)]))
			meant := strings.HasPrefix(err.Reason, "required") && strings.Contains(n.Reason, "(did you mean "+err.Key+"?)")
			if err.Key == n.Key || inside || meant {
				return true
			}
		}
		return false
	}
	for _, err := range errs {
		if err == nil || repeats(err) {
			continue
		}
		named = append(named, err)
		out = append(out, err)
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return out
}
