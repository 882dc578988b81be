package repartition

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"aggregator/internal/config"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/watermark"
)

// Route is what became of one input record in stage 1.
type Route uint8

const (
	Forwarded  Route = iota // written to the repartition topic
	Filtered                // removed by source.filter
	Marker                  // a punctuated watermark marker: it moves the generator, and is not forwarded
	DeadLetter              // written to the dead-letter topic
)

// Stage is the first stage's core for the input partitions this instance
// owns. Partitions need no restore: a partition is ready once assigned,
// and input resumes from the group's committed offset.
type Stage struct {
	cfg      config.Config
	dec      *record.Decoder
	rec      record.Record
	marks    *watermark.Merged
	announce *watermark.Announcer
	futureMs int64
	all      bool    // Format3: records the filter rejects are forwarded too
	sources  int32   // the number of source partitions, for the markers
	next     []int64 // by partition id: the offset of the next record; -1 none; unassigned -2
	hwm      []int64 // by partition id: the high watermark of its last fetch; -1 none since assignment
	outs     []ready.Output
	spare    []ready.Output
	markBuf  []watermark.Mark
	slab     []ready.Repart // Reparts are cut from it, a chunk at a time: one allocation per record was most of the stage's garbage
	forms    []byte         // the records' compact forms are cut from it, a chunk at a time
}

// slabSize is how many Reparts one allocation holds.
const slabSize = 256

// repart returns a Repart holding r; it lives as long as an output refers to it.
func (s *Stage) repart(r ready.Repart) *ready.Repart {
	if len(s.slab) == 0 {
		s.slab = make([]ready.Repart, slabSize)
	}
	p := &s.slab[0]
	*p, s.slab = r, s.slab[1:]
	return p
}

// formChunk is the size of one allocation of compact forms.
const formChunk = 64 << 10

// form returns the compact form of rec, in bytes that are never reused.
func (s *Stage) form(rec *record.Record) []byte {
	if cap(s.forms)-len(s.forms) < 256 {
		s.forms = make([]byte, 0, formChunk)
	}
	start := len(s.forms)
	s.forms = s.dec.AppendCompact(s.forms, rec)
	return s.forms[start:len(s.forms):len(s.forms)]
}

// encode encodes r for the repartition topic (the producer writes its
// Encoded bytes as they are), in bytes that are never reused: they are
// cut from the chunk of the compact forms.
func (s *Stage) encode(r *ready.Repart) {
	if n := RepartSize(r, s.cfg.State.RepartitionFormat); cap(s.forms)-len(s.forms) < n {
		s.forms = make([]byte, 0, max(formChunk, n))
	}
	s.forms = AppendRepart(s.forms, r, s.cfg.State.RepartitionFormat)
}

const unassigned = -2

// New builds a Stage from a validated config; sources is the number of
// partitions of the input topics (SetSources changes it).
func New(cfg config.Config, sources int32, schemas *record.Schemas) (*Stage, error) {
	dec, err := record.NewDecoder(cfg.RecordSpec(), schemas)
	if err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	return &Stage{cfg: cfg, dec: dec, marks: watermark.NewMerged(cfg.Watermark), announce: watermark.NewAnnouncer(),
		futureMs: cfg.Watermark.MaxFutureSkew.Milliseconds(), sources: sources, all: cfg.State.RepartitionFormat == Format3}, nil
}

// ForwardsFiltered reports whether the stage forwards the records its
// config's source.filter rejects (Format3), for stage 2 to filter per
// generation: its records must be decoded with record.Decoder.DecodeAll.
func (s *Stage) ForwardsFiltered() bool { return s.all }

// Sources is the number of source partitions the markers report.
func (s *Stage) Sources() int32 { return s.sources }

// SetSources sets the number of source partitions the markers report
// (the input topics' partitions changed). Every assigned partition is
// announced again at the next commit: a reader of the new count waits for
// all of them.
func (s *Stage) SetSources(n int32) {
	if n != s.sources {
		s.announce.Reset()
	}
	s.sources = n
}

// Assign starts a partition with a fresh generator; its records may
// follow at once. Partition ids are dense: they index a slice.
func (s *Stage) Assign(partition int32, now int64) {
	for int(partition) >= len(s.next) {
		s.next, s.hwm = append(s.next, unassigned), append(s.hwm, -1)
	}
	s.next[partition], s.hwm[partition] = -1, -1
	s.marks.Assign(partition, now)
}

// Revoke forgets a partition: its next owner announces it, and
// processes again from the committed offset what this stage processed
// and did not hand over yet (pipeline.Core holds stage 1's outputs until
// the instance's first restores accepted the config): its outputs not
// handed over are dropped.
func (s *Stage) Revoke(partition int32) {
	if int(partition) < len(s.next) {
		s.next[partition] = unassigned
	}
	s.marks.Revoke(partition)
	s.announce.Forget(partition)
	s.outs = slices.DeleteFunc(s.outs, func(o ready.Output) bool {
		switch o.Kind {
		case ready.Repartition:
			return o.Repart.In.Partition == partition
		case ready.DeadLetter:
			return o.Event.In.Partition == partition
		}
		return false
	})
}

// Assigned reports whether the partition is assigned.
func (s *Stage) Assigned(partition int32) bool {
	return partition >= 0 && int(partition) < len(s.next) && s.next[partition] != unassigned
}

// Fetched notes the high watermark of a fetch of the partition: once its
// position reaches it, the partition is caught up and may become idle.
func (s *Stage) Fetched(partition int32, hwm, now int64) {
	if !s.Assigned(partition) {
		return
	}
	s.hwm[partition] = hwm
	s.marks.SetCaughtUp(partition, s.next[partition] >= hwm, now)
}

// Unfetched lists the assigned partitions no fetch has returned a record
// of since their assignment, with their positions (-1: none, the group's
// offset rules apply), for the shell to ask whether they are at their log
// end (an empty partition must be able to go idle too).
func (s *Stage) Unfetched() map[int32]int64 {
	var out map[int32]int64
	for id, next := range s.next {
		if next != unassigned && s.hwm[id] < 0 {
			if out == nil {
				out = map[int32]int64{}
			}
			out[int32(id)] = next
		}
	}
	return out
}

// Lag is the records of the partition between its position and the high
// watermark of its last fetch; ok is false until both are known.
func (s *Stage) Lag(partition int32) (lag int64, ok bool) {
	if !s.Assigned(partition) || s.hwm[partition] < 0 || s.next[partition] < 0 {
		return 0, false
	}
	return max(s.hwm[partition]-s.next[partition], 0), true
}

// SetCaughtUp tells whether the partition's position is at its log end
// (for a partition no fetch has returned a record of yet).
func (s *Stage) SetCaughtUp(partition int32, caughtUp bool, now int64) {
	if s.Assigned(partition) {
		s.marks.SetCaughtUp(partition, caughtUp, now)
	}
}

// Tick re-evaluates idleness with the wall clock.
func (s *Stage) Tick(now int64) { s.marks.Tick(now) }

// Process decodes one record of an assigned partition and hands it on,
// in offset order per partition; applied is false for a partition that is
// not assigned or a record below its position (fetched again).
func (s *Stage) Process(in *ready.Input, now int64) (out Route, applied bool) {
	if !s.Assigned(in.Partition) || in.Offset < s.next[in.Partition] {
		return 0, false
	}
	var kind record.Kind
	var err error
	if s.all {
		kind, err = s.dec.DecodeAll(in, &s.rec)
	} else {
		kind, err = s.dec.Decode(in, &s.rec)
	}
	return s.ProcessDecoded(in, &s.rec, kind, err, now)
}

// ProcessDecoded is Process for a record decoded elsewhere (kind and
// decodeErr are what its decoder returned, DecodeAll's if
// ForwardsFiltered; rec is not kept).
//
// With Format3 a record the filter rejects is forwarded as well, with
// its verdict, without moving the watermark: with its whole decoding,
// or, if that failed after the group key, without (stage 2 decodes the
// value under each generation's settings). One whose event time or
// group key cannot be read has no partition to go to, and one the
// future guard refuses would be a dead letter wherever a filter took
// it: both are Filtered here, as the config's filter says (so no time
// past the guard reaches stage 2, which keeps the latest time of a
// filtered record for its next cut-over).
//
// With Format3 a record the filter accepts whose decoding failed after
// the group key (a value the aggregates or the session gap cannot read:
// state settings, which a generation of other ones may read) is
// forwarded too, without its decoding and without moving the
// watermark, for stage 2 to decode under each generation's settings
// and dead-letter if none reads it. One whose time or key cannot be
// read (identity settings, the same in every generation), or whose
// time the future guard refuses, is a dead letter here.
func (s *Stage) ProcessDecoded(in *ready.Input, rec *record.Record, kind record.Kind, err error, now int64) (out Route, applied bool) {
	if !s.Assigned(in.Partition) || in.Offset < s.next[in.Partition] {
		return 0, false
	}
	s.next[in.Partition] = in.Offset + 1
	if kind == record.Filtered && s.all {
		if rec.Key == "" || s.future(rec.Time, now) {
			return Filtered, true
		}
		var form []byte
		if err == nil {
			form = s.form(rec)
		}
		s.forward(in, rec.Key, form, true)
		return Forwarded, true
	}
	if err != nil && s.all && kind == record.Event && rec.Key != "" && !s.future(rec.Time, now) {
		s.forward(in, rec.Key, nil, false)
		return Forwarded, true
	}
	if err == nil && kind != record.Filtered {
		err = s.checkFuture(rec.Time, now)
	}
	switch {
	case err != nil:
		s.outs = append(s.outs, ready.Output{Kind: ready.DeadLetter, Event: &ready.Event{In: *in, Err: err}})
		return DeadLetter, true
	case kind == record.Filtered:
		return Filtered, true
	case kind == record.Marker:
		s.marks.OnMarker(in.Partition, rec.Time, now)
		return Marker, true
	}
	before, _ := s.marks.Partition(in.Partition)
	s.marks.OnEvent(in.Partition, rec.Time, now)
	r := s.repart(ready.Repart{In: *in, Key: rec.Key, Record: s.form(rec)})
	r.In.Sources, r.In.Before = s.sources, before
	r.In.After, _ = s.marks.Partition(in.Partition)
	s.encode(r)
	s.outs = append(s.outs, ready.Output{Kind: ready.Repartition, Repart: r})
	return Forwarded, true
}

// forward hands on, under key, a record the filter rejected (filtered)
// or one whose decoding failed after the group key (Format3), with form
// (nil: none); its source's watermark does not move.
func (s *Stage) forward(in *ready.Input, key string, form []byte, filtered bool) {
	r := s.repart(ready.Repart{In: *in, Key: key, Record: form, Filtered: filtered})
	wm, _ := s.marks.Partition(in.Partition)
	r.In.Sources, r.In.Before, r.In.After = s.sources, wm, wm
	s.encode(r)
	s.outs = append(s.outs, ready.Output{Kind: ready.Repartition, Repart: r})
}

// Skip moves a partition's position past offset, a record that holds no
// data (a transaction's control record, kept by the client), unless the
// partition is not assigned or offset is behind its position: a partition
// read to its end is then at its log end, for its lag and its idleness.
func (s *Stage) Skip(partition int32, offset int64) {
	if s.Assigned(partition) && offset >= s.next[partition] {
		s.next[partition] = offset + 1
	}
}

// future reports whether the future guard (docs/semantics.md#watermarks) refuses eventTime.
func (s *Stage) future(eventTime, now int64) bool {
	return s.futureMs != 0 && now <= math.MaxInt64-s.futureMs && eventTime > now+s.futureMs
}

// checkFuture is the future guard (docs/semantics.md#watermarks), as pipeline applies it.
func (s *Stage) checkFuture(eventTime, now int64) error {
	if !s.future(eventTime, now) {
		return nil
	}
	return &record.DecodeError{Reason: "future_timestamp", Field: s.cfg.Source.Timestamp.Field,
		Detail: "event time " + strconv.FormatInt(eventTime, 10) + " is more than " +
			s.cfg.Watermark.MaxFutureSkew.String() + " ahead of the wall clock " + strconv.FormatInt(now, 10)}
}

// Step hands over the outputs since the last Step or Commit. Its slices
// are valid until the next Step or Commit.
func (s *Stage) Step(now int64) ready.Ready { return s.ready(false, now) }

// Commit hands over the outputs since the last Step, the markers due at
// now (after the data: a stage-2 reader of a repartition partition meets
// a source's records before the marker that covers them) and the input
// offsets to commit. The shell calls Accept once it is durable, or Abort.
// Its slices are valid until the next Step or Commit.
func (s *Stage) Commit(now int64) ready.Ready { return s.ready(true, now) }

func (s *Stage) ready(commit bool, now int64) ready.Ready {
	rd := ready.Ready{Commit: commit}
	if commit {
		s.markBuf = s.announce.Due(s.markBuf[:0], s.marks, s.marks.Partitions(), s.sources, now)
		for _, m := range s.markBuf {
			s.outs = append(s.outs, ready.Output{Kind: ready.Marker, Repart: MarkerRepart(m)})
		}
		for id, next := range s.next {
			if next >= 0 {
				rd.Offsets = append(rd.Offsets, ready.Offset{Partition: int32(id), Offset: next})
			}
		}
	}
	if len(s.outs) > 0 {
		rd.Outputs = s.outs
		clear(s.spare)
		s.outs, s.spare = s.spare[:0], s.outs
	}
	return rd
}

// Accept tells the stage the last commit Ready is durable.
func (s *Stage) Accept() {}

// Abort tells the stage the last commit Ready failed: every assigned
// partition starts again from its committed offset (the shell rewinds the
// client) with a fresh generator, and is announced again.
func (s *Stage) Abort(now int64) {
	s.marks = watermark.NewMerged(s.cfg.Watermark)
	s.announce.Reset()
	clear(s.outs)
	s.outs = s.outs[:0]
	for id, next := range s.next {
		if next != unassigned {
			s.Assign(int32(id), now)
		}
	}
}

// PartitionWatermark reports a partition's watermark and whether it is idle.
func (s *Stage) PartitionWatermark(partition int32) (wm int64, idle bool) {
	return s.marks.Partition(partition)
}

// Partitions lists the assigned partitions, sorted.
func (s *Stage) Partitions() []int32 { return s.marks.Partitions() }

// AppendPartitions appends the assigned partitions to dst, in ascending
// order.
func (s *Stage) AppendPartitions(dst []int32) []int32 {
	for id, next := range s.next {
		if next != unassigned {
			dst = append(dst, int32(id))
		}
	}
	return dst
}
