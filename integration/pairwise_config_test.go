package integration

import (
	"fmt"
	"strings"
	"time"

	"aggregator/internal/config"
)

// The config of a pairwise case, generation 1 and, with a change, 2 (at
// state.config_version 2). Durations are in units of the stream's event
// time (pairCase.scale): 1000 units are a second, or for calendar
// windows a day. Every config keeps the records of ok = 1; a change of
// the filter keeps those of c = web instead.

// generations is how many configs the case runs: two with a change.
func (c pairCase) generations() int {
	if c.change == "none" {
		return 1
	}
	return 2
}

// scale is the ms of one unit of event time.
func (c pairCase) scale() int64 {
	if c.window == "calendar" {
		return 86_400
	}
	return 1
}

// pairBerlin is the zone of the calendar windows; the stream starts on
// Wednesday 27 March 2030 there, and crosses the 23-hour 31 March.
const pairBerlin = "Europe/Berlin"

// streamBase is the event time, in ms, of the stream's unit 0.
func (c pairCase) streamBase() int64 {
	if c.window != "calendar" {
		return base
	}
	zone, err := time.LoadLocation(pairBerlin)
	if err != nil {
		panic(err)
	}
	return time.Date(2030, 3, 27, 0, 0, 0, 0, zone).UnixMilli()
}

// spread reports whether the stream spreads keys over the partitions:
// with the repartition stage (auto is repartition for a key of fields).
func (c pairCase) spread() bool { return c.partitioning != "by_key" }

// registry reports whether the case needs a schema registry.
func (c pairCase) registry() bool {
	return c.format != "json" && c.format != "csv" || c.results == config.FormatAvro
}

// eventEarly reports whether windows fire early by event time.
func (c pairCase) eventEarly() bool { return c.early == "event" }

// units is n units of event time as a YAML duration.
func (c pairCase) units(n int64) string { return fmt.Sprintf("%dms", n*c.scale()) }

// windowYAML is the window of generation gen, with its early firings.
func (c pairCase) windowYAML(gen int) string {
	changed := gen == 2 && c.change == "window"
	late := ", allowed_lateness: " + c.units(2000)
	var w string
	switch c.window {
	case "tumbling":
		w = "type: tumbling, size: " + c.units(pick(changed, 2000, 1000)) + late
	case "sliding":
		w = "type: sliding, size: " + c.units(pick(changed, 3000, 2000)) + ", slide: " + c.units(1000) + late
	case "session":
		w = "type: session, gap: " + c.units(pick(changed, 600, 300)) + late
	case "count":
		w = fmt.Sprintf("type: count, size: %d", pick(changed, 7, 5))
	case "global":
		w = "type: global"
		if changed { // a global window's shape is its kind
			w = "type: tumbling, size: " + c.units(2000) + late
		}
	case "calendar":
		w = "type: tumbling, calendar: " + map[bool]string{false: "day", true: "week"}[changed] + ", timezone: " + pairBerlin + late
	}
	switch c.early {
	case "event":
		w += ", early_firings: {every: " + c.units(500) + ", time: event}"
	case "processing":
		w += ", early_firings: {every: 100ms, time: processing}"
	}
	return "{" + w + "}"
}

func pick(cond bool, yes, no int64) int64 {
	if cond {
		return yes
	}
	return no
}

// aggregatesYAML are generation gen's aggregates: count and sum, or
// every function (count of a field too); a change adds one.
func (c pairCase) aggregatesYAML(gen int) string {
	aggs := []string{"{name: calls, fn: count}", "{name: total, fn: sum, field: d}"}
	if c.aggregates == "all" {
		aggs = append(aggs, "{name: lo, fn: min, field: d}", "{name: hi, fn: max, field: d}", "{name: mean, fn: avg, field: d}",
			"{name: first_d, fn: first, field: d}", "{name: last_d, fn: last, field: d}", "{name: regions, fn: count_distinct, field: r}",
			"{name: p90, fn: quantile, field: d, q: 0.9}", "{name: top_r, fn: top_k, field: r, k: 2}", "{name: with_d, fn: count, field: d}")
	}
	if gen == 2 && c.change == "aggregate" {
		aggs = append(aggs, "{name: longest, fn: max, field: d}")
	}
	return "\n  - " + strings.Join(aggs, "\n  - ")
}

// yaml is the config of generation gen; registryURL is the schema
// registry's, for the cases that need one.
func (c pairCase) yaml(gen int, registryURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "source:\n  format: %s\n  partitioning: %s\n  key: [sid]\n  timestamp: {field: t, layout: unix_ms}\n", c.format, c.partitioning)
	if c.registry() {
		fmt.Fprintf(&b, "  schema_registry: {url: '%s'}\n", registryURL)
	}
	if c.format == "csv" {
		fmt.Fprintf(&b, "  csv: {columns: [%s]}\n", strings.Join(pairCSVColumns, ", "))
	}
	if gen == 2 && c.change == "filter" {
		b.WriteString("  filter: [{field: c, equals: web}]\n")
	} else {
		b.WriteString("  filter: [{field: ok, equals: 1}]\n")
	}
	fmt.Fprintf(&b, "watermark: {max_out_of_orderness: %s, scope: %s}\n", c.units(1000), c.scope)
	fmt.Fprintf(&b, "window: %s\naggregates:%s\n", c.windowYAML(gen), c.aggregatesYAML(gen))
	fmt.Fprintf(&b, "sink: {results_topic: %s, late_topic: %s, dead_letter_topic: %s, linger: 1ms, format: %s}\n", resultsTopic, lateTopic, dlqTopic, c.results)
	fmt.Fprintf(&b, "delivery: %s\nstate: {config_version: %d, standby_replicas: %d", c.delivery, gen, c.standby)
	if c.delivery == "exactly_once" {
		// A paused instance's transaction holds the next owner's restore
		// back until the brokers abort it: keep that short.
		b.WriteString(", transaction_timeout: 3s")
	}
	b.WriteString("}\n")
	return b.String()
}

// pairEnv points a config at the brokers, the input topic and the group.
func pairEnv(brokers []string) func(string) string {
	env := map[string]string{
		"AGGREGATOR_SOURCE_BROKERS": strings.Join(brokers, ","),
		"AGGREGATOR_SOURCE_TOPICS":  inTopic,
		"AGGREGATOR_SOURCE_GROUP":   "aggregator-test",
	}
	return func(k string) string { return env[k] }
}
