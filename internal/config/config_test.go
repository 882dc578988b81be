package config

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"aggregator/internal/record"
)

// doc builds a config file from the minimal valid sections, with some
// sections replaced or added (values in flow style).
func doc(sections map[string]string) []byte {
	all := map[string]string{
		"source":     "{timestamp: {field: t}}",
		"window":     "{size: 5s}",
		"aggregates": "[{name: n, fn: count}]",
	}
	maps.Copy(all, sections)
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(all)) {
		b.WriteString(name + ": " + all[name] + "\n")
	}
	return []byte(b.String())
}

// env returns a getenv that serves vars.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// csvSource is a CSV source with columns a, b, t.
const csvSource = "{format: csv, csv: {columns: [a, b, t]}, timestamp: {field: t}"

func TestParseErrors(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		sections map[string]string
		key      string
	}{
		"unknown key":                                  {map[string]string{"window": "{sizee: 5s}"}, "window.sizee"},
		"unknown nested key":                           {map[string]string{"source": "{timestamp: {field: t, layuot: unix_ms}}"}, "source.timestamp.layuot"},
		"unknown top-level key":                        {map[string]string{"windows": "{size: 5s}"}, "windows"},
		"unknown key in a list item":                   {map[string]string{"aggregates": "[{name: n, fn: count}, {nme: x, fn: count}]"}, "aggregates[1].nme"},
		"duplicate key":                                {map[string]string{"window": "{size: 5s, size: 6s}"}, "window.size"},
		"slide on tumbling":                            {map[string]string{"window": "{size: 5s, slide: 1s}"}, "window.slide"},
		"marker_field with bounded":                    {map[string]string{"watermark": "{marker_field: wm}"}, "watermark.marker_field"},
		"csv with json":                                {map[string]string{"source": "{timestamp: {field: t}, csv: {columns: [a]}}"}, "source.csv"},
		"q on sum":                                     {map[string]string{"aggregates": "[{name: n, fn: sum, field: x, q: 0.5}]"}, "aggregates[0].q"},
		"duration without unit":                        {map[string]string{"window": "{size: 5}"}, "window.size"},
		"duration below a millisecond":                 {map[string]string{"window": "{size: 1500us}"}, "window.size"},
		"duration as a float":                          {map[string]string{"window": "{size: 5s, allowed_lateness: 0.0}"}, "window.allowed_lateness"},
		"negative size":                                {map[string]string{"window": "{size: -5s}"}, "window.size"},
		"zero size":                                    {map[string]string{"window": "{size: 0}"}, "window.size"},
		"missing size":                                 {map[string]string{"window": "{type: tumbling}"}, "window.size"},
		"negative allowed_lateness":                    {map[string]string{"window": "{size: 5s, allowed_lateness: -1s}"}, "window.allowed_lateness"},
		"negative max_out_of_orderness":                {map[string]string{"watermark": "{max_out_of_orderness: -1ms}"}, "watermark.max_out_of_orderness"},
		"negative idle_timeout":                        {map[string]string{"watermark": "{idle_timeout: -1s}"}, "watermark.idle_timeout"},
		"negative max_future_skew":                     {map[string]string{"watermark": "{max_future_skew: -1s}"}, "watermark.max_future_skew"},
		"negative linger":                              {map[string]string{"sink": "{linger: -5ms}"}, "sink.linger"},
		"negative shutdown_timeout":                    {map[string]string{"shutdown_timeout": "-1s"}, "shutdown_timeout"},
		"idle_advance without timeout":                 {map[string]string{"watermark": "{idle_advance: true}"}, "watermark.idle_advance"},
		"unknown scope":                                {map[string]string{"watermark": "{scope: instance}"}, "watermark.scope"},
		"scope partition behind the repartition stage": {map[string]string{"watermark": "{scope: partition}", "source": "{timestamp: {field: t}, key: [user]}"}, "watermark.scope"},
		"watermark topic with scope partition":         {map[string]string{"watermark": "{scope: partition}", "source": "{timestamp: {field: t}, key: [$key]}", "state": "{watermark_topic: w}"}, "state.watermark_topic"},
		"watermark topic behind the repartition stage": {map[string]string{"source": "{timestamp: {field: t}, key: [user]}", "state": "{watermark_topic: w}"}, "state.watermark_topic"},
		"bad start_offset":                             {map[string]string{"source": "{timestamp: {field: t}, start_offset: newest}"}, "source.start_offset"},
		"bad partitioning":                             {map[string]string{"source": "{timestamp: {field: t}, partitioning: keyed}"}, "source.partitioning"},
		"repartition topic with by_key":                {map[string]string{"source": "{timestamp: {field: t}, key: [user], partitioning: by_key}", "state": "{repartition_topic: r}"}, "state.repartition_topic"},
		"repartition format with by_key":               {map[string]string{"source": "{timestamp: {field: t}, key: [user], partitioning: by_key}", "state": "{repartition_format: 1}"}, "state.repartition_format"},
		"bad format":                                   {map[string]string{"source": "{timestamp: {field: t}, format: thrift}"}, "source.format"},
		"avro without a registry":                      {map[string]string{"source": "{timestamp: {field: t}, format: avro}"}, "source.schema_registry.url"},
		"registry url without a scheme":                {map[string]string{"source": "{timestamp: {field: t}, format: json_schema, schema_registry: {url: 'registry:8081'}}"}, "source.schema_registry.url"},
		"registry for json":                            {map[string]string{"source": "{timestamp: {field: t}, schema_registry: {url: 'http://r:8081'}}"}, "source.schema_registry"},
		"registry password, no username":               {map[string]string{"source": "{timestamp: {field: t}, format: avro, schema_registry: {url: 'http://r', password: p}}"}, "source.schema_registry.username"},
		"registry username, no password":               {map[string]string{"source": "{timestamp: {field: t}, format: avro, schema_registry: {url: 'http://r', username: u}}"}, "source.schema_registry.password"},
		"registry password and file":                   {map[string]string{"source": "{timestamp: {field: t}, format: avro, schema_registry: {url: 'http://r', username: u, password: p, password_file: /etc/hostname}}"}, "source.schema_registry.password_file"},
		"registry password file missing":               {map[string]string{"source": "{timestamp: {field: t}, format: avro, schema_registry: {url: 'http://r', username: u, password_file: /nonexistent/pw}}"}, "source.schema_registry.password_file"},
		"registry tls on http":                         {map[string]string{"source": "{timestamp: {field: t}, format: avro, schema_registry: {url: 'http://r', tls: {insecure_skip_verify: true}}}"}, "source.schema_registry.tls"},
		"registry cert without key":                    {map[string]string{"source": "{timestamp: {field: t}, format: avro, schema_registry: {url: 'https://r', tls: {cert_file: /etc/hostname}}}"}, "source.schema_registry.tls.key_file"},
		"bad sink format":                              {map[string]string{"sink": "{format: protobuf}"}, "sink.format"},
		"avro sink without a registry":                 {map[string]string{"sink": "{format: avro}"}, "source.schema_registry.url"},
		"bad strategy":                                 {map[string]string{"watermark": "{strategy: periodic}"}, "watermark.strategy"},
		"bad window type":                              {map[string]string{"window": "{type: hopping, size: 5s}"}, "window.type"},
		"session with size":                            {map[string]string{"window": "{type: session, gap: 5s, size: 5s}"}, "window.size"},
		"session with offset":                          {map[string]string{"window": "{type: session, gap: 5s, offset: 1s}"}, "window.offset"},
		"session without gap":                          {map[string]string{"window": "{type: session}"}, "window.gap"},
		"session with zero gap":                        {map[string]string{"window": "{type: session, gap: 0s}"}, "window.gap"},
		"gap on a tumbling window":                     {map[string]string{"window": "{size: 5s, gap: 5s}"}, "window.gap"},
		"gap_field on a sliding window":                {map[string]string{"window": "{type: sliding, size: 5s, slide: 1s, gap_field: g}"}, "window.gap_field"},
		"gap_field not a csv column":                   {map[string]string{"source": "{format: csv, csv: {columns: [t]}, timestamp: {field: t}}", "window": "{type: session, gap: 5s, gap_field: g}"}, "window.gap_field"},
		"sliding slide larger than size":               {map[string]string{"window": "{type: sliding, size: 5s, slide: 7s}"}, "window.slide"},
		"bad emit":                                     {map[string]string{"window": "{size: 5s, emit: early}"}, "window.emit"},
		"bad fn":                                       {map[string]string{"aggregates": "[{name: n, fn: median, field: x}]"}, "aggregates[0].fn"},
		"bad delivery":                                 {map[string]string{"delivery": "exactly-once"}, "delivery"},
		"bad log level":                                {map[string]string{"log": "{level: verbose}"}, "log.level"},
		"bad log format":                               {map[string]string{"log": "{format: text}"}, "log.format"},
		"bad compression":                              {map[string]string{"sink": "{compression: brotli}"}, "sink.compression"},
		"bad sasl mechanism":                           {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: GSSAPI}}"}, "source.sasl.mechanism"},
		"oauth without a token source":                 {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER}}"}, "source.sasl.oauth.token_endpoint"},
		"oauth with two token sources":                 {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_file: /etc/hostname, token_endpoint: 'https://idp/token'}}}"}, "source.sasl.oauth.token_file"},
		"oauth endpoint over http":                     {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_endpoint: 'http://idp/token', client_id: c, client_secret: s}}}"}, "source.sasl.oauth.token_endpoint"},
		"oauth endpoint without client id":             {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_endpoint: 'https://idp/token', client_secret: s}}}"}, "source.sasl.oauth.client_id"},
		"oauth endpoint without secret":                {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_endpoint: 'https://idp/token', client_id: c}}}"}, "source.sasl.oauth.client_secret"},
		"oauth secret and secret file":                 {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_endpoint: 'https://idp/token', client_id: c, client_secret: s, client_secret_file: /etc/hostname}}}"}, "source.sasl.oauth.client_secret_file"},
		"oauth secret file missing":                    {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_endpoint: 'https://idp/token', client_id: c, client_secret_file: /nonexistent/s}}}"}, "source.sasl.oauth.client_secret_file"},
		"oauth token file missing":                     {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_file: /nonexistent/token}}}"}, "source.sasl.oauth.token_file"},
		"oauth client id with a token file":            {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_file: /etc/hostname, client_id: c}}}"}, "source.sasl.oauth.client_id"},
		"oauth extension name not letters":             {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_file: /etc/hostname, extensions: {logical_cluster: lkc-1}}}}"}, "source.sasl.oauth.extensions.logical_cluster"},
		"oauth extension auth":                         {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_file: /etc/hostname, extensions: {auth: x}}}}"}, "source.sasl.oauth.extensions.auth"},
		"oauth extensions not a mapping":               {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, oauth: {token_file: /etc/hostname, extensions: [a]}}}"}, "source.sasl.oauth.extensions"},
		"oauth keys with scram":                        {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: SCRAM-SHA-512, username: u, password: p, oauth: {token_file: /etc/hostname}}}"}, "source.sasl.oauth"},
		"username with oauth":                          {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: OAUTHBEARER, username: u, oauth: {token_file: /etc/hostname}}}"}, "source.sasl.username"},
		"msk iam without a region":                     {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: AWS_MSK_IAM}}"}, "source.sasl.aws.region"},
		"aws region with scram":                        {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: PLAIN, username: u, password: p, aws: {region: eu-west-1}}}"}, "source.sasl.aws"},
		"csv without columns":                          {map[string]string{"source": "{format: csv, timestamp: {field: t}}"}, "source.csv.columns"},
		"csv empty column":                             {map[string]string{"source": "{format: csv, csv: {columns: [a, '']}, timestamp: {field: a}}"}, "source.csv.columns[1]"},
		"csv repeated column":                          {map[string]string{"source": "{format: csv, csv: {columns: [a, a]}, timestamp: {field: a}}"}, "source.csv.columns[1]"},
		"csv two-character delimiter":                  {map[string]string{"source": "{format: csv, csv: {columns: [t], delimiter: ';;'}, timestamp: {field: t}}"}, "source.csv.delimiter"},
		"csv empty delimiter":                          {map[string]string{"source": "{format: csv, csv: {columns: [t], delimiter: ''}, timestamp: {field: t}}"}, "source.csv.delimiter"},
		"csv quote delimiter":                          {map[string]string{"source": "{format: csv, csv: {columns: [t], delimiter: '\"'}, timestamp: {field: t}}"}, "source.csv.delimiter"},
		"csv timestamp not a column":                   {map[string]string{"source": "{format: csv, csv: {columns: [a]}, timestamp: {field: t}}"}, "source.timestamp.field"},
		"csv key not a column":                         {map[string]string{"source": csvSource + ", key: [x]}"}, "source.key[0]"},
		"csv aggregate field not column":               {map[string]string{"source": csvSource + "}", "aggregates": "[{name: n, fn: sum, field: x}]"}, "aggregates[0].field"},
		"csv filter field not a column":                {map[string]string{"source": csvSource + ", filter: [{field: x, equals: y}]}"}, "source.filter[0].field"},
		"missing timestamp field":                      {map[string]string{"source": "{format: json}"}, "source.timestamp.field"},
		"layout without elements":                      {map[string]string{"source": "{timestamp: {field: t, layout: YYYY-MM-DD}}"}, "source.timestamp.layout"},
		"layout without a date":                        {map[string]string{"source": "{timestamp: {field: t, layout: '15:04:05'}}"}, "source.timestamp.layout"},
		"layout without a year":                        {map[string]string{"source": "{timestamp: {field: t, layout: 'Jan _2 15:04:05'}}"}, "source.timestamp.layout"},
		"unknown layout name":                          {map[string]string{"source": "{timestamp: {field: t, layout: unix_millis}}"}, "source.timestamp.layout"},
		"unknown time zone":                            {map[string]string{"source": "{timestamp: {field: t, timezone: Mars/Olympus}}"}, "source.timestamp.timezone"},
		"machine time zone":                            {map[string]string{"source": "{timestamp: {field: t, timezone: Local}}"}, "source.timestamp.timezone"},
		"punctuated without marker":                    {map[string]string{"watermark": "{strategy: punctuated}"}, "watermark.marker_field"},
		"kafka key as marker":                          {map[string]string{"watermark": "{strategy: punctuated, marker_field: $key}"}, "watermark.marker_field"},
		"kafka timestamp as marker":                    {map[string]string{"watermark": "{strategy: punctuated, marker_field: $timestamp}"}, "watermark.marker_field"},
		"no timestamp field":                           {map[string]string{"source": "{timestamp: {field: ''}}"}, "source.timestamp.field"},
		"empty layout":                                 {map[string]string{"source": "{timestamp: {field: t, layout: ''}}"}, "source.timestamp.layout"},
		"empty layout, kafka timestamp, punctuated": {map[string]string{"source": "{timestamp: {field: $timestamp, layout: ''}}",
			"watermark": "{strategy: punctuated, marker_field: wm}"}, "source.timestamp.layout"},
		"sliding without slide":          {map[string]string{"window": "{type: sliding, size: 5s}"}, "window.slide"},
		"sliding with negative slide":    {map[string]string{"window": "{type: sliding, size: 5s, slide: -1s}"}, "window.slide"},
		"tumbling offset of size":        {map[string]string{"window": "{size: 5s, offset: 5s}"}, "window.offset"},
		"tumbling offset below -size":    {map[string]string{"window": "{size: 5s, offset: -6s}"}, "window.offset"},
		"sliding offset of slide":        {map[string]string{"window": "{type: sliding, size: 5s, slide: 1s, offset: -1s}"}, "window.offset"},
		"no aggregates":                  {map[string]string{"aggregates": "[]"}, "aggregates"},
		"aggregates missing":             {map[string]string{"aggregates": "~"}, "aggregates"},
		"aggregate without name":         {map[string]string{"aggregates": "[{fn: count}]"}, "aggregates[0].name"},
		"aggregate names repeat":         {map[string]string{"aggregates": "[{name: n, fn: count}, {name: n, fn: max, field: x}]"}, "aggregates[1].name"},
		"count field not a csv column":   {map[string]string{"source": csvSource + "}", "aggregates": "[{name: n, fn: count, field: x}]"}, "aggregates[0].field"},
		"sum without field":              {map[string]string{"aggregates": "[{name: n, fn: sum}]"}, "aggregates[0].field"},
		"quantile without q":             {map[string]string{"aggregates": "[{name: n, fn: quantile, field: x}]"}, "aggregates[0].q"},
		"quantile with q 0":              {map[string]string{"aggregates": "[{name: n, fn: quantile, field: x, q: 0}]"}, "aggregates[0].q"},
		"quantile with q above 1":        {map[string]string{"aggregates": "[{name: n, fn: quantile, field: x, q: 1.5}]"}, "aggregates[0].q"},
		"quantile with q NaN":            {map[string]string{"aggregates": "[{name: n, fn: quantile, field: x, q: .nan}]"}, "aggregates[0].q"},
		"empty key field":                {map[string]string{"source": "{timestamp: {field: t}, key: [a, '']}"}, "source.key[1]"},
		"repeated key field":             {map[string]string{"source": "{timestamp: {field: t}, key: [a, a]}"}, "source.key[1]"},
		"empty filter field":             {map[string]string{"source": "{timestamp: {field: t}, filter: [{equals: x}]}"}, "source.filter[0].field"},
		"filter without equals":          {map[string]string{"source": "{timestamp: {field: t}, filter: [{field: x}]}"}, "source.filter[0].equals"},
		"tls file missing":               {map[string]string{"source": "{timestamp: {field: t}, tls: {enabled: true, ca_file: /nonexistent/ca.pem}}"}, "source.tls.ca_file"},
		"tls file is a directory":        {map[string]string{"source": "{timestamp: {field: t}, tls: {enabled: true, ca_file: " + dir + "}}"}, "source.tls.ca_file"},
		"tls cert without key":           {map[string]string{"source": "{timestamp: {field: t}, tls: {enabled: true, cert_file: " + pwFile + "}}"}, "source.tls.key_file"},
		"tls file while disabled":        {map[string]string{"source": "{timestamp: {field: t}, tls: {ca_file: " + pwFile + "}}"}, "source.tls.ca_file"},
		"sasl without username":          {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: PLAIN, password: p}}"}, "source.sasl.username"},
		"sasl without password":          {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: PLAIN, username: u}}"}, "source.sasl.password"},
		"sasl with both passwords":       {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: PLAIN, username: u, password: p, password_file: " + pwFile + "}}"}, "source.sasl.password_file"},
		"sasl password file missing":     {map[string]string{"source": "{timestamp: {field: t}, sasl: {mechanism: PLAIN, username: u, password_file: /nonexistent/pw}}"}, "source.sasl.password_file"},
		"sasl username without mech":     {map[string]string{"source": "{timestamp: {field: t}, sasl: {username: u}}"}, "source.sasl.username"},
		"list given a scalar":            {map[string]string{"source": "{timestamp: {field: t}, brokers: 'a:9092'}"}, "source.brokers"},
		"mapping given a list":           {map[string]string{"window": "[5s]"}, "window"},
		"scalar given a mapping":         {map[string]string{"delivery": "{mode: exactly_once}"}, "delivery"},
		"integer not a number":           {map[string]string{"sink": "{partitions: many}"}, "sink.partitions"},
		"integer too large":              {map[string]string{"sink": "{partitions: 3000000000}"}, "sink.partitions"},
		"zero partitions":                {map[string]string{"sink": "{partitions: 0}"}, "sink.partitions"},
		"zero replication factor":        {map[string]string{"sink": "{replication_factor: 0}"}, "sink.replication_factor"},
		"bool not a bool":                {map[string]string{"sink": "{create_topics: maybe}"}, "sink.create_topics"},
		"listen without a port":          {map[string]string{"http": "{listen: '9090'}"}, "http.listen"},
		"unknown state key":              {map[string]string{"state": "{commit_intervall: 1s}"}, "state.commit_intervall"},
		"state given a list":             {map[string]string{"state": "[1s]"}, "state"},
		"zero commit_interval":           {map[string]string{"state": "{commit_interval: 0}"}, "state.commit_interval"},
		"negative commit_interval":       {map[string]string{"state": "{commit_interval: -100ms}"}, "state.commit_interval"},
		"commit_interval below a ms":     {map[string]string{"state": "{commit_interval: 1500us}"}, "state.commit_interval"},
		"commit_interval of default txn": {map[string]string{"state": "{commit_interval: 1m}"}, "state.commit_interval"},
		"standby_replicas negative":      {map[string]string{"state": "{standby_replicas: -1}"}, "state.standby_replicas"},
		"standby_replicas above 8":       {map[string]string{"state": "{standby_replicas: 9}"}, "state.standby_replicas"},
		"transaction_timeout below 1s":   {map[string]string{"state": "{transaction_timeout: 999ms}"}, "state.transaction_timeout"},
		"transaction_timeout above 15m":  {map[string]string{"state": "{transaction_timeout: 15m1ms}"}, "state.transaction_timeout"},
		"transaction_timeout below a ms": {map[string]string{"state": "{transaction_timeout: 10s100us}"}, "state.transaction_timeout"},
		"transaction_timeout of commit":  {map[string]string{"state": "{commit_interval: 10s, transaction_timeout: 10s}"}, "state.transaction_timeout"},
		"transaction_timeout, at_least":  {map[string]string{"delivery": "at_least_once", "state": "{transaction_timeout: 30s}"}, "state.transaction_timeout"},
		"instance_id with a slash":       {map[string]string{"source": "{timestamp: {field: t}, instance_id: 'ns/pod-0'}"}, "source.instance_id"},
		"instance_id too long":           {map[string]string{"source": "{timestamp: {field: t}, instance_id: '" + strings.Repeat("p", 250) + "'}"}, "source.instance_id"},
		"session_timeout below 1s":       {map[string]string{"source": "{timestamp: {field: t}, session_timeout: 999ms}"}, "source.session_timeout"},
		"session_timeout above 30m":      {map[string]string{"source": "{timestamp: {field: t}, session_timeout: 31m}"}, "source.session_timeout"},
		"negative config_version":        {map[string]string{"state": "{config_version: -1}"}, "state.config_version"},
		"config_version not a number":    {map[string]string{"state": "{config_version: 1.5}"}, "state.config_version"},
		"cutover not RFC 3339":           {map[string]string{"state": "{cutover: '2030-12-01 10:00:00'}"}, "state.cutover"},
		"cutover below a ms":             {map[string]string{"state": "{cutover: '2030-12-01T10:00:00.0005Z'}"}, "state.cutover"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			data := doc(tt.sections)
			_, err := Parse(data, nil)
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != tt.key || !errors.Is(err, ErrInvalid) || !(strings.HasPrefix(err.Error(), tt.key+" = ") || strings.HasPrefix(err.Error(), tt.key+": ")) {
				t.Errorf("Parse(%q) = %v, want a *KeyError for %s wrapping ErrInvalid", data, err, tt.key)
			}
		})
	}
}

func TestParseNotKeyErrors(t *testing.T) {
	tests := map[string]string{
		"syntax error":      "window: [",
		"top-level list":    "- a\n- b\n",
		"top-level scalar":  "hello",
		"two documents":     string(doc(nil)) + "---\n" + string(doc(nil)),
		"tab indentation":   "window:\n\tsize: 5s\n",
		"unresolved alias:": "window: *w\n",
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(data), nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse(%q) = %v, want an error wrapping ErrInvalid", data, err)
			}
		})
	}
}

func TestKeyErrorMessage(t *testing.T) {
	tests := map[string]struct {
		data []byte
		env  map[string]string
		want string
	}{
		"from the file": {doc(map[string]string{"window": "{size: -5s}"}), nil,
			`window.size = "-5s": must be positive`},
		"value as written": {doc(map[string]string{"window": "{size: -5000ms}"}), nil,
			`window.size = "-5000ms": must be positive`},
		"from the environment": {doc(nil), map[string]string{"AGGREGATOR_WINDOW_SIZE": "-5s"},
			`window.size = "-5s" (from AGGREGATOR_WINDOW_SIZE): must be positive`},
		"unknown key suggests": {doc(map[string]string{"window": "{sizee: 5s}"}), nil,
			`window.sizee = "5s": unknown key (did you mean window.size?)`},
		"unknown key lists": {doc(map[string]string{"log": "{colour: true}"}), nil,
			`log.colour = "true": unknown key; known keys here: format, level`},
		"secret in unknown key": {doc(map[string]string{"source": "{timestamp: {field: t}, sasl: {passwrd: hunter2}}"}), nil,
			`source.sasl.passwrd = "<redacted>": unknown key (did you mean source.sasl.password?)`},
		"secret that does not apply": {doc(nil), map[string]string{"AGGREGATOR_SOURCE_SASL_PASSWORD": "hunter2"},
			`source.sasl.password = "<redacted>" (from AGGREGATOR_SOURCE_SASL_PASSWORD): applies only when source.sasl.mechanism is set`},
		"unknown state key suggests": {doc(map[string]string{"state": "{changlog_topic: x}"}), nil,
			`state.changlog_topic = "x": unknown key (did you mean state.changelog_topic?)`},
		"commit_interval against the default": {doc(map[string]string{"state": "{commit_interval: 90s}"}), nil,
			`state.commit_interval = "90s": must be shorter than state.transaction_timeout (10s), or the brokers abort every transaction`},
		"transaction_timeout against commit_interval": {doc(map[string]string{"state": "{commit_interval: 5s, transaction_timeout: 5000ms}"}), nil,
			`state.transaction_timeout = "5000ms": must be longer than state.commit_interval (5s): a transaction stays open that long`},
		"tab in indentation": {[]byte("window:\n  size: 5s\n \ttype: tumbling\n"), nil,
			`invalid config: line 3, column 2: tabs are not allowed in YAML indentation; indent with spaces`},
		"quantile without q": {doc(map[string]string{"aggregates": "[{name: p99, fn: quantile, field: x}]"}), nil,
			`aggregates[0].q: required for fn quantile: a number above 0, at most 1, such as 0.99`},
		"quantile with q 0": {doc(map[string]string{"aggregates": "[{name: p99, fn: quantile, field: x, q: 0}]"}), nil,
			`aggregates[0].q = "0": must be above 0 and at most 1, such as 0.99`},
		"required duration": {doc(map[string]string{"window": "{type: sliding, size: 5s}"}), nil,
			`window.slide: required: a positive duration, such as 5s`},
		"transaction_timeout with at_least_once": {doc(map[string]string{"delivery": "at_least_once", "state": "{transaction_timeout: 30s}"}), nil,
			`state.transaction_timeout = "30s": applies only to delivery exactly_once`},
		"scope partition with the default partitioning": {doc(map[string]string{"source": "{timestamp: {field: t}, key: [user]}", "watermark": "{scope: partition}"}), nil,
			`watermark.scope = "partition": applies only to source.partitioning by_key (source.partitioning auto, the default, is repartition for a source.key of record fields; set by_key if the producer partitions by them): behind the repartition stage a key's records come from every input partition, so there is no partition watermark to follow`},
		"scope partition with repartition": {doc(map[string]string{"source": "{timestamp: {field: t}, key: [user], partitioning: repartition}", "watermark": "{scope: partition}"}), nil,
			`watermark.scope = "partition": applies only to source.partitioning by_key: behind the repartition stage a key's records come from every input partition, so there is no partition watermark to follow`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tt.data, env(tt.env))
			if err == nil || err.Error() != tt.want {
				t.Errorf("Parse(%q) = %v, want %s", tt.data, err, tt.want)
			}
		})
	}
}

func TestParseEnvErrors(t *testing.T) {
	tests := map[string]struct {
		vars     map[string]string
		key, env string
	}{
		"bad duration":      {map[string]string{"AGGREGATOR_WINDOW_SIZE": "5"}, "window.size", "AGGREGATOR_WINDOW_SIZE"},
		"bad integer":       {map[string]string{"AGGREGATOR_SINK_PARTITIONS": "x"}, "sink.partitions", "AGGREGATOR_SINK_PARTITIONS"},
		"bad bool":          {map[string]string{"AGGREGATOR_SINK_CREATE_TOPICS": "maybe"}, "sink.create_topics", "AGGREGATOR_SINK_CREATE_TOPICS"},
		"bad enumeration":   {map[string]string{"AGGREGATOR_DELIVERY": "once"}, "delivery", "AGGREGATOR_DELIVERY"},
		"does not apply":    {map[string]string{"AGGREGATOR_WINDOW_SLIDE": "1s"}, "window.slide", "AGGREGATOR_WINDOW_SLIDE"},
		"empty list item":   {map[string]string{"AGGREGATOR_SOURCE_KEY": "sid,"}, "source.key[1]", "AGGREGATOR_SOURCE_KEY"},
		"csv columns json":  {map[string]string{"AGGREGATOR_SOURCE_CSV_COLUMNS": "a,t"}, "source.csv.columns", "AGGREGATOR_SOURCE_CSV_COLUMNS"},
		"bad listen":        {map[string]string{"AGGREGATOR_HTTP_LISTEN": "localhost"}, "http.listen", "AGGREGATOR_HTTP_LISTEN"},
		"validated after":   {map[string]string{"AGGREGATOR_WINDOW_TYPE": "sliding"}, "window.slide", ""},
		"nested validation": {map[string]string{"AGGREGATOR_WATERMARK_STRATEGY": "punctuated"}, "watermark.marker_field", ""},
		"bad commit_interval": {map[string]string{"AGGREGATOR_STATE_COMMIT_INTERVAL": "100"},
			"state.commit_interval", "AGGREGATOR_STATE_COMMIT_INTERVAL"},
		"transaction_timeout too long": {map[string]string{"AGGREGATOR_STATE_TRANSACTION_TIMEOUT": "1h"},
			"state.transaction_timeout", "AGGREGATOR_STATE_TRANSACTION_TIMEOUT"},
		"transaction_timeout, at_least_once": {map[string]string{"AGGREGATOR_DELIVERY": "at_least_once", "AGGREGATOR_STATE_TRANSACTION_TIMEOUT": "30s"},
			"state.transaction_timeout", "AGGREGATOR_STATE_TRANSACTION_TIMEOUT"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(doc(nil), env(tt.vars))
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != tt.key || ke.Env != tt.env || !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse with %v = %v, want a *KeyError for %s from %q", tt.vars, err, tt.key, tt.env)
			}
		})
	}
}

func TestParseEnvOverrides(t *testing.T) {
	tests := map[string]struct {
		vars map[string]string
		got  func(Config) any
		want any
	}{
		"brokers list": {map[string]string{"AGGREGATOR_SOURCE_BROKERS": "a:9092, b:9092"},
			func(c Config) any { return c.Source.Brokers }, []string{"a:9092", "b:9092"}},
		"window size": {map[string]string{"AGGREGATOR_WINDOW_SIZE": "10s"},
			func(c Config) any { return c.Window.Size }, 10 * time.Second},
		"negative offset": {map[string]string{"AGGREGATOR_WINDOW_OFFSET": "-1h", "AGGREGATOR_WINDOW_SIZE": "24h"},
			func(c Config) any { return c.Window.Offset }, -time.Hour},
		"sasl password": {map[string]string{"AGGREGATOR_SOURCE_SASL_MECHANISM": "SCRAM-SHA-512", "AGGREGATOR_SOURCE_SASL_USERNAME": "u", "AGGREGATOR_SOURCE_SASL_PASSWORD": "p w"},
			func(c Config) any { return c.Source.SASL }, SASL{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "p w"}},
		"msk iam region from AWS_REGION": {map[string]string{"AGGREGATOR_SOURCE_SASL_MECHANISM": "AWS_MSK_IAM", "AWS_REGION": "eu-west-1"},
			func(c Config) any { return c.Source.SASL.AWS.Region }, "eu-west-1"},
		"msk iam region set wins": {map[string]string{"AGGREGATOR_SOURCE_SASL_MECHANISM": "AWS_MSK_IAM", "AGGREGATOR_SOURCE_SASL_AWS_REGION": "us-east-2", "AWS_REGION": "eu-west-1"},
			func(c Config) any { return c.Source.SASL.AWS.Region }, "us-east-2"},
		"oauth extensions": {map[string]string{"AGGREGATOR_SOURCE_SASL_MECHANISM": "OAUTHBEARER", "AGGREGATOR_SOURCE_SASL_OAUTH_TOKEN_FILE": "/etc/hostname",
			"AGGREGATOR_SOURCE_SASL_OAUTH_EXTENSIONS": "logicalCluster=lkc-1, identityPoolId=pool-2"},
			func(c Config) any { return c.Source.SASL.OAuth.Extensions }, map[string]string{"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}},
		"rack": {map[string]string{"AGGREGATOR_SOURCE_RACK": "use1-az1"},
			func(c Config) any { return c.Source.Rack }, "use1-az1"},
		"csv columns": {map[string]string{"AGGREGATOR_SOURCE_FORMAT": "csv", "AGGREGATOR_SOURCE_CSV_COLUMNS": "t,x"},
			func(c Config) any { return c.Source.CSV }, CSV{Columns: []string{"t", "x"}, Delimiter: ","}},
		"http listen": {map[string]string{"AGGREGATOR_HTTP_LISTEN": "127.0.0.1:8080"},
			func(c Config) any { return c.HTTP.Listen }, "127.0.0.1:8080"},
		"http pprof": {map[string]string{"AGGREGATOR_HTTP_PPROF": "true"},
			func(c Config) any { return c.HTTP.Pprof }, true},
		"delivery": {map[string]string{"AGGREGATOR_DELIVERY": "at_least_once"},
			func(c Config) any { return c.Delivery }, "at_least_once"},
		"bool false": {map[string]string{"AGGREGATOR_SINK_CREATE_TOPICS": "false"},
			func(c Config) any { return c.Sink.CreateTopics }, false},
		"int16": {map[string]string{"AGGREGATOR_SINK_REPLICATION_FACTOR": "3"},
			func(c Config) any { return c.Sink.ReplicationFactor }, int16(3)},
		"overrides the file": {map[string]string{"AGGREGATOR_SOURCE_TIMESTAMP_FIELD": "ts"},
			func(c Config) any { return c.Source.Timestamp.Field }, "ts"},
		"empty leaves the file": {map[string]string{"AGGREGATOR_SOURCE_TIMESTAMP_FIELD": ""},
			func(c Config) any { return c.Source.Timestamp.Field }, "t"},
		"shutdown timeout": {map[string]string{"AGGREGATOR_SHUTDOWN_TIMEOUT": "0"},
			func(c Config) any { return c.ShutdownTimeout }, time.Duration(0)},
		"state": {map[string]string{"AGGREGATOR_STATE_CHANGELOG_TOPIC": "calls-state", "AGGREGATOR_STATE_COMMIT_INTERVAL": "1s", "AGGREGATOR_STATE_TRANSACTION_TIMEOUT": "2m"},
			func(c Config) any { return c.State }, State{ChangelogTopic: "calls-state", RepartitionFormat: 4, CommitInterval: time.Second, TransactionTimeout: 2 * time.Minute}},
		"changelog topic from the group": {map[string]string{"AGGREGATOR_SOURCE_GROUP": "calls-agg"},
			func(c Config) any { return c.State.ChangelogTopic }, "calls-agg-changelog"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse(doc(nil), env(tt.vars))
			if err != nil || !reflect.DeepEqual(tt.got(c), tt.want) {
				t.Errorf("Parse with %v = %#v, %v; want %#v", tt.vars, tt.got(c), err, tt.want)
			}
		})
	}
}

func TestEnvNames(t *testing.T) {
	var asked []string
	if _, err := Parse(doc(nil), func(name string) string { asked = append(asked, name); return "" }); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"AGGREGATOR_SOURCE_BROKERS", "AGGREGATOR_SOURCE_TOPICS", "AGGREGATOR_SOURCE_GROUP", "AGGREGATOR_SOURCE_START_OFFSET",
		"AGGREGATOR_SOURCE_FORMAT",
		"AGGREGATOR_SOURCE_SCHEMA_REGISTRY_URL", "AGGREGATOR_SOURCE_SCHEMA_REGISTRY_USERNAME", "AGGREGATOR_SOURCE_SCHEMA_REGISTRY_PASSWORD",
		"AGGREGATOR_SOURCE_SCHEMA_REGISTRY_PASSWORD_FILE", "AGGREGATOR_SOURCE_SCHEMA_REGISTRY_TLS_CA_FILE", "AGGREGATOR_SOURCE_SCHEMA_REGISTRY_TLS_CERT_FILE",
		"AGGREGATOR_SOURCE_SCHEMA_REGISTRY_TLS_KEY_FILE", "AGGREGATOR_SOURCE_SCHEMA_REGISTRY_TLS_INSECURE_SKIP_VERIFY", "AGGREGATOR_SOURCE_PARTITIONING",
		"AGGREGATOR_SOURCE_CSV_COLUMNS", "AGGREGATOR_SOURCE_CSV_DELIMITER", "AGGREGATOR_SOURCE_KEY",
		"AGGREGATOR_SOURCE_TIMESTAMP_FIELD", "AGGREGATOR_SOURCE_TIMESTAMP_LAYOUT", "AGGREGATOR_SOURCE_TIMESTAMP_TIMEZONE",
		"AGGREGATOR_SOURCE_TLS_ENABLED", "AGGREGATOR_SOURCE_TLS_CA_FILE", "AGGREGATOR_SOURCE_TLS_CERT_FILE",
		"AGGREGATOR_SOURCE_TLS_KEY_FILE", "AGGREGATOR_SOURCE_TLS_INSECURE_SKIP_VERIFY",
		"AGGREGATOR_SOURCE_SASL_MECHANISM", "AGGREGATOR_SOURCE_SASL_USERNAME", "AGGREGATOR_SOURCE_SASL_PASSWORD", "AGGREGATOR_SOURCE_SASL_PASSWORD_FILE",
		"AGGREGATOR_SOURCE_SASL_OAUTH_TOKEN_FILE", "AGGREGATOR_SOURCE_SASL_OAUTH_TOKEN_ENDPOINT", "AGGREGATOR_SOURCE_SASL_OAUTH_CLIENT_ID",
		"AGGREGATOR_SOURCE_SASL_OAUTH_CLIENT_SECRET", "AGGREGATOR_SOURCE_SASL_OAUTH_CLIENT_SECRET_FILE", "AGGREGATOR_SOURCE_SASL_OAUTH_SCOPE",
		"AGGREGATOR_SOURCE_SASL_OAUTH_CA_FILE", "AGGREGATOR_SOURCE_SASL_OAUTH_EXTENSIONS", "AGGREGATOR_SOURCE_SASL_AWS_REGION", "AGGREGATOR_SOURCE_RACK",
		"AGGREGATOR_SOURCE_INSTANCE_ID", "AGGREGATOR_SOURCE_SESSION_TIMEOUT",
		"AGGREGATOR_WATERMARK_STRATEGY", "AGGREGATOR_WATERMARK_MAX_OUT_OF_ORDERNESS", "AGGREGATOR_WATERMARK_MARKER_FIELD",
		"AGGREGATOR_WATERMARK_IDLE_TIMEOUT", "AGGREGATOR_WATERMARK_IDLE_ADVANCE", "AGGREGATOR_WATERMARK_MAX_FUTURE_SKEW", "AGGREGATOR_WATERMARK_SCOPE",
		"AGGREGATOR_WINDOW_TYPE", "AGGREGATOR_WINDOW_SIZE", "AGGREGATOR_WINDOW_SLIDE", "AGGREGATOR_WINDOW_OFFSET",
		"AGGREGATOR_WINDOW_GAP", "AGGREGATOR_WINDOW_GAP_FIELD",
		"AGGREGATOR_WINDOW_ALLOWED_LATENESS", "AGGREGATOR_WINDOW_EMIT",
		"AGGREGATOR_WINDOW_CALENDAR", "AGGREGATOR_WINDOW_TIMEZONE", "AGGREGATOR_WINDOW_EARLY_FIRINGS_EVERY", "AGGREGATOR_WINDOW_EARLY_FIRINGS_TIME", "AGGREGATOR_WINDOW_TIMEOUT",
		"AGGREGATOR_SINK_RESULTS_TOPIC", "AGGREGATOR_SINK_LATE_TOPIC", "AGGREGATOR_SINK_DEAD_LETTER_TOPIC", "AGGREGATOR_SINK_FORMAT", "AGGREGATOR_SINK_COMPRESSION",
		"AGGREGATOR_SINK_LINGER", "AGGREGATOR_SINK_CREATE_TOPICS", "AGGREGATOR_SINK_PARTITIONS", "AGGREGATOR_SINK_REPLICATION_FACTOR",
		"AGGREGATOR_DELIVERY", "AGGREGATOR_HTTP_LISTEN", "AGGREGATOR_HTTP_PPROF", "AGGREGATOR_LOG_LEVEL", "AGGREGATOR_LOG_FORMAT", "AGGREGATOR_SHUTDOWN_TIMEOUT",
		"AGGREGATOR_STATE_CHANGELOG_TOPIC", "AGGREGATOR_STATE_REPARTITION_TOPIC", "AGGREGATOR_STATE_REPARTITION_PARTITIONS", "AGGREGATOR_STATE_REPARTITION_FORMAT", "AGGREGATOR_STATE_WATERMARK_TOPIC", "AGGREGATOR_STATE_COMMIT_INTERVAL", "AGGREGATOR_STATE_TRANSACTION_TIMEOUT",
		"AGGREGATOR_STATE_STANDBY_REPLICAS", "AGGREGATOR_STATE_CONFIG_VERSION", "AGGREGATOR_STATE_CUTOVER",
	}
	if !slices.Equal(asked, want) {
		t.Errorf("Parse asked for %v, want %v", asked, want)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse(doc(nil), nil)
	want := Config{
		Source: Source{
			Brokers: []string{}, Topics: []string{}, StartOffset: "earliest", Format: "json", Partitioning: "auto",
			CSV: CSV{Columns: []string{}, Delimiter: ","}, Key: []string{},
			Timestamp: Timestamp{Field: "t", Layout: "rfc3339", Timezone: "UTC"}, Filter: []Filter{},
			SessionTimeout: 45 * time.Second,
		},
		Watermark:  Watermark{Strategy: "bounded", Scope: "global"},
		Window:     Window{Type: "tumbling", Size: 5 * time.Second, Emit: "on_watermark"},
		Aggregates: []Aggregate{{Name: "n", Fn: "count"}},
		Sink: Sink{Format: "json", Compression: "lz4", Linger: 5 * time.Millisecond, CreateTopics: true,
			Partitions: 1, ReplicationFactor: -1},
		Delivery:        "exactly_once",
		HTTP:            HTTP{Listen: ":9090"},
		Log:             Log{Level: "info", Format: "json"},
		ShutdownTimeout: 25 * time.Second,
		State:           State{RepartitionFormat: 4, CommitInterval: 100 * time.Millisecond, TransactionTimeout: 10 * time.Second}, // no group, no changelog topic
	}
	if err != nil || !reflect.DeepEqual(c, want) {
		t.Errorf("Parse(minimal) = %+v, %v; want %+v", c, err, want)
	}
}

func TestParseAccepts(t *testing.T) {
	tests := map[string]struct {
		sections map[string]string
		got      func(Config) any
		want     any
	}{
		"integer 0 duration": {map[string]string{"window": "{size: 5s, allowed_lateness: 0}"},
			func(c Config) any { return c.Window.AllowedLateness }, time.Duration(0)},
		"compound duration": {map[string]string{"window": "{size: 1s250ms}"},
			func(c Config) any { return c.Window.Size }, 1250 * time.Millisecond},
		"negative offset": {map[string]string{"window": "{size: 5s, offset: -4999ms}"},
			func(c Config) any { return c.Window.Offset }, -4999 * time.Millisecond},
		"quoted number": {map[string]string{"sink": "{partitions: '3'}"},
			func(c Config) any { return c.Sink.Partitions }, int32(3)},
		"number as text": {map[string]string{"source": "{timestamp: {field: 42}}"},
			func(c Config) any { return c.Source.Timestamp.Field }, "42"},
		"empty section keeps defaults": {map[string]string{"log": "~"},
			func(c Config) any { return c.Log }, Log{Level: "info", Format: "json"}},
		"static membership": {map[string]string{"source": "{timestamp: {field: t}, instance_id: aggregator-7d9f-x2k, session_timeout: 10s}"},
			func(c Config) any { return []any{c.Source.InstanceID, c.Source.SessionTimeout} }, []any{"aggregator-7d9f-x2k", 10 * time.Second}},
		"global key": {map[string]string{"source": "{timestamp: {field: t}, key: []}"},
			func(c Config) any { return c.Source.Key }, []string{}},
		"record key": {map[string]string{"source": "{format: csv, csv: {columns: [t]}, timestamp: {field: $timestamp}, key: [$key]}"},
			func(c Config) any { return c.Source.Key }, []string{"$key"}},
		"json path key": {map[string]string{"source": "{timestamp: {field: t}, key: [a.b]}"},
			func(c Config) any { return c.Source.Key }, []string{"a.b"}},
		"go layout with zone": {map[string]string{"source": "{timestamp: {field: t, layout: '02/01/2006 15:04:05.000 -0700'}}"},
			func(c Config) any { return c.Source.Timestamp.Layout }, "02/01/2006 15:04:05.000 -0700"},
		"tab delimiter": {map[string]string{"source": "{format: csv, csv: {columns: [t], delimiter: \"\\t\"}, timestamp: {field: t}}"},
			func(c Config) any { return c.Source.CSV.Delimiter }, "\t"},
		"sliding slide equal to size": {map[string]string{"window": "{type: sliding, size: 5s, slide: 5s, offset: 4s}"},
			func(c Config) any { return c.Window }, Window{Type: "sliding", Size: 5 * time.Second, Slide: 5 * time.Second, Offset: 4 * time.Second, Emit: "on_watermark"}},
		"count with a field (SQL COUNT(field))": {map[string]string{"aggregates": "[{name: n, fn: count, field: x}]"},
			func(c Config) any { return c.RecordSpec().Aggregates[0] }, record.Aggregate{Field: "x", Need: record.NeedPresence}},
		"quantile with q 1 (the maximum)": {map[string]string{"aggregates": "[{name: n, fn: quantile, field: x, q: 1}]"},
			func(c Config) any { return c.Aggregates[0].Q }, 1.0},
		"session": {map[string]string{"window": "{type: session, gap: 30s, gap_field: idle, allowed_lateness: 1m}"},
			func(c Config) any { return c.Window }, Window{Type: "session", Gap: 30 * time.Second, GapField: "idle", AllowedLateness: time.Minute, Emit: "on_watermark"}},
		"session, gap_field empty": {map[string]string{"window": "{type: session, gap: 1s, gap_field: ''}"},
			func(c Config) any { return c.Window }, Window{Type: "session", Gap: time.Second, Emit: "on_watermark"}},
		"alias": {map[string]string{"source": "{timestamp: {field: &f t}, key: [*f]}"},
			func(c Config) any { return c.Source.Key }, []string{"t"}},
		"state": {map[string]string{"state": "{changelog_topic: calls-state, commit_interval: 1s, transaction_timeout: 15m}"},
			func(c Config) any { return c.State }, State{ChangelogTopic: "calls-state", RepartitionFormat: 4, CommitInterval: time.Second, TransactionTimeout: 15 * time.Minute}},
		"transaction_timeout of 1s": {map[string]string{"state": "{commit_interval: 999ms, transaction_timeout: 1s}"},
			func(c Config) any { return c.State.TransactionTimeout }, time.Second},
		"long commit_interval, at_least_once": {map[string]string{"delivery": "at_least_once", "state": "{commit_interval: 2m}"},
			func(c Config) any { return c.State.CommitInterval }, 2 * time.Minute},
		"partitioning by_key": {map[string]string{"source": "{timestamp: {field: t}, key: [user], partitioning: by_key}"},
			func(c Config) any { return []bool{c.Source.ByKey(), c.Source.KafkaKeyed()} }, []bool{true, false}},
		"partitioning auto, record key": {map[string]string{"source": "{timestamp: {field: t}, key: [$key]}"},
			func(c Config) any { return []any{c.Source.Partitioning, c.Source.ByKey(), c.Source.KafkaKeyed()} }, []any{"auto", true, true}},
		"partitioning auto, key fields": {map[string]string{"source": "{group: g, timestamp: {field: t}, key: [user]}"},
			func(c Config) any { return []any{c.Source.Partitioning, c.Source.ByKey(), c.State.RepartitionTopic} }, []any{"auto", false, "g-repartition"}},
		"partitioning auto, the global key": {map[string]string{"source": "{timestamp: {field: t}, key: []}"},
			func(c Config) any { return c.Source.ByKey() }, false},
		"partitioning repartition, record key": {map[string]string{"source": "{timestamp: {field: t}, key: [$key], partitioning: repartition}"},
			func(c Config) any { return c.Source.ByKey() }, false},
		"empty changelog_topic is the default": {map[string]string{"source": "{group: g, timestamp: {field: t}}", "state": "{changelog_topic: ''}"},
			func(c Config) any { return c.State.ChangelogTopic }, "g-changelog"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			data := doc(tt.sections)
			c, err := Parse(data, nil)
			if err != nil || !reflect.DeepEqual(tt.got(c), tt.want) {
				t.Errorf("Parse(%q) = %#v, %v; want %#v", data, tt.got(c), err, tt.want)
			}
		})
	}
}

// TestChangelogTopicDefault checks that state.changelog_topic defaults to
// source.group + "-changelog" once the environment has had its say.
func TestChangelogTopicDefault(t *testing.T) {
	withGroup := map[string]string{"source": "{group: file-group, timestamp: {field: t}}"}
	tests := map[string]struct {
		sections, vars map[string]string
		want           string
	}{
		"from the file's group":      {withGroup, nil, "file-group-changelog"},
		"from the environment group": {withGroup, map[string]string{"AGGREGATOR_SOURCE_GROUP": "env-group"}, "env-group-changelog"},
		"set in the file": {map[string]string{"source": "{group: g, timestamp: {field: t}}", "state": "{changelog_topic: mine}"},
			map[string]string{"AGGREGATOR_SOURCE_GROUP": "env-group"}, "mine"},
		"set in the environment": {withGroup, map[string]string{"AGGREGATOR_STATE_CHANGELOG_TOPIC": "env-changelog"}, "env-changelog"},
		"no group":               {nil, nil, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse(doc(tt.sections), env(tt.vars))
			if err != nil || c.State.ChangelogTopic != tt.want {
				t.Errorf("Parse(%q) with %v state.changelog_topic = %q, %v; want %q", doc(tt.sections), tt.vars, c.State.ChangelogTopic, err, tt.want)
			}
		})
	}
}

// TestParseNamesEveryError: Parse names every error it finds in one run
// (docs/configuration.md#rules-for-every-key), one a line in the order of the keys, not only the first;
// a key inside one already named, or a key "required" that an unknown key
// was meant to be, is not named again.
func TestParseNamesEveryError(t *testing.T) {
	tests := map[string]struct {
		sections map[string]string
		want     string
	}{
		"unknown key and unknown fn": {map[string]string{"window": "{sizee: 5s}", "aggregates": "[{name: s, fn: summ, field: d}]"},
			`window.sizee = "5s": unknown key (did you mean window.size?)` + "\n" +
				`aggregates[0].fn = "summ": must be one of ` + strings.Join(aggFnNames[:], ", ")},
		"count window with offset and allowed_lateness": {map[string]string{"window": "{type: count, size: 10, offset: 1s, allowed_lateness: 2s}"},
			`window.offset = "1s": does not apply to window.type count: nothing is late in a count window, and it fires when full (or at its timeout)` + "\n" +
				`window.allowed_lateness = "2s": does not apply to window.type count: nothing is late in a count window, and it fires when full (or at its timeout)`},
		"two aggregates": {map[string]string{"aggregates": "[{name: a, fn: summ, field: d}, {name: b, fn: quantile, field: d}]"},
			`aggregates[0].fn = "summ": must be one of ` + strings.Join(aggFnNames[:], ", ") + "\n" +
				`aggregates[1].q: required for fn quantile: a number above 0, at most 1, such as 0.99`},
		"two sections": {map[string]string{"source": "{timestamp: {field: t}, start_offset: first}", "sink": "{compression: brotli}"},
			`source.start_offset = "first": must be one of earliest, latest` + "\n" +
				`sink.compression = "brotli": must be one of none, gzip, snappy, lz4, zstd`},
		"a section and the keys inside it": {map[string]string{"source": "{timestamp: {field: t}, csv: {columns: [a], delimiter: ';'}}"},
			`source.csv: applies only to source.format csv`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			data := doc(tt.sections)
			_, err := Parse(data, nil)
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse(%q) = %v, want (wrapping ErrInvalid):\n%s", data, err, tt.want)
			}
		})
	}
}
