// Package syncbuf holds Buffer, a text buffer that one goroutine may write
// while another reads it: the sink for a server's log that a test or a
// benchmark harness reads while the server runs.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer guarded by a mutex. The zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Len returns how many bytes were written so far: a mark for From.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Len()
}

// From returns what was written after the first n bytes ("" when fewer
// were written).
func (b *Buffer) From(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.b.Len() {
		return ""
	}
	return string(b.b.Bytes()[n:])
}

// Tail returns at most the last n bytes written.
func (b *Buffer) Tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.b.Bytes()
	if len(p) > n {
		p = p[len(p)-n:]
	}
	return string(p)
}
