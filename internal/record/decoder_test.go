package record_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// callsConfig is the config of docs/semantics.md's golden example, reading JSON or CSV.
func callsConfig(format string) config.Config {
	return config.Config{
		Source: config.Source{
			Format:    format,
			CSV:       config.CSV{Columns: []string{"sid", "callType", "callTime", "duration"}, Delimiter: ","},
			Key:       []string{"sid"},
			Timestamp: config.Timestamp{Field: "callTime", Layout: "2006-01-02 15:04:05", Timezone: "UTC"},
			Filter:    []config.Filter{{Field: "callType", Equals: "success"}},
		},
		Watermark:  config.Watermark{Strategy: "bounded"},
		Aggregates: []config.Aggregate{{Name: "total_duration", Fn: "sum", Field: "duration"}, {Name: "calls", Fn: "count"}},
	}
}

// with returns cfg changed by change.
func with(cfg config.Config, change func(*config.Config)) config.Config {
	change(&cfg)
	return cfg
}

func callsDecoder(t testing.TB, format string) *record.Decoder {
	t.Helper()
	return newDecoder(t, callsConfig(format))
}

func newDecoder(t testing.TB, cfg config.Config) *record.Decoder {
	t.Helper()
	d, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		t.Fatalf("NewDecoder: %v", err)
	}
	return d
}

// decoded is what a test compares: the Record without Partition/Offset,
// empty slices as nil.
type decoded struct {
	Kind      record.Kind
	Time      int64
	Key       string
	KeyFields []record.Value
	Values    []record.Value
}

func decode(d *record.Decoder, value string, in record.Input) (decoded, error) {
	var rec record.Record
	in.Value = []byte(value)
	kind, err := d.Decode(&in, &rec)
	got := decoded{Kind: kind, Time: rec.Time, Key: rec.Key, KeyFields: rec.KeyFields, Values: rec.Values}
	if len(got.KeyFields) == 0 {
		got.KeyFields = nil
	}
	if len(got.Values) == 0 {
		got.Values = nil
	}
	return got, err
}

func num(f float64, raw string) record.Value { return record.Value{Num: f, Raw: raw, IsNum: true} }
func str(s, raw string) record.Value         { return record.Value{Str: s, Raw: raw} }

// sum is the Value of a numeric aggregate: only Num is set, whether it was
// read from a number, a string or a CSV cell.
func sum(f float64) record.Value { return record.Value{Num: f, IsNum: true} }

// event is the decoded Event of the calls config at 2030-12-01 10:10:04.456.
func event(key string, keyField, duration record.Value) decoded {
	return decoded{Kind: record.Event, Time: 1922350204456, Key: key,
		KeyFields: []record.Value{keyField}, Values: []record.Value{duration, {}}}
}

const callTime = `"callType":"success","callTime":"2030-12-01 10:10:04.456"`

func TestDecodeJSON(t *testing.T) {
	calls := callsConfig("json")
	nested := with(calls, func(c *config.Config) { c.Source.Key = []string{"a.b"} })
	last := with(calls, func(c *config.Config) {
		c.Aggregates = []config.Aggregate{{Name: "last", Fn: "last", Field: "p"}, {Name: "n", Fn: "count"}}
	})
	tests := map[string]struct {
		cfg   config.Config
		value string
		want  decoded
	}{
		"flat record": {calls, `{"sid":"sid_1",` + callTime + `,"duration":1}`,
			event(`{"sid":"sid_1"}`, str("sid_1", `"sid_1"`), sum(1))},
		"other members skipped": {calls, `{"x":{"sid":"no","y":[1,{"sid":2},[]]},"sid":"s",` + callTime + `,"z":[true,false,null],"duration":2}`,
			event(`{"sid":"s"}`, str("s", `"s"`), sum(2))},
		"whitespace everywhere": {calls, " \n{ \"sid\" :\t\"s\" , \"callType\":\"success\",\"callTime\" : \"2030-12-01 10:10:04.456\" ,\"duration\": 3 }\r\n",
			event(`{"sid":"s"}`, str("s", `"s"`), sum(3))},
		"nested path": {nested, `{"a":{"x":{"b":0},"b":42},` + callTime + `,"duration":1}`,
			event(`{"a.b":42}`, num(42, "42"), sum(1))},
		"escapes in strings": {calls, `{"sid":"s\u0069d\t\"q\"\\\/",` + callTime + `,"duration":1}`,
			event(`{"sid":"sid\t\"q\"\\/"}`, str("sid\t\"q\"\\/", `"sid\t\"q\"\\/"`), sum(1))},
		"escaped member name": {calls, `{"s\u0069d":"x",` + callTime + `,"duration":1}`,
			event(`{"sid":"x"}`, str("x", `"x"`), sum(1))},
		"unicode and surrogate pair": {calls, `{"sid":"ü\ud83d\ude00",` + callTime + `,"duration":1}`,
			event(`{"sid":"ü😀"}`, str("ü😀", `"ü😀"`), sum(1))},
		"lone surrogate": {calls, `{"sid":"\ud83d",` + callTime + `,"duration":1}`,
			event(`{"sid":"�"}`, str("�", `"�"`), sum(1))},
		"control character escaped in key": {calls, `{"sid":"a\u0001",` + callTime + `,"duration":1}`,
			event(`{"sid":"a\u0001"}`, str("a\x01", `"a\u0001"`), sum(1))},
		"negative zero":    {calls, `{"sid":"s",` + callTime + `,"duration":-0}`, event(`{"sid":"s"}`, str("s", `"s"`), sum(0))},
		"exponent":         {calls, `{"sid":"s",` + callTime + `,"duration":1.5E+3}`, event(`{"sid":"s"}`, str("s", `"s"`), sum(1500))},
		"small exponent":   {calls, `{"sid":"s",` + callTime + `,"duration":-2.5e-1}`, event(`{"sid":"s"}`, str("s", `"s"`), sum(-0.25))},
		"big integer":      {calls, `{"sid":"s",` + callTime + `,"duration":12345678901234567890}`, event(`{"sid":"s"}`, str("s", `"s"`), sum(12345678901234567890))},
		"numeric string":   {calls, `{"sid":"s",` + callTime + `,"duration":"42.5"}`, event(`{"sid":"s"}`, str("s", `"s"`), sum(42.5))},
		"padded number":    {calls, `{"sid":"s",` + callTime + `,"duration":" 7 "}`, event(`{"sid":"s"}`, str("s", `"s"`), sum(7))},
		"number key":       {calls, `{"sid":4.20,` + callTime + `,"duration":1}`, event(`{"sid":4.20}`, num(4.2, "4.20"), sum(1))},
		"bool key":         {calls, `{"sid":true,` + callTime + `,"duration":1}`, event(`{"sid":true}`, str("true", "true"), sum(1))},
		"empty string key": {calls, `{"sid":"",` + callTime + `,"duration":1}`, event(`{"sid":""}`, str("", `""`), sum(1))},
		"duplicate member: last wins": {calls, `{"sid":"a","sid":"b",` + callTime + `,"duration":1,"duration":2}`,
			event(`{"sid":"b"}`, str("b", `"b"`), sum(2))},
		"last of an object": {last, `{"sid":"s",` + callTime + `,"p":{"x": [1]}}`,
			decoded{Kind: record.Event, Time: 1922350204456, Key: `{"sid":"s"}`, KeyFields: []record.Value{str("s", `"s"`)},
				Values: []record.Value{str(`{"x": [1]}`, `{"x": [1]}`), {}}}},
		"last of a number": {last, `{"sid":"s",` + callTime + `,"p":5}`,
			decoded{Kind: record.Event, Time: 1922350204456, Key: `{"sid":"s"}`, KeyFields: []record.Value{str("s", `"s"`)},
				Values: []record.Value{num(5, "5"), {}}}},
		"last of a numeric string is text": {last, `{"sid":"s",` + callTime + `,"p":"5"}`,
			decoded{Kind: record.Event, Time: 1922350204456, Key: `{"sid":"s"}`, KeyFields: []record.Value{str("s", `"s"`)},
				Values: []record.Value{str("5", `"5"`), {}}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := decode(newDecoder(t, tt.cfg), tt.value, record.Input{})
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode(%s) = %+v, %v\nwant %+v", tt.value, got, err, tt.want)
			}
		})
	}
}

func TestDecodeCSV(t *testing.T) {
	calls := callsConfig("csv")
	delim := func(d string) config.Config {
		return with(calls, func(c *config.Config) { c.Source.CSV.Delimiter = d })
	}
	tests := map[string]struct {
		cfg   config.Config
		value string
		want  decoded
	}{
		"golden line":         {calls, "sid_1,success,2030-12-01 10:10:04.456,1", event(`{"sid":"sid_1"}`, str("sid_1", `"sid_1"`), sum(1))},
		"trailing line break": {calls, "s,success,2030-12-01 10:10:04.456,1\r\n", event(`{"sid":"s"}`, str("s", `"s"`), sum(1))},
		"quoted delimiter":    {calls, `"s,1",success,2030-12-01 10:10:04.456,1`, event(`{"sid":"s,1"}`, str("s,1", `"s,1"`), sum(1))},
		"escaped quotes":      {calls, `"say ""hi""","success","2030-12-01 10:10:04.456","2.5"`, event(`{"sid":"say \"hi\""}`, str(`say "hi"`, `"say \"hi\""`), sum(2.5))},
		"line break in quotes": {calls, "\"a\nb\",success,2030-12-01 10:10:04.456,1",
			event(`{"sid":"a\nb"}`, str("a\nb", `"a\nb"`), sum(1))},
		"quoted empty key": {calls, `"",success,2030-12-01 10:10:04.456,1`, event(`{"sid":""}`, str("", `""`), sum(1))},
		"numeric key text": {calls, "42,success,2030-12-01 10:10:04.456,1", event(`{"sid":"42"}`, str("42", `"42"`), sum(1))},
		"padded number":    {calls, "s,success,2030-12-01 10:10:04.456, -1e1 ", event(`{"sid":"s"}`, str("s", `"s"`), sum(-10))},
		"semicolon":        {delim(";"), "s;success;2030-12-01 10:10:04.456;1", event(`{"sid":"s"}`, str("s", `"s"`), sum(1))},
		"tab":              {delim("\t"), "s,x\tsuccess\t2030-12-01 10:10:04.456\t1", event(`{"sid":"s,x"}`, str("s,x", `"s,x"`), sum(1))},
		"multibyte delimiter": {delim("¦"), `"a¦b"¦success¦2030-12-01 10:10:04.456¦1`,
			event(`{"sid":"a¦b"}`, str("a¦b", `"a¦b"`), sum(1))},
		"invalid UTF-8 replaced": {calls, "a\xff,success,2030-12-01 10:10:04.456,1", event(`{"sid":"a�"}`, str("a�", `"a�"`), sum(1))},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := decode(newDecoder(t, tt.cfg), tt.value, record.Input{})
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode(%q) = %+v, %v\nwant %+v", tt.value, got, err, tt.want)
			}
		})
	}
}

func TestDecodeTimestamps(t *testing.T) {
	layout := func(format, layout, tz string) *record.Decoder {
		return newDecoder(t, with(callsConfig(format), func(c *config.Config) {
			c.Source.Timestamp.Layout, c.Source.Timestamp.Timezone = layout, tz
		}))
	}
	kafka := newDecoder(t, with(callsConfig("json"), func(c *config.Config) {
		c.Source.Timestamp = config.Timestamp{Field: "$timestamp"}
	}))
	tests := map[string]struct {
		dec   *record.Decoder
		value string
		want  int64
	}{
		"go layout":            {layout("json", "2006-01-02 15:04:05", ""), `"2030-12-01 10:10:04"`, 1922350204000},
		"fractional seconds":   {layout("json", "2006-01-02 15:04:05", "UTC"), `"2030-12-01 10:10:04.456"`, 1922350204456},
		"time zone":            {layout("json", "2006-01-02 15:04:05", "Asia/Kolkata"), `"2030-12-01 15:40:04.456"`, 1922350204456},
		"rfc3339":              {layout("json", "rfc3339", "UTC"), `"2030-12-01T11:10:04.456+01:00"`, 1922350204456},
		"unix_s number":        {layout("json", "unix_s", "UTC"), `1922350204.456`, 1922350204456},
		"unix_s string":        {layout("json", "unix_s", "UTC"), `"1922350204.456"`, 1922350204456},
		"unix_ms number":       {layout("json", "unix_ms", "UTC"), `1922350204456`, 1922350204456},
		"unix_us number":       {layout("json", "unix_us", "UTC"), `1922350204456789`, 1922350204456},
		"unix_ns string":       {layout("json", "unix_ns", "UTC"), `"1922350204456789123"`, 1922350204456},
		"escaped time string":  {layout("json", "2006-01-02 15:04:05", "UTC"), `"2030\u002d12-01 10:10:04.456"`, 1922350204456},
		"kafka timestamp":      {kafka, `"ignored"`, 1234},
		"go layout as number":  {layout("json", "20060102150405", "UTC"), `20301201101004.456`, 1922350204456},
		"csv unix_ms":          {layout("csv", "unix_ms", "UTC"), `1922350204456`, 1922350204456},
		"csv quoted go layout": {layout("csv", "2006-01-02 15:04:05", "UTC"), `"2030-12-01 10:10:04.456"`, 1922350204456},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			value := `{"sid":"s","callType":"success","callTime":` + tt.value + `,"duration":1}`
			if strings.HasPrefix(name, "csv") {
				value = "s,success," + tt.value + ",1"
			}
			got, err := decode(tt.dec, value, record.Input{Timestamp: 1234})
			if err != nil || got.Time != tt.want || got.Kind != record.Event {
				t.Errorf("Decode(%s).Time = %d, %v, %v; want %d", value, got.Time, got.Kind, err, tt.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	jsonDec, csvDec := callsDecoder(t, "json"), callsDecoder(t, "csv")
	kafkaKey := newDecoder(t, with(callsConfig("json"), func(c *config.Config) { c.Source.Key = []string{"$key"} }))
	kafkaTime := newDecoder(t, with(callsConfig("json"), func(c *config.Config) {
		c.Source.Timestamp = config.Timestamp{Field: "$timestamp"}
	}))
	ok := func(sid, ts, duration string) string {
		return `{"sid":` + sid + `,"callType":"success","callTime":` + ts + `,"duration":` + duration + `}`
	}
	okTime := `"2030-12-01 10:10:04"`
	tests := map[string]struct {
		dec           *record.Decoder
		value         string
		reason, field string
	}{
		"empty":                     {jsonDec, ``, record.ReasonBadJSON, ""},
		"not an object":             {jsonDec, `["sid"]`, record.ReasonBadJSON, ""},
		"a string":                  {jsonDec, `"sid"`, record.ReasonBadJSON, ""},
		"truncated":                 {jsonDec, `{"sid":"s","callType":"succ`, record.ReasonBadJSON, ""},
		"truncated after value":     {jsonDec, `{"sid":"s"`, record.ReasonBadJSON, ""},
		"missing value":             {jsonDec, `{"sid":}`, record.ReasonBadJSON, ""},
		"missing colon":             {jsonDec, `{"sid" "s"}`, record.ReasonBadJSON, ""},
		"trailing comma":            {jsonDec, `{"sid":"s",}`, record.ReasonBadJSON, ""},
		"trailing data":             {jsonDec, ok(`"s"`, okTime, "1") + `{}`, record.ReasonBadJSON, ""},
		"bad escape":                {jsonDec, `{"sid":"\x"}`, record.ReasonBadJSON, ""},
		"short unicode escape":      {jsonDec, `{"sid":"\u12"}`, record.ReasonBadJSON, ""},
		"raw control character":     {jsonDec, "{\"sid\":\"a\tb\"}", record.ReasonBadJSON, ""},
		"bad literal in skipped":    {jsonDec, `{"x":tru,"sid":"s"}`, record.ReasonBadJSON, ""},
		"leading zero":              {jsonDec, `{"x":01}`, record.ReasonBadJSON, ""},
		"bare dot number":           {jsonDec, `{"x":1.}`, record.ReasonBadJSON, ""},
		"unclosed array":            {jsonDec, `{"x":[1,2}`, record.ReasonBadJSON, ""},
		"single quotes":             {jsonDec, `{'sid':'s'}`, record.ReasonBadJSON, ""},
		"nested too deeply":         {jsonDec, `{"x":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`, record.ReasonBadJSON, ""},
		"csv too few columns":       {csvDec, `s,success,2030-12-01 10:10:04`, record.ReasonBadCSV, ""},
		"csv too many columns":      {csvDec, `s,success,2030-12-01 10:10:04,1,x`, record.ReasonBadCSV, ""},
		"csv bare quote":            {csvDec, `s"x,success,2030-12-01 10:10:04,1`, record.ReasonBadCSV, ""},
		"csv unterminated quote":    {csvDec, `"s,success,2030-12-01 10:10:04,1`, record.ReasonBadCSV, ""},
		"csv text after quote":      {csvDec, `"s"x,success,2030-12-01 10:10:04,1`, record.ReasonBadCSV, ""},
		"missing timestamp":         {jsonDec, `{"sid":"s","callType":"success","duration":1}`, record.ReasonMissingTimestamp, "callTime"},
		"null timestamp":            {jsonDec, ok(`"s"`, `null`, "1"), record.ReasonMissingTimestamp, "callTime"},
		"csv empty timestamp":       {csvDec, `s,success,,1`, record.ReasonMissingTimestamp, "callTime"},
		"no kafka timestamp":        {kafkaTime, ok(`"s"`, okTime, "1"), record.ReasonMissingTimestamp, "$timestamp"},
		"bad timestamp":             {jsonDec, ok(`"s"`, `"2030-13-01 10:10:04"`, "1"), record.ReasonBadTimestamp, "callTime"},
		"object timestamp":          {jsonDec, ok(`"s"`, `{}`, "1"), record.ReasonBadTimestamp, "callTime"},
		"bool timestamp":            {jsonDec, ok(`"s"`, `true`, "1"), record.ReasonBadTimestamp, "callTime"},
		"csv bad timestamp":         {csvDec, `s,success,today,1`, record.ReasonBadTimestamp, "callTime"},
		"missing key":               {jsonDec, `{"callType":"success","callTime":"2030-12-01 10:10:04","duration":1}`, record.ReasonMissingKey, "sid"},
		"null key":                  {jsonDec, ok(`null`, okTime, "1"), record.ReasonMissingKey, "sid"},
		"csv empty key":             {csvDec, `,success,2030-12-01 10:10:04,1`, record.ReasonMissingKey, "sid"},
		"no kafka key":              {kafkaKey, ok(`"s"`, okTime, "1"), record.ReasonMissingKey, "$key"},
		"object key":                {jsonDec, ok(`{"a":1}`, okTime, "1"), record.ReasonBadKey, "sid"},
		"array key":                 {jsonDec, ok(`[1]`, okTime, "1"), record.ReasonBadKey, "sid"},
		"text for sum":              {jsonDec, ok(`"s"`, okTime, `"abc"`), record.ReasonNonNumeric, "duration"},
		"bool for sum":              {jsonDec, ok(`"s"`, okTime, `true`), record.ReasonNonNumeric, "duration"},
		"object for sum":            {jsonDec, ok(`"s"`, okTime, `{"v":1}`), record.ReasonNonNumeric, "duration"},
		"number out of range":       {jsonDec, ok(`"s"`, okTime, `1e999`), record.ReasonNonNumeric, "duration"},
		"hex string":                {jsonDec, ok(`"s"`, okTime, `"0x10"`), record.ReasonNonNumeric, "duration"},
		"NaN string":                {jsonDec, ok(`"s"`, okTime, `"NaN"`), record.ReasonNonNumeric, "duration"},
		"csv text for sum":          {csvDec, `s,success,2030-12-01 10:10:04,abc`, record.ReasonNonNumeric, "duration"},
		"csv quoted empty for sum":  {csvDec, `s,success,2030-12-01 10:10:04,""`, record.ReasonNonNumeric, "duration"},
		"bad json beats the filter": {jsonDec, `{"callType":"failure"`, record.ReasonBadJSON, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := decode(tt.dec, tt.value, record.Input{Timestamp: -1})
			var de *record.DecodeError
			if !errors.As(err, &de) || de.Reason != tt.reason || de.Field != tt.field {
				t.Errorf("Decode(%.80q) error = %v, want reason %s, field %q", tt.value, err, tt.reason, tt.field)
			}
		})
	}
}

// A missing or null aggregate field is SQL's NULL, not an error (docs/semantics.md#decoding):
// the null Value, for every need and every text format; count with a field
// reads only whether the field is there.
func TestDecodeMissingIsNull(t *testing.T) {
	aggs := []config.Aggregate{
		{Name: "s", Fn: "sum", Field: "duration"}, {Name: "l", Fn: "last", Field: "duration"},
		{Name: "t", Fn: "top_k", Field: "duration", K: 1}, {Name: "n", Fn: "count", Field: "duration"}, {Name: "c", Fn: "count"},
	}
	jsonDec := newDecoder(t, with(callsConfig("json"), func(c *config.Config) { c.Aggregates = aggs }))
	csvDec := newDecoder(t, with(callsConfig("csv"), func(c *config.Config) { c.Aggregates = aggs }))
	null := record.NullValue
	present := []record.Value{sum(7), num(7, "7"), num(7, "7"), {}, {}}
	tests := map[string]struct {
		dec   *record.Decoder
		value string
		want  []record.Value
	}{
		"json absent":   {jsonDec, `{"sid":"s","callType":"success","callTime":"2030-12-01 10:10:04"}`, []record.Value{null, null, null, null, {}}},
		"json null":     {jsonDec, `{"sid":"s","callType":"success","callTime":"2030-12-01 10:10:04","duration":null}`, []record.Value{null, null, null, null, {}}},
		"json present":  {jsonDec, `{"sid":"s","callType":"success","callTime":"2030-12-01 10:10:04","duration":7}`, present},
		"csv empty":     {csvDec, `s,success,2030-12-01 10:10:04,`, []record.Value{null, null, null, null, {}}},
		"csv present":   {csvDec, `s,success,2030-12-01 10:10:04,7`, []record.Value{sum(7), str("7", `"7"`), str("7", `"7"`), {}, {}}},
		"json empty ''": {jsonDec, `{"sid":"s","callType":"success","callTime":"2030-12-01 10:10:04","duration":""}`, nil},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := decode(tt.dec, tt.value, record.Input{})
			if tt.want == nil { // a present non-numeric value for sum stays a dead letter
				if de := (*record.DecodeError)(nil); !errors.As(err, &de) || de.Reason != record.ReasonNonNumeric {
					t.Errorf("Decode(%s) error = %v, want %s", tt.value, err, record.ReasonNonNumeric)
				}
				return
			}
			if err != nil || got.Kind != record.Event || !reflect.DeepEqual(got.Values, tt.want) {
				t.Errorf("Decode(%s) = %+v, %v; want values %+v", tt.value, got.Values, err, tt.want)
			}
		})
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	d := callsDecoder(t, "json")
	long := strings.Repeat("x", 100)
	tests := map[string]struct{ value, want string }{
		"names field and value": {`{"sid":"s",` + callTime + `,"duration":"abc"}`, `non_numeric: field "duration": "abc" is not a number`},
		"truncates long values": {`{"sid":"s",` + callTime + `,"duration":"` + long + `"}`, `non_numeric: field "duration": "` + long[:64] + `"... is not a number`},
		"one line":              {`{"sid":"s",` + callTime + `,"duration":"a\nb"}`, `non_numeric: field "duration": "a\nb" is not a number`},
		"null":                  {`{"sid":null,` + callTime + `,"duration":1}`, `missing_key: field "sid": the value is null`},
		"bad json":              {`{"sid":"s"x`, `bad_json: unexpected 'x' at offset 10, want "," or "}"`},
		"truncated json":        {`{"sid":"s"`, `bad_json: unexpected end of input, want "," or "}"`},
		"missing timestamp":     {`{"sid":"s","callType":"success","duration":1}`, `missing_timestamp: field "callTime": the record has no such field; the field "$timestamp" is the Kafka record timestamp`},
		"null timestamp":        {`{"sid":"s","callType":"success","callTime":null,"duration":1}`, `missing_timestamp: field "callTime": the value is null; the field "$timestamp" is the Kafka record timestamp`},
		"bad timestamp":         {`{"sid":"s","callType":"success","callTime":"noon","duration":1}`, `bad_timestamp: field "callTime": "noon" does not match layout "2006-01-02 15:04:05"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := decode(d, tt.value, record.Input{}); err == nil || err.Error() != tt.want {
				t.Errorf("Decode(%q) error = %v, want %s", tt.value, err, tt.want)
			}
		})
	}
}

func TestDecodeFilter(t *testing.T) {
	filter := func(format, field, equals string) *record.Decoder {
		return newDecoder(t, with(callsConfig(format), func(c *config.Config) {
			c.Source.Filter = []config.Filter{{Field: field, Equals: equals}}
		}))
	}
	both := newDecoder(t, with(callsConfig("json"), func(c *config.Config) {
		c.Source.Filter = append(c.Source.Filter, config.Filter{Field: "region", Equals: "eu"})
	}))
	tests := map[string]struct {
		dec   *record.Decoder
		value string
		want  record.Kind
	}{
		"string matches":                {filter("json", "callType", "success"), `{"callType":"success","sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Event},
		"string differs":                {filter("json", "callType", "success"), `{"callType":"failure","sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Filtered},
		"escaped string matches":        {filter("json", "callType", "suc\"cess"), `{"callType":"suc\u0022cess","sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Event},
		"number literal as written":     {filter("json", "callType", "1.50"), `{"callType":1.50,"sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Event},
		"number literal differs":        {filter("json", "callType", "1.5"), `{"callType":1.50,"sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Filtered},
		"bool literal":                  {filter("json", "callType", "true"), `{"callType":true,"sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Event},
		"object never matches":          {filter("json", "callType", "{}"), `{"callType":{},"sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Filtered},
		"missing field is filtered":     {filter("json", "callType", "success"), `{"sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Filtered},
		"filtered before timestamp":     {filter("json", "callType", "success"), `{"callType":"failure"}`, record.Filtered},
		"filtered before bad values":    {filter("json", "callType", "success"), `{"callType":"x","sid":{},"callTime":"noon","duration":"abc"}`, record.Filtered},
		"nested filter field":           {filter("json", "meta.type", "a"), `{"meta":{"type":"a"},"sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Event},
		"all filters hold":              {both, `{"callType":"success","region":"eu","sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Event},
		"one filter fails":              {both, `{"callType":"success","region":"us","sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Filtered},
		"csv cell":                      {filter("csv", "callType", "success"), `s,success,2030-12-01 10:10:04,1`, record.Event},
		"csv quoted cell":               {filter("csv", "callType", `a"b`), `s,"a""b",2030-12-01 10:10:04,1`, record.Event},
		"csv differs":                   {filter("csv", "callType", "success"), `s,Success,2030-12-01 10:10:04,1`, record.Filtered},
		"csv empty cell is missing":     {filter("csv", "callType", ""), `s,,2030-12-01 10:10:04,1`, record.Filtered},
		"csv quoted empty cell matches": {filter("csv", "callType", ""), `s,"",2030-12-01 10:10:04,1`, record.Event},
		"kafka key":                     {filter("json", "$key", "k1"), `{"sid":"s","callTime":"2030-12-01 10:10:04","duration":1}`, record.Event},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := decode(tt.dec, tt.value, record.Input{Key: []byte("k1")})
			if err != nil || got.Kind != tt.want {
				t.Errorf("Decode(%s) = %v, %v; want %v", tt.value, got.Kind, err, tt.want)
			}
		})
	}
}

func TestDecodeMarker(t *testing.T) {
	punctuated := func(format, layout string) *record.Decoder {
		return newDecoder(t, with(callsConfig(format), func(c *config.Config) {
			c.Source.CSV.Columns = append(c.Source.CSV.Columns, "wm")
			c.Source.Timestamp.Layout = layout
			c.Watermark = config.Watermark{Strategy: "punctuated", MarkerField: "wm"}
		}))
	}
	tests := map[string]struct {
		dec   *record.Decoder
		value string
		want  decoded
	}{
		"marker needs nothing else": {punctuated("json", "2006-01-02 15:04:05"), `{"wm":"2030-12-01 10:10:05"}`,
			decoded{Kind: record.Marker, Time: 1922350205000}},
		"marker is not filtered": {punctuated("json", "2006-01-02 15:04:05"), `{"callType":"failure","wm":"2030-12-01 10:10:05.5"}`,
			decoded{Kind: record.Marker, Time: 1922350205500}},
		"unix marker": {punctuated("json", "unix_ms"), `{"wm":1922350205000}`, decoded{Kind: record.Marker, Time: 1922350205000}},
		"null marker is an event": {punctuated("json", "2006-01-02 15:04:05"), `{"wm":null,"sid":"s",` + callTime + `,"duration":1}`,
			event(`{"sid":"s"}`, str("s", `"s"`), sum(1))},
		"no marker is an event": {punctuated("json", "2006-01-02 15:04:05"), `{"sid":"s",` + callTime + `,"duration":1}`,
			event(`{"sid":"s"}`, str("s", `"s"`), sum(1))},
		"csv marker": {punctuated("csv", "2006-01-02 15:04:05"), `,,,,2030-12-01 10:10:05`, decoded{Kind: record.Marker, Time: 1922350205000}},
		"csv empty marker cell is an event": {punctuated("csv", "2006-01-02 15:04:05"), `s,success,2030-12-01 10:10:04.456,1,`,
			event(`{"sid":"s"}`, str("s", `"s"`), sum(1))},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := decode(tt.dec, tt.value, record.Input{})
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode(%s) = %+v, %v\nwant %+v", tt.value, got, err, tt.want)
			}
		})
	}
	_, err := decode(punctuated("json", "unix_ms"), `{"wm":"soon"}`, record.Input{})
	var de *record.DecodeError
	if !errors.As(err, &de) || de.Reason != record.ReasonBadTimestamp || de.Field != "wm" {
		t.Errorf(`Decode({"wm":"soon"}) error = %v, want bad_timestamp for field "wm"`, err)
	}
}

func TestDecodeKafkaFieldsAndGlobalKey(t *testing.T) {
	kafka := newDecoder(t, with(callsConfig("json"), func(c *config.Config) {
		c.Source.Key = []string{"$key", "sid"}
		c.Source.Timestamp = config.Timestamp{Field: "$timestamp"}
	}))
	global := newDecoder(t, with(callsConfig("csv"), func(c *config.Config) { c.Source.Key = nil }))
	byTime := newDecoder(t, with(callsConfig("csv"), func(c *config.Config) { c.Source.Key = []string{"$timestamp"} }))
	tests := map[string]struct {
		dec   *record.Decoder
		value string
		want  decoded
	}{
		"kafka key and timestamp": {kafka, `{"sid":"s","callType":"success","duration":1}`,
			decoded{Kind: record.Event, Time: 1607654003161, Key: `{"$key":"k\"1","sid":"s"}`,
				KeyFields: []record.Value{str(`k"1`, `"k\"1"`), str("s", `"s"`)}, Values: []record.Value{sum(1), {}}}},
		"kafka timestamp as key": {byTime, `s,success,2030-12-01 10:10:04.456,1`,
			decoded{Kind: record.Event, Time: 1922350204456, Key: `{"$timestamp":1607654003161}`,
				KeyFields: []record.Value{num(1607654003161, "1607654003161")}, Values: []record.Value{sum(1), {}}}},
		"global key": {global, `s,success,2030-12-01 10:10:04.456,1`,
			decoded{Kind: record.Event, Time: 1922350204456, Key: `{}`, Values: []record.Value{sum(1), {}}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := decode(tt.dec, tt.value, record.Input{Key: []byte(`k"1`), Timestamp: 1607654003161})
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode(%s) = %+v, %v\nwant %+v", tt.value, got, err, tt.want)
			}
		})
	}
}

func TestDecodeSetsPartitionAndReusesSlices(t *testing.T) {
	d := callsDecoder(t, "json")
	rec := record.Record{KeyFields: make([]record.Value, 0, 4), Values: make([]record.Value, 0, 4)}
	keyFields, values := &rec.KeyFields[:1][0], &rec.Values[:1][0]
	kind, err := d.Decode(&record.Input{Value: []byte(`{"sid":"s",` + callTime + `,"duration":1}`), Partition: 3, Offset: 77}, &rec)
	if err != nil || kind != record.Event || rec.Partition != 3 || rec.Offset != 77 {
		t.Fatalf("Decode = %v, %v, partition %d, offset %d; want Event, nil, 3, 77", kind, err, rec.Partition, rec.Offset)
	}
	if &rec.KeyFields[0] != keyFields || &rec.Values[0] != values {
		t.Errorf("Decode allocated new KeyFields/Values arrays, want the ones in rec reused")
	}
}

func TestDecodeAllocations(t *testing.T) {
	count := with(callsConfig("json"), func(c *config.Config) { c.Aggregates = c.Aggregates[1:] })
	tests := map[string]struct {
		cfg  config.Config
		max  float64
		recs []string
	}{
		"count only: interned key, nothing else": {count, 0, []string{`{"sid":"a",` + callTime + `}`, `{"sid":"b",` + callTime + `}`}},
		"sum: no text kept for numeric values":   {callsConfig("json"), 0, []string{`{"sid":"a",` + callTime + `,"duration":17}`, `{"sid":"b",` + callTime + `,"duration":42}`}},
		"last: one string for its text": {with(callsConfig("json"), func(c *config.Config) { c.Aggregates[0].Fn = "last" }), 1,
			[]string{`{"sid":"a",` + callTime + `,"duration":17}`, `{"sid":"b",` + callTime + `,"duration":"x"}`}},
		"filtered record": {callsConfig("json"), 0, []string{`{"sid":"a","callType":"x"}`}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := newDecoder(t, tt.cfg)
			var recs [][]byte
			for _, r := range tt.recs {
				recs = append(recs, []byte(r))
			}
			var rec record.Record
			i := 0
			got := testing.AllocsPerRun(100, func() {
				if _, err := d.Decode(&record.Input{Value: recs[i%len(recs)]}, &rec); err != nil {
					t.Fatal(err)
				}
				i++
			})
			if got > tt.max {
				t.Errorf("Decode allocates %v times per record, want at most %v", got, tt.max)
			}
		})
	}
}

// TestNewDecoderErrors: a spec that no valid config gives is refused, not
// decoded wrongly. (config.Load reports each with its key: unknown time
// zones and functions cannot even be put in a Spec.)
func TestNewDecoderErrors(t *testing.T) {
	tests := map[string]struct {
		format string
		change func(*record.Spec)
	}{
		"unknown format":              {"json", func(s *record.Spec) { s.Format = 99 }},
		"long delimiter":              {"csv", func(s *record.Spec) { s.CSVDelimiter = ",," }},
		"quote delimiter":             {"csv", func(s *record.Spec) { s.CSVDelimiter = `"` }},
		"no columns":                  {"csv", func(s *record.Spec) { s.CSVColumns = nil }},
		"repeated column":             {"csv", func(s *record.Spec) { s.CSVColumns = []string{"sid", "sid", "callTime", "duration"} }},
		"unknown column":              {"csv", func(s *record.Spec) { s.Key = []string{"nope"} }},
		"no timestamp field":          {"json", func(s *record.Spec) { s.TimeField = "" }},
		"no layout":                   {"json", func(s *record.Spec) { s.Layout = "" }},
		"layout without a date":       {"json", func(s *record.Spec) { s.Layout = "15:04:05" }},
		"marker field not a column":   {"csv", func(s *record.Spec) { s.MarkerField = "wm" }},
		"kafka key as marker":         {"json", func(s *record.Spec) { s.MarkerField = "$key" }},
		"empty filter field":          {"json", func(s *record.Spec) { s.Filters[0].Field = "" }},
		"sum without field":           {"json", func(s *record.Spec) { s.Aggregates[0].Field = "" }},
		"punctuated needs a layout":   {"json", func(s *record.Spec) { s.TimeField, s.MarkerField, s.Layout = "$timestamp", "wm", "" }},
		"registry format, no schemas": {"json", func(s *record.Spec) { s.Format = record.FormatAvro }},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			spec := callsConfig(tt.format).RecordSpec()
			tt.change(&spec)
			if _, err := record.NewDecoder(spec, nil); err == nil {
				t.Errorf("NewDecoder(%+v) = nil error, want one", spec)
			}
		})
	}
}
