package server

import (
	"testing"
	"time"
)

func TestLogThrottle(t *testing.T) {
	l := logThrottle{interval: 50 * time.Millisecond}
	if ok, held := l.allow(); !ok || held != 0 {
		t.Fatalf("first: %v %d", ok, held)
	}
	for range 99 {
		if ok, _ := l.allow(); ok {
			t.Fatal("a second line within the interval")
		}
	}
	time.Sleep(60 * time.Millisecond)
	if ok, held := l.allow(); !ok || held != 99 {
		t.Fatalf("after the interval: %v, %d held back; want true, 99", ok, held)
	}
}
