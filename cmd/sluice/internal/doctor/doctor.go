// Package doctor checks what makes a deployment's limits wrong or fragile
// in the Valkey it uses: the server version, eviction, persistence for
// long windows, cluster state and replicas, replication, round-trip
// latency against the policies' timeouts, clock skew, the scripts, and the
// permissions the scripts need. Each finding has a severity and the
// setting that fixes it. Where the server does not let it look (managed
// services often disable CONFIG), the finding says "could not check"
// rather than failing. sluice doctor is this package on the command line.
package doctor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"github.com/sluicehq/sluice/cmd/sluice/internal/valkeyops"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/valkey-io/valkey-go"
)

// Severity grades a finding.
type Severity int

// The severities, from harmless to wrong.
const (
	// OK: checked, nothing to do.
	OK Severity = iota
	// Info: worth knowing; nothing is wrong.
	Info
	// Unknown: could not check (the server did not let doctor look).
	Unknown
	// Warning: limits are fragile: they hold until something ordinary
	// happens (a restart, a failover, a load spike).
	Warning
	// Error: limits are wrong now, or will be without warning.
	Error
)

var severityNames = [...]string{OK: "ok", Info: "info", Unknown: "could not check", Warning: "warning", Error: "error"}

func (s Severity) String() string { return severityNames[s] }

// MarshalText writes the severity's name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Finding is one thing doctor found.
type Finding struct {
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	// Node is the server the finding is about, "" for the deployment.
	Node    string `json:"node,omitempty"`
	Message string `json:"message"`
	// Fix is the setting (or action) that fixes it, "" when nothing is to
	// be done.
	Fix string `json:"fix,omitempty"`
}

// Report is what Run found.
type Report struct {
	Valkey   string     `json:"valkey"`
	Mode     string     `json:"mode"`
	Findings []*Finding `json:"findings"`
	// Worst is the highest severity found.
	Worst Severity `json:"worst"`
}

// Options says what Run checks.
type Options struct {
	// Config is the deployment's configuration: its valkey section (with
	// addresses) and policies. Required.
	Config *config.Config
	// Env looks up the environment variables the configuration names for
	// secrets (default os.LookupEnv).
	Env func(string) (string, bool)
	// Samples is the number of decisions timed for the latency check
	// (default 200).
	Samples int
}

// LongWindow is the shortest window for which losing counts on a restart
// is worth a warning: a daily quota forgotten is a day of free requests.
const LongWindow = time.Hour

// Run checks the Valkey of opts.Config. The error is for what kept it from
// checking at all (no Valkey configured, or none answering).
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Config == nil {
		return nil, fmt.Errorf("doctor: no configuration")
	}
	opts = opts.withDefaults()
	conn, err := store.Open(ctx, opts.Config.Valkey, opts.Env)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := conn.Client
	prims, err := valkeyops.Primaries(ctx, client)
	if err != nil {
		return nil, err
	}
	var b [4]byte
	rand.Read(b[:])
	d := &doc{opts: opts, cfg: opts.Config, client: client, prims: prims, prefix: "sluice-doctor-" + hex.EncodeToString(b[:]),
		risked: map[string]bool{}, isCluster: client.Mode() == valkey.ClientModeCluster}
	rep := &Report{Valkey: valkeyops.Describe(opts.Config.Valkey), Mode: valkeyops.Mode(ctx, client)}
	d.rep = rep
	d.risks(ctx, conn.Store)
	d.eachPrimary(ctx)
	if d.isCluster {
		d.cluster(ctx)
	}
	d.scripts(ctx, conn.Store)
	d.acl(ctx)
	rep.setWorst()
	return rep, nil
}

// withDefaults is opts with the process environment and 200 samples
// where they are not set.
func (opts Options) withDefaults() Options {
	if opts.Env == nil {
		opts.Env = os.LookupEnv
	}
	if opts.Samples <= 0 {
		opts.Samples = 200
	}
	return opts
}

// eachPrimary runs the checks of one server on every primary, in address
// order: version, eviction, persistence, replication and clock.
func (d *doc) eachPrimary(ctx context.Context) {
	for _, addr := range valkeyops.SortedAddrs(d.prims) {
		node := d.prims[addr]
		d.version(ctx, addr, node)
		d.eviction(ctx, addr, node)
		d.persistence(ctx, addr, node)
		d.replication(ctx, addr, node)
		d.clock(ctx, addr, node)
	}
}

// setWorst notes the worst severity of the findings.
func (rep *Report) setWorst() {
	for _, f := range rep.Findings {
		rep.Worst = max(rep.Worst, f.Severity)
	}
}

// doc is the state of one Run.
type doc struct {
	opts   Options
	cfg    *config.Config
	client valkey.Client
	prims  map[string]valkey.Client
	prefix string
	// cluster: the client is a cluster client.
	isCluster bool
	rep       *Report
	// risked holds "node setting" for each risk Store.Risks named.
	risked  map[string]bool
	riskErr error
}

func (d *doc) add(check string, sev Severity, node, fix, format string, args ...any) {
	d.rep.Findings = append(d.rep.Findings, &Finding{Check: check, Severity: sev, Node: node, Message: fmt.Sprintf(format, args...), Fix: fix})
}

// configGet returns a server setting, or an error when CONFIG is not
// allowed (managed services often disable it).
func configGet(ctx context.Context, node valkey.Client, name string) (string, error) {
	m, err := node.Do(ctx, node.B().ConfigGet().Parameter(name).Build()).AsStrMap()
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s: no such setting", name)
	}
	return v, nil
}

// couldNot records a setting doctor could not read.
func (d *doc) couldNot(check, addr, what string, err error) {
	d.add(check, Unknown, addr, "check "+what+" in the server's configuration or your provider's settings",
		"could not check %s: %v (CONFIG may be disabled, as on many managed services)", what, err)
}

// info returns the fields of INFO section.
func info(ctx context.Context, node valkey.Client, section string) (map[string]string, error) {
	s, err := node.Do(ctx, node.B().Info().Section(section).Build()).ToString()
	if err != nil {
		return nil, err
	}
	return fields(s), nil
}

// fields parses the "key:value" lines of INFO and CLUSTER INFO (a RESP3
// verbatim string may start with its "txt:" format).
func fields(s string) map[string]string {
	s = strings.TrimPrefix(s, "txt:")
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			out[k] = v
		}
	}
	return out
}

// WriteText writes the report for people: one line per finding, worst
// first within each check's order, and a summary.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "valkey %s (%s)\n\n", rep.Valkey, rep.Mode)
	counts := map[Severity]int{}
	for _, f := range rep.Findings {
		counts[f.Severity]++
		node := ""
		if f.Node != "" {
			node = " [" + f.Node + "]"
		}
		fmt.Fprintf(w, "%-16s %-22s %s%s\n", strings.ToUpper(f.Severity.String()), f.Check, f.Message, node)
		if f.Fix != "" {
			fmt.Fprintf(w, "%-16s %-22s fix: %s\n", "", "", f.Fix)
		}
	}
	fmt.Fprintf(w, "\n%d errors, %d warnings, %d could not check, %d info, %d ok\n",
		counts[Error], counts[Warning], counts[Unknown], counts[Info], counts[OK])
}

// LimitChecks are the checks whose failure breaks the limits themselves,
// not only their availability or speed: an evicting maxmemory-policy
// (an evicted key starts again with its full limit) and persistence (a
// restart hands out fresh quotas for long windows). sluice verify runs
// them through Limits.
var LimitChecks = []string{"maxmemory-policy", "persistence"}

// Limits runs the LimitChecks on every primary that client (connected to
// the Valkey of cfg) knows: the same checks, and findings, as Run's.
func Limits(ctx context.Context, client valkey.Client, store *valkeystore.Store, cfg *config.Config) ([]*Finding, error) {
	prims, err := valkeyops.Primaries(ctx, client)
	if err != nil {
		return nil, err
	}
	d := &doc{cfg: cfg, client: client, prims: prims, risked: map[string]bool{}, rep: &Report{},
		isCluster: client.Mode() == valkey.ClientModeCluster}
	d.risks(ctx, store)
	for _, addr := range valkeyops.SortedAddrs(prims) {
		d.eviction(ctx, addr, prims[addr])
		d.persistence(ctx, addr, prims[addr])
	}
	var out []*Finding
	for _, f := range d.rep.Findings {
		if slices.Contains(LimitChecks, f.Check) {
			out = append(out, f)
		}
	}
	return out, nil
}
