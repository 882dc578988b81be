package watermark

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The records of the watermark topic (by_key with watermark.scope
// global): the key names an input partition as "<topic>/<partition>" (a
// topic name has no '/'), so the compacted topic keeps the latest value
// of each; the value is a small JSON object, readable with kcat:
//
//	{"version":1,"watermark":1700000012345,"idle":false}
//
// watermark is the partition's watermark in ms since the epoch, null
// before its first record (minus infinity); idle says whether the
// partition is idle (it does not hold the group's watermark back then).

// PublishedVersion is the version of the values this release writes.
const PublishedVersion = 1

// ErrPublished is wrapped by ParsePublished's errors: a record of the
// watermark topic this release cannot read.
var ErrPublished = errors.New("watermark topic: unreadable record")

type publishedValue struct {
	Version   int    `json:"version"`
	Watermark *int64 `json:"watermark"`
	Idle      bool   `json:"idle"`
}

// AppendPublishedKey appends the key of the watermark-topic record of
// input partition partition of topic.
func AppendPublishedKey(dst []byte, topic string, partition int32) []byte {
	return strconv.AppendInt(append(append(dst, topic...), '/'), int64(partition), 10)
}

// AppendPublished appends the value of a watermark-topic record.
func AppendPublished(dst []byte, wm int64, idle bool) []byte {
	dst = append(dst, `{"version":1,"watermark":`...)
	if wm == math.MinInt64 {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendInt(dst, wm, 10)
	}
	return append(strconv.AppendBool(append(dst, `,"idle":`...), idle), '}')
}

// ParsePublished reads a record of the watermark topic: the input
// partition its key names, and its value's watermark and idleness. A
// value of a later version than PublishedVersion is an error too.
func ParsePublished(key, value []byte) (topic string, partition int32, wm int64, idle bool, err error) {
	i := bytes.LastIndexByte(key, '/')
	if i <= 0 {
		return "", 0, 0, false, fmt.Errorf("%w: key %q is not <topic>/<partition>", ErrPublished, key)
	}
	n, err := strconv.ParseInt(string(key[i+1:]), 10, 32)
	if err != nil || n < 0 {
		return "", 0, 0, false, fmt.Errorf("%w: key %q is not <topic>/<partition>", ErrPublished, key)
	}
	var v publishedValue
	if err := json.Unmarshal(value, &v); err != nil {
		return "", 0, 0, false, fmt.Errorf("%w: value of %q: %v", ErrPublished, key, err)
	}
	if v.Version != PublishedVersion {
		return "", 0, 0, false, fmt.Errorf("%w: value of %q has version %d, this release reads %d", ErrPublished, key, v.Version, PublishedVersion)
	}
	wm = math.MinInt64
	if v.Watermark != nil {
		wm = *v.Watermark
	}
	return string(key[:i]), int32(n), wm, v.Idle, nil
}
