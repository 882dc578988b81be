package integration

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// changelogKeys is the key count of BenchmarkChangelog's input: the end-to-end
// input with 1,000 keys instead of 100, so each key has a record every 2s
// of event time (2.5 per 5s tumbling window; a new 1s slice for each
// record with sliding(60)) over 800s of event time, 160 tumbling windows
// and 13 sliding window lengths.
const changelogKeys = 1_000

// A changelogRegime is how much input a commit covers.
type changelogRegime struct {
	name           string
	commitInterval time.Duration // 0: the default
	opts           []kgo.Opt     // for the service's clients
}

// changelogRegimes: "backlog" runs with the defaults and reads a backlog,
// so a commit (every 100ms) covers tens of thousands of records and tens
// of seconds of event time, and a window that opens and is dropped
// between two commits is never written at all. "live" commits after every
// poll and keeps polls small (16 KiB fetches), so a commit covers several
// hundred records, about a second of event time: close to a service that
// keeps up with this input and commits every 100ms of it, where hardly
// any change is folded into a later one before it is written. (Such a
// service also writes each assigned partition's position at every commit:
// 4 records per 50 input records here, which live, at one commit per
// several hundred, does not show.)
func changelogRegimes() []changelogRegime {
	return []changelogRegime{
		{name: "backlog"},
		{name: "live", commitInterval: time.Nanosecond,
			opts: []kgo.Opt{kgo.FetchMaxBytes(16 << 10), kgo.FetchMaxPartitionBytes(16 << 10)}},
	}
}

// BenchmarkChangelog reports what the changelog costs per input record,
// for tumbling and sliding(60) windows, reading a backlog and as if live
// (see changelogRegimes), with the default delivery (exactly_once; the
// changelog records a commit writes do not depend on it): its bytes (key
// plus value of every record written, tombstones included, before
// compaction: kfake does not compact), its records and tombstones per
// input record, and the input records a commit covered. For comparison it
// also reports the changelog's bytes as the client's metrics count them
// (changelog-batch-B/record: uncompressed record batches, so with each
// record's framing and headers, such as a tombstone's tag). The pipeline
// runs over the whole input and drains, so the changelog holds what the
// whole input caused. Windows still open at the end are written but not
// yet tombstoned, so a longer input shows slightly more tombstones.
func BenchmarkChangelog(b *testing.B) {
	kc := newCluster(b, 4)
	brokers := kc.ListenAddrs()
	// Small batches, so that the live regime's small fetches are possible
	// (the broker returns whole batches).
	produceBenchInput(b, brokers, changelogKeys, kgo.ProducerBatchMaxBytes(16<<10))
	for _, w := range benchWindows() {
		for _, regime := range changelogRegimes() {
			b.Run(w.name+"/"+regime.name, func(b *testing.B) {
				var total timing
				var sizes changelogSizes
				var commits float64  // the drain's included
				var batchBytes int64 // as the client's metrics count them
				b.ReportAllocs()
				for b.Loop() {
					cfg := benchConfig(b, w.window, "exactly_once", "changelog-"+w.name+"-"+regime.name, brokers)
					if regime.commitInterval > 0 {
						cfg.State.CommitInterval = regime.commitInterval
					}
					run := runPipeline(b, cfg, true, regime.opts...)
					total.add(run.timing)
					commits += run.allCommits
					batchBytes += run.changelogBatchBytes
					got := readChangelogSizes(b, brokers, cfg.State.ChangelogTopic)
					if float64(got.records) != run.changelog {
						b.Errorf("%s holds %d records, aggregator_changelog_records_total = %v", cfg.State.ChangelogTopic, got.records, run.changelog)
					}
					sizes.add(got)
				}
				n := float64(total.records)
				b.ReportMetric(float64(sizes.keys+sizes.values)/n, "changelog-B/record")
				b.ReportMetric(float64(sizes.records)/n, "changelog-records/record")
				b.ReportMetric(float64(sizes.tombstones)/n, "tombstones/record")
				b.ReportMetric(float64(batchBytes)/n, "changelog-batch-B/record")
				b.ReportMetric(n/max(commits, 1), "input-records/commit")
				b.Logf("per input record: keys %.1f B, values %.1f B, tombstone headers %.1f B; %.1f B per changelog record; %.0f records/s",
					float64(sizes.keys)/n, float64(sizes.values)/n, float64(sizes.headers)/n,
					float64(sizes.keys+sizes.values)/float64(max(sizes.records, 1)), n/total.wall.Seconds())
				for _, k := range []string{"slice", "window", "position", "unknown"} {
					if v := sizes.byKind[k]; v != nil {
						b.Logf("%s: %.3f records (%.3f tombstones), %.1f B per input record", k,
							float64(v.records)/n, float64(v.tombstones)/n, float64(v.bytes)/n)
					}
				}
			})
		}
	}
}

// changelogSizes sums the records of a changelog topic.
type changelogSizes struct {
	records, tombstones   int
	keys, values, headers int64                 // bytes
	byKind                map[string]*kindSizes // slice, window, position
}

// kindSizes sums the records of one kind.
type kindSizes struct {
	records, tombstones int
	bytes               int64 // key + value
}

func (s *changelogSizes) add(t changelogSizes) {
	s.records += t.records
	s.tombstones += t.tombstones
	s.keys += t.keys
	s.values += t.values
	s.headers += t.headers
	for k, v := range t.byKind {
		s.kind(k).records += v.records
		s.kind(k).tombstones += v.tombstones
		s.kind(k).bytes += v.bytes
	}
}

func (s *changelogSizes) kind(k string) *kindSizes {
	if s.byKind == nil {
		s.byKind = map[string]*kindSizes{}
	}
	if s.byKind[k] == nil {
		s.byKind[k] = &kindSizes{}
	}
	return s.byKind[k]
}

// recordKind names a changelog record's kind, its key's second byte (see
// package state).
func recordKind(key []byte) string {
	if len(key) < 2 {
		return "unknown"
	}
	switch key[1] {
	case 's':
		return "slice"
	case 'w':
		return "window"
	case 'p':
		return "position"
	}
	return "unknown"
}

// readChangelogSizes reads every record written to topic, committed or
// not (control records aside), and sums their sizes.
func readChangelogSizes(b *testing.B, brokers []string, topic string) changelogSizes {
	adm := kadm.NewClient(client(b, brokers))
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		b.Fatal(err)
	}
	left := map[int32]int64{} // partition → end offset, for those not read to it
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl := client(b, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var s changelogSizes
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Fatalf("read %s: %d records, partitions %v not at their end: %v", topic, s.records, left, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			s.records++
			s.keys += int64(len(r.Key))
			s.values += int64(len(r.Value))
			k := s.kind(recordKind(r.Key))
			k.records++
			k.bytes += int64(len(r.Key) + len(r.Value))
			if r.Value == nil {
				s.tombstones++
				k.tombstones++
			}
			for _, h := range r.Headers {
				s.headers += int64(len(h.Key) + len(h.Value))
			}
		})
	}
	return s
}
