package grpclimit_test

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
)

// A gRPC server limited per client address, and per API key where the
// client sends one.
func Example() {
	store := memstore.New() // valkeystore.Connect(opt) to share the counts
	perPeer, _ := sluice.New(store, sluice.GCRA{Rate: 50, Per: time.Second, Burst: 100}, sluice.WithName("rpc-peer"))
	perKey, _ := sluice.New(store, sluice.TokenBucket{Capacity: 20, Rate: 5, Per: time.Second}, sluice.WithName("rpc-key"))
	in, err := grpclimit.New(grpclimit.Config{Limits: []grpclimit.Limit{
		{Limiter: perPeer, Key: grpclimit.PeerAddr()},
		// Calls without the key skip this limit, as said here (by
		// default they would be refused); FallBack(grpclimit.PeerAddr())
		// would count them by address instead.
		{Limiter: perKey, Key: grpclimit.Metadata("x-api-key"), Missing: grpclimit.Skip()},
	}})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
	_ = srv // register services, then srv.Serve(listener)
	// Output:
}
