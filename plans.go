package sluice

import (
	"context"
	"fmt"
)

// Plans (tiers): a limiter may have named plans besides its policy, such
// as "free" and "pro" with different limits. The caller names the plan of
// each decision (AllowPlan). Every plan of a limiter counts under the same
// key, so a key that moves to another plan keeps what it has taken: the
// new plan's limit applies to it at once.

// WithPlan adds the plan name to the limiter, enforcing p instead of the
// limiter's policy for the decisions that name it. p must keep what a
// key's state means: the same algorithm, CountRejected, window or
// calendar period; a TokenBucket or GCRA plan may have another rate (a
// key's state is then the time it owes, which the new rate keeps). New
// refuses a plan that does not, a name that is not a valid limiter name,
// and a name given twice. A limiter with plans has no deny cache (a
// refusal under one plan says nothing of another).
func WithPlan(name string, p Policy) Option {
	return optionFunc(func(c *config) { c.plans = append(c.plans, namedPolicy{name, p}) })
}

type namedPolicy struct {
	name   string
	policy Policy
}

// ErrUnknownPlan is returned for a decision that names a plan the limiter
// does not have.
var ErrUnknownPlan = fmt.Errorf("%w: unknown plan", ErrInvalidPolicy)

// plans validates the plans of cfg against the limiter's rule.
func buildPlans(base Rule, nps []namedPolicy) (map[string]Rule, error) {
	if len(nps) == 0 {
		return nil, nil
	}
	out := make(map[string]Rule, len(nps))
	for _, np := range nps {
		if err := checkName(np.name); err != nil {
			return nil, within(fmt.Sprintf("plan %q", np.name), "", err)
		}
		if _, dup := out[np.name]; dup {
			return nil, invalid("plan %q is given twice", np.name)
		}
		if np.policy == nil {
			return nil, invalid("plan %q: nil policy", np.name)
		}
		r, err := np.policy.Rule()
		if err != nil {
			return nil, within(fmt.Sprintf("plan %q", np.name), "", err)
		}
		if err := sameState(base, r); err != nil {
			return nil, within(fmt.Sprintf("plan %q", np.name), "", err)
		}
		out[np.name] = r
	}
	return out, nil
}

// sameState reports whether a key's state under r means the same under o,
// so that both may count under one key: the same algorithm, counting of
// refusals, and window or calendar period. Only the limit, and the
// interval of TokenBucket and GCRA, may differ.
func sameState(r, o Rule) error {
	switch {
	case o.Algorithm != r.Algorithm:
		return invalid("a plan has the policy's algorithm (%v), not %v", r.Algorithm, o.Algorithm)
	case o.CountRejected != r.CountRejected:
		return invalid("a plan counts refused requests as the policy does (CountRejected %v)", r.CountRejected)
	case !o.Calendar.Equal(r.Calendar):
		return invalid("a plan has the policy's calendar period (%v), not %v", r.Calendar, o.Calendar)
	case o.Window != r.Window:
		return invalid("a plan has the policy's window (%v), not %v: a key keeps its count only within one window", r.Window, o.Window)
	}
	return nil
}

// Plans returns the names of the limiter's plans, in the order given.
func (l *Limiter) Plans() []string {
	if l.ready() != nil {
		return nil
	}
	out := make([]string, 0, len(l.cfg.plans))
	for _, np := range l.cfg.plans {
		out = append(out, np.name)
	}
	return out
}

// PlanRule returns the rule of the named plan; "" names the limiter's
// policy. ok is false for a plan the limiter does not have.
func (l *Limiter) PlanRule(plan string) (r Rule, ok bool) {
	if l.ready() != nil {
		return Rule{}, false
	}
	if plan == "" {
		return l.rule, true
	}
	r, ok = l.plans[plan]
	return r, ok
}

// AllowPlan is AllowN under the named plan ("" for the limiter's policy):
// the plan's limit applies to what key has taken under any plan. A plan
// the limiter does not have is an error wrapping ErrUnknownPlan, never the
// policy's limit. Result.Source says whether the plan's limit or a key
// override decided.
func (l *Limiter) AllowPlan(ctx context.Context, key, plan string, n int64) (Result, error) {
	if err := l.ready(); err != nil {
		return Result{}, err
	}
	if plan == "" {
		return l.AllowN(ctx, key, n)
	}
	r, ok := l.plans[plan]
	if !ok {
		return Result{}, fmt.Errorf("%w %q of %s (it has %v)", ErrUnknownPlan, plan, l.cfg.name, l.Plans())
	}
	return l.allow(ctx, key, r, n)
}
