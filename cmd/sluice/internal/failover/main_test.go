//go:build failover

package failover_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
	"github.com/valkey-io/valkey-go"
)

func TestMain(m *testing.M) { valkeytest.Main(m) }

// errLog is an Observer that keeps the store errors of degraded decisions.
type errLog struct {
	mu   sync.Mutex
	errs map[string]int
}

func (e *errLog) ObserveDecision(_ string, _ sluice.Result, err error, _ time.Duration) {
	if err == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.errs == nil {
		e.errs = make(map[string]int)
	}
	e.errs[errClass(err)]++
}

// errClass shortens an error to its kind, so the summary stays short.
func errClass(err error) string {
	var verr *valkey.ValkeyError
	switch {
	case errors.Is(err, valkeystore.ErrCircuitOpen):
		return "circuit open"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &verr):
		return strings.Fields(verr.Error())[0]
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return "network"
	}
	return err.Error()
}

func (e *errLog) summary() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.errs))
	for k, v := range e.errs {
		out[k] = v
	}
	return out
}

var discardLogger = slog.New(slog.DiscardHandler)
