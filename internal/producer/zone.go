package producer

import (
	"time"

	"aggregator/internal/config"
)

// EncoderFor returns the Encoder of cfg's results: NewEncoder's, writing
// the start and end of calendar windows with their zone's offset, and the
// seq of count windows.
func EncoderFor(cfg config.Config) *Encoder {
	e := NewEncoder(cfg.AggregateNames())
	e.zone, e.seq = cfg.Window.Zone(), cfg.Window.Kind() == config.Count
	return e
}

// appendZoned appends ms as RFC 3339 with zone's offset at that instant
// (Z for a zero offset), with milliseconds only when they are not zero.
func appendZoned(dst []byte, ms int64, zone *time.Location) []byte {
	t := time.UnixMilli(ms).In(zone)
	if ms%1000 == 0 {
		return t.AppendFormat(dst, time.RFC3339)
	}
	return t.AppendFormat(dst, "2006-01-02T15:04:05.000Z07:00")
}
