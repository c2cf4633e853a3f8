package refmodel

// Penalties (sluice.WithPenalty), modelled from their history: every
// block a key had, and the refusals counted since the last one, kept in
// full. A block's level is found by walking back through the blocks, each
// one that began less than Forgive after the one before it ended adding
// one; its length is Block doubled level − 1 times, capped at the longest.
// The stores keep only a counter, the last block's end and the level, in
// a rolling form: the two must agree.

// PenaltyParams are a penalty's numbers, in microseconds. MaxBlock 0 is
// Block; Forgive is 0 when blocks do not grow.
type PenaltyParams struct {
	After, Within, Block, MaxBlock, Forgive int64
}

// PenaltyResult is a decision under a penalty.
type PenaltyResult struct {
	Result
	Blocked, Started bool
}

// Penalized is a Model under a penalty.
type Penalized struct {
	M    *Model
	P    PenaltyParams
	offs map[string]*offender
}

type offender struct {
	refusals []int64    // the times of the refusals counted in the open window
	blocks   [][2]int64 // every block: its start and its end
}

// NewPenalized returns m under penalty p, with no history.
func NewPenalized(m *Model, p PenaltyParams) *Penalized {
	return &Penalized{M: m, P: p, offs: map[string]*offender{}}
}

func (p *Penalized) off(k string) *offender {
	o := p.offs[k]
	if o == nil {
		o = &offender{}
		p.offs[k] = o
	}
	return o
}

// Reset forgets k: its state, its block and its history.
func (p *Penalized) Reset(k string) {
	p.M.Reset(k)
	delete(p.offs, k)
}

// Decide decides a request of cost (0 peeks) for k at now, and returns the
// receipt a refund of it must carry (meaningless for a blocked one).
func (p *Penalized) Decide(k string, now, cost int64) (PenaltyResult, int64) {
	o := p.off(k)
	if n := len(o.blocks); n > 0 && now < o.blocks[n-1][1] {
		left := o.blocks[n-1][1] - now
		return PenaltyResult{Result: Result{RetryAfter: left, ResetAfter: left}, Blocked: true}, now
	}
	r, receipt := p.M.Decide(k, now, cost)
	if r.Allowed || cost <= 0 {
		return PenaltyResult{Result: r}, receipt
	}
	if len(o.refusals) == 0 || now >= o.refusals[0]+p.P.Within {
		o.refusals = nil // a new window, opened by this refusal
	}
	o.refusals = append(o.refusals, now)
	if int64(len(o.refusals)) < p.P.After {
		return PenaltyResult{Result: r}, receipt
	}
	d := p.length(p.level(o, now))
	o.blocks = append(o.blocks, [2]int64{now, now + d})
	o.refusals = nil
	return PenaltyResult{Result: Result{RetryAfter: d, ResetAfter: d}, Blocked: true, Started: true}, receipt
}

// level is the level of a block starting at now after o's blocks.
func (p *Penalized) level(o *offender, now int64) int64 {
	level, start := int64(1), now
	for j := len(o.blocks) - 1; j >= 0; j-- {
		if start-o.blocks[j][1] >= p.P.Forgive {
			break // forgiven: the chain ends
		}
		level++
		start = o.blocks[j][0]
	}
	return level
}

// length is the length of a block of level: Block × 2^(level−1), at most
// the longest block.
func (p *Penalized) length(level int64) int64 {
	longest := max(p.P.Block, p.P.MaxBlock)
	if level-1 >= 40 {
		return longest // Block ≥ 1ms: 2^40 of it is far past any longest
	}
	return min(p.P.Block<<(level-1), longest)
}

// Refund gives back n units taken by the decision with receipt, at now:
// refunds are never blocked and never counted.
func (p *Penalized) Refund(k string, now, n, receipt int64) Result {
	return p.M.Refund(k, now, n, receipt)
}
