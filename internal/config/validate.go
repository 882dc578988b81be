package config

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// validate checks everything but the Kafka keys and returns every
// problem (docs/configuration.md#rules-for-every-key: validate names every error found), in the order of
// the keys in Config, after the unknown keys decoding found: each
// section's first (a section's later checks assume its earlier ones
// passed) and each aggregate's first, then every other key present where
// it does not apply.
func (c *Config) validate(src *sources) error {
	errs := src.more
	src.more = nil
	for _, check := range []func(*sources) *KeyError{
		c.validateSource, c.validateCSV, c.validateKey, c.validateTimestamp, c.validateFilter,
		c.validateTLS, c.validateSASL, c.validateRegistry, c.validateWatermark, c.validateWindow,
		c.validateAggregates, c.validateSink, c.validateService, c.validateState,
	} {
		errs = append(errs, check(src))
		errs = append(errs, src.more...)
		src.more = nil
	}
	return collect(append(errs, c.inapplicablePresent(src)...))
}

// inapplicable returns why key does not apply to c ("" if it does): such a
// key is an error when present, to catch typos and misunderstandings, and
// is left out of YAML. Keys in aggregates carry their index.
func (c *Config) inapplicable(key string) string {
	var i int
	var field string
	if reason := c.inapplicableWindowKind(key); reason != "" {
		return reason
	}
	switch {
	case strings.HasPrefix(key, "source.csv") && c.Source.Format != "csv":
		return "applies only to source.format csv"
	case strings.HasPrefix(key, "source.schema_registry") && !c.UsesRegistry():
		return "applies only to source.format avro, protobuf or json_schema, or sink.format avro"
	case strings.HasPrefix(key, "source.schema_registry.tls") && !strings.HasPrefix(c.Source.SchemaRegistry.URL, "https://"):
		return "applies only to an https:// source.schema_registry.url"
	case strings.HasPrefix(key, "source.tls.") && key != "source.tls.enabled" && !c.Source.TLS.Enabled:
		return "applies only when source.tls.enabled is true"
	case strings.HasPrefix(key, "source.sasl.") && key != "source.sasl.mechanism" && c.Source.SASL.Mechanism == "":
		return "applies only when source.sasl.mechanism is set"
	case strings.HasPrefix(key, "source.sasl.oauth") && c.Source.SASL.Mechanism != MechanismOAuthBearer:
		return "applies only to source.sasl.mechanism OAUTHBEARER"
	case strings.HasPrefix(key, "source.sasl.oauth.") && key != "source.sasl.oauth.token_file" && key != "source.sasl.oauth.token_endpoint" &&
		!strings.HasPrefix(key, "source.sasl.oauth.extensions") && c.Source.SASL.OAuth.TokenEndpoint == "":
		return "applies only with source.sasl.oauth.token_endpoint"
	case strings.HasPrefix(key, "source.sasl.aws") && c.Source.SASL.Mechanism != MechanismAWSMSKIAM:
		return "applies only to source.sasl.mechanism AWS_MSK_IAM"
	case (key == "source.sasl.username" || key == "source.sasl.password" || key == "source.sasl.password_file") &&
		(c.Source.SASL.Mechanism == MechanismOAuthBearer || c.Source.SASL.Mechanism == MechanismAWSMSKIAM):
		return "applies only to source.sasl.mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
	case key == "watermark.marker_field" && c.Watermark.Strategy != "punctuated":
		return "applies only to watermark.strategy punctuated"
	case key == "window.slide" && c.Window.Type != "sliding" && c.Window.Type != "count":
		return "applies only to window.type sliding"
	case (key == "window.size" || key == "window.offset") && c.Window.Type == "session":
		return "does not apply to window.type session (its windows are per key: see window.gap)"
	case (key == "window.gap" || key == "window.gap_field") && c.Window.Type != "session":
		return "applies only to window.type session"
	case (key == "state.repartition_topic" || key == "state.repartition_partitions" || key == "state.repartition_format") && c.Source.ByKey():
		return "applies only to source.partitioning repartition"
	case key == "state.watermark_topic" && !c.PublishesWatermarks():
		return "applies only to source.partitioning by_key with watermark.scope global"
	case key == "state.transaction_timeout" && c.Delivery != "exactly_once":
		return "applies only to delivery exactly_once"
	}
	if n, _ := fmt.Sscanf(key, "aggregates[%d].%s", &i, &field); n < 2 || i < 0 || i >= len(c.Aggregates) {
		return ""
	}
	switch fn := c.Aggregates[i].Fn; {
	case field == "q" && fn != "quantile":
		return "applies only to fn quantile"
	case field == "k" && fn != "top_k":
		return "applies only to fn top_k"
	}
	return ""
}

// checkApplies returns an error for the first of keys that is present but
// does not apply.
func (c *Config) checkApplies(src *sources, keys ...string) *KeyError {
	for _, key := range keys {
		if reason := c.inapplicable(key); reason != "" && src.present[key] {
			return &KeyError{Key: key, Reason: reason}
		}
	}
	return nil
}

// inapplicablePresent are the errors of every present key that does not
// apply, by key.
func (c *Config) inapplicablePresent(src *sources) []*KeyError {
	var errs []*KeyError
	for _, key := range slices.Sorted(maps.Keys(src.present)) {
		if reason := c.inapplicable(key); reason != "" {
			errs = append(errs, &KeyError{Key: key, Reason: reason})
		}
	}
	return errs
}

func (c *Config) validateSource(*sources) *KeyError {
	if err := oneOf("source.start_offset", c.Source.StartOffset, "earliest", "latest"); err != nil {
		return err
	}
	if err := oneOf("source.format", c.Source.Format, "json", "csv", FormatAvro, FormatProtobuf, FormatJSONSchema); err != nil {
		return err
	}
	if err := oneOf("source.partitioning", c.Source.Partitioning, "auto", "by_key", "repartition"); err != nil {
		return err
	}
	if id := c.Source.InstanceID; id != "" && checkTopicName(id) != "" {
		// Kafka checks group.instance.id with its topic name rule.
		return &KeyError{Key: "source.instance_id", Value: id,
			Reason: "must be 1 to 249 characters from a-z, A-Z, 0-9, '.', '_' and '-' (a pod name is one), or \"\" (off)"}
	}
	if st := c.Source.SessionTimeout; st < time.Second || st > maxSessionTimeout {
		return &KeyError{Key: "source.session_timeout", Value: formatDuration(st),
			Reason: "must be between 1s and 30m (the brokers accept 6s to 30m by default: group.min/max.session.timeout.ms)"}
	}
	return nil
}

func (c *Config) validateCSV(src *sources) *KeyError {
	if err := c.checkApplies(src, "source.csv", "source.csv.columns", "source.csv.delimiter"); err != nil || c.Source.Format != "csv" {
		return err
	}
	csv := c.Source.CSV
	if len(csv.Columns) == 0 {
		return &KeyError{Key: "source.csv.columns", Value: "[]", Reason: "required for source.format csv"}
	}
	if err := names("source.csv.columns", csv.Columns); err != nil {
		return err
	}
	if r, size := utf8.DecodeRuneInString(csv.Delimiter); size == 0 || size != len(csv.Delimiter) ||
		r == utf8.RuneError || r == '"' || r == '\r' || r == '\n' {
		return &KeyError{Key: "source.csv.delimiter", Value: csv.Delimiter, Reason: `must be exactly one character, not '"' or a line break`}
	}
	return nil
}

// names checks that a list of names has no empty or repeated item.
func names(key string, list []string) *KeyError {
	for i, name := range list {
		item := fmt.Sprintf("%s[%d]", key, i)
		if name == "" {
			return &KeyError{Key: item, Reason: "must not be empty"}
		}
		if j := slices.Index(list, name); j < i {
			return &KeyError{Key: item, Value: name, Reason: fmt.Sprintf("repeats %s[%d]", key, j)}
		}
	}
	return nil
}

// field checks that a record field name can be found: not empty, and for
// CSV one of the columns (or special, "$key" or "$timestamp", if not "").
func (c *Config) field(key, name, special string) *KeyError {
	switch {
	case name == "":
		return &KeyError{Key: key, Reason: "required: a record field name"}
	case c.Source.Format != "csv" || name == special || slices.Contains(c.Source.CSV.Columns, name):
		return nil
	}
	return &KeyError{Key: key, Value: name, Reason: "is not one of source.csv.columns " + fmt.Sprint(c.Source.CSV.Columns)}
}

func (c *Config) validateKey(*sources) *KeyError {
	for i, name := range c.Source.Key {
		if err := c.field(fmt.Sprintf("source.key[%d]", i), name, "$key"); err != nil {
			return err
		}
	}
	return names("source.key", c.Source.Key)
}

// unixLayouts are the timestamp layouts that are not Go layouts.
var unixLayouts = []string{"unix_s", "unix_ms", "unix_us", "unix_ns", "rfc3339"}

func (c *Config) validateTimestamp(*sources) *KeyError {
	ts := c.Source.Timestamp
	if err := c.field("source.timestamp.field", ts.Field, "$timestamp"); err != nil {
		return err
	}
	if reason := checkLayout(ts.Layout); reason != "" {
		return &KeyError{Key: "source.timestamp.layout", Value: ts.Layout, Reason: reason}
	}
	if _, err := time.LoadLocation(ts.Timezone); err != nil || ts.Timezone == "" || ts.Timezone == "Local" {
		return &KeyError{Key: "source.timestamp.timezone", Value: ts.Timezone, Reason: "must be an IANA time zone name, such as UTC or Europe/Berlin"}
	}
	return nil
}

// checkLayout returns why layout cannot parse event times, or "". A Go
// layout must parse back what it formats, and keep the date. It is tried on
// a fixed time, not the clock, so the answer never changes.
func checkLayout(layout string) string {
	if slices.Contains(unixLayouts, layout) {
		return ""
	}
	const help = "must be one of " + "unix_s, unix_ms, unix_us, unix_ns, rfc3339 or a Go layout with a date, such as 2006-01-02 15:04:05"
	ref := time.Date(2031, time.November, 23, 19, 47, 58, 123456789, time.UTC)
	text := ref.Format(layout)
	parsed, err := time.Parse(layout, text)
	if err != nil || parsed.Format(layout) != text || parsed.Year() != ref.Year() || parsed.YearDay() != ref.YearDay() {
		return help
	}
	return ""
}

func (c *Config) validateFilter(src *sources) *KeyError {
	for i, f := range c.Source.Filter {
		key := fmt.Sprintf("source.filter[%d]", i)
		if err := c.field(key+".field", f.Field, ""); err != nil {
			return err
		}
		if !src.present[key+".equals"] {
			return &KeyError{Key: key + ".equals", Reason: "required: the value to keep"}
		}
	}
	return nil
}

func (c *Config) validateTLS(src *sources) *KeyError {
	tls := c.Source.TLS
	if err := c.checkApplies(src, "source.tls.ca_file", "source.tls.cert_file", "source.tls.key_file", "source.tls.insecure_skip_verify"); err != nil {
		return err
	}
	for _, f := range []struct{ key, path string }{
		{"source.tls.ca_file", tls.CAFile}, {"source.tls.cert_file", tls.CertFile}, {"source.tls.key_file", tls.KeyFile},
	} {
		if err := readable(f.key, f.path); err != nil {
			return err
		}
	}
	if (tls.CertFile == "") != (tls.KeyFile == "") {
		return &KeyError{Key: "source.tls.key_file", Value: tls.KeyFile, Reason: "source.tls.cert_file and source.tls.key_file go together"}
	}
	return nil
}

// readable checks that the file at path, if set, can be opened.
func readable(key, path string) *KeyError {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return &KeyError{Key: key, Value: path, Reason: fmt.Sprintf("cannot read: %v", err)}
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.IsDir() {
		return &KeyError{Key: key, Value: path, Reason: "must be a file"}
	}
	return nil
}

func (c *Config) validateSASL(src *sources) *KeyError {
	sasl := c.Source.SASL
	if err := oneOf("source.sasl.mechanism", sasl.Mechanism, "", MechanismPlain, MechanismScram256, MechanismScram512,
		MechanismOAuthBearer, MechanismAWSMSKIAM); err != nil {
		return err
	}
	const oauth = "source.sasl.oauth"
	if err := c.checkApplies(src, "source.sasl.username", "source.sasl.password", "source.sasl.password_file",
		oauth, oauth+".token_file", oauth+".token_endpoint", oauth+".client_id", oauth+".client_secret",
		oauth+".client_secret_file", oauth+".scope", oauth+".ca_file", oauth+".extensions",
		"source.sasl.aws", "source.sasl.aws.region"); err != nil {
		return err
	}
	switch sasl.Mechanism {
	case "":
		return nil
	case MechanismOAuthBearer:
		return c.validateOAuth()
	case MechanismAWSMSKIAM:
		if sasl.AWS.Region == "" {
			return &KeyError{Key: "source.sasl.aws.region", Reason: "required with source.sasl.mechanism AWS_MSK_IAM: the cluster's AWS region, such as eu-west-1 (or set AWS_REGION)"}
		}
		return nil
	}
	switch {
	case sasl.Username == "":
		return &KeyError{Key: "source.sasl.username", Reason: "required with source.sasl.mechanism " + sasl.Mechanism}
	case sasl.Password != "" && sasl.PasswordFile != "":
		return &KeyError{Key: "source.sasl.password_file", Value: sasl.PasswordFile, Reason: "set source.sasl.password or source.sasl.password_file, not both"}
	case sasl.Password == "" && sasl.PasswordFile == "":
		return &KeyError{Key: "source.sasl.password", Reason: "required with source.sasl.mechanism " + sasl.Mechanism + " (or source.sasl.password_file)"}
	}
	return nil
}

// validateOAuth checks OAUTHBEARER's token source: a file, or an https
// token endpoint with a client id and one secret.
func (c *Config) validateOAuth() *KeyError {
	const key = "source.sasl.oauth"
	o := c.Source.SASL.OAuth
	switch {
	case o.TokenFile == "" && o.TokenEndpoint == "":
		return &KeyError{Key: key + ".token_endpoint", Reason: "required with source.sasl.mechanism OAUTHBEARER: the OAuth 2.0 token endpoint (client credentials), or " + key + ".token_file"}
	case o.TokenFile != "" && o.TokenEndpoint != "":
		return &KeyError{Key: key + ".token_file", Value: o.TokenFile, Reason: "set " + key + ".token_file or " + key + ".token_endpoint, not both"}
	}
	for name, ext := range o.Extensions {
		if reason := checkExtension(name, ext); reason != "" {
			return &KeyError{Key: key + ".extensions." + name, Value: ext, Reason: reason}
		}
	}
	if o.TokenFile != "" {
		return readable(key+".token_file", o.TokenFile)
	}
	if u, err := url.Parse(o.TokenEndpoint); err != nil || u.Scheme != "https" || u.Host == "" {
		return &KeyError{Key: key + ".token_endpoint", Value: o.TokenEndpoint, Reason: "must be an https:// URL (the client secret is sent to it)"}
	}
	switch {
	case o.ClientID == "":
		return &KeyError{Key: key + ".client_id", Reason: "required with " + key + ".token_endpoint"}
	case o.ClientSecret != "" && o.ClientSecretFile != "":
		return &KeyError{Key: key + ".client_secret_file", Value: o.ClientSecretFile, Reason: "set " + key + ".client_secret or " + key + ".client_secret_file, not both"}
	case o.ClientSecret == "" && o.ClientSecretFile == "":
		return &KeyError{Key: key + ".client_secret", Reason: "required with " + key + ".token_endpoint (or " + key + ".client_secret_file)"}
	}
	if err := readable(key+".client_secret_file", o.ClientSecretFile); err != nil {
		return err
	}
	return readable(key+".ca_file", o.CAFile)
}

// checkExtension returns why a SASL extension cannot be sent, or "": RFC
// 7628 allows names of letters only, "auth" is the token's own, and a
// value is printable text.
func checkExtension(name, value string) string {
	if name == "" || strings.IndexFunc(name, func(r rune) bool { return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') }) >= 0 {
		return "an extension name is letters only (RFC 7628)"
	}
	if name == "auth" {
		return `"auth" is the token itself, not an extension`
	}
	if strings.IndexFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) >= 0 {
		return "an extension value is printable text (RFC 7628)"
	}
	return ""
}

func (c *Config) validateRegistry(src *sources) *KeyError {
	const key = "source.schema_registry"
	if err := c.checkApplies(src, key, key+".url", key+".username", key+".password", key+".password_file",
		key+".tls", key+".tls.ca_file", key+".tls.cert_file", key+".tls.key_file", key+".tls.insecure_skip_verify"); err != nil || !c.UsesRegistry() {
		return err
	}
	sr := c.Source.SchemaRegistry
	if u, err := url.Parse(sr.URL); sr.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &KeyError{Key: key + ".url", Value: sr.URL, Reason: "required: the registry's http:// or https:// URL, such as http://schema-registry:8081"}
	}
	switch {
	case sr.Password != "" && sr.PasswordFile != "":
		return &KeyError{Key: key + ".password_file", Value: sr.PasswordFile, Reason: "set " + key + ".password or " + key + ".password_file, not both"}
	case sr.Username == "" && (sr.Password != "" || sr.PasswordFile != ""):
		return &KeyError{Key: key + ".username", Reason: "required with a password (basic auth)"}
	case sr.Username != "" && sr.Password == "" && sr.PasswordFile == "":
		return &KeyError{Key: key + ".password", Reason: "required with " + key + ".username (or " + key + ".password_file)"}
	}
	tls := sr.TLS
	for _, f := range []struct{ key, path string }{
		{key + ".password_file", sr.PasswordFile},
		{key + ".tls.ca_file", tls.CAFile}, {key + ".tls.cert_file", tls.CertFile}, {key + ".tls.key_file", tls.KeyFile},
	} {
		if err := readable(f.key, f.path); err != nil {
			return err
		}
	}
	if (tls.CertFile == "") != (tls.KeyFile == "") {
		return &KeyError{Key: key + ".tls.key_file", Value: tls.KeyFile, Reason: key + ".tls.cert_file and " + key + ".tls.key_file go together"}
	}
	return nil
}

func (c *Config) validateWatermark(src *sources) *KeyError {
	wm := c.Watermark
	if err := oneOf("watermark.strategy", wm.Strategy, "bounded", "punctuated"); err != nil {
		return err
	}
	if err := notNegative("watermark.max_out_of_orderness", wm.MaxOutOfOrderness); err != nil {
		return err
	}
	if err := c.checkApplies(src, "watermark.marker_field"); err != nil {
		return err
	}
	if wm.Strategy == "punctuated" {
		if err := c.field("watermark.marker_field", wm.MarkerField, ""); err != nil {
			return err
		}
		if wm.MarkerField == "$key" || wm.MarkerField == "$timestamp" {
			return &KeyError{Key: "watermark.marker_field", Value: wm.MarkerField, Reason: "must be a field of the record value, not of the Kafka record"}
		}
	}
	if err := notNegative("watermark.idle_timeout", wm.IdleTimeout); err != nil {
		return err
	}
	if err := oneOf("watermark.scope", wm.Scope, "global", "partition"); err != nil {
		return err
	}
	if !wm.GlobalScope() && !c.Source.ByKey() {
		partitioning := "source.partitioning by_key"
		if c.Source.Partitioning == "auto" {
			// The default: name what it chose, or the message names a
			// setting the file may not have.
			partitioning += " (source.partitioning auto, the default, is repartition for a source.key of record fields; set by_key if the producer partitions by them)"
		}
		return &KeyError{Key: "watermark.scope", Value: wm.Scope,
			Reason: "applies only to " + partitioning + ": behind the repartition stage a key's records come from every input partition, so there is no partition watermark to follow"}
	}
	if wm.IdleAdvance && wm.IdleTimeout == 0 {
		return &KeyError{Key: "watermark.idle_advance", Value: "true", Reason: "needs a positive watermark.idle_timeout: without it no partition is ever idle"}
	}
	return notNegative("watermark.max_future_skew", wm.MaxFutureSkew)
}

func (c *Config) validateWindow(src *sources) *KeyError {
	w := c.Window
	if err := oneOf("window.type", w.Type, windowTypes...); err != nil {
		return err
	}
	if err := c.checkApplies(src, "window.size", "window.slide", "window.offset", "window.gap", "window.gap_field"); err != nil {
		return err
	}
	if err := c.validateWindowKind(src); err != nil {
		return err
	}
	if w.Type == "session" {
		if err := positive(src, "window.gap", w.Gap); err != nil {
			return err
		}
		if w.GapField != "" {
			if err := c.field("window.gap_field", w.GapField, ""); err != nil {
				return err
			}
		}
	} else if c.hasFixedSize() {
		if err := c.validateFixedWindow(src); err != nil {
			return err
		}
	}
	if err := notNegative("window.allowed_lateness", w.AllowedLateness); err != nil {
		return err
	}
	return oneOf("window.emit", w.Emit, "on_watermark", "on_close")
}

// validateFixedWindow checks the keys of tumbling and sliding windows.
func (c *Config) validateFixedWindow(src *sources) *KeyError {
	w := c.Window
	if err := positive(src, "window.size", w.Size); err != nil {
		return err
	}
	unit, unitKey := w.Size, "window.size"
	if w.Type == "sliding" {
		if err := positive(src, "window.slide", w.Slide); err != nil {
			return err
		}
		if w.Slide > w.Size {
			// Flink would silently drop records in the gaps between
			// windows; no outcome of ours describes that.
			return &KeyError{Key: "window.slide", Value: formatDuration(w.Slide), Reason: fmt.Sprintf("must not exceed window.size (%s)", formatDuration(w.Size))}
		}
		unit, unitKey = w.Slide, "window.slide"
	}
	if w.Offset >= unit || w.Offset <= -unit {
		return &KeyError{Key: "window.offset", Value: formatDuration(w.Offset), Reason: fmt.Sprintf("must be less than %s (%s) in absolute value", unitKey, formatDuration(unit))}
	}
	return nil
}

func (c *Config) validateAggregates(src *sources) *KeyError {
	if len(c.Aggregates) == 0 {
		return &KeyError{Key: "aggregates", Value: "[]", Reason: "required: at least one, such as {name: calls, fn: count}"}
	}
	var first *KeyError
	for i := range c.Aggregates {
		switch err := c.validateAggregate(src, i); {
		case err == nil:
		case first == nil:
			first = err
		default:
			src.more = append(src.more, err)
		}
	}
	return first
}

func (c *Config) validateAggregate(src *sources, i int) *KeyError {
	a, key := c.Aggregates[i], fmt.Sprintf("aggregates[%d]", i)
	if a.Name == "" {
		return &KeyError{Key: key + ".name", Reason: "required: the name of the result column"}
	}
	if j := slices.IndexFunc(c.Aggregates, func(b Aggregate) bool { return b.Name == a.Name }); j < i {
		return &KeyError{Key: key + ".name", Value: a.Name, Reason: fmt.Sprintf("repeats aggregates[%d].name", j)}
	}
	if err := oneOf(key+".fn", a.Fn, aggFnNames[:]...); err != nil {
		return err
	}
	if err := c.checkApplies(src, key+".field", key+".q", key+".k"); err != nil {
		return err
	}
	if a.Fn != "count" || a.Field != "" { // count's field is optional: COUNT(field)
		if err := c.field(key+".field", a.Field, ""); err != nil {
			return err
		}
	}
	if a.Fn == "quantile" && !src.present[key+".q"] {
		return &KeyError{Key: key + ".q", Reason: "required for fn quantile: a number above 0, at most 1, such as 0.99"}
	}
	if a.Fn == "quantile" && !(a.Q > 0 && a.Q <= 1) {
		// Nearest rank ceil(q*n) names a value for q in (0, 1]; q = 1 is the maximum.
		return &KeyError{Key: key + ".q", Value: fmt.Sprint(a.Q), Reason: "must be above 0 and at most 1, such as 0.99"}
	}
	return validateTopK(a, key)
}

func (c *Config) validateSink(*sources) *KeyError {
	s := c.Sink
	if err := oneOf("sink.format", s.Format, "json", FormatAvro); err != nil {
		return err
	}
	if k := c.Window.Kind(); s.Format == FormatAvro && (k == Global || k == Count) {
		// The Avro schema has non-null window bounds and no seq field.
		return &KeyError{Key: "sink.format", Value: s.Format, Reason: "does not support window.type " + c.Window.Type + " yet: use sink.format json"}
	}
	if err := oneOf("sink.compression", s.Compression, "none", "gzip", "snappy", "lz4", "zstd"); err != nil {
		return err
	}
	if err := notNegative("sink.linger", s.Linger); err != nil {
		return err
	}
	if s.Partitions < 1 {
		return &KeyError{Key: "sink.partitions", Value: fmt.Sprint(s.Partitions), Reason: "must be at least 1"}
	}
	if s.ReplicationFactor < 1 && s.ReplicationFactor != -1 {
		return &KeyError{Key: "sink.replication_factor", Value: fmt.Sprint(s.ReplicationFactor), Reason: "must be at least 1, or -1 for the broker default"}
	}
	return nil
}

// validateService checks delivery, http, log and shutdown_timeout.
func (c *Config) validateService(*sources) *KeyError {
	if err := oneOf("delivery", c.Delivery, "exactly_once", "at_least_once"); err != nil {
		return err
	}
	if _, port, err := net.SplitHostPort(c.HTTP.Listen); err != nil || port == "" {
		return &KeyError{Key: "http.listen", Value: c.HTTP.Listen, Reason: "must be host:port or :port, such as :9090"}
	}
	if err := oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error"); err != nil {
		return err
	}
	if err := oneOf("log.format", c.Log.Format, "json", "console"); err != nil {
		return err
	}
	return notNegative("shutdown_timeout", c.ShutdownTimeout)
}

// maxSessionTimeout is the brokers' default group.max.session.timeout.ms.
const maxSessionTimeout = 30 * time.Minute

// maxStandbyReplicas bounds state.standby_replicas: every copy costs a
// partition's state in memory and a fetch of its changelog; past a few
// no failover gets faster.
const maxStandbyReplicas = 8

// maxTransactionTimeout is the brokers' default transaction.max.timeout.ms:
// they refuse a producer that asks for a longer transaction timeout.
const maxTransactionTimeout = 15 * time.Minute

// validateState checks state.commit_interval and, with exactly_once,
// state.transaction_timeout. state.changelog_topic is a Kafka key: see
// ValidateKafka.
func (c *Config) validateState(src *sources) *KeyError {
	s := c.State
	if err := positive(src, "state.commit_interval", s.CommitInterval); err != nil {
		return err
	}
	if err := s.validateGeneration(); err != nil {
		return err
	}
	if s.StandbyReplicas < 0 || s.StandbyReplicas > maxStandbyReplicas {
		return &KeyError{Key: "state.standby_replicas", Value: fmt.Sprint(s.StandbyReplicas),
			Reason: fmt.Sprintf("must be 0 (no standby copies) to %d: each copy holds a partition's whole window state on another instance", maxStandbyReplicas)}
	}
	if err := c.checkApplies(src, "state.repartition_topic", "state.repartition_partitions", "state.repartition_format", "state.watermark_topic"); err != nil {
		return err
	}
	if err := c.checkApplies(src, "state.transaction_timeout"); err != nil || c.Delivery != "exactly_once" {
		return err
	}
	if s.TransactionTimeout < time.Second || s.TransactionTimeout > maxTransactionTimeout {
		return &KeyError{Key: "state.transaction_timeout", Value: formatDuration(s.TransactionTimeout),
			Reason: "must be between 1s and 15m (the brokers' default transaction.max.timeout.ms)"}
	}
	if s.TransactionTimeout > s.CommitInterval {
		return nil
	}
	// A transaction stays open for a commit interval at least. Name the key
	// that was set, not the default that it clashes with.
	if src.present["state.transaction_timeout"] {
		return &KeyError{Key: "state.transaction_timeout", Value: formatDuration(s.TransactionTimeout),
			Reason: fmt.Sprintf("must be longer than state.commit_interval (%s): a transaction stays open that long", formatDuration(s.CommitInterval))}
	}
	return &KeyError{Key: "state.commit_interval", Value: formatDuration(s.CommitInterval),
		Reason: fmt.Sprintf("must be shorter than state.transaction_timeout (%s), or the brokers abort every transaction", formatDuration(s.TransactionTimeout))}
}

// ValidateKafka checks the keys that only a Kafka connection needs: brokers,
// topics, group, the output topics and the changelog topic, which must all
// differ. Parse leaves them out because replay runs without Kafka; run
// calls this.
func (c Config) ValidateKafka() error {
	for _, list := range []struct {
		key   string
		items []string
	}{{"source.brokers", c.Source.Brokers}, {"source.topics", c.Source.Topics}} {
		if len(list.items) == 0 {
			return required(list.key, "[]")
		}
		if err := names(list.key, list.items); err != nil {
			return err
		}
	}
	if c.Source.Group == "" {
		return required("source.group", "")
	}
	if err := c.validateSinkTopics(); err != nil {
		return err
	}
	if err := c.validateChangelogTopic(); err != nil {
		return err
	}
	if err := c.validateRepartitionTopic(); err != nil {
		return err
	}
	return c.validateWatermarkTopic()
}

// validateWatermarkTopic checks state.watermark_topic, which only by_key
// with watermark.scope global uses.
func (c Config) validateWatermarkTopic() error {
	if !c.PublishesWatermarks() {
		return nil
	}
	return c.checkStateTopic("state.watermark_topic", c.State.WatermarkTopic)
}

// validateRepartitionTopic checks state.repartition_topic and
// state.repartition_partitions, which only repartition uses.
func (c Config) validateRepartitionTopic() error {
	if c.State.RepartitionPartitions < 0 {
		return &KeyError{Key: "state.repartition_partitions", Value: fmt.Sprint(c.State.RepartitionPartitions),
			Reason: "must be 0 (as many as the input topics have in all) or more"}
	}
	if c.Source.ByKey() {
		return nil
	}
	if f := c.State.RepartitionFormat; f < 1 || f > 4 {
		return &KeyError{Key: "state.repartition_format", Value: fmt.Sprint(f),
			Reason: "must be 4 (the default), 3, 2 or 1 (what releases before format 4, 3 or 2 read: during a rolling upgrade from one)"}
	}
	return c.checkStateTopic("state.repartition_topic", c.State.RepartitionTopic)
}

// checkStateTopic checks a topic of the service's own (the repartition or
// the watermark topic): required, a Kafka topic name, and neither an
// input nor an output nor the changelog.
func (c Config) checkStateTopic(key, topic string) error {
	if topic == "" {
		return required(key, "")
	}
	if reason := checkTopicName(topic); reason != "" {
		return &KeyError{Key: key, Value: topic, Reason: reason}
	}
	if slices.Contains(c.Source.Topics, topic) {
		return &KeyError{Key: key, Value: topic, Reason: "must not be one of source.topics"}
	}
	for _, t := range []struct{ key, topic string }{
		{"sink.results_topic", c.Sink.ResultsTopic}, {"sink.late_topic", c.Sink.LateTopic},
		{"sink.dead_letter_topic", c.Sink.DeadLetterTopic}, {"state.changelog_topic", c.State.ChangelogTopic},
	} {
		if topic == t.topic {
			return &KeyError{Key: key, Value: topic, Reason: "must differ from " + t.key}
		}
	}
	return nil
}

// Warnings are what run and validate (for run) both warn of and accept,
// each naming its key and value: an http.listen bound to a loopback
// address (127.0.0.0/8, ::1, localhost), where /metrics, /healthz and
// /readyz answer only on the host itself, so Kubernetes probes and
// Prometheus scrapes from elsewhere fail. Listening on loopback is a sound
// choice on a laptop, or behind a sidecar on the same host.
func (c Config) Warnings() []string {
	host, _, err := net.SplitHostPort(c.HTTP.Listen)
	if ip := net.ParseIP(host); err == nil && (host == "localhost" || ip != nil && ip.IsLoopback()) {
		return []string{(&KeyError{Key: "http.listen", Value: c.HTTP.Listen,
			Reason: "a loopback address answers only on this host: probes and scrapes from elsewhere fail; use :PORT to listen on every interface"}).Error()}
	}
	return nil
}

// validateSinkTopics checks that the output topics are set and differ from
// each other and from the input topics, so no output feeds back into input.
func (c Config) validateSinkTopics() error {
	topics := []struct{ key, topic string }{
		{"sink.results_topic", c.Sink.ResultsTopic}, {"sink.late_topic", c.Sink.LateTopic}, {"sink.dead_letter_topic", c.Sink.DeadLetterTopic},
	}
	for i, t := range topics {
		if t.topic == "" && t.key != "sink.dead_letter_topic" {
			return required(t.key, "")
		}
		if t.topic != "" && slices.Contains(c.Source.Topics, t.topic) {
			return &KeyError{Key: t.key, Value: t.topic, Reason: "must not be one of source.topics"}
		}
		for _, prev := range topics[:i] {
			if t.topic != "" && t.topic == prev.topic {
				return &KeyError{Key: t.key, Value: t.topic, Reason: "must differ from " + prev.key}
			}
		}
	}
	return nil
}

// validateChangelogTopic checks that state.changelog_topic is a topic name
// Kafka accepts, and that it is neither an input nor an output topic.
func (c Config) validateChangelogTopic() error {
	const key = "state.changelog_topic"
	topic := c.State.ChangelogTopic
	if topic == "" {
		return required(key, "")
	}
	if reason := checkTopicName(topic); reason != "" {
		if topic == c.Source.Group+changelogSuffix {
			reason += "; the default, source.group + \"" + changelogSuffix + "\", is not one: set " + key
		}
		return &KeyError{Key: key, Value: topic, Reason: reason}
	}
	if slices.Contains(c.Source.Topics, topic) {
		return &KeyError{Key: key, Value: topic, Reason: "must not be one of source.topics"}
	}
	for _, t := range []struct{ key, topic string }{
		{"sink.results_topic", c.Sink.ResultsTopic}, {"sink.late_topic", c.Sink.LateTopic}, {"sink.dead_letter_topic", c.Sink.DeadLetterTopic},
	} {
		if topic == t.topic {
			return &KeyError{Key: key, Value: topic, Reason: "must differ from " + t.key}
		}
	}
	return nil
}

// maxTopicName is the longest topic name Kafka accepts.
const maxTopicName = 249

// checkTopicName returns why Kafka would refuse name for a topic, or "":
// Kafka's own rule, 1 to 249 characters from a-z, A-Z, 0-9, '.', '_' and
// '-', and neither "." nor "..".
func checkTopicName(name string) string {
	const rule = "must be a Kafka topic name: 1 to 249 characters from a-z, A-Z, 0-9, '.', '_' and '-', not \".\" or \"..\""
	if name == "" || len(name) > maxTopicName || name == "." || name == ".." {
		return rule
	}
	for _, r := range name {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return rule
		}
	}
	return ""
}

// required is the error for a missing Kafka key, naming its variable.
func required(key, value string) *KeyError {
	return &KeyError{Key: key, Value: value, Reason: "required to connect to Kafka (set it in the file or with " + envName(key) + ")"}
}

func oneOf(key, value string, allowed ...string) *KeyError {
	if slices.Contains(allowed, value) {
		return nil
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = a
		if a == "" {
			quoted[i] = `"" (off)`
		}
	}
	return &KeyError{Key: key, Value: value, Reason: "must be one of " + strings.Join(quoted, ", ")}
}

func notNegative(key string, d time.Duration) *KeyError {
	if d >= 0 {
		return nil
	}
	return &KeyError{Key: key, Value: formatDuration(d), Reason: "must not be negative"}
}

func positive(src *sources, key string, d time.Duration) *KeyError {
	switch {
	case d > 0:
		return nil
	case !src.present[key]:
		return &KeyError{Key: key, Reason: "required: a positive duration, such as 5s"}
	}
	return &KeyError{Key: key, Value: formatDuration(d), Reason: "must be positive"}
}

// formatDuration writes d in Go syntax without zero units: 1h, not 1h0m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
