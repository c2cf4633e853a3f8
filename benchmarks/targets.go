package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	redisrate "github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	throttledstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ulstore "github.com/ulule/limiter/v3/drivers/store/redis"
	"github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeylimiter"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/valkeystore"
)

// Outcome is what one decision came to.
type Outcome uint8

// The outcomes a Decider reports.
const (
	Allowed Outcome = iota
	Denied
	// Degraded is a decision made without the store (Sluice's fail mode):
	// counted apart, never as a real decision.
	Degraded
)

// A Decider makes one rate-limit decision for key with one library. It is
// safe for concurrent use.
type Decider interface {
	Allow(ctx context.Context, key string) (Outcome, error)
	Close()
}

// Profile is the kind of limit a run enforces. Each library expresses it in
// its own terms (see Target.Open); the point is the same for all.
type Profile uint8

const (
	// Hot never refuses at any rate this machine reaches (a million per
	// second, or a billion per hour for window algorithms), so one hot key
	// measures the cost of a decision, not of a refusal. Every hot run
	// uses a fresh key.
	Hot Profile = iota
	// Spread keeps every key's state in Valkey for the whole run (at least
	// ten minutes after one request) and never refuses: 1000 per hour for
	// window algorithms; burst 1000 and 6 per hour for GCRA and token
	// bucket. Used for the 100k-key runs, whose keys are prepared first.
	Spread
	// Refuse is 10 per hour: after the first ten, every decision on a key
	// is a refusal. Used for the refused-hot-key runs and for bytes per key.
	Refuse
)

func (p Profile) String() string {
	return [...]string{"hot", "spread", "refuse"}[p]
}

// Config is what a Target needs to open a Decider.
type Config struct {
	Addr    string
	Profile Profile
	// SluiceTimeout is Sluice's decision timeout (sluice.WithTimeout).
	// Peers have none, so the harness uses a generous one and counts
	// degraded decisions apart.
	SluiceTimeout time.Duration
}

// A Target is one library (and, for Sluice, one algorithm) under test.
type Target struct {
	Name      string // "sluice", "valkeylimiter", ...
	Algorithm string // as the library calls it
	Client    string // the Valkey client library it runs on
	Open      func(Config) (Decider, error)
}

// Label is "name/algorithm".
func (t Target) Label() string { return t.Name + " " + t.Algorithm }

// Peers are the other libraries, each with its default client options.
var Peers = []Target{
	{Name: "valkeylimiter", Algorithm: "fixed_window", Client: "valkey-go", Open: openValkeyLimiter},
	{Name: "redis_rate", Algorithm: "gcra", Client: "go-redis", Open: openRedisRate},
	{Name: "ulule", Algorithm: "fixed_window", Client: "go-redis", Open: openUlule},
	{Name: "throttled", Algorithm: "gcra", Client: "go-redis", Open: openThrottled},
}

// SluiceAlgorithms are Sluice's algorithms, in report order.
var SluiceAlgorithms = []string{"gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log"}

// SluiceTarget is Sluice with algorithm on valkeystore.
func SluiceTarget(algorithm string) Target {
	return Target{Name: "sluice", Algorithm: algorithm, Client: "valkey-go", Open: func(c Config) (Decider, error) {
		return openSluice(c, algorithm)
	}}
}

// SluiceGoRedisTarget is Sluice with algorithm on redisstore, through a
// go-redis client.
func SluiceGoRedisTarget(algorithm string) Target {
	return Target{Name: "sluice-goredis", Algorithm: algorithm, Client: "go-redis", Open: func(c Config) (Decider, error) {
		return openSluiceGoRedis(c, algorithm)
	}}
}

// SluiceGoRedisAlgorithms are the algorithms "all" measures on redisstore,
// beside the same on valkeystore; "sluice-goredis/<algorithm>" names any.
var SluiceGoRedisAlgorithms = []string{"gcra", "token_bucket"}

// Targets returns the targets named in list ("all", or a comma-separated
// list of peer names and sluice algorithms such as "sluice/gcra" or
// "sluice" for all of them, "sluice-goredis/gcra" for Sluice on go-redis),
// in report order: Sluice first.
func Targets(list string) ([]Target, error) {
	var all, more []Target
	for _, a := range SluiceAlgorithms {
		all = append(all, SluiceTarget(a))
	}
	for _, a := range SluiceAlgorithms {
		if slices.Contains(SluiceGoRedisAlgorithms, a) {
			all = append(all, SluiceGoRedisTarget(a))
		} else {
			more = append(more, SluiceGoRedisTarget(a))
		}
	}
	all = append(all, Peers...)
	if list == "" || list == "all" {
		return all, nil
	}
	all = append(all, more...)
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var out []Target
	used := map[string]bool{}
	for _, t := range all {
		for _, n := range []string{t.Name, t.Name + "/" + t.Algorithm} {
			if want[n] {
				out = append(out, t)
				used[n] = true
				break
			}
		}
	}
	for n := range want {
		if !used[n] {
			return nil, fmt.Errorf("unknown target %q (want all, sluice, sluice/<algorithm>, sluice-goredis/<algorithm>, valkeylimiter, redis_rate, ulule, throttled)", n)
		}
	}
	return out, nil
}

// sluicePolicy is Profile p for a Sluice algorithm.
func sluicePolicy(algorithm string, p Profile) (sluice.Policy, error) {
	alg, err := driver.ParseAlgorithm(algorithm)
	if err != nil {
		return nil, err
	}
	limit, window := windowLimit(p)
	b, r, per := gcraLimit(p)
	burst, rate := int64(b), float64(r)
	if alg.Rated() {
		return sluice.PolicyOf(alg, driver.Params{Limit: burst, Rate: rate, Per: per})
	}
	if alg == driver.AlgorithmSlidingLog {
		// One entry per unit: the log holds at most MaxSlidingLogLimit, and
		// every hot run starts on a fresh key.
		limit = min(limit, driver.MaxSlidingLogLimit)
	}
	return sluice.PolicyOf(alg, driver.Params{Limit: limit, Window: window})
}

// SluiceRule is the Rule Sluice's target enforces for algorithm under
// Profile p, for a client that builds Sluice's script calls itself.
func SluiceRule(algorithm string, p Profile) (sluice.Rule, error) {
	policy, err := sluicePolicy(algorithm, p)
	if err != nil {
		return sluice.Rule{}, err
	}
	return policy.Rule()
}

// NewValkeyClient is the valkey-go client every valkey-go target gets:
// one auto-pipelined connection, no client-side cache.
func NewValkeyClient(addr string) (valkey.Client, error) {
	return newValkeyClient(addr)
}

func newValkeyClient(addr string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
}

type sluiceDecider struct {
	l     *sluice.Limiter
	close func()
}

func openSluice(c Config, algorithm string) (Decider, error) {
	policy, err := sluicePolicy(algorithm, c.Profile)
	if err != nil {
		return nil, err
	}
	client, err := newValkeyClient(c.Addr)
	if err != nil {
		return nil, err
	}
	store, err := valkeystore.New(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	return newSluiceDecider(c, "sluice", algorithm, policy, store, client.Close)
}

// openSluiceGoRedis is openSluice on redisstore: a go-redis client with
// default options, but for the ContextTimeoutEnabled redisstore requires.
func openSluiceGoRedis(c Config, algorithm string) (Decider, error) {
	policy, err := sluicePolicy(algorithm, c.Profile)
	if err != nil {
		return nil, err
	}
	client := goredis.NewClient(&goredis.Options{Addr: c.Addr, ContextTimeoutEnabled: true})
	store, err := redisstore.New(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	return newSluiceDecider(c, "sluice-goredis", algorithm, policy, store, func() { client.Close() })
}

func newSluiceDecider(c Config, prefix, algorithm string, policy sluice.Policy, store driver.Store, closeClient func()) (Decider, error) {
	timeout := c.SluiceTimeout
	if timeout <= 0 {
		timeout = sluice.DefaultTimeout
	}
	l, err := sluice.New(store, policy, sluice.WithPrefix(prefix),
		sluice.WithName("bench-"+algorithm+"-"+c.Profile.String()), sluice.WithTimeout(timeout))
	if err != nil {
		closeClient()
		return nil, err
	}
	return &sluiceDecider{l: l, close: closeClient}, nil
}

func (d *sluiceDecider) Allow(ctx context.Context, key string) (Outcome, error) {
	r, err := d.l.Allow(ctx, key)
	switch {
	case err != nil:
		return Denied, err
	case r.Degraded:
		return Degraded, nil
	case r.Allowed:
		return Allowed, nil
	}
	return Denied, nil
}

func (d *sluiceDecider) Close() { d.close() }

// windowLimit is Profile p for the fixed-window peers.
func windowLimit(p Profile) (int64, time.Duration) {
	return map[Profile]int64{Hot: 1e9, Spread: 1000, Refuse: 10}[p], time.Hour
}

type valkeyLimiterDecider struct {
	l valkeylimiter.RateLimiterClient
	c valkey.Client
}

func openValkeyLimiter(c Config) (Decider, error) {
	client, err := newValkeyClient(c.Addr)
	if err != nil {
		return nil, err
	}
	limit, window := windowLimit(c.Profile)
	l, err := valkeylimiter.NewRateLimiter(valkeylimiter.RateLimiterOption{
		ClientBuilder: func(valkey.ClientOption) (valkey.Client, error) { return client, nil },
		KeyPrefix:     "valkeylimiter",
		Limit:         int(limit),
		Window:        window,
	})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &valkeyLimiterDecider{l: l, c: client}, nil
}

func (d *valkeyLimiterDecider) Allow(ctx context.Context, key string) (Outcome, error) {
	r, err := d.l.Allow(ctx, key)
	if err != nil {
		return Denied, err
	}
	if r.Allowed {
		return Allowed, nil
	}
	return Denied, nil
}

func (d *valkeyLimiterDecider) Close() { d.c.Close() }

// gcraLimit is Profile p for the GCRA peers: burst, and rate per period.
func gcraLimit(p Profile) (burst, rate int, period time.Duration) {
	switch p {
	case Hot:
		return 1e6, 1e6, time.Second
	case Spread:
		return 1000, 6, time.Hour
	}
	return 10, 10, time.Hour
}

type redisRateDecider struct {
	l     *redisrate.Limiter
	limit redisrate.Limit
	c     *goredis.Client
}

func openRedisRate(c Config) (Decider, error) {
	client := goredis.NewClient(&goredis.Options{Addr: c.Addr})
	burst, rate, period := gcraLimit(c.Profile)
	return &redisRateDecider{
		l:     redisrate.NewLimiter(client),
		limit: redisrate.Limit{Rate: rate, Burst: burst, Period: period},
		c:     client,
	}, nil
}

func (d *redisRateDecider) Allow(ctx context.Context, key string) (Outcome, error) {
	r, err := d.l.Allow(ctx, key, d.limit)
	if err != nil {
		return Denied, err
	}
	if r.Allowed > 0 {
		return Allowed, nil
	}
	return Denied, nil
}

func (d *redisRateDecider) Close() { d.c.Close() }

type ululeDecider struct {
	l *ulule.Limiter
	c *goredis.Client
}

func openUlule(c Config) (Decider, error) {
	client := goredis.NewClient(&goredis.Options{Addr: c.Addr})
	store, err := ulstore.NewStoreWithOptions(client, ulule.StoreOptions{Prefix: "ulule"})
	if err != nil {
		client.Close()
		return nil, err
	}
	limit, window := windowLimit(c.Profile)
	return &ululeDecider{l: ulule.New(store, ulule.Rate{Period: window, Limit: limit}), c: client}, nil
}

func (d *ululeDecider) Allow(ctx context.Context, key string) (Outcome, error) {
	r, err := d.l.Get(ctx, key)
	if err != nil {
		return Denied, err
	}
	if r.Reached {
		return Denied, nil
	}
	return Allowed, nil
}

func (d *ululeDecider) Close() { d.c.Close() }

type throttledDecider struct {
	l *throttled.GCRARateLimiterCtx
	c *goredis.Client
}

func openThrottled(c Config) (Decider, error) {
	client := goredis.NewClient(&goredis.Options{Addr: c.Addr})
	store, err := throttledstore.NewCtx(client, "throttled:")
	if err != nil {
		client.Close()
		return nil, err
	}
	burst, rate, period := gcraLimit(c.Profile)
	// throttled allows MaxBurst+1 at once.
	l, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{MaxRate: throttled.PerDuration(rate, period), MaxBurst: burst - 1})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &throttledDecider{l: l, c: client}, nil
}

func (d *throttledDecider) Allow(ctx context.Context, key string) (Outcome, error) {
	limited, _, err := d.l.RateLimitCtx(ctx, key, 1)
	if err != nil {
		return Denied, err
	}
	if limited {
		return Denied, nil
	}
	return Allowed, nil
}

func (d *throttledDecider) Close() { d.c.Close() }
