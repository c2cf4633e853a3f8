package valkeystore_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

// TestBatchingSharedContextEnds queues many decisions under one context
// (a server's, say) behind a call to a paused server: most of them wait
// through the batcher's watch of that context instead of a select of
// their own. When the context is canceled, every queued caller returns at
// once with its error, long before the call in flight ends (by its 3s
// timeout), and none of them is sent: after the server resumes, it has run
// at most the call that was in flight and one made after.
func TestBatchingSharedContextEnds(t *testing.T) {
	srv := valkeytest.Start(t)
	c := srv.Client(t)
	s, err := valkeystore.New(c, valkeystore.WithBatching(1))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := sluice.New(s, sluice.GCRA{Rate: 1, Per: time.Hour, Burst: 1000}, sluice.WithTimeout(3*time.Second),
		sluice.WithLogger(discardLogger))
	l.Allow(context.Background(), "warm") // the script is loaded
	before := scriptCalls(t, c)
	srv.Pause(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const callers = 64
	var wg sync.WaitGroup
	var first sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		w := &wg
		if i == 0 {
			w = &first // the call in flight, which returns by its timeout
		}
		w.Add(1)
		go func() {
			defer w.Done()
			res, err := l.Allow(ctx, "k"+strconv.Itoa(i))
			if i == 0 {
				return
			}
			if err == nil {
				err = errors.New("a decision: " + strconv.FormatBool(res.Allowed))
			}
			errs <- err
		}()
		if i == 0 {
			time.Sleep(50 * time.Millisecond) // the first call is in flight
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, q := valkeystore.InFlight(s); q == callers-1 {
			break
		}
		if time.Now().After(deadline) {
			_, q := valkeystore.InFlight(s)
			t.Fatalf("%d of %d callers queued", q, callers-1)
		}
	}
	if w := valkeystore.WatchedQueued(s); w < callers/2 {
		t.Fatalf("%d queued callers watched, want at least %d", w, callers/2)
	}
	start := time.Now()
	cancel()
	wg.Wait()
	if d := time.Since(start); d > time.Second {
		t.Errorf("the queued callers returned %v after their context ended", d)
	}
	first.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a caller returned %v, want context.Canceled", err)
		}
	}
	srv.Resume(t)
	l.Allow(context.Background(), "after") // a call after the queue was sifted
	if n := scriptCalls(t, c) - before; n > 2 {
		t.Errorf("%d script calls since the pause, want at most 2 (the one in flight and the one after)", n)
	}
}
