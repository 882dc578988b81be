package state

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"

	"aggregator/internal/windowing"
)

// This file is the changelog's second key version: generations (docs/design.md#generations-in-the-changelog).
//
// A partition's changelog keeps one generation record per live generation
// of windows, keyed (1, 'g', partition, config_version), whose value is the
// generation's cut-over and settings; it is tombstoned when the generation
// retires. The entries of a generation are keyed (2, kind, partition,
// config_version, start, split, group key): keyGenerations, then the rest
// of a version-1 key. Entries with version-1 keys (AppendKey, written
// before generations) belong to the one generation whose record says
// LegacyKeys, or, when no record does, to an implicit generation of
// unknown settings: today's changelogs restore as one generation.

// keyGenerations is the first byte of the key of a generation's entry.
const keyGenerations = 2

// kindGeneration is the kind byte of a generation record's key.
const kindGeneration = 'g'

// generationFormat is the first byte of a generation record's payload
// (after the value's version and tag): a later release reads every format
// an earlier one wrote.
const generationFormat = 1

// NoCutover is the Cutover of a partition's first generation: it holds
// windows of every time.
const NoCutover = math.MinInt64

// A Generation is one generation of a state partition's windows: the
// settings they are computed under and the event time from which it
// creates windows.
type Generation struct {
	Version int64 // state.config_version of the config that started it
	Cutover int64 // ms: it creates no window that starts before; NoCutover for the first
	// LegacyKeys says its entries have version-1 keys (AppendKey): the
	// generation a changelog written before generations holds.
	LegacyKeys bool
	// Settings is config.StateSettings.Encode, Identity is
	// config.IdentitySettings.Encode, Run is config.RunSettings.Encode
	// (the run settings the partition last ran the generation with); nil
	// for the implicit generation of a changelog written before
	// generations (settings unknown).
	Settings []byte
	Identity []byte
	Run      []byte
	// Dropped says that the generation had dropped, under a lower
	// allowed_lateness than it runs with now, every window whose
	// maxTimestamp is at or below DroppedTo (docs/changing-config.md#three-kinds-of-key: a raised lateness
	// brings no dropped window back). An optional trailing field of the
	// record: one without it reads as !Dropped.
	Dropped   bool
	DroppedTo int64
}

// Known reports whether g's settings are stored (g is not the implicit
// generation of a changelog written before generations).
func (g Generation) Known() bool { return g.Settings != nil }

// GenerationKey appends the key of partition's record of the generation
// of config_version gen.
func GenerationKey(dst []byte, partition int32, gen int64) []byte {
	dst = append(dst, version, kindGeneration)
	dst = binary.BigEndian.AppendUint32(dst, uint32(partition))
	return binary.BigEndian.AppendUint64(dst, uint64(gen)^1<<63)
}

// AppendGeneration appends the value of g's generation record under
// commit tag tag. A retired generation's record is a tombstone (TagHeader).
func AppendGeneration(dst []byte, g Generation, tag uint64) []byte {
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, tag)
	dst = append(dst, generationFormat)
	dst = binary.AppendVarint(dst, g.Cutover)
	var flags byte
	if g.LegacyKeys {
		flags |= 1
	}
	dst = append(dst, flags)
	dst = appendString(dst, string(g.Settings))
	dst = appendString(dst, string(g.Identity))
	dst = appendString(dst, string(g.Run))
	if g.Dropped {
		dst = binary.AppendVarint(dst, g.DroppedTo)
	}
	return dst
}

// AppendGenerationKey appends the changelog key of en, an entry of the
// generation of config_version gen.
func AppendGenerationKey(dst []byte, gen int64, en *windowing.Entry) []byte {
	dst = append(dst, keyGenerations, entryKinds[en.Kind])
	dst = binary.BigEndian.AppendUint32(dst, uint32(en.Partition))
	dst = binary.BigEndian.AppendUint64(dst, uint64(gen)^1<<63)
	dst = binary.BigEndian.AppendUint64(dst, uint64(en.Start)^1<<63)
	dst = binary.AppendUvarint(dst, uint64(en.Split))
	return append(dst, en.ID...)
}

func decodeGeneration(k key, b []byte) (Generation, error) {
	r := reader{b: b}
	r.header()
	if len(r.b) == 0 || r.b[0] != generationFormat {
		r.fail("generation format")
	} else {
		r.b = r.b[1:]
	}
	g := Generation{Version: k.gen, Cutover: r.varint("cut-over")}
	if len(r.b) == 0 || r.b[0] > 1 {
		r.fail("generation flags")
	} else {
		g.LegacyKeys = r.b[0]&1 != 0
		r.b = r.b[1:]
	}
	g.Settings = []byte(r.str("generation settings"))
	g.Identity = []byte(r.str("generation identity"))
	g.Run = []byte(r.str("generation run settings"))
	if r.err == nil && len(r.b) != 0 {
		g.Dropped, g.DroppedTo = true, r.varint("dropped bound")
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: generation: %d bytes left over", ErrCorrupt, len(r.b))
	}
	return g, r.err
}

// generations checks what a restore found: the stored generations (by
// version), whether entries of version-1 keys were found, and the
// versions of the generation keys' entries. It returns the partition's
// generations, by version, with the implicit one of a changelog written
// before generations.
func generations(stored []Generation, legacyEntries bool, entryGens map[int64]bool) ([]Generation, error) {
	legacy := 0
	for _, g := range stored {
		if g.LegacyKeys {
			legacy++
		}
	}
	switch {
	case legacy > 1:
		return nil, fmt.Errorf("%w: %d generations hold the entries of version-1 keys", ErrCorrupt, legacy)
	case legacyEntries && legacy == 0 && len(stored) > 0:
		return nil, fmt.Errorf("%w: entries of version-1 keys beside generation records, none of which holds them", ErrCorrupt)
	case legacyEntries && legacy == 0:
		stored = []Generation{{Version: 0, Cutover: NoCutover, LegacyKeys: true}}
	}
	for _, gen := range slices.Sorted(maps.Keys(entryGens)) { // the lowest named: the same error on every restore
		if !slices.ContainsFunc(stored, func(g Generation) bool { return g.Version == gen && !g.LegacyKeys }) {
			return nil, fmt.Errorf("%w: entries of generation %d, which has no generation record", ErrCorrupt, gen)
		}
	}
	slices.SortFunc(stored, func(a, b Generation) int {
		switch {
		case a.Version < b.Version:
			return -1
		case a.Version > b.Version:
			return 1
		}
		return 0
	})
	return stored, nil
}
