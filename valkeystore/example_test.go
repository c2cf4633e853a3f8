package valkeystore_test

import (
	"context"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

// The README's library example (TestReadmeLibraryExample keeps them the
// same): Connect returns at once, whether or not Valkey answers; decisions
// follow the limiter's fail mode until it does, and the client has what
// the store needs.
func Example_connect() {
	if err := limitUser(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func limitUser(ctx context.Context) error {
	// Starts while Valkey is down (decisions follow the fail mode until it
	// answers) and sets what the store needs of the client (AlwaysPipelining).
	store, err := valkeystore.Connect(valkey.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		return err // an option it cannot honour; never Valkey being down
	}
	defer store.Close()
	limiter, err := sluice.New(store, sluice.GCRA{Rate: 10, Per: time.Second, Burst: 20},
		sluice.WithName("api")) // invalid policies (and a nil store) fail here, before any traffic
	if err != nil {
		return err
	}
	res, err := limiter.Allow(ctx, "user:42")
	if err != nil {
		return err // an empty key, or ctx ended; a sick Valkey is not an error (see Degraded)
	}
	if !res.Allowed {
		// refuse; res.RetryAfter says when the same request will be allowed
	}
	return nil
}

// A store on a master found through Valkey Sentinel: the client asks the
// Sentinels for the master of the set, and follows it when they fail over.
// Decisions made while the master is dead follow each limiter's fail mode;
// TestSentinelFailover measures how soon they are normal again.
func Example_sentinel() {
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"}, // the Sentinels
		Sentinel:    valkey.SentinelOption{MasterSet: "mymaster"},
		// Queue every call on the shared connections: a call whose deadline
		// passes then does not close a connection that others use.
		AlwaysPipelining: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := valkeystore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := sluice.New(store, sluice.GCRA{Rate: 10, Per: time.Second, Burst: 20},
		sluice.WithName("api"), sluice.WithFailMode(sluice.FailOpen))
	if err != nil {
		log.Fatal(err)
	}
	_ = limiter
}

// A store on a Valkey Cluster: one breaker per primary, so a dead primary
// costs only the decisions of its slots. Set cluster-require-full-coverage
// to no on the servers: otherwise every node refuses every command from
// the moment a primary is marked failed until its replica is promoted
// (Store.Risks reports it).
func Example_cluster() {
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:      []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		AlwaysPipelining: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := valkeystore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	_ = store
}
