package ready

import "encoding/binary"

// TagHeader is the header of a changelog tombstone (a Changelog with a nil
// Value) that holds its commit tag: a tombstone has no value to hold it.
// Package state reads it at restore; it is here so that the writer of a
// Changelog knows the changelog's format through this package only.
const TagHeader = "aggregator.tag"

// AppendTag appends the TagHeader value of tag: 8 bytes, big endian.
func AppendTag(dst []byte, tag uint64) []byte { return binary.BigEndian.AppendUint64(dst, tag) }
