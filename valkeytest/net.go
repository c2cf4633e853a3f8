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
	pl := &proxyListener{l: l, target: target, serve: serve}
	pl.wg.Add(1)
	go pl.accept()
	t.Cleanup(pl.close)
	return l.Addr().String()
}

// proxyListener serves each connection it accepts, with a connection of
// its own to target when there is one, until it is closed.
type proxyListener struct {
	l      net.Listener
	target string
	serve  func(c, up net.Conn)
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// accept serves connections until the listener is closed.
func (pl *proxyListener) accept() {
	defer pl.wg.Done()
	for {
		c, err := pl.l.Accept()
		if err != nil {
			return
		}
		var up net.Conn
		if pl.target != "" {
			if up, err = net.DialTimeout("tcp", pl.target, 5*time.Second); err != nil {
				c.Close()
				continue
			}
		}
		if !pl.track(c, up) {
			return
		}
		go func() {
			defer pl.wg.Done()
			defer c.Close()
			if up != nil {
				defer up.Close()
			}
			pl.serve(c, up)
		}()
	}
}

// track keeps c and up (nil without a target) to close them with the
// listener, and counts their server; false, closing them, when the
// listener is closed already.
func (pl *proxyListener) track(c, up net.Conn) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed {
		c.Close()
		if up != nil {
			up.Close()
		}
		return false
	}
	pl.conns = append(pl.conns, c)
	if up != nil {
		pl.conns = append(pl.conns, up)
	}
	pl.wg.Add(1)
	return true
}

// close closes the listener and every connection, and waits for their
// servers to return.
func (pl *proxyListener) close() {
	pl.mu.Lock()
	pl.closed = true
	pl.l.Close()
	for _, c := range pl.conns {
		c.Close()
	}
	pl.mu.Unlock()
	pl.wg.Wait()
}
