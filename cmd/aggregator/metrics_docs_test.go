package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMetricsDocumented runs `run` on an empty topic of kfake, in each
// delivery mode with the repartition stage (examples/local.yaml groups by
// a field) and exactly_once by_key, and compares the aggregator_*
// families on /metrics with the metric table of docs/operations.md, both
// ways, once the service is ready (before any record) and again once
// records went through: every family served is in the table, for that
// delivery mode and format (rows marked "`at_least_once` only" are not
// served with exactly_once, nor "Schema Registry formats only" with JSON:
// internal/registry's tests cover that metric), and every row that
// appears "at start" is served from the start. Rows that appear "once"
// something happened may be served or not.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	runs := []struct{ delivery, partitioning string }{
		{"exactly_once", "repartition"}, {"at_least_once", "repartition"}, {"exactly_once", "by_key"},
	}
	rows := metricRows(string(doc))
	if len(rows) < 40 {
		t.Fatalf("docs/operations.md has %d metric rows, want its whole table", len(rows))
	}
	for _, r := range runs {
		t.Run(r.delivery+"/"+r.partitioning, func(t *testing.T) {
			check := func(when string, got []string) {
				t.Helper()
				for _, name := range got {
					switch row, ok := rows[name]; {
					case !ok:
						t.Errorf("%s: /metrics serves %s, which docs/operations.md does not document", when, name)
					case !row.servedWith(r.delivery):
						t.Errorf("%s: /metrics serves %s with %s and JSON input, which docs/operations.md says appears %q", when, name, r.delivery, row.appears)
					}
				}
				for name, row := range rows {
					if row.atStart() && row.servedWith(r.delivery) && !slices.Contains(got, name) {
						t.Errorf("%s: docs/operations.md says %s appears %q; /metrics does not serve it with %s", when, name, row.appears, r.delivery)
					}
				}
			}
			before, after := metricsBeforeAndAfter(t, "AGGREGATOR_DELIVERY="+r.delivery, "AGGREGATOR_SOURCE_PARTITIONING="+r.partitioning)
			check("ready", before)
			check("after records", after)
		})
	}
}

// A metricRow is a row of the metric table: when its family appears.
type metricRow struct{ appears string }

// atStart reports whether the row's family is served from the start.
func (r metricRow) atStart() bool { return strings.HasPrefix(r.appears, "at start") }

// servedWith reports whether the family may be served with delivery and
// JSON input.
func (r metricRow) servedWith(delivery string) bool {
	return !(delivery != "at_least_once" && strings.Contains(r.appears, "`at_least_once` only") ||
		strings.Contains(r.appears, "Schema Registry formats only"))
}

var metricRowRE = regexp.MustCompile("(?m)^\\| `(aggregator_[a-z_]+)` \\|[^|\\n]*\\|[^|\\n]*\\| ([^|\\n]*) \\|")

// metricRows returns the rows of the metric table by family name.
func metricRows(doc string) map[string]metricRow {
	rows := map[string]metricRow{}
	for _, m := range metricRowRE.FindAllStringSubmatch(doc, -1) {
		rows[m[1]] = metricRow{appears: m[2]}
	}
	return rows
}

// metricsBeforeAndAfter runs the service against a fresh kfake cluster
// until its ready line and returns the aggregator_* family names /metrics
// declares then, and again once the records of examples/calls.csv went
// through (every one counted in aggregator_records_total).
func metricsBeforeAndAfter(t *testing.T, env ...string) (before, after []string) {
	ctx, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	out, done, brokers := runOnKfakeAt(t, ctx, append(env, "AGGREGATOR_LOG_FORMAT=json")...)
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v\n%s", err, out.String())
		}
	}()
	url := waitFor(t, ctx, out, regexp.MustCompile(`"metrics_url":"([^"]+)"`))
	before, _ = scrape(t, ctx, url)
	lines, err := os.ReadFile("../../examples/calls.csv")
	if err != nil {
		t.Fatal(err)
	}
	records := strings.Split(strings.TrimSpace(string(lines)), "\n")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.DefaultProduceTopic("calls"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, line := range records {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(line)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for {
		names, text := scrape(t, ctx, url)
		if processed(text) >= len(records) {
			return before, names
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the %d records not processed within a minute:\n%s", len(records), text)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// scrape returns the aggregator_* family names /metrics at url declares,
// sorted, and its text.
func scrape(t *testing.T, ctx context.Context, url string) ([]string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for line := range strings.Lines(string(body)) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "aggregator_") {
			names = append(names, f[2])
		}
	}
	slices.Sort(names)
	return names, string(body)
}

// processed sums aggregator_records_total in a /metrics text.
func processed(text string) int {
	n := 0.0
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, "aggregator_records_total{"); ok {
			if _, v, ok := strings.Cut(rest, "} "); ok {
				f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				n += f
			}
		}
	}
	return int(n)
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
	out, done, _ = runOnKfakeAt(t, ctx, env...)
	return out, done
}

// runOnKfakeAt is runOnKfake, returning the cluster's address too.
func runOnKfakeAt(t *testing.T, ctx context.Context, env ...string) (out *lockedBuffer, done <-chan error, broker string) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "calls"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	env = append([]string{"AGGREGATOR_SOURCE_BROKERS=" + kc.ListenAddrs()[0], "AGGREGATOR_HTTP_LISTEN=127.0.0.1:0"}, env...)
	out = new(lockedBuffer)
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"run", "--config", "../../examples/local.yaml"}, env, nil, out, out) }()
	return out, errc, kc.ListenAddrs()[0]
}
