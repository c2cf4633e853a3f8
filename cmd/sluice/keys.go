package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/server"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"github.com/sluicehq/sluice/cmd/sluice/internal/valkeyops"
	"github.com/sluicehq/sluice/luascript"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"

	"github.com/sluicehq/sluice/driver"

	"github.com/sluicehq/sluice/httplimit"
)

// The key commands: keys, inspect and reset.

const keysUsage = `usage: sluice keys [--config FILE] [--valkey ADDR[,ADDR...]] [--policy NAME] [--limit N] [--names | --find h:HASH] [--json]

Walks the keys under the configuration's prefix with SCAN (never KEYS) on
every primary and reports, per policy: the number of keys, their memory
(MEMORY USAGE) and the spread of their time to live. Keys under the prefix
that belong to no configured policy (a renamed or removed policy, another
algorithm under the same name) are reported apart.

--names lists the keys themselves, each as counted (the spelling sluice
inspect, reset and override take) with its policy and time to live.
--find h:HASH lists the keys whose hash (show_keys: hashed, keyed by the
admin token) is HASH: from a key the dashboard's top refused keys show to
the key to inspect and reset. A key longer than 128 bytes is stored as its
SHA-256 ("#..."), which cannot be turned back into the key.

flags:
`

const inspectUsage = `usage: sluice inspect [--config FILE] [--valkey ADDR[,ADDR...]] [--plan NAME] [--json] POLICY KEY

Shows the state of KEY under POLICY as the algorithm sees it, under the
rule in force for the key (its override, else the plan --plan names, else
the policy), decided by the code sluice serve decides with: whether a
request would be allowed, the units remaining of the limit in force, the
retry-after and reset times, the time to live, and the raw fields stored
in Valkey. KEY is the key as counted (sluice key prints it from a raw
address, API key or username). Looking takes nothing. Exit code 1 when the
key holds no state.

flags:
`

const resetUsage = `usage: sluice reset [--config FILE] [--valkey ADDR[,ADDR...]] [--audit-log FILE] POLICY KEY

Forgets the state of KEY under POLICY ("unlock this user"), and tells every
sluice process on the same Valkey and prefix (Valkey pub/sub): each drops
the key from its deny cache on receipt, and a process whose subscription is
down answers nothing from its cache, so within 500ms the key's next request
anywhere starts with the whole limit. The answer says how many processes'
subscriptions the notice reached. Every reset is written to stderr as a
JSON audit line (time, policy, key, store key, whether state existed, the
operating-system user and host), and appended to --audit-log when given.
Exit code 1 when the key held no state (nothing was reset).

flags:
`

// keyEnv is what the key commands share: the configuration, a client and
// a store on it.
type keyEnv struct {
	cfg    *config.Config
	client valkey.Client
	store  *valkeystore.Store
}

func openKeyEnv(ctx context.Context, of *opsFlags, env func(string) (string, bool)) (*keyEnv, error) {
	cfg, err := of.load(true)
	if err != nil {
		return nil, err
	}
	conn, err := store.Open(ctx, cfg.Valkey, env)
	if err != nil {
		return nil, err
	}
	return &keyEnv{cfg: cfg, client: conn.Client, store: conn.Store}, nil
}

func (k *keyEnv) Close() { k.client.Close() }

// errUnknownPolicy is a usage error: the policy is not in the configuration.
var errUnknownPolicy = errors.New("unknown policy")

func (k *keyEnv) policy(name string) (*config.Policy, error) {
	if p := k.cfg.Policy(name); p != nil {
		return p, nil
	}
	var names []string
	for _, p := range k.cfg.Policies {
		names = append(names, p.Name)
	}
	return nil, fmt.Errorf("%w %q: %s defines %s", errUnknownPolicy, name, k.cfg.Source, strings.Join(names, ", "))
}

// limiter is the policy's limiter as sluice serve builds it (its name,
// prefix, key overrides and plans), with a generous timeout (an operator
// waits; a request does not).
func (k *keyEnv) limiter(p *config.Policy, more ...sluice.Option) (*sluice.Limiter, error) {
	opts := []sluice.Option{sluice.WithName(p.Limiter), sluice.WithPrefix(k.cfg.Prefix),
		sluice.WithTimeout(5 * time.Second), sluice.WithDenyCache(false), sluice.WithOverrides(p.Overrides),
		sluice.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	for _, pl := range p.Plans {
		opts = append(opts, sluice.WithPlan(pl.Name, pl.Policy))
	}
	if p.Penalty != nil {
		// Reset then lifts a block, and inspect's peek sees it.
		opts = append(opts, sluice.WithPenalty(*p.Penalty))
	}
	return sluice.New(k.store, p.Policy, append(opts, more...)...)
}

// keyGroup is the keys of one limiter and state layout.
type keyGroup struct {
	Policy  string  `json:"policy,omitempty"`
	Limiter string  `json:"limiter"`
	State   string  `json:"state"`
	Keys    int     `json:"keys"`
	Bytes   int64   `json:"memory_bytes"`
	TTLMin  float64 `json:"ttl_min_ms"`
	TTLMed  float64 `json:"ttl_median_ms"`
	TTLMax  float64 `json:"ttl_max_ms"`
	NoTTL   int     `json:"keys_without_ttl"`
	ttls    []time.Duration
}

// runKeys is sluice keys. Exit code 0 on success, 1 when the walk fails
// (or --find finds nothing), 2 for bad usage.
func runKeys(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := newFlags("keys")
	f := defineKeysFlags(fs)
	if code, ok := f.parse(fs, args, stdout, stderr); !ok {
		return code
	}
	k, err := openKeyEnv(ctx, f.ops, env)
	if err != nil {
		fmt.Fprintf(stderr, "sluice keys: %v\n", err)
		return 1
	}
	defer k.Close()
	c, code := f.census(k, env, stderr)
	if c == nil {
		return code
	}
	if err := c.scan(ctx, k.client, f.only); err != nil {
		fmt.Fprintf(stderr, "sluice keys: %v\n", err)
		return 1
	}
	if c.list != nil {
		return printNamed(stdout, stderr, f.asJSON, c.list.keys, f.find, c.seen, c.truncated)
	}
	printCensus(ctx, stdout, k, c, f.asJSON)
	return 0
}

// printCensus writes the census's groups, as JSON or as a table under a
// line naming the prefix and the Valkey.
func printCensus(ctx context.Context, stdout io.Writer, k *keyEnv, c *keyCensus, asJSON bool) {
	out := c.result()
	if asJSON {
		writeJSON(stdout, map[string]any{"prefix": k.cfg.Prefix, "groups": out, "examined": c.seen, "truncated": c.truncated})
		return
	}
	fmt.Fprintf(stdout, "prefix %s on %s (%s)\n\n", k.cfg.Prefix, valkeyops.Describe(k.cfg.Valkey), valkeyops.Mode(ctx, k.client))
	printKeyGroups(stdout, out)
	if c.truncated {
		fmt.Fprintf(stdout, "\nstopped after %d keys (--limit): the counts are lower bounds\n", c.seen)
	}
}

// parse parses sluice keys's command line into f; ok is false, with the
// exit code, when the command is not to run.
func (f *keysFlags) parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool) {
	if code, ok := parseNoArgs(fs, keysUsage, args, stdout, stderr); !ok {
		return code, false
	}
	if err := f.check(); err != nil {
		return usageError(fs, stderr, "%v", err), false
	}
	return 0, true
}

// census returns the census the flags ask for over k's configuration
// (listing keys with --names or --find), or nil and the exit code when
// --find has no secret or --policy names no policy.
func (f *keysFlags) census(k *keyEnv, env func(string) (string, bool), stderr io.Writer) (*keyCensus, int) {
	secret, code := findSecret(k.cfg, f.find, env, stderr)
	if code != 0 {
		return nil, code
	}
	c := newKeyCensus(k.cfg, f.only, f.limit)
	if f.names || secret != nil {
		c.list = &keyListing{secret: secret, find: f.find}
	}
	if f.only != "" && len(c.order) == 0 {
		_, err := k.policy(f.only)
		fmt.Fprintf(stderr, "sluice keys: %v\n", err)
		return nil, 2
	}
	return c, 0
}

// keysFlags are the flags of sluice keys.
type keysFlags struct {
	ops           *opsFlags
	only, find    string
	limit         int
	asJSON, names bool
}

// defineKeysFlags defines the flags of sluice keys on fs.
func defineKeysFlags(fs *flag.FlagSet) *keysFlags {
	f := &keysFlags{ops: addOpsFlags(fs)}
	fs.StringVar(&f.only, "policy", "", "report only this `policy`")
	fs.IntVar(&f.limit, "limit", 100_000, "examine at most this many keys (counts are then lower bounds)")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON")
	fs.BoolVar(&f.names, "names", false, "list the keys, as counted, with their policy and TTL")
	fs.StringVar(&f.find, "find", "", "list the keys shown as this `h:HASH` among the top refused keys")
	return f
}

// check refuses flags that contradict each other.
func (f *keysFlags) check() error {
	if f.limit < 1 {
		return errors.New("--limit must be at least 1")
	}
	if f.names && f.find != "" {
		return errors.New("give --names or --find, not both")
	}
	if f.find != "" && !strings.HasPrefix(f.find, "h:") {
		return fmt.Errorf("--find takes a hashed key as the top refused keys show it, h:HASH, got %q", f.find)
	}
	return nil
}

// findSecret returns the secret keys are hashed with for --find (nil
// without --find), or the exit code when there is none.
func findSecret(cfg *config.Config, find string, env func(string) (string, bool), stderr io.Writer) ([]byte, int) {
	if find == "" {
		return nil, 0
	}
	if cfg.Admin == nil {
		fmt.Fprintf(stderr, "sluice keys: --find: %s configures no admin token, so no key is shown hashed\n", cfg.Source)
		return nil, 2
	}
	tok, err := cfg.Admin.Token(env)
	if err != nil {
		fmt.Fprintf(stderr, "sluice keys: --find needs the admin token the hashes are keyed with: %v\n", err)
		return nil, 1
	}
	return server.KeyHashSecret(tok), 0
}

// keyCensus counts the keys a scan finds, grouped by "limiter:state", the
// key's second and third parts, in the order first seen (the configured
// policies first).
type keyCensus struct {
	prefix    string
	limit     int
	groups    map[string]*keyGroup
	order     []string
	seen      int
	truncated bool
	list      *keyListing // nil unless --names or --find
}

// keyListing is the keys --names or --find lists: all of them, or (with
// secret) those whose hash is find.
type keyListing struct {
	secret []byte
	find   string
	keys   []namedKey
}

// newKeyCensus returns a census with a group for each configured policy
// (only the one named only, when set).
func newKeyCensus(cfg *config.Config, only string, limit int) *keyCensus {
	c := &keyCensus{prefix: cfg.Prefix, limit: limit, groups: map[string]*keyGroup{}}
	for _, p := range cfg.Policies {
		if only != "" && p.Name != only {
			continue
		}
		rule, _ := p.Policy.Rule()
		id := p.Limiter + ":" + rule.State()
		c.groups[id] = &keyGroup{Policy: p.Name, Limiter: p.Limiter, State: rule.State()}
		c.order = append(c.order, id)
	}
	return c
}

// pattern is the SCAN pattern: every key under the prefix, or only those
// of the one policy's group.
func (c *keyCensus) pattern(prefix, only string) string {
	if only != "" {
		return valkeyops.Glob(prefix+":"+c.order[0]+":") + "*"
	}
	return valkeyops.Glob(prefix+":") + "*"
}

// scan walks the keys of the census's pattern on every primary of
// client, counting them batch by batch.
func (c *keyCensus) scan(ctx context.Context, client valkey.Client, only string) error {
	return valkeyops.Scan(ctx, client, c.pattern(c.prefix, only), func(node valkey.Client, keys []string) (bool, error) {
		return c.scanBatch(ctx, node, keys)
	})
}

// scanBatch counts one batch of keys SCAN returned from node, asking the
// node for their TTLs and memory; false when the limit is reached.
func (c *keyCensus) scanBatch(ctx context.Context, node valkey.Client, keys []string) (bool, error) {
	if c.seen+len(keys) > c.limit {
		keys, c.truncated = keys[:c.limit-c.seen], true
	}
	c.seen += len(keys)
	cmds := make(valkey.Commands, 0, 2*len(keys))
	for _, key := range keys {
		cmds = append(cmds, node.B().Pttl().Key(key).Build(), node.B().MemoryUsage().Key(key).Build())
	}
	res := node.DoMulti(ctx, cmds...)
	for i, key := range keys {
		parts := strings.SplitN(strings.TrimPrefix(key, c.prefix+":"), ":", 3)
		g := c.group(parts)
		ttl, err := res[2*i].AsInt64()
		if err != nil {
			return false, fmt.Errorf("PTTL %s: %w", key, err)
		}
		if ttl == -2 {
			continue // expired since the scan
		}
		mem, _ := res[2*i+1].AsInt64()
		c.count(g, key, parts, ttl, mem)
	}
	return !c.truncated, nil
}

// count adds key (split into limiter, state and key), with its PTTL
// (-1: no expiry) and memory, to its group g, and to the listing.
func (c *keyCensus) count(g *keyGroup, key string, parts []string, ttl, mem int64) {
	if c.list != nil {
		c.list.add(g.Policy, key, parts, ttl)
	}
	g.Keys++
	g.Bytes += mem
	if ttl == -1 {
		g.NoTTL++
	} else {
		g.ttls = append(g.ttls, time.Duration(ttl)*time.Millisecond)
	}
}

// group returns the group of a key split into limiter, state and key
// (fewer parts: "(other)"), adding it when it is new.
func (c *keyCensus) group(parts []string) *keyGroup {
	id := "(other)"
	if len(parts) == 3 {
		id = parts[0] + ":" + parts[1]
	}
	g := c.groups[id]
	if g == nil {
		g = &keyGroup{Limiter: strings.Split(id, ":")[0]}
		if len(parts) == 3 {
			g.State = parts[1]
		}
		c.groups[id] = g
		c.order = append(c.order, id)
	}
	return g
}

// add lists the store key of policy when there is no secret, or when its
// key's hash is the one sought.
func (l *keyListing) add(policy, storeKey string, parts []string, ttl int64) {
	nk := namedKey{Policy: policy, StoreKey: storeKey, TTLMS: float64(ttl)}
	if len(parts) == 3 {
		nk.Key, nk.Recoverable = identityOf(parts[2])
	}
	if l.secret == nil || nk.Recoverable && server.KeyHash(l.secret, nk.Key) == l.find {
		l.keys = append(l.keys, nk)
	}
}

// result returns the groups in order, their TTL spread filled in.
func (c *keyCensus) result() []*keyGroup {
	out := make([]*keyGroup, 0, len(c.order))
	for _, id := range c.order {
		g := c.groups[id]
		if len(g.ttls) > 0 {
			slices.Sort(g.ttls)
			g.TTLMin, g.TTLMed, g.TTLMax = msOf(g.ttls[0]), msOf(g.ttls[len(g.ttls)/2]), msOf(g.ttls[len(g.ttls)-1])
		}
		out = append(out, g)
	}
	return out
}

// printKeyGroups writes a table of the groups.
func printKeyGroups(w io.Writer, groups []*keyGroup) {
	fmt.Fprintf(w, "%-20s %-28s %8s %10s   %s\n", "policy", "limiter:state", "keys", "memory", "ttl min / median / max")
	for _, g := range groups {
		pol := g.Policy
		if pol == "" {
			pol = "(not configured)"
		}
		spread := "-"
		if len(g.ttls) > 0 {
			spread = fmt.Sprintf("%v / %v / %v", g.ttls[0], g.ttls[len(g.ttls)/2], g.ttls[len(g.ttls)-1])
		}
		if g.NoTTL > 0 {
			spread += fmt.Sprintf("; %d keys never expire", g.NoTTL)
		}
		fmt.Fprintf(w, "%-20s %-28s %8d %10s   %s\n", pol, g.Limiter+":"+g.State, g.Keys, bytesOf(g.Bytes), spread)
	}
}

// namedKey is one key --names or --find lists.
type namedKey struct {
	Policy   string `json:"policy,omitempty"`
	Key      string `json:"key"`
	StoreKey string `json:"store_key"`
	// Recoverable is false for a key stored as its SHA-256 (longer than
	// driver.MaxIdentityLen escaped): Key is then that digest.
	Recoverable bool    `json:"recoverable"`
	TTLMS       float64 `json:"ttl_ms"`
}

// identityOf returns the key a store key's last part ({escaped key})
// holds, undoing driver.Key's escaping; ok is false when it is not one,
// or is a long key's SHA-256 ("#...").
func identityOf(tagged string) (key string, ok bool) {
	if len(tagged) < 2 || tagged[0] != '{' || tagged[len(tagged)-1] != '}' {
		return tagged, false
	}
	esc := tagged[1 : len(tagged)-1]
	if strings.HasPrefix(esc, "#") {
		return esc, false
	}
	return unescapeKey(esc), true
}

// unescapeKey undoes driver.Key's escaping: each %XX becomes the byte XX
// (hexadecimal); any other byte stands for itself.
func unescapeKey(esc string) string {
	var b strings.Builder
	for i := 0; i < len(esc); i++ {
		if esc[i] == '%' && i+2 < len(esc) {
			if v, err := strconv.ParseUint(esc[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(esc[i])
	}
	return b.String()
}

// printNamed writes the keys --names or --find listed, as JSON or as a
// table; exit code 1 when --find found none.
func printNamed(stdout, stderr io.Writer, asJSON bool, listed []namedKey, find string, seen int, truncated bool) int {
	if asJSON {
		printNamedJSON(stdout, listed, seen, truncated)
	} else {
		printNamedTable(stdout, listed, seen, truncated)
	}
	if find != "" && len(listed) == 0 {
		fmt.Fprintf(stderr, "sluice keys: no stored key is shown as %s (expired, reset, keyed with another admin token, or longer than %d bytes)\n", find, driver.MaxIdentityLen)
		return 1
	}
	return 0
}

// printNamedJSON writes the listed keys as one JSON object (an empty
// array when there are none).
func printNamedJSON(w io.Writer, listed []namedKey, seen int, truncated bool) {
	if listed == nil {
		listed = []namedKey{}
	}
	writeJSON(w, map[string]any{"keys": listed, "examined": seen, "truncated": truncated})
}

// printNamedTable writes the listed keys as a table, and says when the
// walk stopped at --limit.
func printNamedTable(w io.Writer, listed []namedKey, seen int, truncated bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tKEY\tTTL")
	for _, nk := range listed {
		fmt.Fprintln(tw, nk.row())
	}
	tw.Flush()
	if truncated {
		fmt.Fprintf(w, "\nstopped after %d keys (--limit): there may be more\n", seen)
	}
}

// row is nk's line of the --names table: policy, key (shell-quoted, or
// the store key of a digest) and time to live, tab-separated.
func (nk namedKey) row() string {
	pol, key := nk.Policy, shellQuote(nk.Key)
	if pol == "" {
		pol = "(not configured)"
	}
	if !nk.Recoverable {
		key = nk.StoreKey + " (stored as its SHA-256: not recoverable)"
	}
	ttl := "never expires"
	if nk.TTLMS >= 0 {
		ttl = time.Duration(nk.TTLMS * 1e6).String()
	}
	return pol + "\t" + key + "\t" + ttl
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func bytesOf(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// keyArgs parses POLICY KEY of inspect and reset.
func keyArgs(ctx context.Context, name string, of *opsFlags, fsArgs []string, env func(string) (string, bool), stderr io.Writer) (*keyEnv, *config.Policy, *sluice.Limiter, int) {
	k, err := openKeyEnv(ctx, of, env)
	if err != nil {
		fmt.Fprintf(stderr, "sluice %s: %v\n", name, err)
		return nil, nil, nil, 1
	}
	p, err := k.policy(fsArgs[0])
	if err != nil {
		k.Close()
		fmt.Fprintf(stderr, "sluice %s: %v\n", name, err)
		return nil, nil, nil, 2
	}
	l, err := k.limiter(p)
	if err != nil {
		k.Close()
		fmt.Fprintf(stderr, "sluice %s: %v\n", name, err)
		return nil, nil, nil, 1
	}
	return k, p, l, 0
}

// keyState is what inspect shows.
type keyState struct {
	Policy   string `json:"policy"`
	Key      string `json:"key"`
	StoreKey string `json:"store_key"`
	Rule     string `json:"rule"`
	Plan     string `json:"plan,omitempty"`
	// Source, InForce and WindowMS are the rule in force for the key: the
	// override's, the plan's or the policy's (sluice.Rule.InForce), as
	// /v1/check answers and the headers advertise it.
	Source   string `json:"source"`
	InForce  string `json:"rule_in_force"`
	WindowMS int64  `json:"window_ms"`
	// Override is the key's override, when one decided.
	Override     *sluice.Override  `json:"override,omitempty"`
	Exists       bool              `json:"exists"`
	Allowed      bool              `json:"allowed"`
	Limit        int64             `json:"limit"`
	Remaining    int64             `json:"remaining"`
	RetryAfterMS float64           `json:"retry_after_ms"`
	ResetAfterMS float64           `json:"reset_after_ms"`
	TTLMS        float64           `json:"ttl_ms"`
	Type         string            `json:"type"`
	Fields       map[string]string `json:"fields,omitempty"`
	Entries      []string          `json:"entries,omitempty"`
	EntryCount   int64             `json:"entry_count,omitempty"`
	// Leases are an in_flight key's leases, the soonest to end first, with
	// the time each has left by Valkey's clock (ended ones not yet reaped
	// show 0 or less).
	Leases []leaseState `json:"leases,omitempty"`
	// Grants is a policy with grants' key state: the grant hash, its
	// units available and its holders (grantkeys.go).
	Grants *grantState `json:"grants,omitempty"`
	// Penalty is the key's penalty state, when its policy has a penalty
	// and the store keeps some for the key.
	Penalty *penaltyState `json:"penalty,omitempty"`
}

// penaltyState is a key's penalty state, with the times left by Valkey's
// clock: whether it is blocked and for how long, the level of its last
// block (the blocks in a row), the refusals counted in the open window
// and the time it has left, and the time until the level is forgotten.
type penaltyState struct {
	Blocked       bool    `json:"blocked"`
	BlockLeftMS   float64 `json:"block_left_ms"`
	Level         int64   `json:"level"`
	Refusals      int64   `json:"refusals"`
	WindowLeftMS  float64 `json:"window_left_ms"`
	ForgottenInMS float64 `json:"forgotten_in_ms"`
}

// leaseState is one lease of an in_flight key.
type leaseState struct {
	ID       string  `json:"id"`
	EndsInMS float64 `json:"ends_in_ms"`
}

func runInspect(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := newFlags("inspect")
	of := addOpsFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	plan := fs.String("plan", "", "inspect under this `plan` of the policy, as a check naming it is decided")
	if code, ok := parsePolicyKey(fs, inspectUsage, args, stdout, stderr); !ok {
		return code
	}
	k, p, l, code := keyArgs(ctx, "inspect", of, fs.Args(), env, stderr)
	if k == nil {
		return code
	}
	defer k.Close()
	key := fs.Arg(1)
	if _, ok := l.PlanRule(*plan); !ok {
		fmt.Fprintf(stderr, "sluice inspect: plan %q is not a plan of policy %s (it has %v)\n", *plan, p.Name, l.Plans())
		return 2
	}
	st, err := inspect(ctx, k, p, l, key, *plan)
	if err != nil {
		fmt.Fprintf(stderr, "sluice inspect: %v\n", err)
		return 1
	}
	writeKeyState(stdout, st, *asJSON)
	if !st.Exists && st.Penalty == nil {
		fmt.Fprintf(stderr, "sluice inspect: no state for key %q of policy %s (never used, expired or reset): its next request gets the whole limit of %d (%s)\n",
			key, p.Name, st.Limit, inForceOf(st))
		return 1
	}
	return 0
}

// parsePolicyKey parses the command line of a command taking POLICY KEY
// (inspect, reset); ok is false, with the exit code, when the command is
// not to run.
func parsePolicyKey(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer) (int, bool) {
	if code, ok := parseFlags(fs, usage, args, stdout, stderr); !ok {
		return code, false
	}
	if fs.NArg() != 2 || fs.Arg(1) == "" {
		return usageError(fs, stderr, "want POLICY and a non-empty KEY, got %q", fs.Args()), false
	}
	return 0, true
}

// writeKeyState writes what inspect found, as JSON or as text.
func writeKeyState(w io.Writer, st *keyState, asJSON bool) {
	if !asJSON {
		printKeyState(w, st)
		return
	}
	writeJSON(w, st)
}

// printKeyState writes what inspect found, as text.
func printKeyState(w io.Writer, st *keyState) {
	fmt.Fprintf(w, "policy     %s: %s\nkey        %s\nstore key  %s\n", st.Policy, st.Rule, st.Key, st.StoreKey)
	fmt.Fprintf(w, "in force   %s: %s\n", inForceOf(st), st.InForce)
	if st.Penalty != nil {
		printPenalty(w, st.Penalty)
	}
	if !st.Exists {
		return
	}
	if st.Grants != nil {
		fmt.Fprintf(w, "ttl        %v\n", time.Duration(st.TTLMS*1e6))
		printGrants(w, st.Grants)
		return
	}
	verdict := "allowed"
	if !st.Allowed {
		verdict = fmt.Sprintf("refused, retry after %v", time.Duration(st.RetryAfterMS*1e6))
	}
	fmt.Fprintf(w, "next       %s\nremaining  %d of %d\nreset in   %v\nttl        %v\n", verdict, st.Remaining, st.Limit,
		time.Duration(st.ResetAfterMS*1e6), time.Duration(st.TTLMS*1e6))
	fmt.Fprintf(w, "raw        %s", st.Type)
	for _, n := range slices.Sorted(maps.Keys(st.Fields)) {
		fmt.Fprintf(w, " %s=%s", n, st.Fields[n])
	}
	if st.Type == "zset" && st.Leases == nil {
		fmt.Fprintf(w, " %d entries; oldest: %s", st.EntryCount, strings.Join(st.Entries, " "))
	}
	fmt.Fprintln(w)
	if st.Leases != nil {
		printLeases(w, st.Leases)
	}
}

// printPenalty shows a key's penalty state.
func printPenalty(w io.Writer, ps *penaltyState) {
	ms := func(v float64) time.Duration { return time.Duration(v * 1e6).Round(time.Millisecond) }
	switch {
	case ps.Blocked:
		fmt.Fprintf(w, "penalty    blocked for %v more (block level %d)", ms(ps.BlockLeftMS), ps.Level)
	default:
		fmt.Fprintf(w, "penalty    not blocked (level %d)", ps.Level)
	}
	if ps.Refusals > 0 {
		fmt.Fprintf(w, "; %d refusals counted, window ends in %v", ps.Refusals, ms(ps.WindowLeftMS))
	}
	if ps.ForgottenInMS > 0 {
		fmt.Fprintf(w, "; level forgotten in %v", ms(ps.ForgottenInMS))
	}
	fmt.Fprintln(w)
}

// printLeases shows an in_flight key's leases, at most 20 of them.
func printLeases(w io.Writer, leases []leaseState) {
	fmt.Fprintf(w, "leases     %d held\n", len(leases))
	for i, ls := range leases {
		if i == 20 {
			fmt.Fprintf(w, "           ... and %d more (--json lists them all)\n", len(leases)-i)
			return
		}
		fmt.Fprintf(w, "           %s ends in %v\n", ls.ID, time.Duration(ls.EndsInMS*1e6).Round(time.Millisecond))
	}
}

// inForceOf names where the rule in force comes from: "override until
// TIME (reason)", "plan NAME" or "policy".
func inForceOf(st *keyState) string {
	switch {
	case st.Override != nil:
		s := "override until " + st.Override.Expires.UTC().Format(time.RFC3339)
		if st.Override.Reason != "" {
			s += " (" + st.Override.Reason + ")"
		}
		return s
	case st.Source == sluice.SourcePlan.String():
		return "plan " + st.Plan
	}
	return st.Source
}

// inspect reads the raw state of key under p's limiter l and peeks at it
// under the rule in force (plan's, when named).
func inspect(ctx context.Context, k *keyEnv, p *config.Policy, l *sluice.Limiter, key, plan string) (*keyState, error) {
	if key == "" {
		return nil, errors.New("the key is empty")
	}
	st := &keyState{Policy: p.Name, Key: key, StoreKey: driver.Key(k.cfg.Prefix, l.Name(), l.Rule(), key), Rule: l.Rule().String(), Plan: plan}
	if p.Grants {
		return st, inspectGrants(ctx, k, l, st)
	}
	// The raw state first: Peek may tidy it (a sliding log drops old entries).
	if err := readState(ctx, k.client, l, st); err != nil {
		return nil, err
	}
	if err := readPenalty(ctx, k, l, st); err != nil {
		return nil, err
	}
	res, err := peekInForce(ctx, l, st, plan)
	if err != nil {
		return nil, err
	}
	if st.Exists {
		st.Allowed, st.Remaining = res.Allowed, res.Remaining
		st.RetryAfterMS, st.ResetAfterMS = msOf(res.RetryAfter), msOf(res.ResetAfter)
	}
	return st, nil
}

// readState reads the type of st's store key and, when it exists, its
// raw state.
func readState(ctx context.Context, c valkey.Client, l *sluice.Limiter, st *keyState) error {
	typ, err := c.Do(ctx, c.B().Type().Key(st.StoreKey).Build()).ToString()
	if err != nil {
		return err
	}
	st.Type = typ
	if typ == "none" {
		return nil
	}
	st.Exists = true
	return readRawState(ctx, c, l, st)
}

// peekInForce decides st's key under the rule in force, as a check of the
// key would meet it (a peek takes nothing), and notes that rule in st.
func peekInForce(ctx context.Context, l *sluice.Limiter, st *keyState, plan string) (sluice.Result, error) {
	planRule, _ := l.PlanRule(plan)
	res, err := l.AllowPlan(ctx, st.Key, plan, 0)
	if err != nil {
		return res, err
	}
	if res.Degraded {
		return res, errors.New("Valkey did not answer the peek in time")
	}
	in := httplimit.InForce(planRule, res)
	st.Source, st.InForce, st.WindowMS, st.Limit = res.Source.String(), in.String(), in.Period().Milliseconds(), in.Limit
	if res.Source == sluice.SourceOverride {
		if o, ok, err := l.GetOverride(ctx, st.Key); err == nil && ok {
			st.Override = &o
		}
	}
	return res, nil
}

// readRawState reads the stored state of st's key, of type st.Type: a
// string's decoded fields, or a sorted set's size and oldest entries; and
// its time to live.
func readRawState(ctx context.Context, c valkey.Client, l *sluice.Limiter, st *keyState) error {
	var err error
	switch st.Type {
	case "string":
		err = readStringState(ctx, c, l, st)
	case "zset":
		err = readZsetState(ctx, c, l, st)
	}
	if err != nil {
		return err
	}
	ttl, err := c.Do(ctx, c.B().Pttl().Key(st.StoreKey).Build()).AsInt64()
	if err != nil {
		return err
	}
	st.TTLMS = float64(ttl)
	return nil
}

// readLeases reads an in_flight key's leases (at most MaxInFlightLimit)
// and the time each has left by Valkey's clock.
func readLeases(ctx context.Context, c valkey.Client, sk string) ([]leaseState, error) {
	zs, err := c.Do(ctx, c.B().Zrange().Key(sk).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		return nil, err
	}
	now, err := valkeyNow(ctx, c)
	if err != nil {
		return nil, err
	}
	out := make([]leaseState, 0, len(zs))
	for _, z := range zs {
		var id driver.LeaseID
		copy(id[:], z.Member)
		out = append(out, leaseState{ID: "h" + id.String(), EndsInMS: (z.Score - float64(now)) / 1000})
	}
	return out, nil
}

// readStringState reads st's string state into st.Fields, decoded into
// the fields of l's algorithm (one "value" for an algorithm without any).
func readStringState(ctx context.Context, c valkey.Client, l *sluice.Limiter, st *keyState) error {
	v, err := c.Do(ctx, c.B().Get().Key(st.StoreKey).Build()).ToString()
	if err != nil {
		return err
	}
	rule := l.Rule()
	if luascript.StateFields(&rule) == nil {
		st.Fields = map[string]string{"value": v}
		return nil
	}
	st.Fields, err = luascript.DecodeState(&rule, v)
	return err
}

// readZsetState reads the size and the ten oldest entries of st's sorted
// set, or for an in_flight key its leases.
func readZsetState(ctx context.Context, c valkey.Client, l *sluice.Limiter, st *keyState) error {
	sk := st.StoreKey
	var err error
	if st.EntryCount, err = c.Do(ctx, c.B().Zcard().Key(sk).Build()).AsInt64(); err != nil {
		return err
	}
	if l.Rule().Algorithm == driver.AlgorithmInFlight {
		st.Leases, err = readLeases(ctx, c, sk)
		return err
	}
	st.Entries, err = c.Do(ctx, c.B().Zrange().Key(sk).Min("0").Max("9").Build()).AsStrSlice()
	return err
}

// openAuditLog returns where reset's audit lines go: stderr, and the
// file at path (appended to) when path is set.
func openAuditLog(path string, stderr io.Writer) (io.Writer, func(), error) {
	if path == "" {
		return stderr, func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	return io.MultiWriter(stderr, f), func() { f.Close() }, nil
}

// operator names who runs the command, and on which host, for audit.
func operator() (who, host string) {
	who = "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	host, _ = os.Hostname()
	return who, host
}

func runReset(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := newFlags("reset")
	of := addOpsFlags(fs)
	auditPath := fs.String("audit-log", "", "also append the audit line to this `file`")
	if code, ok := parsePolicyKey(fs, resetUsage, args, stdout, stderr); !ok {
		return code
	}
	audit, closeAudit, err := openAuditLog(*auditPath, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice reset: --audit-log: %v\n", err)
		return 1
	}
	defer closeAudit()
	k, p, l, code := keyArgs(ctx, "reset", of, fs.Args(), env, stderr)
	if k == nil {
		return code
	}
	defer k.Close()
	r := &resetRun{k: k, p: p, l: l, key: fs.Arg(1)}
	r.reset(ctx)
	r.audit(audit)
	return r.report(ctx, stdout, stderr)
}

// resetRun is one sluice reset of a key of a policy, and what came of it.
type resetRun struct {
	k        *keyEnv
	p        *config.Policy
	l        *sluice.Limiter
	key      string
	existed  int64 // EXISTS of the store key (and its penalty key) before the reset
	notified int   // the processes the notice reached
	err      error
}

// storeKey is the store key of the key reset: its grant state for a
// policy with grants.
func (r *resetRun) storeKey() string {
	if r.p.Grants {
		return grantKeyOf(r.k, r.l, r.key)
	}
	return driver.Key(r.k.cfg.Prefix, r.l.Name(), r.l.Rule(), r.key)
}

// reset deletes the key's state when it exists, and tells every process;
// a policy with grants resets its grant state (resetGrants).
func (r *resetRun) reset(ctx context.Context) {
	c := r.k.client
	keys := []string{r.storeKey()}
	if _, ok := r.l.Penalty(); ok {
		// The penalty key shares the store key's slot: one EXISTS.
		keys = append(keys, driver.PenaltyKey(r.k.cfg.Prefix, r.l.Name(), r.key))
	}
	r.existed, r.err = c.Do(ctx, c.B().Exists().Key(keys...).Build()).AsInt64()
	switch {
	case r.err == nil && r.p.Grants:
		r.notified, r.err = resetGrants(ctx, r.k, r.p, r.key)
	case r.err == nil:
		r.notified, r.err = r.l.ResetNotify(ctx, r.key)
	}
}

// result is the reset's outcome, as the audit line says it.
func (r *resetRun) result() string {
	switch {
	case r.err != nil:
		return "failed: " + r.err.Error()
	case r.existed == 0:
		return "no state"
	}
	return "reset"
}

// audit writes the reset's JSON audit line to w.
func (r *resetRun) audit(w io.Writer) {
	who, host := operator()
	slog.New(slog.NewJSONHandler(w, nil)).Info("sluice reset", "audit", true, "policy", r.p.Name, "key", r.key,
		"store_key", r.storeKey(), "had_state", r.existed > 0, "result", r.result(), "notified", r.notified, "user", who, "host", host, "valkey", valkeyops.Describe(r.k.cfg.Valkey))
}

// report tells the operator what the reset did, and returns the exit
// code: 1 when it failed or there was no state.
func (r *resetRun) report(ctx context.Context, stdout, stderr io.Writer) int {
	switch {
	case r.err != nil:
		fmt.Fprintf(stderr, "sluice reset: %v\n", r.err)
		return 1
	case r.existed == 0:
		fmt.Fprintf(stderr, "sluice reset: no state for key %q of policy %s (never used, expired or reset already): nothing to reset\n", r.key, r.p.Name)
		return 1
	}
	if r.p.Grants {
		fmt.Fprintf(stdout, "reset %s %q: the grant state's level is full again but for the units the processes hold, which stay theirs until their grants end (at most %v); the notice reached %d subscribed sluice process(es), and every process on this Valkey stops refusing the key from its share within %v: from then a request its units do not cover asks Valkey again. Together they get the limit of %d, less the units a process spent since its last grant call, never more\n",
			r.p.Name, r.key, grantLife(r.p), r.notified, valkeystore.NoticeBound, r.l.Rule().Limit)
		return 0
	}
	fmt.Fprintf(stdout, "reset %s %q: state deleted; the notice reached %d subscribed sluice process(es), and every process on this Valkey stops refusing the key from its deny cache within %v: from then its next request gets the whole limit of %s\n",
		r.p.Name, r.key, r.notified, valkeystore.NoticeBound, r.limitBack(ctx))
	return 0
}

// limitBack names the limit the key gets back: the rule in force's when
// a peek answers, else the policy's.
func (r *resetRun) limitBack(ctx context.Context) string {
	if res, err := r.l.Peek(ctx, r.key); err == nil && !res.Degraded {
		return fmt.Sprintf("%d (the %s's)", res.Limit, res.Source)
	}
	return fmt.Sprintf("%d (the policy's)", r.l.Rule().Limit)
}

// valkeyNow is Valkey's clock (TIME), in microseconds since the epoch.
func valkeyNow(ctx context.Context, c valkey.Client) (int64, error) {
	t, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil || len(t) != 2 {
		return 0, fmt.Errorf("TIME: %v", err)
	}
	sec, _ := strconv.ParseInt(t[0], 10, 64)
	usec, _ := strconv.ParseInt(t[1], 10, 64)
	return sec*1_000_000 + usec, nil
}

// readPenalty reads the penalty state of st's key into st.Penalty, when
// l has a penalty and Valkey keeps some for the key.
func readPenalty(ctx context.Context, k *keyEnv, l *sluice.Limiter, st *keyState) error {
	pen, ok := l.Penalty()
	if !ok {
		return nil
	}
	c := k.client
	v, err := c.Do(ctx, c.B().Get().Key(driver.PenaltyKey(k.cfg.Prefix, l.Name(), st.Key)).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		return nil
	} else if err != nil {
		return err
	}
	ps, err := luascript.DecodePenalty(v)
	if err != nil {
		return err
	}
	now, err := valkeyNow(ctx, c)
	if err != nil {
		return err
	}
	ms := func(us int64) float64 { return float64(max(us, 0)) / 1000 }
	out := &penaltyState{Blocked: ps.Until > now, BlockLeftMS: ms(ps.Until - now), Level: ps.Level, Refusals: ps.Count}
	if ps.Count > 0 {
		out.WindowLeftMS = ms(ps.WindowStart + pen.Within.Microseconds() - now)
	}
	if ps.Level > 0 && pen.MaxBlock > pen.Block {
		out.ForgottenInMS = ms(ps.Until + pen.Forgive.Microseconds() - now)
	}
	st.Penalty = out
	return nil
}
