package simulate

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
)

// A Record is one line of a trace (--trace) or of a decision log
// (--replay). Both are CSV or JSON lines, told apart by the first
// character: '{' starts JSON lines.
//
// JSON lines have the fields time, key and, optionally, cost (default 1),
// policy (default: every policy simulated) and allowed (the decision made,
// required in a decision log); unknown fields are errors. A CSV file has
// the columns time,key[,cost], or any of time, key, cost, policy and
// allowed named in a header line. Lines starting with '#' and empty lines
// are skipped.
//
// time is an RFC 3339 time (2027-01-01T00:00:00.25Z) or an offset from the
// start of the simulation (250ms, 1.5s, 2h); a file uses one or the other.
type Record struct {
	// Line is the line the record starts on, counting from 1.
	Line int
	// Time is the absolute time when Absolute; otherwise Offset is the time
	// from the start of the simulation.
	Time     time.Time
	Offset   time.Duration
	Absolute bool
	Key      string
	Cost     int64
	// Policy is "" when the record applies to every policy.
	Policy string
	// Allowed is the decision recorded, when HasAllowed.
	Allowed    bool
	HasAllowed bool
}

// LineError is a problem on one line of a trace or decision log.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// MaxLineBytes is the longest line read from a trace or decision log.
const MaxLineBytes = 64 << 10

// Reader reads Records from a trace or decision log.
type Reader struct {
	file string
	br   *bufio.Reader
	json bool
	sc   *bufio.Scanner
	cr   *csv.Reader
	cols []string // CSV columns
	line int
	abs  int // 0 unknown, 1 absolute times, 2 offsets
	// decisions requires the allowed field (a decision log).
	decisions bool
}

// NewReader reads records from r; file names it in errors. With decisions
// set, every record must carry the decision made (allowed), as a decision
// log does.
func NewReader(r io.Reader, file string, decisions bool) (*Reader, error) {
	rd := &Reader{file: file, br: bufio.NewReaderSize(r, 64<<10), decisions: decisions}
	var err error
	if rd.json, err = sniffJSON(rd.br); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if rd.json {
		rd.sc = bufio.NewScanner(rd.br)
		rd.sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	} else {
		rd.cr = csv.NewReader(rd.br)
		rd.cr.FieldsPerRecord = -1
		rd.cr.Comment = '#'
		rd.cr.ReuseRecord = true
		rd.cr.TrimLeadingSpace = true
	}
	return rd, nil
}

// sniffJSON tells the format from the first character of br that is not
// white space: '{' is JSON lines, anything else CSV. An input that is
// empty or only white space (within the first 4096 bytes) is CSV, which
// reports the empty file.
func sniffJSON(br *bufio.Reader) (bool, error) {
	for n := 1; n <= 4096; n++ {
		b, err := br.Peek(n)
		if len(b) < n {
			return false, shortPeek(err)
		}
		if c := b[n-1]; !isBlank(c) {
			return c == '{', nil
		}
	}
	return false, nil
}

// shortPeek is the error of a Peek that found fewer bytes than it asked
// for: none when the input was empty or white space only.
func shortPeek(err error) error {
	if err == nil || err == io.EOF || errors.Is(err, bufio.ErrBufferFull) {
		return nil
	}
	return err
}

// isBlank reports whether c is white space: space, tab, CR or LF.
func isBlank(c byte) bool { return strings.IndexByte(" \t\r\n", c) >= 0 }

func (r *Reader) errorf(line int, format string, args ...any) error {
	return &LineError{File: r.file, Line: line, Err: fmt.Errorf(format, args...)}
}

// Next returns the next record, or io.EOF after the last.
func (r *Reader) Next() (Record, error) {
	if r.json {
		return r.nextJSON()
	}
	return r.nextCSV()
}

type jsonRecord struct {
	Time    *string `json:"time"`
	Key     *string `json:"key"`
	Cost    *int64  `json:"cost"`
	Policy  *string `json:"policy"`
	Allowed *bool   `json:"allowed"`
}

// nextJSON returns the record on the next JSON line, skipping blank lines
// and # comments.
func (r *Reader) nextJSON() (Record, error) {
	for r.sc.Scan() {
		r.line++
		b := bytes.TrimSpace(r.sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		rec, tm, err := r.jsonLine(b)
		if err != nil {
			return Record{}, err
		}
		return r.finish(rec, tm)
	}
	return Record{}, r.scanEnd()
}

// jsonLine reads the JSON object on line r.line (b, trimmed); tm is its
// time's text, for finish. Cost defaults to 1; a policy, when given, must
// not be empty.
func (r *Reader) jsonLine(b []byte) (rec Record, tm string, err error) {
	j, err := r.decodeJSONLine(b)
	if err != nil {
		return Record{}, "", err
	}
	if j.Time == nil {
		return Record{}, "", r.errorf(r.line, "time is missing")
	}
	if j.Key == nil {
		return Record{}, "", r.errorf(r.line, "key is missing")
	}
	rec, err = r.jsonOptional(j, Record{Line: r.line, Key: *j.Key, Cost: 1})
	if err != nil {
		return Record{}, "", err
	}
	return rec, *j.Time, nil
}

// decodeJSONLine decodes b, the one JSON object of line r.line, strictly.
func (r *Reader) decodeJSONLine(b []byte) (jsonRecord, error) {
	var j jsonRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return j, r.errorf(r.line, "not a JSON object with time, key, cost, policy, allowed: %v", err)
	}
	if dec.More() {
		return j, r.errorf(r.line, "more than one JSON value on the line")
	}
	return j, nil
}

// jsonOptional sets in rec the optional fields of j that are given:
// cost, policy (not empty) and allowed.
func (r *Reader) jsonOptional(j jsonRecord, rec Record) (Record, error) {
	if j.Cost != nil {
		rec.Cost = *j.Cost
	}
	if j.Policy != nil {
		if *j.Policy == "" {
			return Record{}, r.errorf(r.line, "policy must not be empty (leave it out to apply the line to every policy)")
		}
		rec.Policy = *j.Policy
	}
	if j.Allowed != nil {
		rec.Allowed, rec.HasAllowed = *j.Allowed, true
	}
	return rec, nil
}

// scanEnd says why the JSON lines ended: a read error, a line too long,
// a file with no records, or io.EOF after the last record.
func (r *Reader) scanEnd() error {
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return r.errorf(r.line+1, "line longer than %d bytes", MaxLineBytes)
		}
		return fmt.Errorf("%s: %w", r.file, err)
	}
	if r.line == 0 {
		return fmt.Errorf("%s: empty: no records", r.file)
	}
	return io.EOF
}

var csvColumns = []string{"time", "key", "cost", "policy", "allowed"}

// nextCSV returns the record on the next CSV line, reading a header line
// first when the file starts with one.
func (r *Reader) nextCSV() (Record, error) {
	for {
		fields, err := r.cr.Read()
		if err != nil {
			return Record{}, r.csvReadError(err)
		}
		line, _ := r.cr.FieldPos(0)
		first := r.line == 0
		r.line = line
		isHead, err := r.headerLine(fields, line, first)
		if err != nil {
			return Record{}, err
		}
		if !isHead {
			return r.csvLine(fields, line)
		}
	}
}

// headerLine reads fields as the header line when they are the file's
// first line and name columns, and reports whether they were.
func (r *Reader) headerLine(fields []string, line int, first bool) (bool, error) {
	if !first || !isHeader(fields) {
		return false, nil
	}
	return true, r.header(fields, line)
}

// csvLine returns the record of the fields of a CSV line that is not the
// header.
func (r *Reader) csvLine(fields []string, line int) (Record, error) {
	if err := r.csvColumnsOf(fields, line); err != nil {
		return Record{}, err
	}
	rec, tm, err := r.csvRecord(fields, line)
	if err != nil {
		return Record{}, err
	}
	return r.finish(rec, tm)
}

// csvReadError says why the CSV reader stopped: io.EOF after the last
// record, a file with no records, a parse error at its line, or a read
// error.
func (r *Reader) csvReadError(err error) error {
	if err == io.EOF {
		if r.line == 0 {
			return fmt.Errorf("%s: empty: no records", r.file)
		}
		return io.EOF
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return r.errorf(pe.StartLine, "%v", pe.Err)
	}
	return fmt.Errorf("%s: %w", r.file, err)
}

// csvColumnsOf checks the number of fields on line against the columns,
// which without a header line are time,key[,cost].
func (r *Reader) csvColumnsOf(fields []string, line int) error {
	if r.cols == nil {
		r.cols = []string{"time", "key", "cost"}
		if len(fields) > 3 {
			return r.errorf(line, "%d columns: want time,key[,cost], or a header line naming the columns (%s)", len(fields), strings.Join(csvColumns, ", "))
		}
	}
	if len(fields) > len(r.cols) || len(fields) < 2 {
		return r.errorf(line, "%d columns, want %s", len(fields), strings.Join(r.cols, ","))
	}
	return nil
}

// csvRecord reads the fields of one CSV line by their columns; tm is the
// time column's text, for finish.
func (r *Reader) csvRecord(fields []string, line int) (rec Record, tm string, err error) {
	rec = Record{Line: line, Cost: 1}
	for i, f := range fields {
		if err := r.csvField(&rec, &tm, r.cols[i], strings.TrimSpace(f), line); err != nil {
			return rec, "", err
		}
	}
	if cols := r.cols[:len(fields)]; !contains(cols, "time") || !contains(cols, "key") {
		return rec, "", r.errorf(line, "time and key are required")
	}
	return rec, tm, nil
}

// csvField sets what column col holds, from its trimmed text f on line:
// a field of rec, or tm, the time's text.
func (r *Reader) csvField(rec *Record, tm *string, col, f string, line int) error {
	switch col {
	case "time":
		*tm = f
	case "key":
		rec.Key = f
	case "policy":
		rec.Policy = f
	case "cost":
		return r.csvCost(rec, f, line)
	case "allowed":
		return r.csvAllowed(rec, f, line)
	}
	return nil
}

// csvCost sets rec's cost from f, a whole number; empty keeps the default.
func (r *Reader) csvCost(rec *Record, f string, line int) error {
	if f == "" {
		return nil
	}
	n, err := strconv.ParseInt(f, 10, 64)
	if err != nil {
		return r.errorf(line, "cost %q is not a whole number", f)
	}
	rec.Cost = n
	return nil
}

// csvAllowed sets rec's recorded decision from f, true or false.
func (r *Reader) csvAllowed(rec *Record, f string, line int) error {
	b, err := strconv.ParseBool(f)
	if err != nil {
		return r.errorf(line, "allowed %q: want true or false", f)
	}
	rec.Allowed, rec.HasAllowed = b, true
	return nil
}

func (r *Reader) header(fields []string, line int) error {
	seen := map[string]bool{}
	for _, f := range fields {
		if err := r.headerColumn(f, seen, line); err != nil {
			return err
		}
	}
	if !seen["time"] || !seen["key"] {
		return r.errorf(line, "the header needs a time and a key column")
	}
	if r.decisions && !seen["allowed"] {
		return r.errorf(line, "a decision log needs an allowed column")
	}
	return nil
}

// headerColumn adds the column the header field f names, which must be
// known and not in seen (it is added).
func (r *Reader) headerColumn(f string, seen map[string]bool, line int) error {
	c := strings.ToLower(strings.TrimSpace(f))
	if !contains(csvColumns, c) {
		return r.errorf(line, "unknown column %q in the header (want %s)", f, strings.Join(csvColumns, ", "))
	}
	if seen[c] {
		return r.errorf(line, "column %q named twice", c)
	}
	seen[c] = true
	r.cols = append(r.cols, c)
	return nil
}

// finish parses the time and checks what every record needs.
func (r *Reader) finish(rec Record, tm string) (Record, error) {
	if err := r.checkRecord(rec); err != nil {
		return Record{}, err
	}
	if err := r.parseTime(&rec, tm); err != nil {
		return Record{}, err
	}
	kind := 2
	if rec.Absolute {
		kind = 1
	}
	if r.abs != 0 && r.abs != kind {
		return Record{}, r.errorf(rec.Line, "time %q: the file mixes RFC 3339 times and offsets; use one or the other", tm)
	}
	r.abs = kind
	return rec, nil
}

// checkRecord checks what every record needs but its time: a key, a cost
// of at least 1 and, in a decision log, the decision.
func (r *Reader) checkRecord(rec Record) error {
	if rec.Key == "" {
		return r.errorf(rec.Line, "key is empty")
	}
	if rec.Cost < 1 {
		return r.errorf(rec.Line, "cost must be at least 1, got %d", rec.Cost)
	}
	if r.decisions && !rec.HasAllowed {
		return r.errorf(rec.Line, "allowed is missing: a decision log records each decision (true or false)")
	}
	return nil
}

// parseTime sets rec's time from tm: an RFC 3339 time, or an offset from
// the start.
func (r *Reader) parseTime(rec *Record, tm string) error {
	if t, err := time.Parse(time.RFC3339Nano, tm); err == nil {
		rec.Time, rec.Absolute = t, true
		return nil
	}
	d, err := config.ParseDuration(tm)
	if err != nil || d < 0 {
		return r.errorf(rec.Line, "time %q: want an RFC 3339 time such as 2027-01-01T00:00:00.25Z, or an offset from the start such as 1.5s", tm)
	}
	rec.Offset = d
	return nil
}

// isHeader reports whether a CSV file's first record names columns: its
// first field is a column name (which no time is).
func isHeader(fields []string) bool {
	return contains(csvColumns, strings.ToLower(strings.TrimSpace(fields[0])))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
