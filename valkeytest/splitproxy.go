package valkeytest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SplitProxy returns the address of a proxy to the Valkey at target that
// breaks the atomicity of script calls, to show that a check catches
// non-atomic limiting. Every EVAL and EVALSHA becomes two round trips: the
// proxy first reads the state of the call's keys (DUMP and PTTL), waits
// pause, and then, in one MULTI, writes that state back (RESTORE, or DEL
// for a key that did not exist) and runs the script on it. Decisions made
// by other connections between the read and the write are lost, as with a
// limiter that reads a counter in one round trip and writes it in another.
// Every other command is passed through unchanged. The proxy is for a
// standalone server (it does not follow cluster redirections) and is
// closed, with its connections, in t.Cleanup.
func SplitProxy(t testing.TB, target string, pause time.Duration) string {
	t.Helper()
	return listen(t, "split proxy", target, func(c, up net.Conn) { splitConn(c, up, pause) })
}

// splitConn serves one client connection, one request at a time.
func splitConn(c, up net.Conn, pause time.Duration) {
	cr, ur := bufio.NewReader(c), bufio.NewReader(up)
	for {
		raw, args, err := readRequest(cr)
		if err != nil {
			return
		}
		reply, err := answer(up, ur, raw, args, pause)
		if err != nil {
			return
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

// answer returns the server's reply to one request (raw, parsed as args):
// a script call is split in two, anything else passed through.
func answer(up net.Conn, ur *bufio.Reader, raw []byte, args [][]byte, pause time.Duration) ([]byte, error) {
	cmd := strings.ToUpper(string(firstOr(args)))
	if (cmd == "EVAL" || cmd == "EVALSHA") && len(args) >= 3 {
		return splitScript(up, ur, raw, args, pause)
	}
	if _, err := up.Write(raw); err != nil {
		return nil, err
	}
	reply, _, err := readValue(ur)
	return reply, err
}

func firstOr(args [][]byte) []byte {
	if len(args) == 0 {
		return nil
	}
	return args[0]
}

// splitScript runs one script call as a read, a pause, and a write.
func splitScript(up net.Conn, ur *bufio.Reader, raw []byte, args [][]byte, pause time.Duration) ([]byte, error) {
	nkeys, err := strconv.Atoi(string(args[2]))
	if err != nil || nkeys < 0 || 3+nkeys > len(args) {
		return []byte("-ERR split proxy: bad numkeys\r\n"), nil
	}
	keys := args[3 : 3+nkeys]
	dumps, ttls, err := readState(up, ur, keys)
	if err != nil {
		return nil, err
	}
	time.Sleep(pause)
	return restoreAndRun(up, ur, keys, dumps, ttls, raw)
}

// readState reads each key's state (DUMP; nil when there is none) and
// PTTL.
func readState(up net.Conn, ur *bufio.Reader, keys [][]byte) (dumps [][]byte, ttls []int64, err error) {
	var req bytes.Buffer
	for _, k := range keys {
		writeCommand(&req, []byte("DUMP"), k)
		writeCommand(&req, []byte("PTTL"), k)
	}
	if _, err := up.Write(req.Bytes()); err != nil {
		return nil, nil, err
	}
	dumps = make([][]byte, len(keys))
	ttls = make([]int64, len(keys))
	for i := range keys {
		if dumps[i], ttls[i], err = readKeyState(ur); err != nil {
			return nil, nil, err
		}
	}
	return dumps, ttls, nil
}

// readKeyState reads the replies to one key's DUMP (nil when the key does
// not exist) and PTTL.
func readKeyState(ur *bufio.Reader) (dump []byte, ttl int64, err error) {
	raw, _, err := readValue(ur)
	if err != nil {
		return nil, 0, err
	}
	if raw[0] == '$' && !bytes.HasPrefix(raw, []byte("$-1")) {
		dump = bulkBody(raw)
	}
	raw, _, err = readValue(ur)
	if err != nil {
		return nil, 0, err
	}
	ttl, _ = strconv.ParseInt(strings.TrimSpace(string(raw[1:])), 10, 64)
	return dump, ttl, nil
}

// restoreAndRun writes the state as read back, then runs the script (its
// command as received, raw) on it, in one MULTI, and returns the script's
// reply.
func restoreAndRun(up net.Conn, ur *bufio.Reader, keys, dumps [][]byte, ttls []int64, raw []byte) ([]byte, error) {
	if _, err := up.Write(restoreRequest(keys, dumps, ttls, raw)); err != nil {
		return nil, err
	}
	for range len(keys) + 2 { // +OK for MULTI, +QUEUED for each command
		if _, _, err := readValue(ur); err != nil {
			return nil, err
		}
	}
	execRaw, children, err := readValue(ur)
	if err != nil {
		return nil, err
	}
	if len(children) != len(keys)+1 {
		return execRaw, nil // EXECABORT or a null reply: pass it on
	}
	return children[len(children)-1], nil
}

// restoreRequest is the MULTI of restoreAndRun: each key's state written
// back (RESTORE, or DEL for a key that did not exist), then the script call
// raw.
func restoreRequest(keys, dumps [][]byte, ttls []int64, raw []byte) []byte {
	var req bytes.Buffer
	writeCommand(&req, []byte("MULTI"))
	for i, k := range keys {
		if dumps[i] == nil {
			writeCommand(&req, []byte("DEL"), k)
		} else {
			writeCommand(&req, []byte("RESTORE"), k, []byte(strconv.FormatInt(max(ttls[i], 0), 10)), dumps[i], []byte("REPLACE"))
		}
	}
	req.Write(raw)
	writeCommand(&req, []byte("EXEC"))
	return req.Bytes()
}

func writeCommand(b *bytes.Buffer, args ...[]byte) {
	fmt.Fprintf(b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(b, "$%d\r\n", len(a))
		b.Write(a)
		b.WriteString("\r\n")
	}
}

// bulkBody is the payload of a raw bulk string.
func bulkBody(raw []byte) []byte {
	i := bytes.IndexByte(raw, '\n')
	return raw[i+1 : len(raw)-2]
}

// readRequest reads one command: an array of bulk strings.
func readRequest(r *bufio.Reader) (raw []byte, args [][]byte, err error) {
	raw, children, err := readValue(r)
	if err != nil {
		return nil, nil, err
	}
	if raw[0] != '*' {
		return nil, nil, fmt.Errorf("split proxy: request is not an array: %q", raw)
	}
	for _, c := range children {
		if c[0] != '$' {
			return nil, nil, fmt.Errorf("split proxy: request argument is not a bulk string: %q", c)
		}
		args = append(args, bulkBody(c))
	}
	return raw, args, nil
}

// readValue reads one RESP2 or RESP3 value and returns its raw bytes and,
// for an aggregate, the raw bytes of each element.
func readValue(r *bufio.Reader) (raw []byte, children [][]byte, err error) {
	line, err := readLine(r)
	if err != nil {
		return nil, nil, err
	}
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return line, nil, nil
	case '$', '!', '=':
		return readBlob(r, line)
	case '*', '~', '>', '%', '|':
		return readAggregate(r, line)
	}
	return nil, nil, fmt.Errorf("split proxy: unknown RESP type %q", line)
}

// readLine reads the first line of a value, with its CRLF.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("split proxy: bad RESP line %q", line)
	}
	return line, nil
}

// lineBody is a value's first line without its type byte and CRLF.
func lineBody(line []byte) string { return string(line[1 : len(line)-2]) }

// readBlob reads the payload of a blob value (bulk string, blob error,
// verbatim string) whose first line is line; a negative length is null.
func readBlob(r *bufio.Reader, line []byte) (raw []byte, children [][]byte, err error) {
	n, err := strconv.Atoi(lineBody(line))
	if err != nil {
		return nil, nil, err
	}
	if n < 0 {
		return line, nil, nil
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, nil, err
	}
	return append(line, b...), nil, nil
}

// readAggregate reads the elements of an aggregate value (array, set,
// push, map, attribute) whose first line is line.
func readAggregate(r *bufio.Reader, line []byte) (raw []byte, children [][]byte, err error) {
	n, err := aggregateLen(line)
	if err != nil {
		return nil, nil, err
	}
	raw, children, err = readElements(r, line, n)
	if err != nil || line[0] != '|' {
		return raw, children, err
	}
	// An attribute precedes the value it describes.
	v, vc, err := readValue(r)
	if err != nil {
		return nil, nil, err
	}
	return append(raw, v...), vc, nil
}

// aggregateLen is the count of values that follow an aggregate's first
// line: two for each entry of a map or an attribute.
func aggregateLen(line []byte) (int, error) {
	n, err := strconv.Atoi(lineBody(line))
	if line[0] == '%' || line[0] == '|' {
		n *= 2
	}
	return n, err
}

// readElements reads n values after raw, the first line of their
// aggregate, and returns raw followed by them and each of them.
func readElements(r *bufio.Reader, raw []byte, n int) ([]byte, [][]byte, error) {
	var children [][]byte
	for range max(n, 0) {
		c, _, err := readValue(r)
		if err != nil {
			return nil, nil, err
		}
		children = append(children, c)
		raw = append(raw, c...)
	}
	return raw, children, nil
}

// DelayProxy returns the address of a proxy to target that holds every
// chunk of the server's replies for delay before passing it on: a Valkey
// far away. It is closed, with its connections, in t.Cleanup.
func DelayProxy(t testing.TB, target string, delay time.Duration) string {
	t.Helper()
	return listen(t, "delay proxy", target, func(c, up net.Conn) {
		done := make(chan struct{})
		go func() { io.Copy(up, c); up.Close(); close(done) }()
		defer func() { c.Close(); <-done }()
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				time.Sleep(delay)
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
}
