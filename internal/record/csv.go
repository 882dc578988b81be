package record

import (
	"bytes"
	"strconv"
)

// csvScanner splits one CSV record (RFC 4180: fields in double quotes may
// hold the delimiter, line breaks and "" for a quote) into its cells.
type csvScanner struct {
	delim   []byte
	columns int
	cells   []token
}

// split fills s.cells from data. A trailing line break is ignored. An
// unquoted empty cell is missing; a quoted one ("") is the empty string.
func (s *csvScanner) split(data []byte) error {
	data = trimLineBreak(data)
	s.cells = s.cells[:0]
	n := 0 // cells seen; only the first s.columns are kept
	for i := 0; ; n++ {
		var cell token
		var err error
		if i < len(data) && data[i] == '"' {
			cell, i, err = s.quoted(data, i)
		} else {
			cell, i, err = s.unquoted(data, i)
		}
		if err != nil {
			return err
		}
		if n < s.columns {
			s.cells = append(s.cells, cell)
		}
		if i >= len(data) {
			break
		}
		i += len(s.delim) // data[i:] starts with the delimiter
	}
	if n+1 != s.columns {
		return csvError("got " + strconv.Itoa(n+1) + " columns, want " + strconv.Itoa(s.columns))
	}
	return nil
}

// unquoted reads the cell at data[i:] up to the next delimiter.
func (s *csvScanner) unquoted(data []byte, i int) (token, int, error) {
	end := len(data)
	if n := bytes.Index(data[i:], s.delim); n >= 0 {
		end = i + n
	}
	if q := bytes.IndexByte(data[i:end], '"'); q >= 0 {
		return token{}, i, csvError(`bare " in an unquoted field at offset ` + strconv.Itoa(i+q))
	}
	if end == i {
		return token{kind: tokMissing}, end, nil
	}
	return token{kind: tokString, text: data[i:end]}, end, nil
}

// quoted reads the quoted cell at data[i] (a '"').
func (s *csvScanner) quoted(data []byte, i int) (token, int, error) {
	start := i + 1
	esc := false
	for j := start; ; {
		q := bytes.IndexByte(data[j:], '"')
		if q < 0 {
			return token{}, i, csvError("unterminated quoted field at offset " + strconv.Itoa(i))
		}
		j += q + 1
		if j < len(data) && data[j] == '"' {
			esc = true
			j++
			continue
		}
		if j < len(data) && !bytes.HasPrefix(data[j:], s.delim) {
			return token{}, j, csvError(`extraneous character after a closing quote at offset ` + strconv.Itoa(j))
		}
		return token{kind: tokString, esc: esc, text: data[start : j-1]}, j, nil
	}
}

func csvError(detail string) error {
	return &DecodeError{Reason: ReasonBadCSV, Detail: detail}
}

func trimLineBreak(data []byte) []byte {
	if n := len(data); n > 0 && data[n-1] == '\n' {
		data = data[:n-1]
	}
	if n := len(data); n > 0 && data[n-1] == '\r' {
		data = data[:n-1]
	}
	return data
}

// unescapeCSV appends the content of a quoted cell with "" turned into ".
func unescapeCSV(dst, s []byte) []byte {
	for {
		q := bytes.IndexByte(s, '"')
		if q < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:q+1]...)
		s = s[q+2:]
	}
}
