// Package verify proves that a deployment of Sluice limits as promised: it
// runs, against the deployment's own Valkey (standalone or Cluster) and for
// each of its configured policies, the four tests every rate limiter
// deserves, plus the expiry of every key:
//
//   - concurrency: twice the limit in parallel from several OS processes
//     (this executable, started again as workers) with many goroutines
//     each; exactly the limit must be allowed;
//   - boundaries: a full burst just before and just after a window edge,
//     with what the algorithm promises (fixed window allows both, the
//     sliding log neither, the sliding window counter per its formula,
//     the buckets what refilled);
//   - recovery: after exhausting a key, a request at the advertised
//     RetryAfter is allowed and one a microsecond earlier is not; when the
//     RetryAfter is short, also after a real wait;
//   - failure: the same policy against a local server that stops
//     listening and one that never answers decides within its timeout, as
//     its on_failure says;
//   - ttl: every key the checks wrote expires, within its bound;
//
// An in_flight policy has checks of its own (inflight.go): concurrency
// (holders in several processes never hold more than Limit leases at
// once by their own timestamps, and take freed slots again promptly),
// crash (a holder of every slot killed with SIGKILL: its slots come back
// after Lease, within the margin), failure and ttl as above;
//
// and, once for the deployment, doctor's checks of the Valkey settings
// whose failure breaks the limits (doctor.LimitChecks): an evicting
// maxmemory-policy fails the run; persistence that forgets long windows'
// counts on a restart is a caveat the verdict names; a setting that could
// not be read (CONFIG disabled) is named as not checked.
//
// Everything happens under a scratch key prefix of its own, which must be
// empty at the start (Run refuses a prefix holding keys it did not create)
// and whose keys are deleted at the end. The checks that count and compare
// times decide on a client clock (sluice.WithClock), so that their answers
// are exact on any machine; the scripts, keys and server are the
// deployment's own.
//
// sluice verify is this package on the command line; the project's tests
// call Run too.
package verify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/doctor"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"github.com/sluicehq/sluice/cmd/sluice/internal/valkeyops"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

// Defaults for Options.
const (
	DefaultProcesses     = 4
	DefaultGoroutines    = 16
	DefaultBlackholeWait = time.Second
	DefaultMargin        = 250 * time.Millisecond
)

// Options says what Run verifies, and how.
type Options struct {
	// Config is the deployment's configuration: its valkey section (with
	// addresses) and its policies. Required.
	Config *config.Config
	// Env looks up the environment variables the configuration names for
	// secrets (default os.LookupEnv).
	Env func(string) (string, bool)
	// Policies restricts the run to these policy names (default: all).
	Policies []string
	// Processes is the number of worker processes of the concurrency check
	// (default 4); Goroutines the goroutines deciding in each (default 16).
	Processes, Goroutines int
	// Prefix is the scratch key prefix (default "sluice-verify-" and 8
	// random hex digits). It must hold no key when Run starts.
	Prefix string
	// BlackholeWait is the longest a decision may take against a server
	// that never answers (default 1s): a policy whose timeout is longer
	// would hold each request that long while Valkey hangs.
	BlackholeWait time.Duration
	// Margin is what a degraded decision may take beyond the policy's
	// timeout (default 250ms): scheduling on a busy host and connection
	// handling.
	Margin time.Duration
	// LeaseWait is the longest Lease the crash check of an in_flight
	// policy waits out (default 10s): a policy with a longer Lease is
	// checked with this one, and the report says so. Margin is also how
	// long after the killed holder's leases ended a slot may take to come
	// back.
	LeaseWait time.Duration
	// Worker returns the command that runs a concurrency worker (default:
	// this executable with WorkerEnv=1 in its environment, whose main must
	// call ServeWorker when it sees WorkerEnv).
	Worker func(ctx context.Context) *exec.Cmd
}

// ErrUnknownPolicy is returned (wrapped) for a policy name the
// configuration does not define.
var ErrUnknownPolicy = errors.New("unknown policy")

// PrefixInUseError is Run's refusal of a scratch prefix that already holds
// keys: verify never touches keys it did not create.
type PrefixInUseError struct {
	Prefix  string
	Example string
}

func (e *PrefixInUseError) Error() string {
	return fmt.Sprintf("the scratch prefix %q already holds keys (such as %q) that verify did not create: "+
		"choose another --prefix; verify never touches keys it did not create", e.Prefix, e.Example)
}

// Report is the outcome of Run.
type Report struct {
	Valkey   string          `json:"valkey"`
	Mode     string          `json:"mode"`
	Prefix   string          `json:"prefix"`
	Policies []*PolicyReport `json:"policies"`
	// Settings are doctor's findings for doctor.LimitChecks on every
	// primary.
	Settings []*doctor.Finding `json:"settings"`
	// NotChecked names the settings that could not be read, so that what
	// they break was not verified; Caveats the ones that hold the limits
	// until a restart.
	NotChecked []string `json:"not_checked,omitempty"`
	Caveats    []string `json:"caveats,omitempty"`
	Passed     bool     `json:"passed"`
	// Failed names each failed check as "policy/check".
	Failed      []string      `json:"failed,omitempty"`
	Elapsed     time.Duration `json:"-"`
	ElapsedMS   float64       `json:"elapsed_ms"`
	KeysDeleted int           `json:"keys_deleted"`
	// CleanupError says why scratch keys could not all be deleted.
	CleanupError string `json:"cleanup_error,omitempty"`
}

// PolicyReport is one policy's checks.
type PolicyReport struct {
	Name     string `json:"policy"`
	Rule     string `json:"rule"`
	FailMode string `json:"on_failure"`
	Timeout  string `json:"timeout"`
	// Shadow: the policy never refuses in service; verify checks its
	// limit as if it did.
	Shadow bool     `json:"shadow,omitempty"`
	Checks []*Check `json:"checks"`
	Passed bool     `json:"passed"`
}

// Check is one check of one policy: its verdict, a line with its figures
// for people, and the figures themselves for programs.
type Check struct {
	Name     string             `json:"check"`
	Passed   bool               `json:"passed"`
	Detail   string             `json:"detail"`
	Failures []string           `json:"failures,omitempty"`
	Figures  map[string]float64 `json:"figures"`
	Elapsed  time.Duration      `json:"-"`
}

func (c *Check) fail(format string, args ...any) {
	c.Passed = false
	c.Failures = append(c.Failures, fmt.Sprintf(format, args...))
}

func (c *Check) fig(name string, v float64) { c.Figures[name] = v }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// checkTimeout bounds each decision of the checks that test semantics
// rather than speed: long enough that a loaded machine never degrades
// them (a degraded decision would be counted by the fail mode).
const checkTimeout = 5 * time.Second

// run is the state of one Run.
type run struct {
	opts   Options
	cfg    *config.Config
	client valkey.Client
	store  *valkeystore.Store
	prefix string
	log    *slog.Logger
	// workers are the concurrency check's worker processes, started on
	// first use and ended by Run.
	workers []*workerProc
	// primary is the address of a primary the client reached: what the
	// failure check's proxy stands in front of.
	primary string
}

// Run verifies the policies of opts.Config against its Valkey. The error is
// for what kept it from verifying (no Valkey, an unknown policy, a prefix
// in use, Valkey unreachable); a failed check is in the Report, with
// Passed false.
func Run(ctx context.Context, opts Options) (*Report, error) {
	start := time.Now()
	if opts.Config == nil {
		return nil, errors.New("no configuration")
	}
	opts.setDefaults()
	policies, prefix, err := opts.scope()
	if err != nil {
		return nil, err
	}
	conn, err := store.Open(ctx, opts.Config.Valkey, opts.Env)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := conn.Client
	r := &run{opts: opts, cfg: opts.Config, client: client, store: conn.Store, prefix: prefix,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	defer r.stopWorkers()
	rep, err := r.begin(ctx)
	if err != nil {
		return nil, err
	}
	// Scratch keys go, even when a check failed or ctx ended.
	defer rep.cleanUp(client, prefix)
	if err := r.checkAll(ctx, rep, policies); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(start)
	rep.ElapsedMS = ms(rep.Elapsed)
	return rep, nil
}

// scope returns the policies to verify and the prefix to write under.
func (opts *Options) scope() ([]*config.Policy, string, error) {
	policies, err := selectPolicies(opts.Config, opts.Policies)
	if err != nil {
		return nil, "", err
	}
	prefix, err := scratchPrefix(opts.Prefix)
	return policies, prefix, err
}

// begin refuses a prefix in use, finds the primary the failure check's
// proxy stands in front of, and starts the report with the Valkey
// settings judged.
func (r *run) begin(ctx context.Context) (*Report, error) {
	if err := refuseUsedPrefix(ctx, r.client, r.prefix); err != nil {
		return nil, err
	}
	var err error
	if r.primary, err = firstPrimary(ctx, r.client); err != nil {
		return nil, err
	}
	rep := &Report{Valkey: valkeyops.Describe(r.cfg.Valkey), Mode: valkeyops.Mode(ctx, r.client), Prefix: r.prefix, Passed: true}
	if err := rep.settings(ctx, r.client, r.store, r.cfg); err != nil {
		return nil, err
	}
	return rep, nil
}

// checkAll runs the checks of each policy into rep, stopping when ctx
// ends.
func (r *run) checkAll(ctx context.Context, rep *Report, policies []*config.Policy) error {
	for _, p := range policies {
		rep.add(p.Name, r.policy(ctx, p))
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// firstPrimary returns the address of the first primary the client knows,
// in address order.
func firstPrimary(ctx context.Context, client valkey.Client) (string, error) {
	prims, err := valkeyops.Primaries(ctx, client)
	if err != nil {
		return "", err
	}
	if len(prims) == 0 {
		return "", errors.New("the client knows no primary")
	}
	return valkeyops.SortedAddrs(prims)[0], nil
}

// setDefaults fills in the options left zero.
func (opts *Options) setDefaults() {
	if opts.Env == nil {
		opts.Env = os.LookupEnv
	}
	opts.Processes = positiveOr(opts.Processes, DefaultProcesses)
	opts.Goroutines = positiveOr(opts.Goroutines, DefaultGoroutines)
	opts.BlackholeWait = positiveOr(opts.BlackholeWait, DefaultBlackholeWait)
	opts.Margin = positiveOr(opts.Margin, DefaultMargin)
	opts.LeaseWait = positiveOr(opts.LeaseWait, DefaultLeaseWait)
	if opts.Worker == nil {
		opts.Worker = selfWorker
	}
}

// positiveOr returns v when it is positive, else def.
func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// scratchPrefix is the prefix the checks write under: the one given, or
// a random sluice-verify-XXXXXXXX.
func scratchPrefix(prefix string) (string, error) {
	if prefix == "" {
		var b [4]byte
		rand.Read(b[:])
		prefix = "sluice-verify-" + hex.EncodeToString(b[:])
	}
	if prefix == "" || strings.ContainsAny(prefix, "{} \t\r\n") {
		return "", fmt.Errorf("the prefix %q must be non-empty, without braces or spaces", prefix)
	}
	return prefix, nil
}

// add adds the report of one policy, noting its failed checks.
func (rep *Report) add(policy string, pr *PolicyReport) {
	rep.Policies = append(rep.Policies, pr)
	for _, c := range pr.Checks {
		if !c.Passed {
			rep.Passed = false
			rep.Failed = append(rep.Failed, policy+"/"+c.Name)
		}
	}
}

// cleanUp deletes the scratch keys under prefix, noting how many and any
// error in the report.
func (rep *Report) cleanUp(client valkey.Client, prefix string) {
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := deletePrefix(cctx, client, prefix)
	rep.KeysDeleted = n
	if err != nil {
		rep.CleanupError = err.Error()
	}
}

// settings runs doctor's LimitChecks and judges them (settingVerdict).
func (rep *Report) settings(ctx context.Context, client valkey.Client, store *valkeystore.Store, cfg *config.Config) error {
	found, err := doctor.Limits(ctx, client, store, cfg)
	if err != nil {
		return fmt.Errorf("checking the valkey settings: %w", err)
	}
	rep.Settings = found
	for _, f := range found {
		rep.judge(f)
	}
	return nil
}

// judge notes a setting check that was not checked, failed, or passed
// with a caveat (settingVerdict).
func (rep *Report) judge(f *doctor.Finding) {
	where := f.Check
	if f.Node != "" {
		where += " on " + f.Node
	}
	switch settingVerdict(f) {
	case "NOT CHECKED":
		rep.NotChecked = append(rep.NotChecked, where)
	case "FAIL":
		rep.Passed = false
		rep.Failed = append(rep.Failed, "settings/"+where)
	case "CAVEAT":
		rep.Caveats = append(rep.Caveats, where+": "+f.Message)
	}
}

func selectPolicies(cfg *config.Config, names []string) ([]*config.Policy, error) {
	if len(names) == 0 {
		if len(cfg.Policies) == 0 {
			return nil, fmt.Errorf("%s defines no policies", cfg.Source)
		}
		return cfg.Policies, nil
	}
	var out []*config.Policy
	for _, n := range names {
		p := cfg.Policy(n)
		if p == nil {
			return nil, unknownPolicy(cfg, n)
		}
		out = append(out, p)
	}
	return out, nil
}

// unknownPolicy is the error for the policy name that cfg does not
// define, naming those it does.
func unknownPolicy(cfg *config.Config, name string) error {
	var known []string
	for _, q := range cfg.Policies {
		known = append(known, q.Name)
	}
	return fmt.Errorf("%w %q: %s defines %s", ErrUnknownPolicy, name, cfg.Source, strings.Join(known, ", "))
}

// namedCheck is one check of a policy, by name.
type namedCheck struct {
	name string
	run  func(context.Context, *config.Policy, *Check)
}

// policy runs every check of p: for an in_flight policy, inFlightChecks.
func (r *run) policy(ctx context.Context, p *config.Policy) *PolicyReport {
	rule, _ := p.Policy.Rule() // validated by config
	pr := &PolicyReport{Name: p.Name, Rule: rule.String(), FailMode: p.FailMode.String(), Timeout: r.timeout(p).String(), Shadow: p.Shadow, Passed: true}
	checks := []namedCheck{
		{"concurrency", r.concurrency},
		{"boundaries", r.boundaries},
		{"recovery", r.recovery},
		{"failure", r.failure},
		{"ttl", r.ttl},
	}
	if rule.Algorithm == driver.AlgorithmInFlight {
		checks = r.inFlightChecks()
	}
	for _, c := range checks {
		chk := &Check{Name: c.name, Passed: true, Figures: map[string]float64{}}
		t0 := time.Now()
		if err := ctx.Err(); err != nil {
			chk.fail("not run: %v", err)
		} else {
			c.run(ctx, p, chk)
		}
		chk.Elapsed = time.Since(t0)
		chk.fig("elapsed_ms", ms(chk.Elapsed))
		if !chk.Passed {
			pr.Passed = false
		}
		pr.Checks = append(pr.Checks, chk)
	}
	return pr
}

// timeout is the policy's decision timeout as sluice serve applies it.
func (r *run) timeout(p *config.Policy) time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return sluice.DefaultTimeout
}

// limiter returns a limiter for p under the scratch prefix that decides at
// the times clock gives (the store's clock when nil), with the deny cache
// off: the checks test the store.
func (r *run) limiter(p *config.Policy, clock func() time.Time) (*sluice.Limiter, error) {
	opts := []sluice.Option{sluice.WithName(p.Limiter), sluice.WithPrefix(r.prefix), sluice.WithDenyCache(false),
		sluice.WithTimeout(max(checkTimeout, r.timeout(p))), sluice.WithLogger(r.log)}
	if clock != nil {
		opts = append(opts, sluice.WithClock(clock))
	}
	return sluice.New(r.store, p.Policy, opts...)
}

// refuseUsedPrefix fails when any key starts with prefix+":".
func refuseUsedPrefix(ctx context.Context, c valkey.Client, prefix string) error {
	var example string
	err := valkeyops.Scan(ctx, c, valkeyops.Glob(prefix+":")+"*", func(_ valkey.Client, keys []string) (bool, error) {
		example = keys[0]
		return false, nil
	})
	if err != nil {
		return err
	}
	if example != "" {
		return &PrefixInUseError{Prefix: prefix, Example: example}
	}
	return nil
}

// deletePrefix deletes every key under prefix+":", one DEL per key (keys
// of a cluster node may be in different slots), and returns how many.
func deletePrefix(ctx context.Context, c valkey.Client, prefix string) (int, error) {
	n := 0
	err := valkeyops.Scan(ctx, c, valkeyops.Glob(prefix+":")+"*", func(node valkey.Client, keys []string) (bool, error) {
		cmds := make(valkey.Commands, len(keys))
		for i, k := range keys {
			cmds[i] = node.B().Del().Key(k).Build()
		}
		for _, res := range node.DoMulti(ctx, cmds...) {
			d, err := res.AsInt64()
			if err != nil {
				return false, fmt.Errorf("DEL: %w", err)
			}
			n += int(d)
		}
		return true, nil
	})
	return n, err
}
