package redisstore_test

import (
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// A limiter on a go-redis client: standalone here; Addrs of several
// cluster nodes, or MasterName and sentinel Addrs, make the other kinds.
func Example() {
	client := redis.NewUniversalClient(redisstore.Options(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}}))
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		panic(err)
	}
	limiter, err := sluice.New(store, sluice.GCRA{Rate: 10, Per: time.Second, Burst: 20}, sluice.WithName("api"))
	if err != nil {
		panic(err)
	}
	_ = limiter // limiter.Allow(ctx, "user:42")
}
