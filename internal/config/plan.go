package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
)

// This file decides what a config does to a state partition given the
// newest generation its changelog holds (docs/changing-config.md#stateconfig_version-rollouts-and-rollbacks): the decision that
// `aggregator plan` prints and that run makes at a partition's restore.

// RunSettings are the run settings that act on windows in state
// (watermark.*, window.allowed_lateness, window.emit,
// window.early_firings.*), by key, as the file writes them. A generation
// record keeps them, so that a later config can say which changed.
type RunSettings map[string]string

// windowRunPrefixes are the sections whose run settings RunSettings holds.
var windowRunPrefixes = []string{"watermark.", "window."}

// RunSettings returns c's run settings that act on windows in state.
func (c Config) RunSettings() RunSettings {
	out := RunSettings{}
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		for i := range v.NumField() {
			f, key := v.Field(i), join(path, tagName(v.Type().Field(i)))
			switch {
			case f.Type() != durationType && f.Kind() == reflect.Struct:
				walk(f, key)
			case ClassOf(key) == RunSetting && slices.ContainsFunc(windowRunPrefixes, func(p string) bool { return strings.HasPrefix(key, p) }):
				out[key] = valueText(f)
			}
		}
	}
	walk(reflect.ValueOf(c), "")
	return out
}

func valueText(v reflect.Value) string {
	if v.Type() == durationType {
		return formatDuration(time.Duration(v.Int()))
	}
	return fmt.Sprint(v.Interface())
}

// Encode returns the canonical encoding of r: a format byte, then JSON
// with the keys in order.
func (r RunSettings) Encode() []byte {
	b, err := json.Marshal(map[string]string(r)) // sorted keys
	if err != nil {                              // unreachable: strings
		panic(fmt.Sprintf("config: encode run settings: %v", err))
	}
	return append([]byte{settingsFormat}, b...)
}

// DecodeRun decodes what RunSettings.Encode wrote.
func DecodeRun(b []byte) (RunSettings, error) {
	if len(b) == 0 || b[0] != settingsFormat {
		return nil, fmt.Errorf("run settings: unknown format")
	}
	r := RunSettings{}
	if err := json.NewDecoder(bytes.NewReader(b[1:])).Decode(&r); err != nil {
		return nil, fmt.Errorf("run settings: %w", err)
	}
	return r, nil
}

// DiffRun returns the run settings that differ from old to new, by key.
func DiffRun(old, new RunSettings) []Change {
	var out []Change
	keys := map[string]bool{}
	for k := range old {
		keys[k] = true
	}
	for k := range new {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if old[k] != new[k] {
			out = append(out, Change{Key: k, Old: old[k], New: new[k]})
		}
	}
	return out
}

// Stored is what a state partition's changelog holds of its newest
// generation: the encodings of its settings. State nil is a changelog
// written before generations, whose settings are not stored.
type Stored struct {
	Version              int64
	State, Identity, Run []byte
}

// Verdict is what a config does to a state partition.
type Verdict uint8

const (
	// Fresh: the partition has no state; the config starts it.
	Fresh Verdict = iota + 1
	// Nothing: the same settings as the partition's newest generation.
	Nothing
	// RunSettingsChange: the same state settings, other run settings:
	// they apply to every window in state from the restart on.
	RunSettingsChange
	// NewGeneration: other state settings with a higher
	// state.config_version: a new generation from a cut-over.
	NewGeneration
	// Older: a lower state.config_version (a pod of the previous release
	// during a rollout): the partition runs its newest stored generation.
	Older
	// Unrecorded: a changelog written before generations: its settings
	// are not stored, so only the windows' layout can be compared.
	Unrecorded
	// Refused: exit 2 (Plan.Refusal says why and what to do).
	Refused
)

func (v Verdict) String() string {
	return [...]string{"", "fresh", "nothing", "run settings", "new generation", "older", "unrecorded", "refused"}[v]
}

// A Plan is what a config does to one state partition.
type Plan struct {
	Verdict Verdict
	// Changes are the state or identity settings that differ from the
	// stored generation's; Run the run settings that differ.
	Changes, Run []Change
	// Refusal, with Verdict Refused, names the key and says what to do;
	// it wraps ErrInvalid.
	Refusal *KeyError
}

// PlanAgainst decides what c does to a state partition whose newest
// generation is newest (nil: the partition has no state).
func (c Config) PlanAgainst(newest *Stored) (Plan, error) {
	if newest == nil {
		return Plan{Verdict: Fresh}, nil
	}
	if newest.Identity != nil {
		id, err := DecodeIdentity(newest.Identity)
		if err != nil {
			return Plan{}, err
		}
		if changes := DiffIdentity(id, c.IdentitySettings()); len(changes) > 0 {
			return Plan{Verdict: Refused, Changes: changes, Refusal: &KeyError{Key: changes[0].Key, Value: changes[0].New,
				Reason: fmt.Sprintf("changed against a non-empty state (%s): a new key or event time is a new aggregation; run it as a new source.group, or change it back", joinChanges(changes))}}, nil
		}
	}
	if newest.State == nil {
		return Plan{Verdict: Unrecorded}, nil
	}
	old, err := DecodeState(newest.State)
	if err != nil {
		return Plan{}, err
	}
	var run []Change
	if newest.Run != nil {
		r, err := DecodeRun(newest.Run)
		if err != nil {
			return Plan{}, err
		}
		run = DiffRun(r, c.RunSettings())
	}
	v := c.State.ConfigVersion
	changes := Diff(old, c.StateSettings())
	switch {
	case v < newest.Version:
		return Plan{Verdict: Older, Changes: changes, Run: run}, nil
	case len(changes) == 0 && len(run) == 0:
		return Plan{Verdict: Nothing}, nil
	case len(changes) == 0:
		return Plan{Verdict: RunSettingsChange, Run: run}, nil
	case v > newest.Version:
		return Plan{Verdict: NewGeneration, Changes: changes, Run: run}, nil
	}
	return Plan{Verdict: Refused, Changes: changes, Run: run, Refusal: &KeyError{Key: "state.config_version", Value: fmt.Sprint(v),
		Reason: fmt.Sprintf("the state's newest generation has this version and other state settings (%s): raise state.config_version to start a new generation, or change them back", joinChanges(changes))}}, nil
}

func joinChanges(cs []Change) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}
