package server

import (
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/cmd/sluice/internal/topk"
)

// The top refused keys of each policy: a Space-Saving sketch per slot of
// time (internal/topk), so memory stays bounded whatever the number of
// keys. Keys are kept in the form the policy's show_keys allows, never
// raw unless it says raw, and never as metric labels.
//
// A hashed key is KeyHash(KeyHashSecret(admin token), key): the same in
// every process that shares the admin token, and computable from a raw
// key by whoever holds that token (sluice key), the only ones who can read
// the top refused keys. Without the token the hash cannot be recomputed,
// so a guessable key (an address) does not leak to whoever sees a hash.

// Sizes of the refused-keys sketches.
const (
	// RefusedCounters is the counters per slot and policy: keys refused
	// more than 1/RefusedCounters of a slot's refusals are always found.
	RefusedCounters = 64
	// RefusedSlot is the width of one slot; RefusedSlots of them make the
	// longest span reported (5 minutes).
	RefusedSlot  = 10 * time.Second
	RefusedSlots = 30
	// maxTopRefused is the most keys one answer lists.
	maxTopRefused = 100
)

// refusedSpans are the spans GET /v1/top-refused answers for.
var refusedSpans = map[string]time.Duration{"1m": time.Minute, "5m": 5 * time.Minute}

type refusedKeys struct {
	now    func() time.Time
	secret []byte // keys the hash of KeysHashed (KeyHashSecret)
	mu     sync.Mutex
	by     map[string]*refusedPolicy
}

type refusedPolicy struct {
	display config.KeyDisplay
	win     *topk.Window
}

func newRefusedKeys() *refusedKeys {
	secret := make([]byte, 32)
	rand.Read(secret)
	return &refusedKeys{now: time.Now, secret: secret, by: map[string]*refusedPolicy{}}
}

// KeyHashSecret is the secret that keys the hash of show_keys hashed,
// derived from the admin token (HMAC-SHA256 keyed by the token): the
// dashboard's hashes are then the same across processes and restarts,
// and change when the token does.
func KeyHashSecret(adminToken string) []byte {
	m := hmac.New(sha256.New, []byte(adminToken))
	m.Write([]byte("sluice show_keys hashed v1"))
	return m.Sum(nil)
}

// KeyHash is how show_keys hashed shows key: "h:" and the first 8 bytes,
// in hex, of HMAC-SHA256(secret, key).
func KeyHash(secret []byte, key string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(key))
	return "h:" + hex.EncodeToString(m.Sum(nil)[:8])
}

// useSecret makes secret key the hashes from now on (a reload may change
// the admin token): counts kept under another secret are forgotten, since
// their hashes could no longer be recomputed. nil keeps a random one.
func (r *refusedKeys) useSecret(secret []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if secret == nil || hmac.Equal(secret, r.secret) {
		return
	}
	r.secret = secret
	clear(r.by)
}

// of returns the counts of policy p, started afresh when the way its keys
// are shown changed (a reload).
func (r *refusedKeys) of(p *config.Policy) *refusedPolicy {
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.by[p.Name]
	if rp == nil || rp.display != p.ShowKeys {
		rp = &refusedPolicy{display: p.ShowKeys, win: topk.NewWindow(RefusedCounters, RefusedSlots, RefusedSlot)}
		r.by[p.Name] = rp
	}
	return rp
}

// retain forgets the counts of policies that are no longer configured (a
// reload removed them), so that memory stays bounded by the policies in
// force.
func (r *refusedKeys) retain(policies []*policy) {
	keep := make(map[string]bool, len(policies))
	for _, p := range policies {
		keep[p.cfg.Name] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.by {
		if !keep[name] {
			delete(r.by, name)
		}
	}
}

// note counts key if res is a refusal the store decided (a shadowed one
// too: it shows what the limit would refuse). Degraded refusals say
// nothing about the key.
func (r *refusedKeys) note(p *config.Policy, key string, res sluice.Result) {
	if res.Degraded || res.Allowed && !res.Shadowed {
		return
	}
	rp := r.of(p)
	r.mu.Lock()
	shown := r.show(rp.display, key)
	r.mu.Unlock()
	rp.win.Add(r.now(), shown)
}

// show returns key as display allows it to be shown.
func (r *refusedKeys) show(display config.KeyDisplay, key string) string {
	switch display {
	case config.KeysRaw:
		return key
	case config.KeysTruncated:
		return TruncatedKey(key)
	}
	return KeyHash(r.secret, key)
}

// TruncatedKey is how show_keys truncated shows key: its first
// config.TruncatedKeyBytes bytes (whole UTF-8 characters) and its length.
func TruncatedKey(key string) string {
	if len(key) <= config.TruncatedKeyBytes {
		return key
	}
	cut := config.TruncatedKeyBytes
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return key[:cut] + "…(" + strconv.Itoa(len(key)) + " bytes)"
}

// topRefused is one policy's answer.
type topRefused struct {
	Policy   string `json:"policy"`
	ShowKeys string `json:"show_keys"`
	// Resolve says how to go from a key shown to what Sluice counts.
	Resolve string       `json:"resolve"`
	Span    string       `json:"span"`
	Refused int64        `json:"refused"`
	Keys    []topk.Entry `json:"keys"`
}

func (r *refusedKeys) top(p *config.Policy, span time.Duration, spanName string, n int) topRefused {
	rp := r.of(p)
	entries, total := rp.win.Top(r.now(), span, n)
	if entries == nil {
		entries = []topk.Entry{}
	}
	return topRefused{Policy: p.Name, ShowKeys: rp.display.String(), Resolve: resolveHint[rp.display], Span: spanName, Refused: total, Keys: entries}
}

// resolveHint says, per show_keys, how an operator goes from a key shown
// to the key to inspect and reset.
var resolveHint = map[config.KeyDisplay]string{
	config.KeysHashed: "keys are hashed with the admin token: sluice key --config FILE SOURCE VALUE prints the hash of a raw identifier " +
		"and the key to pass to sluice inspect and reset; sluice keys --find h:HASH finds the stored key of a hash",
	config.KeysTruncated: "keys are cut: sluice keys --names --policy NAME lists the stored keys; sluice key SOURCE VALUE prints a raw identifier's key",
	config.KeysRaw:       "keys are shown as counted: pass one to sluice inspect or reset as it is",
}

// handleTopRefused is GET /v1/top-refused?policy=NAME&span=1m|5m&n=10
// (admin): the most refused keys per policy over the span, each with an
// upper bound of its refusals (count) and how much that may overstate
// (error). Without policy, every policy.
func (s *Server) handleTopRefused(w http.ResponseWriter, r *http.Request) {
	q, err := parseTopRefused(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.topRefusedOf(s.state.Load(), q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"policies": out,
		"note": fmt.Sprintf("approximate: each key's true count is between count-error and count; a key refused more than 1/%d of a %v slot's refusals is never missed", RefusedCounters, RefusedSlot)})
}

// topRefusedQuery is a /v1/top-refused request's parameters.
type topRefusedQuery struct {
	policy   string // "" for every policy
	spanName string // 1m or 5m
	span     time.Duration
	n        int
}

// parseTopRefused reads /v1/top-refused's parameters, refusing unknown
// ones; span defaults to 5m and n to 10.
func parseTopRefused(q url.Values) (topRefusedQuery, error) {
	for name := range q {
		if name != "policy" && name != "span" && name != "n" {
			return topRefusedQuery{}, bad(http.StatusBadRequest, "unknown parameter %q (want policy, span, n)", name)
		}
	}
	t := topRefusedQuery{policy: q.Get("policy"), spanName: cmp.Or(q.Get("span"), "5m")}
	var ok bool
	if t.span, ok = refusedSpans[t.spanName]; !ok {
		return topRefusedQuery{}, bad(http.StatusBadRequest, "span must be 1m or 5m, got %q", t.spanName)
	}
	var err error
	if t.n, err = parseTopN(q.Get("n")); err != nil {
		return topRefusedQuery{}, err
	}
	return t, nil
}

// parseTopN reads the parameter n of /v1/top-refused: 1 to maxTopRefused,
// 10 when it is not given.
func parseTopN(v string) (int, error) {
	if v == "" {
		return 10, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxTopRefused {
		return 0, bad(http.StatusBadRequest, "n must be 1 to %d, got %q", maxTopRefused, v)
	}
	return n, nil
}

// topRefusedOf returns the most refused keys of the policy q names, or of
// every policy in order.
func (s *Server) topRefusedOf(st *state, q topRefusedQuery) ([]topRefused, error) {
	if q.policy != "" {
		p, err := st.policy(q.policy, "")
		if err != nil {
			return nil, err
		}
		return []topRefused{s.refused.top(p.cfg, q.span, q.spanName, q.n)}, nil
	}
	var out []topRefused
	for _, p := range st.order {
		out = append(out, s.refused.top(p.cfg, q.span, q.spanName, q.n))
	}
	return out, nil
}
