package sluice

import (
	"context"
	"testing"
	"time"
)

// TestWaitCallEndedPastDeadline: a grant call that has ended answers the
// decision waiting for it even when the decision's deadline has passed
// too; select alone chose between the two at random, degrading about half
// of such decisions (seen on a loaded machine, where running the calls
// held took longer than the timeout).
func TestWaitCallEndedPastDeadline(t *testing.T) {
	ch := make(chan struct{})
	close(ch)
	past := time.Now().Add(-time.Second)
	for i := range 1000 {
		if err := waitCall(context.Background(), ch, past); err != nil {
			t.Fatalf("attempt %d: %v, want the ended call's answer", i, err)
		}
	}
	if err := waitCall(context.Background(), make(chan struct{}), past); err == nil {
		t.Fatal("a call still in flight past the deadline: nil, want the timeout")
	}
}
