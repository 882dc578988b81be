package placement

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"aggregator/internal/wire"
)

// userDataVersion is the first byte of both user data: a member's copies
// in its join, and a member's copies in the leader's plan.
const userDataVersion = 1

// errUserData is wrapped by the errors of user data that do not read.
var errUserData = errors.New("bad user data")

// appendLags appends a member's copies and their lags, for its join:
// the version, the number of topics, then per topic (in name order) its
// name, the number of copies and each copy's partition and lag + 1 (0:
// Unknown), as uvarints.
func appendLags(b []byte, lags map[Partition]int64) []byte {
	b = append(b, userDataVersion)
	return appendByTopic(b, slices.SortedFunc(maps.Keys(lags), Partition.compare), func(b []byte, p Partition) []byte {
		l := lags[p]
		if l >= Unknown || l < 0 {
			return binary.AppendUvarint(b, 0)
		}
		return binary.AppendUvarint(b, uint64(l)+1)
	})
}

// parseLags reads what appendLags wrote.
func parseLags(b []byte) (map[Partition]int64, error) {
	lags := map[Partition]int64{}
	err := parseByTopic(b, func(r *wire.Reader, p Partition) {
		l := int64(r.Uvarint()) - 1
		if l < 0 {
			l = Unknown
		}
		lags[p] = l
	})
	return lags, err
}

// appendCopies appends a member's copies in the leader's plan: as
// appendLags, each copy's flags (1: a warm-up) in place of its lag.
func appendCopies(b []byte, copies []Copy) []byte {
	b = append(b, userDataVersion)
	sorted := slices.SortedFunc(slices.Values(copies), func(a, b Copy) int { return a.Partition.compare(b.Partition) })
	ps := make([]Partition, len(sorted))
	warm := map[Partition]bool{}
	for i, c := range sorted {
		ps[i] = c.Partition
		warm[c.Partition] = c.WarmUp
	}
	return appendByTopic(b, ps, func(b []byte, p Partition) []byte {
		if warm[p] {
			return append(b, 1)
		}
		return append(b, 0)
	})
}

// parseCopies reads what appendCopies wrote.
func parseCopies(b []byte) ([]Copy, error) {
	var copies []Copy
	err := parseByTopic(b, func(r *wire.Reader, p Partition) {
		copies = append(copies, Copy{Partition: p, WarmUp: r.Byte()&1 != 0})
	})
	return copies, err
}

// appendByTopic appends ps (sorted) grouped by topic, each partition
// followed by what each appends.
func appendByTopic(b []byte, ps []Partition, each func([]byte, Partition) []byte) []byte {
	var topics []string
	for _, p := range ps {
		if len(topics) == 0 || topics[len(topics)-1] != p.Topic {
			topics = append(topics, p.Topic)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(topics)))
	for _, t := range topics {
		lo, _ := slices.BinarySearchFunc(ps, t, func(p Partition, t string) int { return cmp.Compare(p.Topic, t) })
		hi := lo
		for hi < len(ps) && ps[hi].Topic == t {
			hi++
		}
		b = binary.AppendUvarint(b, uint64(len(t)))
		b = append(b, t...)
		b = binary.AppendUvarint(b, uint64(hi-lo))
		for _, p := range ps[lo:hi] {
			b = binary.AppendVarint(b, int64(p.Partition))
			b = each(b, p)
		}
	}
	return b
}

// parseByTopic reads what appendByTopic wrote, after the version byte,
// calling each to read what follows each partition. Empty user data is
// nothing (a member of the cooperative-sticky protocol's metadata).
func parseByTopic(b []byte, each func(*wire.Reader, Partition)) error {
	if len(b) == 0 {
		return nil
	}
	if b[0] != userDataVersion {
		return fmt.Errorf("%w: version %d", errUserData, b[0])
	}
	r := wire.Reader{B: b[1:]}
	for range r.Count() {
		t := string(r.Counted())
		for range r.Count() {
			p := Partition{Topic: t, Partition: int32(r.Varint())}
			each(&r, p)
		}
	}
	if r.Bad() {
		return fmt.Errorf("%w: truncated", errUserData)
	}
	if len(r.B) > 0 {
		return fmt.Errorf("%w: %d bytes after the end", errUserData, len(r.B))
	}
	return nil
}
