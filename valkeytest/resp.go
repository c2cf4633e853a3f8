package valkeytest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// respConn is a minimal RESP2 connection for the harness's own commands
// (readiness, cluster setup). It needs no valkey-go client, so it works
// against a node whose cluster is not formed yet.
type respConn struct {
	conn    net.Conn
	r       *bufio.Reader
	timeout time.Duration
}

// respError is an error reply from the server.
type respError string

func (e respError) Error() string { return string(e) }

func dialRESP(addr string, timeout time.Duration) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &respConn{conn: c, r: bufio.NewReader(c), timeout: timeout}, nil
}

func (c *respConn) Close() error { return c.conn.Close() }

// Do sends one command and reads its reply: string for simple and bulk
// strings, int64, []any, nil, or a respError as the error.
func (c *respConn) Do(args ...string) (any, error) {
	if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, err
	}
	buf := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		buf = fmt.Appendf(buf, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.conn.Write(buf); err != nil {
		return nil, err
	}
	return c.read()
}

// DoString is Do for a reply that must be a string.
func (c *respConn) DoString(args ...string) (string, error) {
	r, err := c.Do(args...)
	if err != nil {
		return "", err
	}
	s, ok := r.(string)
	if !ok {
		return "", fmt.Errorf("%v: reply %T, want a string", args, r)
	}
	return s, nil
}

func (c *respConn) read() (any, error) {
	kind, body, err := c.readLine()
	if err != nil {
		return nil, err
	}
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, respError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		return c.readBulk(body)
	case '*':
		return c.readArray(body)
	}
	return nil, fmt.Errorf("unknown RESP type %q", string(kind)+body+"\r\n")
}

// readLine reads the first line of a reply: its type byte and the rest,
// without the CRLF.
func (c *respConn) readLine() (kind byte, body string, err error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return 0, "", err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, "", fmt.Errorf("bad RESP line %q", line)
	}
	return line[0], line[1 : len(line)-2], nil
}

// readBulk reads the payload of a bulk string whose length line is body;
// a negative length is the null reply.
func (c *respConn) readBulk(body string) (any, error) {
	n, err := strconv.Atoi(body)
	if err != nil || n < 0 {
		return nil, err
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return nil, err
	}
	return string(b[:n]), nil
}

// readArray reads the elements of an array whose length line is body; a
// negative length is the null reply.
func (c *respConn) readArray(body string) (any, error) {
	n, err := strconv.Atoi(body)
	if err != nil || n < 0 {
		return nil, err
	}
	out := make([]any, n)
	for i := range out {
		v, err := c.readElement()
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// readElement reads one element of an array, where an error reply is kept
// as a value.
func (c *respConn) readElement() (any, error) {
	v, err := c.read()
	if e, ok := err.(respError); ok {
		return e, nil
	}
	return v, err
}
