package login_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/login"
	"github.com/sluicehq/sluice/memstore"
)

// A login handler asks the guard before checking the password, and clears
// the username's count after a correct one.
func Example() {
	guard, err := login.New(login.Config{
		Store:       memstore.New(), // valkeystore.New(client) in production
		Secret:      []byte("load me from a secret store, 32B"),
		PerUsername: sluice.SlidingLog{Limit: 3, Window: 15 * time.Minute},
		PerAddress:  sluice.SlidingLog{Limit: 20, Window: 15 * time.Minute},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	try := func(user, addr string, passwordOK bool) {
		v, err := guard.Attempt(ctx, user, netip.MustParseAddr(addr)) // or guard.AttemptRequest(r, user)
		if err != nil {
			panic(err)
		}
		if !v.Allowed {
			fmt.Printf("%s from %s: refused, %s limit\n", user, addr, v.Tripped)
			return
		}
		if passwordOK {
			guard.Success(ctx, user)
		}
		fmt.Printf("%s from %s: checked password, ok=%v\n", user, addr, passwordOK)
	}
	// Guesses at one account from three addresses, then a fourth.
	try("alice@example.com", "192.0.2.1", false)
	try("Alice@Example.com", "192.0.2.2", false)
	try("alice@example.com ", "192.0.2.3", false)
	try("alice@example.com", "192.0.2.4", true)
	// An account that does not exist is treated exactly alike.
	try("nobody@example.com", "192.0.2.1", false)
	// Bob logs in after two typos; his count starts afresh.
	try("bob", "198.51.100.7", false)
	try("bob", "198.51.100.7", false)
	try("bob", "198.51.100.7", true)
	try("bob", "198.51.100.7", false)
	// Output:
	// alice@example.com from 192.0.2.1: checked password, ok=false
	// Alice@Example.com from 192.0.2.2: checked password, ok=false
	// alice@example.com  from 192.0.2.3: checked password, ok=false
	// alice@example.com from 192.0.2.4: refused, username limit
	// nobody@example.com from 192.0.2.1: checked password, ok=false
	// bob from 198.51.100.7: checked password, ok=false
	// bob from 198.51.100.7: checked password, ok=false
	// bob from 198.51.100.7: checked password, ok=true
	// bob from 198.51.100.7: checked password, ok=false
}
