package server

import (
	"net/http"
	"slices"
	"strconv"
	"sync"
)

// POST /v1/check's answer, a Result, written directly: the bytes
// json.Marshal writes, for a Result of plain strings (printable ASCII but
// '<', '>' and '&', which encoding/json escapes as \u003c and so on)
// without a deny body; json.Marshal writes any other. TestResultJSON
// holds the two equal.

// writeResult writes r as writeJSON does.
func writeResult(w http.ResponseWriter, status int, r *Result) {
	buf := resultBufs.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= 8<<10 {
			resultBufs.Put(buf)
		}
	}()
	b, ok := appendResult((*buf)[:0], r)
	if !ok {
		writeJSON(w, status, r)
		return
	}
	*buf = b
	h := w.Header()
	h["Content-Type"], h["X-Content-Type-Options"] = jsonContentType, nosniff
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// The headers of every JSON answer, one slice each for all of them
// (net/http copies the header when it writes it).
var (
	jsonContentType = []string{"application/json"}
	nosniff         = []string{"nosniff"}
)

// resultBufs are the buffers answers are written in, reused.
var resultBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// appendResult appends r's JSON to b; false when r holds what it does not
// write (a string that is not plain, a deny body), left to json.Marshal.
func appendResult(b []byte, r *Result) ([]byte, bool) {
	if !plainResult(r) {
		return b, false
	}
	b = append(b, '{')
	if r.Policy != "" {
		b = appendString(append(b, `"policy":`...), r.Policy)
		b = append(b, ',')
	}
	if r.Key != "" {
		b = appendString(append(b, `"key":`...), r.Key)
		b = append(b, ',')
	}
	b = strconv.AppendBool(append(b, `"allowed":`...), r.Allowed)
	b = strconv.AppendInt(append(b, `,"limit":`...), r.Limit, 10)
	b = strconv.AppendInt(append(b, `,"remaining":`...), r.Remaining, 10)
	b = strconv.AppendInt(append(b, `,"retry_after_ms":`...), r.RetryAfterMS, 10)
	b = strconv.AppendInt(append(b, `,"reset_after_ms":`...), r.ResetAfterMS, 10)
	b = strconv.AppendBool(append(b, `,"degraded":`...), r.Degraded)
	b = strconv.AppendBool(append(b, `,"shadow":`...), r.Shadow)
	b = appendString(append(b, `,"source":`...), r.Source)
	if r.Plan != "" {
		b = appendString(append(b, `,"plan":`...), r.Plan)
	}
	return appendResultTail(b, r), true
}

// plainResult reports whether appendResult writes r: no deny body, plain
// strings only.
func plainResult(r *Result) bool {
	if r.DenyBody != nil || !plain(r.Policy) || !plain(r.Key) || !plain(r.Source) || !plain(r.Plan) || !plain(r.Rule) {
		return false
	}
	for k, v := range r.Headers {
		if !plain(k) || !plain(v) {
			return false
		}
	}
	return true
}

// appendResultTail appends r's fields from rule on, and the closing brace.
func appendResultTail(b []byte, r *Result) []byte {
	b = appendString(append(b, `,"rule":`...), r.Rule)
	b = strconv.AppendInt(append(b, `,"window_ms":`...), r.WindowMS, 10)
	if r.OverrideInvalid {
		b = append(b, `,"override_invalid":true`...)
	}
	if r.Warning {
		b = append(b, `,"warning":true`...)
	}
	if r.Blocked {
		b = append(b, `,"blocked":true`...)
	}
	if r.BlockStarted {
		b = append(b, `,"block_started":true`...)
	}
	if len(r.Headers) > 0 {
		b = appendHeaders(append(b, `,"headers":`...), r.Headers)
	}
	if r.DenyStatus != 0 {
		b = strconv.AppendInt(append(b, `,"deny_status":`...), int64(r.DenyStatus), 10)
	}
	return append(b, '}')
}

// appendHeaders appends a map of plain strings, its keys in order, as
// encoding/json writes maps.
func appendHeaders(b []byte, h map[string]string) []byte {
	var keyBuf [8]string
	keys := keyBuf[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(append(appendString(b, k), ':'), h[k])
	}
	return append(b, '}')
}

// appendString appends a plain string, quoted, '"' and '\\' escaped with
// a backslash as encoding/json escapes them.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(append(b, s[start:i]...), '\\', c)
			start = i + 1
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plain reports whether s is printable ASCII without '<', '>' or '&':
// what appendString writes as encoding/json does.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
