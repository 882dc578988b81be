package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Layout keywords accepted besides Go layouts (docs/configuration.md#rules-for-particular-keys).
const (
	LayoutUnixS   = "unix_s"
	LayoutUnixMS  = "unix_ms"
	LayoutUnixUS  = "unix_us"
	LayoutUnixNS  = "unix_ns"
	LayoutRFC3339 = "rfc3339"
)

// A TimeParser turns event-time text into ms since the epoch for one
// layout. Common layouts take a fast path that never allocates; anything
// the fast path does not accept is handed to time.ParseInLocation, so the
// results always agree with it. A TimeParser is safe for concurrent use.
type TimeParser struct {
	name   string // the layout as configured
	layout string // the Go layout (time.RFC3339 for rfc3339)
	loc    *time.Location
	unix   bool // unix_*: a decimal number scaled by 10^shift to ms
	shift  int
	rfc    bool                     // rfc3339: the strict RFC 3339 fast path
	fast   []layoutToken            // nil when the layout has no fast path
	fixed  *fixedLayout             // the fast path's positions, when they are fixed
	zone   atomic.Pointer[zoneSpan] // the last offset of loc looked up
}

// NewTimeParser compiles layout (a Go layout, or unix_s | unix_ms |
// unix_us | unix_ns | rfc3339). loc is used for layouts without a zone; nil
// means UTC. A Go layout must contain a full date, so a typo such as a
// field name in place of a layout is caught here.
func NewTimeParser(layout string, loc *time.Location) (*TimeParser, error) {
	if loc == nil {
		loc = time.UTC
	}
	p := &TimeParser{name: layout, layout: layout, loc: loc}
	switch layout {
	case LayoutUnixS:
		p.unix, p.shift = true, 3
	case LayoutUnixMS:
		p.unix, p.shift = true, 0
	case LayoutUnixUS:
		p.unix, p.shift = true, -3
	case LayoutUnixNS:
		p.unix, p.shift = true, -6
	case LayoutRFC3339:
		p.layout, p.rfc = time.RFC3339, true
	default:
		if !hasFullDate(layout) {
			return nil, fmt.Errorf("layout %q has no full date (year, month and day)", layout)
		}
		p.fast = compileLayout(layout)
		p.fixed = fixedPositions(p.fast)
	}
	return p, nil
}

// ParseTime parses text with layout in loc; see NewTimeParser. It compiles
// the layout on every call: keep a TimeParser for repeated use.
func ParseTime(layout string, loc *time.Location, text []byte) (int64, error) {
	p, err := NewTimeParser(layout, loc)
	if err != nil {
		return 0, err
	}
	return p.Parse(text)
}

// Layout returns the layout the parser was made with.
func (p *TimeParser) Layout() string { return p.name }

// Parse returns text as ms since the epoch. Digits below the millisecond
// are dropped, rounding toward minus infinity, as time.Time.UnixMilli does.
func (p *TimeParser) Parse(text []byte) (int64, error) {
	if p.unix {
		if ms, ok := parseUnixInt(text, p.shift); ok {
			return ms, nil
		}
		ms, err := parseUnix(text, p.shift)
		if err != nil {
			return 0, fmt.Errorf("%q as %s: %w", text, p.name, err)
		}
		return ms, nil
	}
	if p.rfc {
		if ms, ok := parseRFC3339(text); ok {
			return ms, nil
		}
	} else if p.fixed != nil {
		if ms, ok := p.parseFixed(text); ok {
			return ms, nil
		}
	} else if p.fast != nil {
		if ms, ok := p.parseFast(text); ok {
			return ms, nil
		}
	}
	t, err := time.ParseInLocation(p.layout, string(text), p.loc)
	if err != nil {
		return 0, err
	}
	return t.UnixMilli(), nil
}

// hasFullDate reports whether layout tells dates apart: instants that differ
// in year, month or day must not parse back to the same day.
func hasFullDate(layout string) bool {
	probes := []time.Time{
		time.Date(2031, 11, 27, 13, 14, 15, 0, time.UTC),
		time.Date(1998, 2, 3, 4, 5, 6, 0, time.UTC),
	}
	for _, want := range probes {
		got, err := time.Parse(layout, want.Format(layout))
		if err != nil || got.Year() != want.Year() || got.YearDay() != want.YearDay() {
			return false
		}
	}
	return true
}

// layoutToken is one element of a layout that has a fast path: a literal
// byte or a zero-padded number field.
type layoutToken struct {
	field byte // 0 for a literal, else one of the field* constants
	lit   byte
}

const (
	fieldYear byte = iota + 1
	fieldMonth
	fieldDay
	fieldHour
	fieldMinute
	fieldSecond
)

// compileLayout returns the tokens of layout when it consists only of
// 2006, 01, 02, 15, 04, 05 (each at most once, with a full date) and the
// separators - / : . , T and space; otherwise nil. Those tokens are exactly
// how time.Parse reads such a layout, so the fast path can only accept what
// it accepts, with the same result.
func compileLayout(layout string) []layoutToken {
	fields := map[string]byte{"2006": fieldYear, "01": fieldMonth, "02": fieldDay, "15": fieldHour, "04": fieldMinute, "05": fieldSecond}
	var toks []layoutToken
	var seen [fieldSecond + 1]bool
	for i := 0; i < len(layout); {
		if f, n := matchField(layout[i:], fields); f != 0 {
			if seen[f] {
				return nil
			}
			seen[f] = true
			toks = append(toks, layoutToken{field: f})
			i += n
			continue
		}
		switch c := layout[i]; c {
		case '-', '/', ':', '.', ',', 'T', ' ':
			toks = append(toks, layoutToken{lit: c})
			i++
		default:
			return nil
		}
	}
	if !seen[fieldYear] || !seen[fieldMonth] || !seen[fieldDay] {
		return nil
	}
	return toks
}

func matchField(s string, fields map[string]byte) (byte, int) {
	for _, n := range []int{4, 2} {
		if len(s) >= n {
			if f, ok := fields[s[:n]]; ok {
				return f, n
			}
		}
	}
	return 0, 0
}

// parseFast parses text with the compiled tokens. It reports false for
// anything unusual (time.ParseInLocation then decides).
func (p *TimeParser) parseFast(text []byte) (int64, bool) {
	var year, month, day, hour, minute, sec, ms int
	i := 0
	for _, tok := range p.fast {
		if tok.field == 0 {
			if i >= len(text) || text[i] != tok.lit {
				return 0, false
			}
			i++
			continue
		}
		width := 2
		if tok.field == fieldYear {
			width = 4
		}
		n, ok := digits(text, i, width)
		if !ok {
			return 0, false
		}
		i += width
		switch tok.field {
		case fieldYear:
			year = n
		case fieldMonth:
			month = n
		case fieldDay:
			day = n
		case fieldHour:
			hour = n
		case fieldMinute:
			minute = n
		case fieldSecond:
			sec = n
			ms, i = fraction(text, i)
		}
	}
	if i != len(text) || !validDate(year, month, day, hour, minute, sec) {
		return 0, false
	}
	return p.toMillis(year, month, day, hour, minute, sec, ms), true
}

// fixedLayout is a fast-path layout whose fields all sit at fixed
// positions: the seconds, if any, come last (a fraction may follow them).
type fixedLayout struct {
	size int     // the text's length without a fraction
	at   [7]int  // the position of each field* (0: absent, then the value is 0)
	has  [7]bool // whether the layout has the field
	lits []litAt // the separators
	frac bool    // the layout ends with seconds: a fraction may follow
}

type litAt struct {
	pos int
	c   byte
}

// fixedPositions returns the fixed positions of toks, or nil when a field
// follows the seconds.
func fixedPositions(toks []layoutToken) *fixedLayout {
	if toks == nil {
		return nil
	}
	f := &fixedLayout{}
	for k, tok := range toks {
		if tok.field == 0 {
			f.lits = append(f.lits, litAt{f.size, tok.lit})
			f.size++
			continue
		}
		f.at[tok.field], f.has[tok.field] = f.size, true
		f.size += 2
		if tok.field == fieldYear {
			f.size += 2
		}
		if tok.field == fieldSecond {
			if k != len(toks)-1 {
				return nil
			}
			f.frac = true
		}
	}
	return f
}

// parseFixed is parseFast for a fixedLayout.
func (p *TimeParser) parseFixed(text []byte) (int64, bool) {
	f := p.fixed
	if len(text) < f.size || (len(text) > f.size && !f.frac) {
		return 0, false
	}
	for _, l := range f.lits {
		if text[l.pos] != l.c {
			return 0, false
		}
	}
	var v [7]int
	for field := fieldYear; field <= fieldSecond; field++ {
		if !f.has[field] {
			continue
		}
		width := 2
		if field == fieldYear {
			width = 4
		}
		n, ok := digits(text, f.at[field], width)
		if !ok {
			return 0, false
		}
		v[field] = n
	}
	ms, i := 0, f.size
	if f.frac {
		ms, i = fraction(text, i)
	}
	year, month, day, hour, minute, sec := v[fieldYear], v[fieldMonth], v[fieldDay], v[fieldHour], v[fieldMinute], v[fieldSecond]
	if i != len(text) || !validDate(year, month, day, hour, minute, sec) {
		return 0, false
	}
	return p.toMillis(year, month, day, hour, minute, sec, ms), true
}

// parseRFC3339 is time.Parse's strict RFC 3339 fast path:
// 2006-01-02T15:04:05[.frac](Z|±hh:mm).
func parseRFC3339(s []byte) (int64, bool) {
	if len(s) < len("2006-01-02T15:04:05Z") || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return 0, false
	}
	year, ok1 := digits(s, 0, 4)
	month, ok2 := digits(s, 5, 2)
	day, ok3 := digits(s, 8, 2)
	hour, ok4 := digits(s, 11, 2)
	minute, ok5 := digits(s, 14, 2)
	sec, ok6 := digits(s, 17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || !validDate(year, month, day, hour, minute, sec) {
		return 0, false
	}
	ms, i := 0, 19
	if len(s) >= i+2 && s[i] == '.' {
		ms, i = fraction(s, i)
	}
	zone := s[i:]
	offset := 0
	if len(zone) != 1 || zone[0] != 'Z' {
		hh, okh := digits(zone, 1, 2)
		mm, okm := digits(zone, 4, 2)
		if len(zone) != 6 || (zone[0] != '+' && zone[0] != '-') || zone[3] != ':' || !okh || !okm || hh > 23 || mm > 59 {
			return 0, false
		}
		offset = (hh*60 + mm) * 60_000
		if zone[0] == '-' {
			offset = -offset
		}
	}
	return utcSeconds(year, month, day, hour, minute, sec)*1000 + int64(ms) - int64(offset), true
}

// digits reads exactly width decimal digits at s[i:].
func digits(s []byte, i, width int) (int, bool) {
	if i+width > len(s) {
		return 0, false
	}
	n := 0
	for _, c := range s[i : i+width] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// fraction reads an optional fractional second at s[i:] ("." or "," and at
// least one digit, as time.Parse allows after the seconds field) and
// returns its whole milliseconds and the index after it.
func fraction(s []byte, i int) (ms, next int) {
	if i+1 >= len(s) || (s[i] != '.' && s[i] != ',') || s[i+1] < '0' || s[i+1] > '9' {
		return 0, i
	}
	n := 0
	for i++; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if n < 3 {
			ms = ms*10 + int(s[i]-'0')
			n++
		}
	}
	for ; n < 3; n++ {
		ms *= 10
	}
	return ms, i
}

func validDate(year, month, day, hour, minute, sec int) bool {
	return month >= 1 && month <= 12 && day >= 1 && day <= daysIn(month, year) &&
		hour < 24 && minute < 60 && sec < 60
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// utcSeconds returns a wall-clock time read as UTC, in seconds since the
// epoch.
func utcSeconds(year, month, day, hour, minute, sec int) int64 {
	return daysFromCivil(year, month, day)*86400 + int64(hour*3600+minute*60+sec)
}

// toMillis converts a wall-clock time in p.loc to ms since the epoch,
// exactly as time.Date does (DST gaps and overlaps included) but without
// building a time.Time while the offset stays the one last looked up.
func (p *TimeParser) toMillis(year, month, day, hour, minute, sec, ms int) int64 {
	local := utcSeconds(year, month, day, hour, minute, sec)
	if p.loc == time.UTC {
		return local*1000 + int64(ms)
	}
	// time.Date's steps: the offset at the wall clock read as UTC, checked
	// against the zone it belongs to, else the offset at the adjusted time.
	z := p.lookup(local)
	offset := z.offset
	if offset != 0 {
		if utc := local - offset; utc < z.start || utc >= z.end {
			offset = p.lookup(utc).offset
		}
	}
	return (local-offset)*1000 + int64(ms)
}

// zoneSpan is what time.Location's lookup says about an instant: the zone
// offset, and the span [start, end) of seconds it holds for.
type zoneSpan struct{ offset, start, end int64 }

// lookup returns the zone of p.loc at sec (unix seconds), from the cache
// when sec is in the span last looked up.
func (p *TimeParser) lookup(sec int64) *zoneSpan {
	if z := p.zone.Load(); z != nil && z.start <= sec && sec < z.end {
		return z
	}
	t := time.Unix(sec, 0).In(p.loc)
	_, offset := t.Zone()
	z := &zoneSpan{offset: int64(offset), start: math.MinInt64, end: math.MaxInt64}
	start, end := t.ZoneBounds() // zero: unbounded
	if !start.IsZero() {
		z.start = start.Unix()
	}
	if !end.IsZero() {
		z.end = end.Unix()
	}
	p.zone.Store(z)
	return z
}

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian
// date (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

var (
	errNotNumber = errors.New("not a number")
	errRange     = errors.New("out of range")
)

// parseUnix parses a decimal number (JSON number syntax, surrounding spaces
// allowed) and returns it times 10^shift, rounded toward minus infinity:
// unix_s 1607654003.161 is 1607654003161 ms, unix_us -1500 is -2 ms. It
// works on the digits, so no precision is lost to float64. (Parse tries
// parseUnixInt first.)
func parseUnix(text []byte, shift int) (int64, error) {
	n, ok := scanDecimal(trimSpaces(text))
	if !ok {
		return 0, errNotNumber
	}
	point := n.intDigits + n.exp + shift // digits before the decimal point
	var acc uint64
	for k := 0; k < point && k < n.count(); k++ {
		d := uint64(n.digit(k))
		if acc > (math.MaxInt64-d)/10 {
			return 0, errRange
		}
		acc = acc*10 + d
	}
	if acc != 0 {
		for k := n.count(); k < point; k++ {
			if acc > math.MaxInt64/10 {
				return 0, errRange
			}
			acc *= 10
		}
	}
	v := int64(acc)
	if n.neg {
		v = -v
		if n.nonZeroFrom(max(point, 0)) {
			v--
		}
	}
	return v, nil
}

// parseUnixInt is parseUnix's fast path for the usual text: a number
// without sign, spaces or exponent, with at most 15 digits before the
// point (18 when shift ≤ 0), so that the result fits an int64 with room to
// spare. Digits beyond the millisecond are dropped, which is the floor for
// a number that is not negative. It reports false for anything else.
func parseUnixInt(text []byte, shift int) (int64, bool) {
	i := 0
	var v int64
	if n := len(text); n >= 8 && n <= 16 {
		// All digits, as unix_s, unix_ms and unix_us times are these
		// days: two overlapping words instead of a loop. The bytes that
		// the last word shares with the first are masked to leading
		// zeros (all of them for n = 8, where 1<<64 is 0).
		first, last := binary.LittleEndian.Uint64(text), binary.LittleEndian.Uint64(text[n-8:])
		if nonDigits(first)|nonDigits(last) == 0 {
			i, v = n, int64(eightDigits(first)*pow10[n-8]+eightDigits(last&^(1<<(8*(16-n))-1)))
		}
	}
	for i < len(text) && text[i] >= '0' && text[i] <= '9' {
		v = v*10 + int64(text[i]-'0')
		i++
	}
	if i == 0 || i > 18 || (shift > 0 && i > 15) || (text[0] == '0' && i > 1) {
		return 0, false
	}
	frac := text[i:]
	if len(frac) > 0 {
		if len(frac) < 2 || frac[0] != '.' {
			return 0, false
		}
		frac = frac[1:]
		for _, c := range frac {
			if c < '0' || c > '9' {
				return 0, false
			}
		}
	}
	switch shift { // the layouts' 3, 0, -3 or -6; constant divisors: a multiply, not a division
	case 0:
		return v, true
	case -3:
		return v / 1e3, true
	case -6:
		return v / 1e6, true
	}
	for k := range shift {
		v *= 10
		if k < len(frac) {
			v += int64(frac[k] - '0')
		}
	}
	return v, true
}

// pow10 holds the powers of ten up to 10^8.
var pow10 = [...]uint64{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000}

// nonDigits flags (in the high bit of each byte) the bytes of v that are
// not decimal digits. The sums are per byte (seven bits plus at most 0x50)
// and never carry into the next one.
func nonDigits(v uint64) uint64 {
	low7 := v &^ highBits
	return ((low7 + lowBits*(0x80-'9'-1)) | ^(low7 + lowBits*(0x80-'0')) | v) & highBits
}

// eightDigits returns the number written by the eight digits in v, the
// first one in the lowest byte. Zero bytes count as leading zeros. It
// combines neighbours pairwise: 2, 4, then 8 digits.
func eightDigits(v uint64) uint64 {
	v = (v & (lowBits * 0x0f)) * (10<<8 + 1) >> 8
	v = (v & 0x00ff00ff00ff00ff) * (100<<16 + 1) >> 16
	return (v & 0x0000ffff0000ffff) * (10000<<32 + 1) >> 32
}

// decimal is a JSON number split into its parts, pointing into the text.
type decimal struct {
	neg       bool
	intPart   []byte
	fracPart  []byte
	intDigits int // len(intPart)
	exp       int // the exponent, clamped near ±100000 (far beyond int64)
}

func (n *decimal) count() int { return len(n.intPart) + len(n.fracPart) }

func (n *decimal) digit(k int) byte {
	if k < len(n.intPart) {
		return n.intPart[k] - '0'
	}
	return n.fracPart[k-len(n.intPart)] - '0'
}

// nonZeroFrom reports whether any digit at position k or later is not 0.
func (n *decimal) nonZeroFrom(k int) bool {
	for ; k < n.count(); k++ {
		if n.digit(k) != 0 {
			return true
		}
	}
	return false
}

// scanDecimal splits s when it is exactly one JSON number.
func scanDecimal(s []byte) (decimal, bool) {
	var n decimal
	end, ok := scanNumber(s, 0)
	if !ok || end != len(s) {
		return n, false
	}
	i := 0
	if s[0] == '-' {
		n.neg, i = true, 1
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n.intPart = s[start:i]
	n.intDigits = len(n.intPart)
	if i < len(s) && s[i] == '.' {
		start = i + 1
		for i = start; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		}
		n.fracPart = s[start:i]
	}
	if i < len(s) {
		i++ // e or E
		neg := s[i] == '-'
		if s[i] == '-' || s[i] == '+' {
			i++
		}
		for ; i < len(s); i++ {
			if n.exp < 100000 {
				n.exp = n.exp*10 + int(s[i]-'0')
			}
		}
		if neg {
			n.exp = -n.exp
		}
	}
	return n, true
}

// scanNumber returns the end of the JSON number that starts at s[i], and
// false when there is none.
func scanNumber(s []byte, i int) (int, bool) {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i >= len(s):
		return i, false
	case s[i] == '0':
		i++
	case s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i+1)
	default:
		return i, false
	}
	if i < len(s) && s[i] == '.' {
		j := skipDigits(s, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := skipDigits(s, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func skipDigits(s []byte, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

func trimSpaces(s []byte) []byte {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
