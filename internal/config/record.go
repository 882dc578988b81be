package config

import (
	"time"

	"aggregator/internal/record"
)

// formats maps source.format to the decoder's formats.
var formats = map[string]record.Format{
	"json": record.FormatJSON, "csv": record.FormatCSV, FormatAvro: record.FormatAvro,
	FormatProtobuf: record.FormatProtobuf, FormatJSONSchema: record.FormatJSONSchema,
}

// needs maps each aggregate fn to what it needs of its field.
var needs = [...]record.Need{
	FnCount: record.NeedNothing,
	FnSum:   record.NeedNumber, FnMin: record.NeedNumber, FnMax: record.NeedNumber, FnAvg: record.NeedNumber, FnQuantile: record.NeedNumber,
	FnFirst: record.NeedValue, FnLast: record.NeedValue, FnCountDistinct: record.NeedValue,
	FnTopK: record.NeedValue,
}

// RecordSpec is the decoder's part of c: the source, the punctuated
// marker, the aggregates' fields and a session's gap_field. c must be
// valid (Load's); a config built in code gets UTC for an empty or unknown
// time zone, and JSON for an empty format.
func (c Config) RecordSpec() record.Spec {
	src := c.Source
	loc, err := time.LoadLocation(src.Timestamp.Timezone)
	if err != nil {
		loc = time.UTC
	}
	s := record.Spec{
		Format: formats[src.Format], Key: src.Key,
		TimeField: src.Timestamp.Field, Layout: src.Timestamp.Layout, Location: loc,
	}
	if s.Format == record.FormatCSV {
		s.CSVColumns, s.CSVDelimiter = src.CSV.Columns, src.CSV.Delimiter
		if s.CSVDelimiter == "" {
			s.CSVDelimiter = ","
		}
	}
	if c.Watermark.Strategy == "punctuated" {
		s.MarkerField = c.Watermark.MarkerField
	}
	for _, f := range src.Filter {
		s.Filters = append(s.Filters, record.Filter{Field: f.Field, Equals: f.Equals})
	}
	for _, a := range c.Aggregates {
		need := needs[a.Func()]
		if a.Field != "" && need == record.NeedNothing { // count(field)
			need = record.NeedPresence
		}
		s.Aggregates = append(s.Aggregates, record.Aggregate{Field: a.Field, Need: need})
	}
	if c.Window.Type == "session" {
		s.GapField = c.Window.GapField
	}
	return s
}
