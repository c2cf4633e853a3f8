package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrent: writes from several goroutines while another reads all
// arrive whole (run with -race, which also fails on an unguarded buffer).
func TestConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("line\n"))
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			_ = b.String()
		}
	}()
	wg.Wait()
	<-done
	if got := strings.Count(b.String(), "line\n"); got != 400 {
		t.Fatalf("%d lines, want 400", got)
	}
}

func TestMarks(t *testing.T) {
	var b Buffer
	b.Write([]byte("abc"))
	mark := b.Len()
	b.Write([]byte("def"))
	for _, c := range []struct{ got, want string }{
		{b.From(mark), "def"},
		{b.From(0), "abcdef"},
		{b.From(7), ""},
		{b.Tail(2), "ef"},
		{b.Tail(10), "abcdef"},
		{b.String(), "abcdef"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
