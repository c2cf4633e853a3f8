package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/topk"
)

// The top refused keys of each policy: a Space-Saving sketch per slot of
// time (internal/topk), so memory stays bounded whatever the number of
// keys. Keys are kept in the form the policy's show_keys allows, never
// raw unless it says raw, and never as metric labels.

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
	secret []byte // keys the hash of KeysHashed, per process
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
	rp.win.Add(r.now(), r.show(rp.display, key))
}

// show returns key as display allows it to be shown.
func (r *refusedKeys) show(display config.KeyDisplay, key string) string {
	switch display {
	case config.KeysRaw:
		return key
	case config.KeysTruncated:
		if len(key) <= config.TruncatedKeyBytes {
			return key
		}
		cut := config.TruncatedKeyBytes
		for cut > 0 && !utf8.RuneStart(key[cut]) {
			cut--
		}
		return key[:cut] + "…(" + strconv.Itoa(len(key)) + " bytes)"
	}
	m := hmac.New(sha256.New, r.secret)
	m.Write([]byte(key))
	return "h:" + hex.EncodeToString(m.Sum(nil)[:8])
}

// topRefused is one policy's answer.
type topRefused struct {
	Policy   string       `json:"policy"`
	ShowKeys string       `json:"show_keys"`
	Span     string       `json:"span"`
	Refused  int64        `json:"refused"`
	Keys     []topk.Entry `json:"keys"`
}

func (r *refusedKeys) top(p *config.Policy, span time.Duration, spanName string, n int) topRefused {
	rp := r.of(p)
	entries, total := rp.win.Top(r.now(), span, n)
	if entries == nil {
		entries = []topk.Entry{}
	}
	return topRefused{Policy: p.Name, ShowKeys: rp.display.String(), Span: spanName, Refused: total, Keys: entries}
}

// handleTopRefused is GET /v1/top-refused?policy=NAME&span=1m|5m&n=10
// (admin): the most refused keys per policy over the span, each with an
// upper bound of its refusals (count) and how much that may overstate
// (error). Without policy, every policy.
func (s *Server) handleTopRefused(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for name := range q {
		if name != "policy" && name != "span" && name != "n" {
			s.fail(w, r, bad(http.StatusBadRequest, "unknown parameter %q (want policy, span, n)", name))
			return
		}
	}
	spanName := q.Get("span")
	if spanName == "" {
		spanName = "5m"
	}
	span, ok := refusedSpans[spanName]
	if !ok {
		s.fail(w, r, bad(http.StatusBadRequest, "span must be 1m or 5m, got %q", spanName))
		return
	}
	n := 10
	if v := q.Get("n"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		if err != nil || n < 1 || n > maxTopRefused {
			s.fail(w, r, bad(http.StatusBadRequest, "n must be 1 to %d, got %q", maxTopRefused, v))
			return
		}
	}
	st := s.state.Load()
	var out []topRefused
	if name := q.Get("policy"); name != "" {
		p, err := st.policy(name, "")
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out = append(out, s.refused.top(p.cfg, span, spanName, n))
	} else {
		for _, p := range st.order {
			out = append(out, s.refused.top(p.cfg, span, spanName, n))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"policies": out,
		"note": fmt.Sprintf("approximate: each key's true count is between count-error and count; a key refused more than 1/%d of a %v slot's refusals is never missed", RefusedCounters, RefusedSlot)})
}
