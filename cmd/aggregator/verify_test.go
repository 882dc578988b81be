package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/hamba/avro/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
	"aggregator/internal/producer"
)

const verifyYaml = `
source:
  topics: [calls]
  group: verify-test
  format: json
  key: [sid]
  partitioning: %s
  timestamp: {field: t, layout: unix_ms}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 5s, allowed_lateness: 2s}
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: calls, fn: count}
sink: {results_topic: calls-windows, late_topic: calls-late, dead_letter_topic: calls-dlq, linger: 1ms}
delivery: %s
`

// verifyBase is the event time of the tests' first record.
const verifyBase = 1_900_000_000_000

// verifySetup is a kfake cluster, a config file for it and the config.
type verifySetup struct {
	kc      *kfake.Cluster
	brokers []string
	path    string
	env     []string
	cfg     config.Config
	parts   int32
}

func newVerifySetup(t *testing.T, parts int32, yaml string) *verifySetup {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "calls"),
		kfake.SeedTopics(1, "calls-windows", "calls-late", "calls-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	s := &verifySetup{kc: kc, brokers: kc.ListenAddrs(), path: filepath.Join(t.TempDir(), "verify.yaml"), parts: parts}
	writeFile(t, s.path, yaml)
	s.env = []string{"AGGREGATOR_SOURCE_BROKERS=" + strings.Join(s.brokers, ",")}
	if s.cfg, err = config.Load(s.path, lookupEnv(s.env)); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *verifySetup) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// verifyService is the service, in process.
type verifyService struct {
	c      *consumer.Consumer
	cancel context.CancelFunc
	done   chan error
}

func (s *verifySetup) start(t *testing.T) *verifyService {
	t.Helper()
	c, err := consumer.New(s.cfg, zerolog.Nop(), prometheus.NewRegistry(), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc := &verifyService{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { svc.done <- c.Run(ctx) }()
	t.Cleanup(svc.crash)
	return svc
}

// crash stops the service without committing anything more.
func (v *verifyService) crash() {
	if v.cancel == nil {
		return
	}
	v.cancel()
	v.cancel = nil
	<-v.done
	v.c.Close()
}

// stop drains and leaves.
func (v *verifyService) stop(t *testing.T) {
	t.Helper()
	v.cancel()
	v.cancel = nil
	<-v.done
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := v.c.Drain(ctx); err != nil {
		t.Errorf("Drain = %v", err)
	}
}

// verifyRecord is one input record.
type verifyRecord struct {
	partition int32
	value     string
	ts        int64 // the Kafka timestamp; 0: now
}

// verifyInput is a stream of calls over 6 keys, each key's records in
// one partition (sid i in partition i % parts; spread: any), with a few
// malformed ones, then (second) records an hour behind: late however the
// partitions interleave.
func verifyInput(parts int32, n int, spread bool) (first, second []verifyRecord) {
	for i := range n {
		sid := i % 6
		p := int32(sid) % parts
		if spread {
			p = int32(i/6) % parts
		}
		v := fmt.Sprintf(`{"sid":"u%d","t":%d,"d":%d}`, sid, verifyBase+int64(i)*50, i%10)
		if i%97 == 5 {
			v = fmt.Sprintf(`{"sid":"u%d","t":"soon","d":1}`, sid)
		}
		first = append(first, verifyRecord{p, v, verifyBase + int64(i)*50})
	}
	for i := range 4 {
		second = append(second, verifyRecord{int32(i) % parts, fmt.Sprintf(`{"sid":"u%d","t":%d,"d":1}`, i*(int(parts)), verifyBase-3_600_000), 0})
	}
	return first, second
}

func (s *verifySetup) produce(t *testing.T, recs []verifyRecord) {
	t.Helper()
	cl := s.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = &kgo.Record{Topic: "calls", Partition: r.partition, Value: []byte(r.value)}
		if r.ts != 0 {
			krs[i].Timestamp = time.UnixMilli(r.ts)
		}
	}
	if err := cl.ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// waitProcessed polls until the group has committed every input record
// (and with the repartition stage, every repartition record but a
// transaction's last marker).
func (s *verifySetup) waitProcessed(t *testing.T) {
	t.Helper()
	adm := kadm.NewClient(s.client(t))
	topics := []string{"calls"}
	if s.cfg.State.RepartitionTopic != "" && !s.cfg.Source.ByKey() {
		topics = append(topics, s.cfg.State.RepartitionTopic)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ends, err1 := adm.ListEndOffsets(ctx, topics...)
		offs, err2 := adm.FetchOffsets(ctx, s.cfg.Source.Group)
		cancel()
		done := err1 == nil && err2 == nil && ends.Error() == nil
		if done {
			ends.Each(func(o kadm.ListedOffset) {
				c, ok := offs.Lookup(o.Topic, o.Partition)
				slack := int64(0)
				if o.Topic != "calls" {
					slack = 1 // a commit marker
				}
				if o.Offset > 0 && (!ok || c.At < o.Offset-slack) {
					done = false
				}
			})
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service has not committed the input after 60s: %v %v", offs, ends)
		}
		time.Sleep(20 * time.Millisecond) // polling, not for correctness
	}
}

// verifyOutput is verify's summary and differences.
type verifyOutput struct {
	summary map[string]any
	diffs   []map[string]any
	text    string
	stderr  string
}

func (s *verifySetup) verify(t *testing.T, args ...string) (verifyOutput, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), append([]string{"verify", "--config", s.path}, args...), s.env, nil, &stdout, &stderr)
	out := verifyOutput{text: stdout.String() + stderr.String(), stderr: stderr.String()}
	for i, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var m map[string]any
		if jerr := json.Unmarshal([]byte(line), &m); jerr != nil {
			t.Fatalf("verify printed %q, not JSON lines: %v (%v)\n%s", line, jerr, err, out.text)
		}
		if i == 0 {
			out.summary = m["summary"].(map[string]any)
			continue
		}
		out.diffs = append(out.diffs, m)
	}
	return out, err
}

// count reads a summary count: "windows.equal".
func (o verifyOutput) count(path string) float64 {
	var v any = o.summary
	for _, k := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	f, _ := v.(float64)
	return f
}

// healthyRun runs the service over both phases. "crash": the instance
// is killed right after a part of the input is produced (mid-commit, its
// open transaction or unflushed outputs lost) and started again;
// "rescale": a second instance joins for the rest of the first phase
// (1 → 2) and leaves before the second (2 → 1).
func (s *verifySetup) healthyRun(t *testing.T, first, second []verifyRecord, fault string) {
	t.Helper()
	a := s.start(t)
	half, three := len(first)/2, len(first)*3/4
	s.produce(t, first[:half])
	s.waitProcessed(t)
	switch fault {
	case "crash":
		s.produce(t, first[half:three])
		a.crash()
		a = s.start(t)
		s.produce(t, first[three:])
	case "rescale":
		b := s.start(t)
		s.produce(t, first[half:])
		s.waitProcessed(t)
		b.stop(t)
	default:
		s.produce(t, first[half:])
	}
	s.waitProcessed(t)
	s.produce(t, second)
	s.waitProcessed(t)
	a.stop(t)
}

// TestVerifyHealthy: the service over a stream with dead letters and late
// events, in both delivery and partitioning modes, through a crash and a
// rescale; verify over the whole input finds no unexplained difference.
func TestVerifyHealthy(t *testing.T) {
	t.Parallel()
	for _, partitioning := range []string{"by_key", "repartition"} {
		for _, delivery := range []string{"exactly_once", "at_least_once"} {
			for _, fault := range []string{"crash", "rescale"} {
				t.Run(partitioning+"/"+delivery+"/"+fault, func(t *testing.T) {
					t.Parallel()
					s := newVerifySetup(t, 3, fmt.Sprintf(verifyYaml, partitioning, delivery))
					first, second := verifyInput(3, 600, partitioning == "repartition")
					s.healthyRun(t, first, second, fault)
					out, err := s.verify(t)
					if err != nil {
						t.Fatalf("verify = %v, want nil:\n%s", err, out.text)
					}
					if out.count("windows.equal") < 25 || out.count("late_events.equal")+out.count("late_events.explained_by_timing") != 4 || out.count("dead_letters.equal") == 0 {
						t.Fatalf("verify compared too little (windows, 4 late events, dead letters):\n%s", out.text)
					}
				})
			}
		}
	}
}

// tamperSetup is a healthy by_key run, verified clean, ready to be damaged.
func tamperSetup(t *testing.T) *verifySetup {
	t.Helper()
	s := newVerifySetup(t, 3, fmt.Sprintf(verifyYaml, "by_key", "exactly_once"))
	first, second := verifyInput(3, 600, false)
	s.healthyRun(t, first, second, "")
	if out, err := s.verify(t); err != nil {
		t.Fatalf("before tampering: verify = %v:\n%s", err, out.text)
	}
	return s
}

// readTopic returns every record of a one-partition output topic.
func (s *verifySetup) readTopic(t *testing.T, topic string) []*kgo.Record {
	t.Helper()
	cl := s.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	adm := kadm.NewClient(s.client(t))
	ends, err := adm.ListCommittedOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for last := int64(-1); last+1 < end.Offset-1 && ctx.Err() == nil; {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			last = r.Offset
		})
	}
	return out
}

func wantDiff(t *testing.T, out verifyOutput, err error, kind string) map[string]any {
	t.Helper()
	if !errors.Is(err, errDiffs) || exitCode(err) != 1 {
		t.Fatalf("verify = %v (exit %d), want unexplained differences (exit 1):\n%s", err, exitCode(err), out.text)
	}
	for _, d := range out.diffs {
		if d["kind"] == kind {
			return d
		}
	}
	t.Fatalf("verify reported no %s:\n%s", kind, out.text)
	return nil
}

// TestVerifyTampered: a result with a wrong count written into the
// results topic, a window's result deleted (a tombstone), a late event
// deleted (the late topic recreated without it): each is reported as what
// it is, exit 1.
func TestVerifyTampered(t *testing.T) {
	t.Parallel()
	t.Run("wrong_count", func(t *testing.T) {
		t.Parallel()
		s := tamperSetup(t)
		r := s.readTopic(t, "calls-windows")[0]
		var v map[string]any
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatal(err)
		}
		v["count"] = v["count"].(float64) + 1
		b, _ := json.Marshal(v)
		if err := s.client(t).ProduceSync(context.Background(), &kgo.Record{Topic: "calls-windows", Key: r.Key, Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		out, err := s.verify(t)
		d := wantDiff(t, out, err, "window_differs")
		if d["found"].(map[string]any)["count"] != v["count"] {
			t.Errorf("the difference's found count is %v, want %v:\n%s", d["found"], v["count"], out.text)
		}
		if out.count("windows.differing") != 1 || out.count("unexplained") != 1 {
			t.Errorf("want one differing window, nothing else:\n%s", out.text)
		}
	})
	t.Run("window_missing", func(t *testing.T) {
		t.Parallel()
		s := tamperSetup(t)
		r := s.readTopic(t, "calls-windows")[0]
		if err := s.client(t).ProduceSync(context.Background(), &kgo.Record{Topic: "calls-windows", Key: r.Key}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		out, err := s.verify(t)
		wantDiff(t, out, err, "window_missing")
		if out.count("windows.missing") != 1 || out.count("unexplained") != 1 {
			t.Errorf("want one missing window, nothing else:\n%s", out.text)
		}
	})
	t.Run("late_event_deleted", func(t *testing.T) {
		t.Parallel()
		s := tamperSetup(t)
		late := s.readTopic(t, "calls-late")
		// The late event of the last partition: verify reads the
		// partitions of a fetch one after the other, so records of the
		// others may be on time in its recomputation (explained by timing);
		// this one is late there too.
		var keep []*kgo.Record
		var deleted *kgo.Record
		for _, r := range late {
			if p, _ := header(r, producer.HeaderSourcePartition); p == "2" && deleted == nil {
				deleted = r
				continue
			}
			keep = append(keep, r)
		}
		if deleted == nil {
			t.Fatalf("no late event of partition 2 in %d", len(late))
		}
		s.recreateLate(t, keep)
		out, err := s.verify(t)
		d := wantDiff(t, out, err, "late_missing")
		src, _ := header(deleted, producer.HeaderSourceOffset)
		if fmt.Sprint(d["source"].(map[string]any)["offset"]) != src {
			t.Errorf("the missing late event is %v, want the one deleted (offset %s)", d["source"], src)
		}
		if out.count("late_events.missing") != 1 || out.count("unexplained") != 1 {
			t.Errorf("want one missing late event, nothing else:\n%s", out.text)
		}
	})
}

// TestVerifyOtherConfigVersions: a result whose state.config_version is
// no generation of the changelog (docs/verify.md#config-generations) is counted by version in the
// summary, with a warning that verify cannot recompute such windows.
func TestVerifyOtherConfigVersions(t *testing.T) {
	t.Parallel()
	s := tamperSetup(t)
	if out, _ := s.verify(t); out.summary["results_of_other_versions"] != nil {
		t.Fatalf("a healthy run of one config version counts other versions:\n%s", out.text)
	}
	r := s.readTopic(t, "calls-windows")[0]
	rewritten := &kgo.Record{Topic: "calls-windows", Key: r.Key, Value: r.Value,
		Headers: []kgo.RecordHeader{{Key: producer.HeaderConfigVersion, Value: []byte("7")}}}
	if err := s.client(t).ProduceSync(context.Background(), rewritten).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, err := s.verify(t)
	if err != nil {
		t.Fatalf("verify = %v, want nil (the result's values are right):\n%s", err, out.text)
	}
	if got := out.count("results_of_other_versions.7"); got != 1 {
		t.Errorf("results_of_other_versions.7 = %v, want 1:\n%s", got, out.text)
	}
	if !strings.Contains(out.stderr, "no live generation in the changelog") {
		t.Errorf("no warning about other config versions on stderr:\n%s", out.stderr)
	}
}

// TestVerifyPartialWindows: by_key, but a key's records spread over the
// partitions (the misuse aggregator_key_partition_conflicts_total counts):
// each partition's state is a part of the window, and verify reports the
// windows as partial.
func TestVerifyPartialWindows(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t, 3, fmt.Sprintf(verifyYaml, "by_key", "exactly_once"))
	first, second := verifyInput(3, 600, true)
	s.healthyRun(t, first, second, "")
	out, err := s.verify(t)
	wantDiff(t, out, err, "window_partial")
	if out.count("windows.partial") == 0 || out.count("windows.differing") != 0 {
		t.Errorf("want the differing windows counted as partial:\n%s", out.text)
	}
}

// TestVerifyUsage: bad flags and a bad config exit 2, naming the flag or
// the key.
func TestVerifyUsage(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t, 1, fmt.Sprintf(verifyYaml, "by_key", "exactly_once"))
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, strings.Replace(fmt.Sprintf(verifyYaml, "by_key", "exactly_once"), "size: 5s", "size: -5s", 1))
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	writeFile(t, missing, strings.Replace(fmt.Sprintf(verifyYaml, "by_key", "exactly_once"), "late_topic: calls-late", "late_topic: calls-gone", 1))
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "yesterday"}, "--from"},
		{[]string{"--from", "2030-01-02T00:00:00Z", "--to", "2030-01-01T00:00:00Z"}, "--from must be before --to"},
		{[]string{"--max-diffs", "-1"}, "--max-diffs"},
		{[]string{"--config", bad}, "window.size"},
		{[]string{"--config", missing}, "calls-gone"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"verify", "--config", s.path}, tt.args...), s.env, nil, &stdout, &stderr)
		if exitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("verify %v = %v (exit %d), want exit 2 naming %s", tt.args, err, exitCode(err), tt.want)
		}
	}
}

// recreateLate replaces the late topic's records with recs, as changed.
func (s *verifySetup) recreateLate(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	adm := kadm.NewClient(s.client(t))
	ctx := context.Background()
	if _, err := adm.DeleteTopics(ctx, "calls-late"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "calls-late"); err != nil {
		t.Fatal(err)
	}
	var out []*kgo.Record
	for _, r := range recs {
		out = append(out, &kgo.Record{Topic: "calls-late", Key: r.Key, Value: r.Value, Headers: r.Headers})
	}
	if err := s.client(t).ProduceSync(ctx, out...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyInterleaving: the late records of the partitions verify reads
// first are on time in its recomputation (the others have not raised the
// watermark yet), late live: the late topic's recorded watermark justifies
// that, and verify counts them, with the windows they change, as
// explained by timing (exit 0). The same late events with a watermark that
// does not justify them (below their window's cleanup time) are
// unexplained. Every late event's watermark is changed: which ones the
// live run's interleaving makes late, and which are late in the
// recomputation too, depends on the run's timing (changing the first of
// partition 0 alone failed under load, when that one was late in both).
func TestVerifyInterleaving(t *testing.T) {
	t.Parallel()
	s := tamperSetup(t)
	out, err := s.verify(t)
	if err != nil || out.count("late_events.explained_by_timing") == 0 || out.count("windows.explained_by_timing") == 0 {
		t.Fatalf("verify = %v, want nil with late events and windows explained by timing:\n%s", err, out.text)
	}
	late := s.readTopic(t, "calls-late")
	changed := map[string]bool{} // "partition/offset" of the late events changed
	for _, r := range late {
		for i, h := range r.Headers {
			if h.Key == producer.HeaderWatermark {
				r.Headers[i].Value = []byte(fmt.Sprint(verifyBase - 3_600_000))
				p, _ := header(r, producer.HeaderSourcePartition)
				off, _ := header(r, producer.HeaderSourceOffset)
				changed[p+"/"+off] = true
			}
		}
	}
	if len(changed) == 0 {
		t.Fatalf("no late event with a watermark in %d", len(late))
	}
	s.recreateLate(t, late)
	out, err = s.verify(t)
	d := wantDiff(t, out, err, "late_unexpected")
	src := d["source"].(map[string]any)
	if at := fmt.Sprint(src["partition"], "/", src["offset"]); !changed[at] {
		t.Errorf("the unjustified late event is %v, want one of those changed: %v", src, changed)
	}
}

// TestVerifyRange: --from and --to over a long stream whose record
// timestamps are its event times: only the windows wholly inside the
// range and closed by its end are compared; the one cut by --from is left
// out, as are those still open at --to.
func TestVerifyRange(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t, 3, fmt.Sprintf(verifyYaml, "by_key", "exactly_once"))
	first, _ := verifyInput(3, 3000, false) // 150 s of event time, 5 s windows
	a := s.start(t)
	s.produce(t, first)
	s.waitProcessed(t)
	a.stop(t)
	at := func(ms int64) string { return time.UnixMilli(verifyBase + ms).UTC().Format(time.RFC3339Nano) }
	out, err := s.verify(t, "--from", at(42_000), "--to", at(100_000))
	if err != nil {
		t.Fatalf("verify = %v, want nil:\n%s", err, out.text)
	}
	// Windows [45 s, 50 s) to [90 s, 95 s) of 6 keys: [40 s, 45 s) starts
	// before --from; [95 s, 100 s) is not closed by the watermark at --to
	// (99.95 s - 1 s of out-of-orderness, below its end + 2 s of lateness).
	if out.count("windows.compared") != 60 || out.count("windows.equal") != 60 || out.count("windows_left_out.starts_before_range") != 6 {
		t.Errorf("want 60 windows compared, 6 starting before the range:\n%s", out.text)
	}
	if n := out.count("records_read.calls"); n != (100_000-42_000)/50 {
		t.Errorf("verify read %v input records, want those of the range, %d", n, (100_000-42_000)/50)
	}
	if out.stderr != "" {
		t.Errorf("verify wrote to a stderr that is not a terminal:\n%s", out.stderr)
	}
}

// TestVerifyProgressOnATerminal: on a terminal, stderr shows the records
// read per topic; the summary still goes to stdout.
func TestVerifyProgressOnATerminal(t *testing.T) {
	t.Parallel()
	s := tamperSetup(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	seen := make(chan string)
	go func() {
		b, _ := io.ReadAll(ptmx) // until tty closes
		seen <- string(b)
	}()
	var stdout bytes.Buffer
	err = run(context.Background(), []string{"verify", "--config", s.path}, s.env, nil, &stdout, tty)
	tty.Close()
	screen := <-seen
	if err != nil || !strings.HasPrefix(stdout.String(), `{"summary":`) {
		t.Fatalf("verify = %v, stdout %q", err, stdout.String())
	}
	if !regexp.MustCompile(`verify: calls 604, calls-dlq 7, calls-late 4, calls-windows \d+ records read`).MatchString(screen) {
		t.Errorf("the terminal shows %q, want the records read per topic", screen)
	}
}

// TestVerifyWindowKinds: a healthy run of each window kind verifies
// clean; global windows never close, and are left out.
func TestVerifyWindowKinds(t *testing.T) {
	t.Parallel()
	const tumbling = "{type: tumbling, size: 5s, allowed_lateness: 2s}"
	kinds := map[string]struct{ window, watermark, counted string }{
		"sliding": {"{type: sliding, size: 10s, slide: 5s, allowed_lateness: 2s}", "", "windows.equal"},
		"session": {"{type: session, gap: 200ms, allowed_lateness: 2s}", "", "windows.equal"},
		"count":   {"{type: count, size: 10}", "", "windows.equal"},
		"global":  {"{type: global, early_firings: {every: 10s, time: event}}", "", "windows_left_out.never_closes"},
		// Each partition's own state and watermark, in the service and in
		// the recomputation.
		"tumbling_scope_partition": {tumbling, ", scope: partition", "windows.equal"},
	}
	for name, k := range kinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			yaml := strings.NewReplacer(tumbling, k.window, "max_out_of_orderness: 1s}", "max_out_of_orderness: 1s"+k.watermark+"}").
				Replace(fmt.Sprintf(verifyYaml, "by_key", "exactly_once"))
			s := newVerifySetup(t, 3, yaml)
			first, second := verifyInput(3, 600, false)
			s.healthyRun(t, first, second, "")
			out, err := s.verify(t)
			if err != nil {
				t.Fatalf("verify = %v, want nil:\n%s", err, out.text)
			}
			if out.count(k.counted) == 0 {
				t.Errorf("want %s above 0:\n%s", k.counted, out.text)
			}
		})
	}
}

// TestVerifyAvro: Avro input through a Schema Registry (srfake) and Avro
// results, by key and through the repartition stage: a healthy run
// verifies clean, and a result re-encoded with a wrong count is found,
// decoded, as the window that differs.
func TestVerifyAvro(t *testing.T) {
	t.Parallel()
	for _, partitioning := range []string{"by_key", "repartition"} {
		t.Run(partitioning, func(t *testing.T) {
			t.Parallel()
			testVerifyAvro(t, partitioning)
		})
	}
}

func testVerifyAvro(t *testing.T, partitioning string) {
	toAvro, encode := avroVerifyInput(t)
	s := newVerifySetup(t, 3, toAvro.Replace(fmt.Sprintf(verifyYaml, partitioning, "exactly_once")))
	first, second := verifyInput(3, 600, false)
	first, second = encode(first), encode(second)
	s.healthyRun(t, first, second, "")
	out, err := s.verify(t)
	if err != nil || out.count("windows.equal") < 5 {
		t.Fatalf("verify = %v, want nil with windows compared:\n%s", err, out.text)
	}
	results := avro.MustParse(producer.AvroSchema(s.cfg))
	r := s.readTopic(t, "calls-windows")[0]
	var v map[string]any
	if err := avro.Unmarshal(results, r.Value[5:], &v); err != nil {
		t.Fatal(err)
	}
	v["count"] = v["count"].(int64) + 1
	body, err := avro.Marshal(results, v)
	if err != nil {
		t.Fatal(err)
	}
	tampered := &kgo.Record{Topic: "calls-windows", Key: r.Key, Value: append(slices.Clone(r.Value[:5]), body...)}
	if err := s.client(t).ProduceSync(context.Background(), tampered).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, err = s.verify(t)
	d := wantDiff(t, out, err, "window_differs")
	if got := d["found"].(map[string]any)["count"]; got != float64(v["count"].(int64)) {
		t.Errorf("the difference's found count is %v, want %v", got, v["count"])
	}
}

// TestVerifyNoDeadLetterTopic: with sink.dead_letter_topic null the
// service only counts dead letters; verify reads no such topic and counts
// its own as not written, not missing.
func TestVerifyNoDeadLetterTopic(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t, 3, strings.Replace(fmt.Sprintf(verifyYaml, "by_key", "exactly_once"), "dead_letter_topic: calls-dlq", "dead_letter_topic: null", 1))
	first, second := verifyInput(3, 600, false)
	s.healthyRun(t, first, second, "")
	out, err := s.verify(t)
	if err != nil || out.count("dead_letters.not_written") != 7 {
		t.Fatalf("verify = %v, want nil with 7 dead letters not written:\n%s", err, out.text)
	}
}

// TestVerifyLaggingPartition: partition 2's producer lags 20 s of event
// time and the others have stragglers 4 to 10 s behind their own
// partition, all produced at once, so the service and verify read the
// partitions in other interleavings: the lagging partition holds the
// watermark back in both, nothing is late, and verify finds the windows
// equal (exit 0).
func TestVerifyLaggingPartition(t *testing.T) {
	t.Parallel()
	for _, partitioning := range []string{"by_key", "repartition"} {
		t.Run(partitioning, func(t *testing.T) {
			t.Parallel()
			s := newVerifySetup(t, 3, fmt.Sprintf(verifyYaml, partitioning, "exactly_once"))
			rng := rand.New(rand.NewPCG(17, 4))
			var recs []verifyRecord
			for i := range 1500 {
				sid := rng.IntN(12)
				p := int32(sid % 3)
				if partitioning == "repartition" {
					p = int32(rng.IntN(3))
				}
				ts := verifyBase + int64(i)*25
				switch {
				case p == 2:
					ts -= 20_000
				case i%29 == 0:
					ts -= 4_000 + rng.Int64N(6_000)
				}
				recs = append(recs, verifyRecord{p, fmt.Sprintf(`{"sid":"u%d","t":%d,"d":%d}`, sid, ts, i%10), 0})
			}
			a := s.start(t)
			s.produce(t, recs)
			s.waitProcessed(t)
			a.stop(t)
			out, err := s.verify(t)
			if err != nil || out.count("windows.equal") < 30 {
				t.Fatalf("verify = %v, want nil with windows compared:\n%s", err, out.text)
			}
		})
	}
}
