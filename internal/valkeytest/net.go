package valkeytest

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("valkeytest: blackhole: %v", err)
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
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			conns = append(conns, c)
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				io.Copy(io.Discard, c)
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
