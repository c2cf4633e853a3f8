package valkeytest

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// handedOut holds the ports freePort gave out in this process, so two
// servers started at once never get the same one.
var handedOut struct {
	mu    sync.Mutex
	ports map[int]bool
}

// freePort returns a loopback port nothing listens on: the kernel picks one
// for a listener that is closed at once. Another process may still take it
// before the server binds it; Start then retries with another port.
func freePort() (int, error) {
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = make(map[int]bool)
	}
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("finding a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("finding a free port: the kernel keeps giving ports already used")
}

// ClosedAddr returns a loopback address where nothing listens: connections
// to it are refused at once.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("valkeytest: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// Blackhole returns the address of a TCP listener that accepts connections
// and never answers: it reads and discards whatever it gets, like a server
// that hangs. It is closed, with its connections, in t.Cleanup.
func Blackhole(t testing.TB) string {
	t.Helper()
	return listen(t, "blackhole", "", func(c, _ net.Conn) { io.Copy(io.Discard, c) })
}

// listen serves the connections of a loopback listener, each with serve on
// a goroutine of its own: c is the accepted connection and up, when target
// is not empty, a connection dialled to target for it (a connection whose
// dial fails is closed unserved). The listener and every connection are
// closed in t.Cleanup, which waits for every serve to return; what names
// the listener in errors.
func listen(t testing.TB, what, target string, serve func(c, up net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("valkeytest: %s: %v", what, err)
	}
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
		wg     sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var up net.Conn
			if target != "" {
				if up, err = net.DialTimeout("tcp", target, 5*time.Second); err != nil {
					c.Close()
					continue
				}
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				if up != nil {
					up.Close()
				}
				return
			}
			conns = append(conns, c)
			if up != nil {
				conns = append(conns, up)
			}
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				defer c.Close()
				if up != nil {
					defer up.Close()
				}
				serve(c, up)
			}()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		closed = true
		l.Close()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}
