package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/cmd/sluice/internal/config"
	"github.com/sluicehq/sluice/driver"
)

// inspect and reset of a key of a policy with grants (grants: auto): its
// state is the grant hash of driver.GrantKey (format in driver/grant.go),
// never the plain key, which inspect must not create by peeking (the
// processes would count the key as decided without grants).

// grantState is a key's grant state as inspect shows it.
type grantState struct {
	StoreKey string `json:"store_key"`
	// Available is the units Valkey could grant now (the bucket's level
	// after its refill, capped by the units held; a window's limit less
	// its count).
	Available int64 `json:"available"`
	// Held is the units granted to the holders and not known to be spent,
	// of grants not ended (an ended grant's units are void: the script
	// drops them at its next call).
	Held int64 `json:"held"`
	// Counting is the holders the fair cap counts (seen within a life, or
	// holding units): each gets at most max(1, limit / (2 × (Counting+1)))
	// units at a call of a new holder.
	Counting int           `json:"counting_holders"`
	Holders  []grantHolder `json:"holders"`
	// WindowEndsInMS is a window's time left (fixed_window).
	WindowEndsInMS float64 `json:"window_ends_in_ms,omitempty"`
}

// grantHolder is one holder of a key's grants: a sluice process (one
// limiter), the units it holds and the time its grant has left and until
// it stops counting as seen, by Valkey's clock.
type grantHolder struct {
	ID        string  `json:"holder"`
	Units     int64   `json:"units"`
	EndsInMS  float64 `json:"ends_in_ms"`
	SeenForMS float64 `json:"seen_for_ms"`
	// Counted: the holder still counts among the holders (its record
	// goes at the next call otherwise).
	Counted bool `json:"counted"`
}

// grantKeyOf is the store key of key's grant state under limiter l.
func grantKeyOf(k *keyEnv, l *sluice.Limiter, key string) string {
	return driver.GrantKey(k.cfg.Prefix, l.Name(), l.Rule(), key)
}

// inspectGrants fills st from the grant state of its key.
func inspectGrants(ctx context.Context, k *keyEnv, l *sluice.Limiter, st *keyState) error {
	c := k.client
	gk := grantKeyOf(k, l, st.Key)
	raw, err := c.Do(ctx, c.B().Hgetall().Key(gk).Build()).AsStrMap()
	if err != nil {
		return err
	}
	rule := l.Rule()
	st.Source, st.InForce, st.Limit, st.WindowMS = "policy", rule.String(), rule.Limit, rule.Period().Milliseconds()
	st.Type = "none"
	if len(raw) == 0 {
		return nil
	}
	st.Exists, st.Type, st.StoreKey, st.Fields = true, "hash", gk, raw
	now, err := valkeyNow(ctx, c)
	if err != nil {
		return err
	}
	g, err := decodeGrants(rule, raw, now)
	if err != nil {
		return fmt.Errorf("grant state of %s: %w", gk, err)
	}
	g.StoreKey = gk
	st.Grants = g
	st.Remaining, st.Allowed = g.Available, g.Available > 0 || g.Held > 0
	ttl, err := c.Do(ctx, c.B().Pttl().Key(gk).Build()).AsInt64()
	st.TTLMS = float64(ttl)
	return err
}

// decodeGrants reads a grant hash (fields v, l, t, h:<holder>) at Valkey's
// time now (microseconds), as the grant script would find it.
func decodeGrants(rule driver.Rule, raw map[string]string, now int64) (*grantState, error) {
	if raw["v"] != "1" {
		return nil, fmt.Errorf("format version %q, want 1", raw["v"])
	}
	level, err1 := strconv.ParseInt(raw["l"], 10, 64)
	at, err2 := strconv.ParseInt(raw["t"], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("level %q, time %q: want integers", raw["l"], raw["t"])
	}
	g := &grantState{Holders: []grantHolder{}}
	var ended []grantHolder // raw units and ends, in microseconds
	var all int64
	for f, v := range raw {
		id, ok := strings.CutPrefix(f, "h:")
		if !ok {
			continue
		}
		var units, end, seen int64
		if n, err := fmt.Sscanf(v, "%d %d %d", &units, &end, &seen); n != 3 || err != nil {
			return nil, fmt.Errorf("holder %s: %q: want three integers", id, v)
		}
		all += units
		h := grantHolder{ID: id, Units: units, EndsInMS: float64(end-now) / 1000, SeenForMS: float64(seen-now) / 1000}
		if end <= now {
			h.Units = 0 // void: the grant ended
			if units > 0 && end < now {
				ended = append(ended, grantHolder{Units: units, EndsInMS: float64(end)})
			}
		}
		h.Counted = seen > now || h.Units > 0
		if h.Counted {
			g.Counting++
		}
		g.Held += h.Units
		g.Holders = append(g.Holders, h)
	}
	sort.Slice(g.Holders, func(i, j int) bool { return g.Holders[i].ID < g.Holders[j].ID })
	g.Available = available(rule, level, at, all, ended, now, g)
	return g, nil
}

// available is the units Valkey could grant at now, as the grant script
// refills: a bucket's level refilled since at, piecewise up to each ended
// grant's end under the cap of the burst less the units counted until
// then (all, less the ended grants' units from their ends on); a window's
// limit less its count while the window is the current one (all of it
// after).
func available(rule driver.Rule, level, at, all int64, ended []grantHolder, now int64, g *grantState) int64 {
	if rule.Algorithm.Rated() {
		iv := rule.Interval.Microseconds()
		tau, held := rule.Limit*iv, all
		sort.Slice(ended, func(i, j int) bool { return ended[i].EndsInMS < ended[j].EndsInMS })
		if now > at {
			for _, e := range ended {
				if end := int64(e.EndsInMS); end > at {
					level = min(tau-held*iv, level+(end-at))
					at = end
				}
				held -= e.Units
			}
			level = min(tau-held*iv, level+(now-at))
		}
		return max(0, level/iv)
	}
	start, end := rule.Span(time.UnixMicro(now))
	if start.UnixMicro() != at {
		g.Held = 0 // the grants of an ended window ended with it
		return rule.Limit
	}
	g.WindowEndsInMS = float64(end.UnixMicro()-now) / 1000
	return max(0, rule.Limit-level)
}

// printGrants shows a key's grants and holders, at most 20 of them.
func printGrants(w io.Writer, g *grantState) {
	fmt.Fprintf(w, "grants     %d available at Valkey, %d held by %d holder(s) as of their last calls (some may be spent since); %d counted for the fair cap", g.Available, g.Held, len(g.Holders), g.Counting)
	if g.WindowEndsInMS > 0 {
		fmt.Fprintf(w, "; the window ends in %v", time.Duration(g.WindowEndsInMS*1e6).Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	for i, h := range g.Holders {
		if i == 20 {
			fmt.Fprintf(w, "           ... and %d more (--json lists them all)\n", len(g.Holders)-i)
			return
		}
		state := fmt.Sprintf("grant ends in %v", time.Duration(h.EndsInMS*1e6).Round(time.Millisecond))
		if h.EndsInMS <= 0 {
			state = "grant ended (its units void)"
		}
		if !h.Counted {
			state += ", no longer counted among the holders"
		}
		fmt.Fprintf(w, "           holder %s: %d units, %s\n", h.ID, h.Units, state)
	}
}

// resetGrants resets key's grant state as sluice serve's limiter does
// (Limiter.ResetNotify with grants): the level becomes the limit less the
// units the holders still hold, which stay valid until their grants end,
// and the notice of the reset ends every process's local refusal of the
// key. It returns the subscriptions the notice reached. Deleting the hash
// instead would let the holders spend those units on top of a full level:
// over-admission by up to the units held, for a grant's life.
func resetGrants(ctx context.Context, k *keyEnv, p *config.Policy, key string) (int, error) {
	l, err := k.limiter(p, sluice.WithGrants(p.GrantOptions))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.ResetNotify(ctx, key)
}

// grantLife is p's grants' life (grant_life, default 2s).
func grantLife(p *config.Policy) time.Duration {
	if p.GrantOptions.Life > 0 {
		return p.GrantOptions.Life
	}
	return 2 * time.Second
}
