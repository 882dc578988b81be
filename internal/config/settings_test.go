package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKeyClassesCoverConfig walks every field of Config: a key added to
// Config without a class in keyClasses fails here, as does a class left
// for a key that is gone.
func TestKeyClassesCoverConfig(t *testing.T) {
	keys := configKeys()
	for _, key := range keys {
		if ClassOf(key) == 0 {
			t.Errorf("ClassOf(%q) = unclassified: add it to keyClasses (run setting, state setting or identity, docs/changing-config.md#three-kinds-of-key)", key)
		}
	}
	for key := range keyClasses {
		if !slices.Contains(keys, key) {
			t.Errorf("keyClasses has %q, which Config does not", key)
		}
	}
}

func TestClassOf(t *testing.T) {
	tests := map[string]KeyClass{
		"window.size": StateSetting, "window.allowed_lateness": RunSetting, "window.emit": RunSetting,
		"window.early_firings.every": RunSetting, "aggregates[2].fn": StateSetting, "source.filter[0].field": StateSetting,
		"source.key": Identity, "source.timestamp.field": Identity, "source.partitioning": Identity,
		"watermark.max_out_of_orderness": RunSetting, "sink.format": RunSetting, "state.config_version": RunSetting,
		"window.sizee": 0,
	}
	for key, want := range tests {
		if got := ClassOf(key); got != want {
			t.Errorf("ClassOf(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestStateSettingsCoverWindow checks that every window key classed a
// state setting is in WindowShape, and every run setting is not.
func TestStateSettingsCoverWindow(t *testing.T) {
	shape := map[string]bool{}
	wt := reflect.TypeFor[WindowShape]()
	for i := range wt.NumField() {
		shape["window."+strings.TrimSuffix(wt.Field(i).Tag.Get("json"), "_ms")] = true
	}
	for _, key := range configKeys() {
		if !strings.HasPrefix(key, "window.") {
			continue
		}
		if got, want := shape[key], ClassOf(key) == StateSetting; got != want {
			t.Errorf("WindowShape has %s: %v, want %v (it is a %v)", key, got, want, ClassOf(key))
		}
	}
}

func parseDoc(t *testing.T, sections map[string]string) Config {
	t.Helper()
	c, err := Parse(doc(sections), nil)
	if err != nil {
		t.Fatalf("Parse(%v): %v", sections, err)
	}
	return c
}

func TestStateSettingsEncoding(t *testing.T) {
	c := parseDoc(t, map[string]string{
		"source":     "{timestamp: {field: t}, filter: [{field: status, equals: ok}]}",
		"window":     "{type: sliding, size: 10s, slide: 5s, allowed_lateness: 2s}",
		"aggregates": "[{name: n, fn: count}, {name: p, fn: quantile, field: d, q: 0.99}, {name: top, fn: top_k, field: d, k: 3}]",
	})
	s := c.StateSettings()
	enc := s.Encode()
	got, err := DecodeState(enc)
	if err != nil {
		t.Fatalf("DecodeState(%q): %v", enc, err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("DecodeState(Encode(s)) = %+v, want %+v", got, s)
	}
	if again := got.Encode(); string(again) != string(enc) {
		t.Errorf("Encode is not canonical: %q, then %q", enc, again)
	}
	// A run setting changes nothing in the encoding.
	c.Window.AllowedLateness = 0
	c.Watermark.MaxOutOfOrderness = 1
	if e := c.StateSettings().Encode(); string(e) != string(enc) {
		t.Errorf("Encode after run-setting changes = %q, want %q", e, enc)
	}
	// Today's format, as a later release must read it.
	const golden = "\x01" + `{"filter":[{"Field":"status","Equals":"ok"}],"window":{"type":"sliding","size_ms":10000,"slide_ms":5000,"offset_ms":0,"gap_ms":0,"gap_field":"","calendar":"","timezone":"","timeout_ms":0},"aggregates":[{"Name":"n","Fn":"count","Field":"","Q":0,"K":0},{"Name":"p","Fn":"quantile","Field":"d","Q":0.99,"K":0},{"Name":"top","Fn":"top_k","Field":"d","Q":0,"K":3}]}`
	if string(enc) != golden {
		t.Errorf("Encode = %q, want %q (a changed encoding needs a new settingsFormat)", enc, golden)
	}
	for _, bad := range []string{"", "\x02{}", "\x01{", "\x01{\"filter\":[],\"window\":{},\"aggregates\":[],\"more\":1}", "\x01{} {}"} {
		if _, err := DecodeState([]byte(bad)); err == nil {
			t.Errorf("DecodeState(%q) = nil error, want one", bad)
		}
	}
}

func TestDiff(t *testing.T) {
	base := map[string]string{"window": "{size: 1m}", "aggregates": "[{name: n, fn: count}, {name: s, fn: sum, field: d}]"}
	tests := map[string]struct {
		sections map[string]string
		want     []string
	}{
		"same":              {map[string]string{}, nil},
		"run settings only": {map[string]string{"window": "{size: 1m, allowed_lateness: 5s, emit: on_close}", "watermark": "{max_out_of_orderness: 3s}"}, nil},
		"window size":       {map[string]string{"window": "{size: 5m}"}, []string{"window.size: 1m -> 5m"}},
		"window kind":       {map[string]string{"window": "{type: session, gap: 30s}"}, []string{"window.type: tumbling -> session", "window.size: 1m -> 0s", "window.gap: 0s -> 30s"}},
		"aggregate added":   {map[string]string{"aggregates": "[{name: n, fn: count}, {name: s, fn: sum, field: d}, {name: p99, fn: quantile, field: d, q: 0.99}]"}, []string{"aggregates[2] added ({name: p99, fn: quantile, field: d, q: 0.99})"}},
		"aggregate removed": {map[string]string{"aggregates": "[{name: n, fn: count}]"}, []string{"aggregates[1] removed (was {name: s, fn: sum, field: d})"}},
		"aggregate fn":      {map[string]string{"aggregates": "[{name: n, fn: count}, {name: s, fn: max, field: d}]"}, []string{"aggregates[1].fn: sum -> max"}},
		"aggregates order":  {map[string]string{"aggregates": "[{name: s, fn: sum, field: d}, {name: n, fn: count}]"}, []string{"aggregates[0].name: n -> s", "aggregates[0].fn: count -> sum", "aggregates[0].field added (d)", "aggregates[1].name: s -> n", "aggregates[1].fn: sum -> count", "aggregates[1].field removed (was d)"}},
		"filter":            {map[string]string{"source": "{timestamp: {field: t}, filter: [{field: s, equals: ok}]}"}, []string{`source.filter: [] -> [s="ok"]`}},
	}
	old := parseDoc(t, base).StateSettings()
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sections := map[string]string{}
			for k, v := range base {
				sections[k] = v
			}
			for k, v := range tt.sections {
				sections[k] = v
			}
			nw := parseDoc(t, sections).StateSettings()
			var got []string
			for _, c := range Diff(old, nw) {
				got = append(got, c.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Diff = %q, want %q", got, tt.want)
			}
			if want := len(tt.want) == 0; old.Equal(nw) != want {
				t.Errorf("Equal = %v, want %v", !want, want)
			}
		})
	}
}

func TestDiffIdentity(t *testing.T) {
	old := parseDoc(t, map[string]string{"source": "{timestamp: {field: t}, key: [sid]}"})
	tests := map[string]struct {
		source string
		want   []string
	}{
		"same":         {"{timestamp: {field: t}, key: [sid]}", nil},
		"key":          {"{timestamp: {field: t}, key: [sid, region]}", []string{"source.key: [sid] -> [sid,region]"}},
		"timestamp":    {"{timestamp: {field: ts, layout: unix_ms}, key: [sid]}", []string{"source.timestamp.field: t -> ts", "source.timestamp.layout: rfc3339 -> unix_ms"}},
		"partitioning": {"{timestamp: {field: t}, key: [sid], partitioning: by_key}", []string{"source.partitioning: repartition -> by_key"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			id := parseDoc(t, map[string]string{"source": tt.source}).IdentitySettings()
			back, err := DecodeIdentity(id.Encode())
			if err != nil || !reflect.DeepEqual(back, id) {
				t.Fatalf("DecodeIdentity(Encode(%+v)) = %+v, %v", id, back, err)
			}
			var got []string
			for _, c := range DiffIdentity(old.IdentitySettings(), id) {
				got = append(got, c.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("DiffIdentity = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCutover(t *testing.T) {
	c := parseDoc(t, map[string]string{"state": "{config_version: 7, cutover: '2030-12-01T10:00:00.250+01:00'}"})
	if ms, ok := c.State.CutoverMillis(); !ok || ms != 1922346000250 {
		t.Errorf("CutoverMillis() = %d, %v, want 1922346000250, true", ms, ok)
	}
	if c.State.ConfigVersion != 7 {
		t.Errorf("ConfigVersion = %d, want 7", c.State.ConfigVersion)
	}
	c = parseDoc(t, nil)
	if _, ok := c.State.CutoverMillis(); ok || strings.Contains(string(c.YAML()), "cutover") {
		t.Errorf("an unset state.cutover: CutoverMillis ok = %v, YAML = %s; want false and no cutover key", ok, c.YAML())
	}
	c, err := Parse(doc(nil), env(map[string]string{"AGGREGATOR_STATE_CONFIG_VERSION": "12", "AGGREGATOR_STATE_CUTOVER": "2030-12-01T09:00:00Z"}))
	if err != nil || c.State.ConfigVersion != 12 || c.State.Cutover != "2030-12-01T09:00:00Z" {
		t.Errorf("Parse with AGGREGATOR_STATE_CONFIG_VERSION and _CUTOVER = %+v, %v", c.State, err)
	}
	_, err = Parse(doc(nil), env(map[string]string{"AGGREGATOR_STATE_CUTOVER": "tomorrow"}))
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Key != "state.cutover" || ke.Env != "AGGREGATOR_STATE_CUTOVER" {
		t.Errorf("Parse with AGGREGATOR_STATE_CUTOVER=tomorrow = %v, want a KeyError for state.cutover naming the variable", err)
	}
}

// TestWithState: a config given another config's state settings has
// those state settings and keeps its own run settings.
func TestWithState(t *testing.T) {
	a := parseDoc(t, map[string]string{"source": "{timestamp: {field: t}, key: [sid]}", "window": "{size: 1m, allowed_lateness: 3s}",
		"aggregates": "[{name: n, fn: count}]"})
	b := a
	b.Window.Type, b.Window.Size, b.Window.Slide = "sliding", 10*time.Minute, time.Minute
	b.Aggregates = append(slices.Clone(b.Aggregates), Aggregate{Name: "longest", Fn: "max", Field: "duration"})
	b.Source.Filter = []Filter{{Field: "kind", Equals: "call"}}
	a.Window.AllowedLateness = 7 * time.Second
	got := a.WithState(b.StateSettings())
	if !got.StateSettings().Equal(b.StateSettings()) {
		t.Errorf("WithState: state settings %s, want %s", got.StateSettings().Encode(), b.StateSettings().Encode())
	}
	if got.Window.AllowedLateness != 7*time.Second || !reflect.DeepEqual(got.RunSettings(), a.RunSettings()) {
		t.Errorf("WithState changed the run settings: %v, want %v", got.RunSettings(), a.RunSettings())
	}
}
