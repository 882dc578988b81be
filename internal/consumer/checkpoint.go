package consumer

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"aggregator/internal/watermark"
)

// maxMetadata keeps a commit's metadata under Kafka's default
// offset.metadata.max.bytes (4096).
const maxMetadata = 4000

// checkpointVersion prefixes the metadata, so a later format can tell.
const checkpointVersion = "a1"

// A Step says that from input offset Offset on, the engine judged the
// partition's records against merged watermark W.
type Step struct {
	Offset int64
	W      int64
}

// Checkpoint is what a commit's metadata carries for one partition.
type Checkpoint struct {
	Emitted int64           // outputs of every record below this offset were acknowledged
	W       int64           // the merged watermark when the commit was taken
	State   watermark.State // the partition's generator at Emitted
	Steps   []Step          // merged watermark steps from the committed offset to Emitted
}

// Encode writes c as compact text: offsets and watermarks of the steps are
// deltas from the previous step.
func (c Checkpoint) Encode() string {
	var b strings.Builder
	b.WriteString(checkpointVersion)
	for _, v := range []int64{c.Emitted, c.W, c.State.MaxTimestamp, c.State.Watermark} {
		b.WriteByte(' ')
		b.WriteString(formatTime(v))
	}
	prev := Step{W: math.MinInt64}
	for _, s := range c.Steps {
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(s.Offset-prev.Offset, 10))
		b.WriteByte(':')
		if prev.W == math.MinInt64 || s.W == math.MinInt64 {
			b.WriteString(formatTime(s.W))
		} else {
			b.WriteString("+" + strconv.FormatInt(s.W-prev.W, 10))
		}
		prev = s
	}
	return b.String()
}

// errNoCheckpoint is returned by ParseCheckpoint for metadata that is not a
// checkpoint (empty, or written by another client).
var errNoCheckpoint = errors.New("no checkpoint")

// ParseCheckpoint reads what Encode wrote.
func ParseCheckpoint(s string) (Checkpoint, error) {
	f := strings.Fields(s)
	if len(f) < 5 || f[0] != checkpointVersion {
		return Checkpoint{}, errNoCheckpoint
	}
	var c Checkpoint
	var err error
	for i, dst := range []*int64{&c.Emitted, &c.W, &c.State.MaxTimestamp, &c.State.Watermark} {
		if *dst, err = parseTime(f[i+1]); err != nil {
			return Checkpoint{}, fmt.Errorf("checkpoint %q: %w", s, err)
		}
	}
	prev := Step{W: math.MinInt64}
	for _, field := range f[5:] {
		if prev, err = parseStep(field, prev); err != nil {
			return Checkpoint{}, fmt.Errorf("checkpoint %q: %w", s, err)
		}
		c.Steps = append(c.Steps, prev)
	}
	return c, nil
}

func parseStep(field string, prev Step) (Step, error) {
	off, w, ok := strings.Cut(field, ":")
	if !ok {
		return Step{}, fmt.Errorf("step %q: no colon", field)
	}
	d, err := strconv.ParseInt(off, 10, 64)
	if err != nil {
		return Step{}, fmt.Errorf("step %q: %w", field, err)
	}
	s := Step{Offset: prev.Offset + d}
	if delta, isDelta := strings.CutPrefix(w, "+"); isDelta {
		d, err = strconv.ParseInt(delta, 10, 64)
		s.W = prev.W + d
	} else {
		s.W, err = parseTime(w)
	}
	if err != nil {
		return Step{}, fmt.Errorf("step %q: %w", field, err)
	}
	return s, nil
}

// formatTime writes ms, with "m" for math.MinInt64 (no watermark yet).
func formatTime(v int64) string {
	if v == math.MinInt64 {
		return "m"
	}
	return strconv.FormatInt(v, 10)
}

func parseTime(s string) (int64, error) {
	if s == "m" {
		return math.MinInt64, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// Fit drops the oldest steps after the first until the encoding fits in
// max bytes; it reports whether any step was dropped. A dropped step makes
// the rebuild judge some records against a lower watermark than the first
// time, which can change the revision numbers of later late firings.
func (c *Checkpoint) Fit(max int) (string, bool) {
	dropped := false
	for {
		s := c.Encode()
		if len(s) <= max || len(c.Steps) < 2 {
			return s, dropped
		}
		c.Steps = append(c.Steps[:1], c.Steps[2:]...)
		dropped = true
	}
}
