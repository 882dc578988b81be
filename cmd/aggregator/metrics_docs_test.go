package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestMetricsDocumented runs `run` on an empty topic of kfake, in each
// delivery mode with the repartition stage (examples/local.yaml groups by
// a field) and exactly_once by_key, and compares the aggregator_* families on /metrics once it
// is ready (before any record) with the metric table of docs/operations.md:
// every documented metric is there from the start, and every one there is
// documented. Rows marked "`at_least_once` only" are left out of the
// exactly_once run, and rows marked "Schema Registry formats only" out of
// both (the run reads JSON; internal/registry's tests cover its metric),
// and rows of "series per source partition, once known" may be there or
// not yet (their series appear once a source partition is known: a
// marker read, a by_key partition assigned or published).
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	runs := []struct{ delivery, partitioning string }{
		{"exactly_once", "repartition"}, {"at_least_once", "repartition"}, {"exactly_once", "by_key"},
	}
	for _, r := range runs {
		t.Run(r.delivery+"/"+r.partitioning, func(t *testing.T) {
			want := documentedMetrics(string(doc), r.delivery)
			if len(want) < 20 {
				t.Fatalf("docs/operations.md documents %d metrics for %s, want its whole table", len(want), r.delivery)
			}
			got := metricsWhenReady(t, "AGGREGATOR_DELIVERY="+r.delivery, "AGGREGATOR_SOURCE_PARTITIONING="+r.partitioning)
			// Stage 1's first markers, and by_key's first published
			// watermarks, are produced and fetched around the ready line:
			// the Kafka clients' families of that work (documented as
			// appearing once a client has done it), and the families whose
			// series are the source partitions, may be there or not yet.
			later := perSourceMetrics(string(doc))
			got = slices.DeleteFunc(got, func(name string) bool {
				return strings.HasPrefix(name, "aggregator_kafka_") && !slices.Contains(want, name) || slices.Contains(later, name)
			})
			if !slices.Equal(got, want) {
				t.Errorf("/metrics before any record has\n%s\ndocs/operations.md documents\n%s",
					strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

var metricRowRE = regexp.MustCompile("(?m)^\\| `(aggregator_[a-z_]+)` \\|([^\\n]*)$")

// perSourceRow marks the rows of families whose series are source
// partitions: they appear once one is known (stage 2 read a marker, a
// by_key partition was assigned or published), around the ready line or
// after it.
const perSourceRow = "series per source partition, once known"

// perSourceMetrics returns the names of the rows marked perSourceRow.
func perSourceMetrics(doc string) []string {
	var names []string
	for _, m := range metricRowRE.FindAllStringSubmatch(doc, -1) {
		if strings.Contains(m[2], perSourceRow) {
			names = append(names, m[1])
		}
	}
	return names
}

// documentedMetrics returns the metric names of the table, sorted; rows
// of series that exist only once the repartition stage has read a marker
// are left out.
func documentedMetrics(doc, delivery string) []string {
	var names []string
	for _, m := range metricRowRE.FindAllStringSubmatch(doc, -1) {
		if delivery != "at_least_once" && strings.Contains(m[2], "`at_least_once` only") ||
			strings.Contains(m[2], "Schema Registry formats only") ||
			strings.Contains(m[2], perSourceRow) {
			continue
		}
		names = append(names, m[1])
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// metricsWhenReady runs the service against a fresh kfake cluster until its
// ready line, and returns the aggregator_* family names /metrics declares.
func metricsWhenReady(t *testing.T, env ...string) []string {
	ctx, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	out, done := runOnKfake(t, ctx, append(env, "AGGREGATOR_LOG_FORMAT=json")...)
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v\n%s", err, out.String())
		}
	}()
	url := waitFor(t, ctx, out, regexp.MustCompile(`"metrics_url":"([^"]+)"`))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var names []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "aggregator_") {
			names = append(names, f[2])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// TestRunLogs: at info, `run` in the console format writes a start line,
// the warning of its http.listen on loopback (127.0.0.1:0 here: validate
// prints the same), its partitions' assignment, a ready line and, at
// SIGTERM, a stopped line; none of the Kafka client's own info messages;
// no ANSI colours on a stdout that is not a terminal; and a millisecond
// time on every line.
func TestRunLogs(t *testing.T) {
	ctx, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	out, done := runOnKfake(t, ctx)
	waitFor(t, ctx, out, regexp.MustCompile(`(INF ready)`))
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	wants := []*regexp.Regexp{
		regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} INF starting brokers=\["127\.0\.0\.1:\d+"\] delivery=exactly_once group=calls-local late_topic=calls-late results_topic=calls-windows topics=\["calls"\] version=dev$`),
		regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} WRN config accepted with a warning warning="http\.listen = \\"127\.0\.0\.1:0\\": a loopback address answers only on this host: probes and scrapes from elsewhere fail; use :PORT to listen on every interface"$`),
		regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} INF partitions rebalanced assigned="calls\[0,1\] calls-local-repartition\[0,1\]" component=consumer held="calls\[0,1\] calls-local-repartition\[0,1\]" revoked=none$`),
		regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} INF ready metrics_url=http://127\.0\.0\.1:\d+/metrics partitions=4 restored_records=0$`),
		regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} INF stopped$`),
	}
	if len(lines) != len(wants) {
		t.Fatalf("run logged %d lines, want %d (start, warning, assignment, ready, stopped):\n%s", len(lines), len(wants), out.String())
	}
	for i, re := range wants {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d = %q, want it to match %s", i+1, lines[i], re)
		}
	}
}

// runOnKfake starts `run --config examples/local.yaml` (console logs at
// info) against a fresh kfake cluster with the topic calls, with env's
// overrides on top, until ctx ends; done has run's error then.
func runOnKfake(t *testing.T, ctx context.Context, env ...string) (out *lockedBuffer, done <-chan error) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "calls"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	env = append([]string{"AGGREGATOR_SOURCE_BROKERS=" + kc.ListenAddrs()[0], "AGGREGATOR_HTTP_LISTEN=127.0.0.1:0"}, env...)
	out = new(lockedBuffer)
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"run", "--config", "../../examples/local.yaml"}, env, nil, out, out) }()
	return out, errc
}
