package simulate

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/memstore"
)

// MaxFlippedKeys bounds the keys Replay tracks one by one per policy;
// beyond it the flips are still counted, and the report says that the list
// of keys is cut.
const MaxFlippedKeys = 1_000_000

// ReplayResult says which decisions of a log would flip under a changed
// configuration.
type ReplayResult struct {
	// Decisions is the number of decisions in the log.
	Decisions int64
	// Policies in the order of their first decision in the log, those of
	// the new configuration only.
	Policies []*ReplayPolicy
	// Missing counts the decisions of policies that the new configuration
	// no longer has, by name: they are not decided.
	Missing map[string]int64
}

// ReplayPolicy is one policy's part of a ReplayResult.
type ReplayPolicy struct {
	Name string
	// Rule is the new configuration's; Shadow its shadow mode (a shadowed
	// policy allows every request).
	Rule   sluice.Rule
	Shadow bool
	// Decisions, and how many were allowed in the log (Before) and would be
	// allowed under the new configuration (After).
	Decisions, Before, After int64
	// ToDeny counts decisions that were allowed and would be refused;
	// ToAllow the reverse.
	ToDeny, ToAllow int64
	// OverLimit counts requests whose cost exceeds the new limit: they
	// could never be allowed and count as refused.
	OverLimit int64
	// Keys are the keys with flips, most flips first.
	Keys []KeyFlips
	// KeysCut reports that more than MaxFlippedKeys keys flipped: Keys
	// holds only the first ones seen.
	KeysCut bool

	byKey map[string]*KeyFlips
	store *memstore.Store
	rule  sluice.Rule
	now   time.Time
	last  time.Time
	line  int
	pol   *config.Policy
	ops   [1]driver.Op
}

// KeyFlips counts one key's flips.
type KeyFlips struct {
	Key             string
	ToDeny, ToAllow int64
}

// Replay re-decides every decision of the decision log in file (see
// Record) under policies, the changed configuration, each policy from
// empty state on its own in-process store at the logged times, and
// reports the decisions that would flip, per policy and key. Requests
// that a change allows take units, as they would live, so later decisions
// see them. The log does not say what came before its first line, so a
// log that starts in the middle of a window may show flips in that first
// window that a live change would not.
func Replay(ctx context.Context, file string, policies []*config.Policy) (*ReplayResult, error) {
	rd, f, err := openRecords(file, true)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rp := newReplayer(file, policies)
	if err := rp.replayAll(ctx, rd); err != nil {
		return nil, err
	}
	for _, p := range rp.res.Policies {
		p.sortKeys()
	}
	return rp.res, nil
}

// replayer decides again, under the configured policies, each record of
// a decision log.
type replayer struct {
	file       string
	res        *ReplayResult
	byName     map[string]*ReplayPolicy
	configured map[string]*config.Policy
}

// replayAll replays every record of rd, checking ctx every 65536 records.
func (rp *replayer) replayAll(ctx context.Context, rd *Reader) error {
	for n := 0; ; n++ {
		if n&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		rec, err := rd.Next()
		if err != nil {
			return endOfRecords(err)
		}
		if err := rp.replay(rec); err != nil {
			return err
		}
	}
}

// endOfRecords is the error of a Reader that stopped with err: none at
// io.EOF, after the last record.
func endOfRecords(err error) error {
	if err == io.EOF {
		return nil
	}
	return err
}

func newReplayer(file string, policies []*config.Policy) *replayer {
	rp := &replayer{file: file, res: &ReplayResult{Missing: map[string]int64{}},
		byName: map[string]*ReplayPolicy{}, configured: map[string]*config.Policy{}}
	for _, p := range policies {
		rp.configured[p.Name] = p
	}
	return rp
}

// replay decides rec again under its policy (counting it as missing when
// the configuration has none of that name) and counts whether it flips.
func (rp *replayer) replay(rec Record) error {
	if rec.Policy == "" {
		return &LineError{File: rp.file, Line: rec.Line, Err: fmt.Errorf("policy is missing: a decision log names the policy of each decision")}
	}
	rp.res.Decisions++
	p, err := rp.policy(rec.Policy)
	if p == nil {
		return err
	}
	at := rec.at()
	if at.Before(p.last) {
		return &LineError{File: rp.file, Line: rec.Line, Err: fmt.Errorf("time goes backwards for policy %q (before line %d's): a decision log is in time order for each policy", rec.Policy, p.line)}
	}
	p.last, p.line = at, rec.Line
	allowed, err := p.decide(at, rec.Key, rec.Cost)
	if err != nil {
		return &LineError{File: rp.file, Line: rec.Line, Err: err}
	}
	p.count(rec.Key, rec.Allowed, allowed)
	return nil
}

// policy returns the replay of the policy named name, started on first
// use, or nil (and no error) after counting name as missing when the
// configuration has no policy of that name.
func (rp *replayer) policy(name string) (*ReplayPolicy, error) {
	if p := rp.byName[name]; p != nil {
		return p, nil
	}
	pol := rp.configured[name]
	if pol == nil {
		rp.res.Missing[name]++
		return nil, nil
	}
	p, err := newReplayPolicy(pol)
	if err != nil {
		return nil, err
	}
	rp.byName[name] = p
	rp.res.Policies = append(rp.res.Policies, p)
	return p, nil
}

// at is the time of rec: its own, or its offset from DefaultStart.
func (rec Record) at() time.Time {
	if rec.Absolute {
		return rec.Time
	}
	return DefaultStart.Add(rec.Offset)
}

// since is the time of rec after start: its offset, or for an absolute
// time the time since start.
func (rec Record) since(start time.Time) time.Duration {
	if rec.Absolute {
		return rec.Time.Sub(start)
	}
	return rec.Offset
}

// sortKeys lists the keys that flipped, the most flips first.
func (rp *ReplayPolicy) sortKeys() {
	for _, k := range rp.byKey {
		rp.Keys = append(rp.Keys, *k)
	}
	sort.Slice(rp.Keys, func(i, j int) bool {
		a, b := rp.Keys[i], rp.Keys[j]
		if a.ToDeny+a.ToAllow != b.ToDeny+b.ToAllow {
			return a.ToDeny+a.ToAllow > b.ToDeny+b.ToAllow
		}
		return a.Key < b.Key
	})
	rp.byKey = nil
}

func newReplayPolicy(pol *config.Policy) (*ReplayPolicy, error) {
	rule, err := pol.Policy.Rule()
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", pol.Name, err)
	}
	if rule.Algorithm == driver.AlgorithmInFlight {
		return nil, fmt.Errorf("policy %q is in_flight: a decision log has no durations (how long each lease was held), so its decisions cannot be replayed under it", pol.Name)
	}
	rp := &ReplayPolicy{Name: pol.Name, Rule: rule, Shadow: pol.Shadow, rule: rule, pol: pol, byKey: map[string]*KeyFlips{}}
	rp.store = memstore.New(memstore.WithClock(func() time.Time { return rp.now }))
	return rp, nil
}

// decide is the new configuration's answer to a logged request: what the
// client would be told (a shadowed policy allows everything).
func (rp *ReplayPolicy) decide(at time.Time, key string, cost int64) (bool, error) {
	rp.Decisions++
	if cost > rp.rule.Limit {
		rp.OverLimit++
		return rp.Shadow, nil
	}
	rp.now = at
	rp.ops[0] = driver.Op{Key: driver.Key(sluice.DefaultPrefix, rp.pol.Limiter, rp.rule, key), Rule: rp.rule, Cost: cost, Now: at}
	if err := rp.store.Do(context.Background(), rp.ops[:]); err != nil {
		return false, err
	}
	if err := rp.ops[0].Err; err != nil {
		return false, err
	}
	return rp.ops[0].Result.Allowed || rp.Shadow, nil
}

func (rp *ReplayPolicy) count(key string, before, after bool) {
	if before {
		rp.Before++
	}
	if after {
		rp.After++
	}
	if before == after {
		return
	}
	k := rp.flipsOf(key)
	if before {
		rp.ToDeny++
		k.ToDeny++
	} else {
		rp.ToAllow++
		k.ToAllow++
	}
}

// flipsOf returns the flips counted for key; past MaxFlippedKeys keys, a
// new key's flips are counted in a KeyFlips that is not kept, and KeysCut
// says so.
func (rp *ReplayPolicy) flipsOf(key string) *KeyFlips {
	if k := rp.byKey[key]; k != nil {
		return k
	}
	k := &KeyFlips{Key: key}
	if len(rp.byKey) >= MaxFlippedKeys {
		rp.KeysCut = true
		return k
	}
	rp.byKey[key] = k
	return k
}

// FlipsCSVHeader is the first line of WriteFlipsCSV's output.
const FlipsCSVHeader = "policy,key,allow_to_deny,deny_to_allow"

// WriteFlipsCSV writes every key with flips, per policy.
func WriteFlipsCSV(w io.Writer, r *ReplayResult) error {
	cw := csv.NewWriter(w)
	cw.Write(strings.Split(FlipsCSVHeader, ","))
	for _, p := range r.Policies {
		for _, k := range p.Keys {
			cw.Write([]string{p.Name, k.Key, strconv.FormatInt(k.ToDeny, 10), strconv.FormatInt(k.ToAllow, 10)})
		}
	}
	cw.Flush()
	return cw.Error()
}
