package sluice_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// Example_reserve: tokens per minute for an LLM call: reserve the
// request's max_tokens, settle the tokens the upstream used.
func Example_reserve() {
	ctx := context.Background()
	clock := sluicetest.NewClock()
	tpm, err := sluice.New(memstore.New(), sluice.TokenBucket{Capacity: 10000, Rate: 10000, Per: time.Minute},
		sluice.WithReservations(sluice.ReserveOptions{}), sluice.WithClock(clock.Now))
	if err != nil {
		panic(err)
	}
	r, err := tpm.Reserve(ctx, "tenant:42", 4000) // the request's max_tokens
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Allowed, r.Remaining)
	s, err := tpm.Settle(ctx, "tenant:42", r.ID, 1234) // the tokens the upstream reported
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Settled, s.Remaining, s.Debt)
	s, _ = tpm.Settle(ctx, "tenant:42", r.ID, 1234) // retried, from any process: counted once
	fmt.Println(s.Settled, s.Remaining)
	r, _ = tpm.Reserve(ctx, "tenant:42", 8000)
	s, _ = r.Settle(ctx, 15000) // more than reserved: into debt, up to MaxDebt (default: the limit)
	fmt.Println(s.Charged, s.Debt, s.RetryAfter)
	// Output:
	// true 6000
	// true 8766 0
	// false 8766
	// 7000 6234 37.41s
}

// TestReadmeReservations: the Go lines and outputs README.md's "Metered
// work" section shows are those of Example_reserve.
func TestReadmeReservations(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Metered work: reserve, then settle")
	if !ok {
		t.Fatal("README.md has no Metered work section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	src, err := os.ReadFile("reserve_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(section, "```go\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || block == "" {
		t.Fatal("the section has no Go block")
	}
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !strings.Contains(string(src), line) {
			t.Errorf("README.md shows %q, which reserve_example_test.go does not hold", line)
		}
	}
}
