package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// This file classifies every key by what a change of it does to a running
// service's state (docs/changing-config.md#three-kinds-of-key), and holds the state settings a generation of
// windows is computed under, their encoding and their differences.

// KeyClass is what a change of a config key does to the windows in state.
type KeyClass uint8

const (
	// RunSetting applies from the restart on to every window in state:
	// it does not decide which records a window holds or what it computes.
	RunSetting KeyClass = iota + 1
	// StateSetting starts a new generation of windows (with a higher
	// state.config_version).
	StateSetting
	// Identity is what a window state is of: a change against a non-empty
	// state is refused (a new aggregation, with its own group).
	Identity
)

func (k KeyClass) String() string {
	switch k {
	case RunSetting:
		return "run setting"
	case StateSetting:
		return "state setting"
	case Identity:
		return "identity"
	}
	return "unclassified"
}

// keyClasses classifies every key of Config: each scalar key by its full
// path, and the lists of objects (aggregates, source.filter) as a whole.
// TestKeyClassesCoverConfig fails when a key of Config is missing here.
var keyClasses = map[string]KeyClass{
	// Connection and decoding: a record holds the same fields however it
	// is read.
	"source.brokers": RunSetting, "source.topics": RunSetting, "source.group": RunSetting,
	"source.start_offset": RunSetting, "source.format": RunSetting,
	"source.schema_registry.url": RunSetting, "source.schema_registry.username": RunSetting,
	"source.schema_registry.password": RunSetting, "source.schema_registry.password_file": RunSetting,
	"source.schema_registry.tls.ca_file": RunSetting, "source.schema_registry.tls.cert_file": RunSetting,
	"source.schema_registry.tls.key_file": RunSetting, "source.schema_registry.tls.insecure_skip_verify": RunSetting,
	"source.csv.columns": RunSetting, "source.csv.delimiter": RunSetting,
	"source.tls.enabled": RunSetting, "source.tls.ca_file": RunSetting, "source.tls.cert_file": RunSetting,
	"source.tls.key_file": RunSetting, "source.tls.insecure_skip_verify": RunSetting,
	"source.sasl.mechanism": RunSetting, "source.sasl.username": RunSetting,
	"source.sasl.password": RunSetting, "source.sasl.password_file": RunSetting,
	"source.sasl.oauth.token_file": RunSetting, "source.sasl.oauth.token_endpoint": RunSetting,
	"source.sasl.oauth.client_id": RunSetting, "source.sasl.oauth.client_secret": RunSetting,
	"source.sasl.oauth.client_secret_file": RunSetting, "source.sasl.oauth.scope": RunSetting,
	"source.sasl.oauth.ca_file": RunSetting, "source.sasl.oauth.extensions": RunSetting,
	"source.sasl.aws.region": RunSetting, "source.rack": RunSetting,
	"source.instance_id": RunSetting, "source.session_timeout": RunSetting,

	"source.partitioning": Identity, "source.key": Identity,
	"source.timestamp.field": Identity, "source.timestamp.layout": Identity, "source.timestamp.timezone": Identity,

	"source.filter": StateSetting,

	"watermark.strategy": RunSetting, "watermark.max_out_of_orderness": RunSetting,
	"watermark.marker_field": RunSetting, "watermark.idle_timeout": RunSetting,
	"watermark.idle_advance": RunSetting, "watermark.max_future_skew": RunSetting, "watermark.scope": RunSetting,

	"window.type": StateSetting, "window.size": StateSetting, "window.slide": StateSetting,
	"window.offset": StateSetting, "window.gap": StateSetting, "window.gap_field": StateSetting,
	"window.calendar": StateSetting, "window.timezone": StateSetting, "window.timeout": StateSetting,
	"window.allowed_lateness": RunSetting, "window.emit": RunSetting,
	"window.early_firings.every": RunSetting, "window.early_firings.time": RunSetting,

	"aggregates": StateSetting,

	"sink.results_topic": RunSetting, "sink.late_topic": RunSetting, "sink.dead_letter_topic": RunSetting,
	"sink.format": RunSetting, "sink.compression": RunSetting, "sink.linger": RunSetting,
	"sink.create_topics": RunSetting, "sink.partitions": RunSetting, "sink.replication_factor": RunSetting,
	"delivery": RunSetting, "http.listen": RunSetting, "http.pprof": RunSetting, "log.level": RunSetting, "log.format": RunSetting,
	"shutdown_timeout": RunSetting,

	"state.changelog_topic": RunSetting, "state.repartition_topic": RunSetting,
	"state.repartition_partitions": RunSetting, "state.repartition_format": RunSetting,
	"state.watermark_topic": RunSetting, "state.commit_interval": RunSetting,
	"state.transaction_timeout": RunSetting, "state.standby_replicas": RunSetting,
	// They order and time generations; a change of them alone changes no
	// window.
	"state.config_version": RunSetting, "state.cutover": RunSetting,
}

// ClassOf returns the class of a config key: a full path ("window.size"),
// or a path into a list of objects ("aggregates[1].fn" is aggregates's).
// It returns 0 for a key Config does not have.
func ClassOf(key string) KeyClass {
	if i := strings.IndexByte(key, '['); i >= 0 {
		key = key[:i]
	}
	return keyClasses[key]
}

// configKeys returns every key of Config in the order of its fields: each scalar
// and list of scalars by its full path, a list of objects as one key.
func configKeys() []string {
	var keys []string
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for i := range t.NumField() {
			f := t.Field(i)
			key := join(path, tagName(f))
			if f.Type != durationType && f.Type.Kind() == reflect.Struct {
				walk(f.Type, key)
				continue
			}
			keys = append(keys, key)
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return keys
}

// StateSettings are the settings a generation of windows is computed under
// (docs/changing-config.md#three-kinds-of-key): the filter, the window's shape and the aggregates, in order.
// Durations are whole milliseconds, as the engine holds them.
type StateSettings struct {
	Filter     []Filter    `json:"filter"`
	Window     WindowShape `json:"window"`
	Aggregates []Aggregate `json:"aggregates"`
}

// WindowShape is window.* without its run settings (allowed_lateness, emit,
// early_firings).
type WindowShape struct {
	Type     string `json:"type"`
	Size     int64  `json:"size_ms"`
	Slide    int64  `json:"slide_ms"`
	Offset   int64  `json:"offset_ms"`
	Gap      int64  `json:"gap_ms"`
	GapField string `json:"gap_field"`
	Calendar string `json:"calendar"`
	Timezone string `json:"timezone"`
	Timeout  int64  `json:"timeout_ms"`
}

// StateSettings returns c's state settings.
func (c Config) StateSettings() StateSettings {
	w := c.Window
	return StateSettings{
		Filter: slices.Clone(c.Source.Filter),
		Window: WindowShape{Type: w.Type, Size: w.Size.Milliseconds(), Slide: w.Slide.Milliseconds(),
			Offset: w.Offset.Milliseconds(), Gap: w.Gap.Milliseconds(), GapField: w.GapField,
			Calendar: w.Calendar, Timezone: w.Timezone, Timeout: w.Timeout.Milliseconds()},
		Aggregates: slices.Clone(c.Aggregates),
	}
}

// settingsFormat is the first byte of EncodeState's output: a later
// release reads every format an earlier one wrote.
const settingsFormat = 1

// Encode returns the canonical encoding of s: a format byte, then JSON with
// the fields in a fixed order (equal settings encode to equal bytes). The
// changelog keeps it in a generation record.
func (s StateSettings) Encode() []byte {
	if s.Filter == nil {
		s.Filter = []Filter{}
	}
	if s.Aggregates == nil {
		s.Aggregates = []Aggregate{}
	}
	b, err := json.Marshal(s)
	if err != nil { // unreachable: strings, numbers and lists of them
		panic(fmt.Sprintf("config: encode state settings: %v", err))
	}
	return append([]byte{settingsFormat}, b...)
}

// DecodeState decodes what StateSettings.Encode wrote, in this release's
// format or an earlier one's.
func DecodeState(b []byte) (StateSettings, error) {
	if len(b) == 0 || b[0] != settingsFormat {
		return StateSettings{}, fmt.Errorf("state settings: unknown format")
	}
	var s StateSettings
	dec := json.NewDecoder(bytes.NewReader(b[1:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return StateSettings{}, fmt.Errorf("state settings: %w", err)
	}
	if dec.More() {
		return StateSettings{}, fmt.Errorf("state settings: data after the settings")
	}
	return s, nil
}

// Equal reports whether s and o compute the same windows.
func (s StateSettings) Equal(o StateSettings) bool { return bytes.Equal(s.Encode(), o.Encode()) }

// A Change is one setting that differs between two configs, named by its
// config key, with its old and new values as a user writes them ("" for
// one that is absent).
type Change struct{ Key, Old, New string }

func (c Change) String() string {
	switch {
	case c.Old == "":
		return fmt.Sprintf("%s added (%s)", c.Key, c.New)
	case c.New == "":
		return fmt.Sprintf("%s removed (was %s)", c.Key, c.Old)
	}
	return fmt.Sprintf("%s: %s -> %s", c.Key, c.Old, c.New)
}

// Diff returns the state settings that differ from old to new, by config
// key in the order of Config: source.filter as a whole, each window key,
// then each aggregate's changed fields, or the aggregate added or removed.
func Diff(old, new StateSettings) []Change {
	var out []Change
	if f, g := filterText(old.Filter), filterText(new.Filter); f != g {
		out = append(out, Change{Key: "source.filter", Old: f, New: g})
	}
	ov, nv := reflect.ValueOf(old.Window), reflect.ValueOf(new.Window)
	for i := range ov.NumField() {
		name := ov.Type().Field(i).Tag.Get("json")
		o, n := ov.Field(i).Interface(), nv.Field(i).Interface()
		if o == n {
			continue
		}
		key, ms := strings.CutSuffix(name, "_ms")
		out = append(out, Change{Key: "window." + key, Old: settingText(o, ms), New: settingText(n, ms)})
	}
	for i := range max(len(old.Aggregates), len(new.Aggregates)) {
		key := fmt.Sprintf("aggregates[%d]", i)
		switch {
		case i >= len(new.Aggregates):
			out = append(out, Change{Key: key, Old: aggText(old.Aggregates[i])})
			continue
		case i >= len(old.Aggregates):
			out = append(out, Change{Key: key, New: aggText(new.Aggregates[i])})
			continue
		}
		oa, na := reflect.ValueOf(old.Aggregates[i]), reflect.ValueOf(new.Aggregates[i])
		for j := range oa.NumField() {
			if o, n := oa.Field(j).Interface(), na.Field(j).Interface(); o != n {
				out = append(out, Change{Key: key + "." + tagName(oa.Type().Field(j)), Old: fmt.Sprint(o), New: fmt.Sprint(n)})
			}
		}
	}
	return out
}

// settingText writes a window setting as in the file: milliseconds as a
// duration, and "" (absent) as "none".
func settingText(v any, ms bool) string {
	switch {
	case ms:
		return formatDuration(time.Duration(v.(int64)) * time.Millisecond)
	case v == "":
		return `""`
	}
	return fmt.Sprint(v)
}

func filterText(fs []Filter) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%s=%q", f.Field, f.Equals)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func aggText(a Aggregate) string {
	s := fmt.Sprintf("{name: %s, fn: %s", a.Name, a.Fn)
	if a.Field != "" {
		s += ", field: " + a.Field
	}
	switch a.Fn {
	case "quantile":
		s += fmt.Sprintf(", q: %v", a.Q)
	case "top_k":
		s += fmt.Sprintf(", k: %d", a.K)
	}
	return s + "}"
}

// IdentitySettings are the keys that say what a window state is of:
// source.key, source.timestamp and source.partitioning (docs/changing-config.md#three-kinds-of-key).
type IdentitySettings struct {
	Key          []string  `json:"key"`
	Timestamp    Timestamp `json:"timestamp"`
	Partitioning string    `json:"partitioning"`
}

// IdentitySettings returns c's identity settings. source.partitioning auto is
// resolved to what it runs as (by_key or repartition).
func (c Config) IdentitySettings() IdentitySettings {
	p := "repartition"
	if c.Source.ByKey() {
		p = "by_key"
	}
	return IdentitySettings{Key: slices.Clone(c.Source.Key), Timestamp: c.Source.Timestamp, Partitioning: p}
}

// Encode returns the canonical encoding of id: a format byte, then JSON.
func (id IdentitySettings) Encode() []byte {
	if id.Key == nil {
		id.Key = []string{}
	}
	b, err := json.Marshal(id)
	if err != nil { // unreachable
		panic(fmt.Sprintf("config: encode identity: %v", err))
	}
	return append([]byte{settingsFormat}, b...)
}

// DecodeIdentity decodes what IdentitySettings.Encode wrote.
func DecodeIdentity(b []byte) (IdentitySettings, error) {
	if len(b) == 0 || b[0] != settingsFormat {
		return IdentitySettings{}, fmt.Errorf("identity settings: unknown format")
	}
	var id IdentitySettings
	dec := json.NewDecoder(bytes.NewReader(b[1:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&id); err != nil {
		return IdentitySettings{}, fmt.Errorf("identity settings: %w", err)
	}
	return id, nil
}

// DiffIdentity returns the identity keys that differ from old to new.
func DiffIdentity(old, new IdentitySettings) []Change {
	var out []Change
	if o, n := strings.Join(old.Key, ","), strings.Join(new.Key, ","); o != n {
		out = append(out, Change{Key: "source.key", Old: "[" + o + "]", New: "[" + n + "]"})
	}
	for _, f := range []struct{ key, o, n string }{
		{"source.timestamp.field", old.Timestamp.Field, new.Timestamp.Field},
		{"source.timestamp.layout", old.Timestamp.Layout, new.Timestamp.Layout},
		{"source.timestamp.timezone", old.Timestamp.Timezone, new.Timestamp.Timezone},
		{"source.partitioning", old.Partitioning, new.Partitioning},
	} {
		if f.o != f.n {
			out = append(out, Change{Key: f.key, Old: f.o, New: f.n})
		}
	}
	return out
}
