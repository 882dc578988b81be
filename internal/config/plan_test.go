package config

import (
	"errors"
	"slices"
	"testing"
)

func TestPlanAgainst(t *testing.T) {
	base := map[string]string{"source": "{timestamp: {field: t}, key: [sid]}", "window": "{size: 1m, allowed_lateness: 3s}",
		"aggregates": "[{name: n, fn: count}]", "state": "{config_version: 3}"}
	stored := parseDoc(t, base)
	newest := &Stored{Version: 3, State: stored.StateSettings().Encode(), Identity: stored.IdentitySettings().Encode(), Run: stored.RunSettings().Encode()}
	with := func(sections map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range sections {
			out[k] = v
		}
		return out
	}
	tests := map[string]struct {
		sections map[string]string
		newest   *Stored
		verdict  Verdict
		changes  []string
		run      []string
		refused  string // the refusal's key
	}{
		"no state":             {nil, nil, Fresh, nil, nil, ""},
		"the same config":      {nil, newest, Nothing, nil, nil, ""},
		"a higher version":     {map[string]string{"state": "{config_version: 4}"}, newest, Nothing, nil, nil, ""},
		"lateness lowered":     {map[string]string{"window": "{size: 1m, allowed_lateness: 0s}"}, newest, RunSettingsChange, nil, []string{"window.allowed_lateness: 3s -> 0s"}, ""},
		"a sink change":        {map[string]string{"sink": "{linger: 50ms}"}, newest, Nothing, nil, nil, ""},
		"new window size":      {map[string]string{"window": "{size: 5m, allowed_lateness: 3s}", "state": "{config_version: 4}"}, newest, NewGeneration, []string{"window.size: 1m -> 5m"}, nil, ""},
		"size and lateness":    {map[string]string{"window": "{size: 5m, allowed_lateness: 10s}", "state": "{config_version: 4}"}, newest, NewGeneration, []string{"window.size: 1m -> 5m"}, []string{"window.allowed_lateness: 3s -> 10s"}, ""},
		"equal version":        {map[string]string{"aggregates": "[{name: n, fn: count}, {name: m, fn: max, field: d}]"}, newest, Refused, []string{"aggregates[1] added ({name: m, fn: max, field: d})"}, nil, "state.config_version"},
		"lower version":        {map[string]string{"window": "{size: 5m, allowed_lateness: 3s}", "state": "{config_version: 2}"}, newest, Older, []string{"window.size: 1m -> 5m"}, nil, ""},
		"lower, same settings": {map[string]string{"state": "{config_version: 2}"}, newest, Older, nil, nil, ""},
		"key changed":          {map[string]string{"source": "{timestamp: {field: t}, key: [caller]}", "state": "{config_version: 9}"}, newest, Refused, []string{"source.key: [sid] -> [caller]"}, nil, "source.key"},
		"before generations":   {map[string]string{"state": "{config_version: 4}"}, &Stored{Version: 0}, Unrecorded, nil, nil, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := parseDoc(t, with(tt.sections))
			p, err := c.PlanAgainst(tt.newest)
			if err != nil {
				t.Fatalf("PlanAgainst = %v", err)
			}
			var changes, run []string
			for _, ch := range p.Changes {
				changes = append(changes, ch.String())
			}
			for _, ch := range p.Run {
				run = append(run, ch.String())
			}
			if p.Verdict != tt.verdict || !slices.Equal(changes, tt.changes) || !slices.Equal(run, tt.run) {
				t.Errorf("PlanAgainst = %v, changes %q, run %q; want %v, %q, %q", p.Verdict, changes, run, tt.verdict, tt.changes, tt.run)
			}
			switch {
			case tt.refused == "" && p.Refusal != nil:
				t.Errorf("Refusal = %v, want none", p.Refusal)
			case tt.refused != "" && (p.Refusal == nil || p.Refusal.Key != tt.refused || !errors.Is(p.Refusal, ErrInvalid)):
				t.Errorf("Refusal = %v, want a KeyError for %s wrapping ErrInvalid", p.Refusal, tt.refused)
			}
		})
	}
}

func TestRunSettings(t *testing.T) {
	c := parseDoc(t, map[string]string{"window": "{size: 1m, allowed_lateness: 3s, early_firings: {every: 1s}}", "watermark": "{max_out_of_orderness: 2s}"})
	r := c.RunSettings()
	for key, want := range map[string]string{"window.allowed_lateness": "3s", "window.early_firings.every": "1s", "watermark.max_out_of_orderness": "2s", "window.emit": "on_watermark"} {
		if r[key] != want {
			t.Errorf("RunSettings()[%q] = %q, want %q", key, r[key], want)
		}
	}
	for key := range r {
		if ClassOf(key) != RunSetting {
			t.Errorf("RunSettings() has %s, a %v", key, ClassOf(key))
		}
	}
	back, err := DecodeRun(r.Encode())
	if err != nil || len(DiffRun(r, back)) != 0 {
		t.Errorf("DecodeRun(Encode()) = %v, %v; want it back", back, err)
	}
}
