package config

import (
	"reflect"
	"testing"
)

// What a config's enum methods say, for the YAML each enum string comes
// from (and the defaults).
func TestEnums(t *testing.T) {
	type says struct {
		ExactlyOnce, StartAtLatest, Punctuated, OnClose bool
		Kind                                            WindowKind
		Codec                                           Compression
	}
	for yaml, want := range map[string]says{
		"source: {timestamp: {field: t}}\nwindow: {size: 5s}\n": {ExactlyOnce: true, Kind: Tumbling, Codec: Lz4}, // the defaults
		"source: {timestamp: {field: t}, start_offset: latest}\ndelivery: at_least_once\nwindow: {type: sliding, size: 4s, slide: 2s, emit: on_close}\nsink: {compression: zstd}\n": {StartAtLatest: true, OnClose: true, Kind: Sliding, Codec: Zstd},
		"source: {timestamp: {field: t}}\nwatermark: {strategy: punctuated, marker_field: wm}\nwindow: {type: session, gap: 1s}\nsink: {compression: gzip}\n":                       {ExactlyOnce: true, Punctuated: true, Kind: Session, Codec: Gzip},
		"source: {timestamp: {field: t}}\nwindow: {size: 5s}\nsink: {compression: snappy}\n":                                                                                        {ExactlyOnce: true, Codec: Snappy},
		"source: {timestamp: {field: t}}\nwindow: {size: 5s}\nsink: {compression: lz4}\n":                                                                                           {ExactlyOnce: true, Codec: Lz4},
	} {
		c, err := Parse([]byte(yaml+"aggregates: [{name: n, fn: count}]\n"), nil)
		if err != nil {
			t.Fatalf("Parse(%q): %v", yaml, err)
		}
		got := says{c.ExactlyOnce(), c.Source.StartAtLatest(), c.Watermark.Punctuated(), c.Window.OnClose(), c.Window.Kind(), c.Sink.Codec()}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) says %+v, want %+v", yaml, got, want)
		}
	}
}
