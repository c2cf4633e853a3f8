package valkeytest

import (
	"fmt"
	"testing"
	"time"
)

// RequirePass makes s require password for every new connection (CONFIG
// SET requirepass), as a deployment with requirepass does: a client that
// sends no password gets NOAUTH, one that sends another WRONGPASS.
// Connections already open stay authenticated.
func (s *Server) RequirePass(t testing.TB, password string) {
	t.Helper()
	c, err := dialRESP(s.Addr, 2*time.Second)
	if err != nil {
		t.Fatalf("valkeytest: %v", err)
	}
	defer c.Close()
	r, err := c.Do("CONFIG", "SET", "requirepass", password)
	if err == nil && r != "OK" {
		err = fmt.Errorf("answered %v", r)
	}
	if err != nil {
		t.Fatalf("valkeytest: CONFIG SET requirepass on %s: %v", s.Addr, err)
	}
}
