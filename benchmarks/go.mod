module github.com/sluicehq/sluice/benchmarks

go 1.26.0

replace github.com/sluicehq/sluice => ../

require github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-redis/redis_rate/v10 v10.0.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/throttled/throttled/v2 v2.15.0 // indirect
	github.com/ulule/limiter/v3 v3.11.2 // indirect
	github.com/valkey-io/valkey-go v1.0.79 // indirect
	github.com/valkey-io/valkey-go/valkeylimiter v1.0.70 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
