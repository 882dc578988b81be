package config

import (
	"fmt"
	"slices"
	"time"
)

// This file holds the keys that order configs across a rollout
// (state.config_version, state.cutover: docs/changing-config.md).

// validateGeneration checks state.config_version and state.cutover.
func (s State) validateGeneration() *KeyError {
	if s.ConfigVersion < 0 {
		return &KeyError{Key: "state.config_version", Value: fmt.Sprint(s.ConfigVersion),
			Reason: "must not be negative (the Helm chart sets it to the release revision)"}
	}
	if s.Cutover == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s.Cutover)
	switch {
	case err != nil:
		return &KeyError{Key: "state.cutover", Value: s.Cutover,
			Reason: "must be an RFC 3339 time, such as 2030-12-01T10:00:00Z"}
	case t.Nanosecond()%int(time.Millisecond) != 0:
		return &KeyError{Key: "state.cutover", Value: s.Cutover, Reason: "must be a whole number of milliseconds"}
	}
	return nil
}

// CutoverMillis returns state.cutover in milliseconds since the epoch, and
// whether it is set. Load has validated it.
func (s State) CutoverMillis() (int64, bool) {
	if s.Cutover == "" {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339Nano, s.Cutover)
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}

// WithState returns c with the state settings s (a stored generation's):
// the config a generation of windows runs under, its own filter, window
// shape and aggregates with c's run and identity settings (docs/changing-config.md#three-kinds-of-key).
func (c Config) WithState(s StateSettings) Config {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	c.Source.Filter = slices.Clone(s.Filter)
	w := &c.Window
	w.Type, w.Size, w.Slide, w.Offset = s.Window.Type, ms(s.Window.Size), ms(s.Window.Slide), ms(s.Window.Offset)
	w.Gap, w.GapField, w.Calendar, w.Timezone, w.Timeout = ms(s.Window.Gap), s.Window.GapField, s.Window.Calendar, s.Window.Timezone, ms(s.Window.Timeout)
	c.Aggregates = slices.Clone(s.Aggregates)
	return c
}
