package enginefake

import (
	"fmt"
	"math"
	"sort"

	"github.com/ctxd/ctxd/engine"
)

// Sampler is greedy or seeded sampling; its random state advances with
// every token it picks.
type Sampler struct {
	p      engine.SamplingParams
	state  uint64
	closed bool
}

// Close ends the sampler.
func (s *Sampler) Close() { s.closed = true }

// NewSampler validates p as engine/llama does.
func (c *Context) NewSampler(p engine.SamplingParams) (engine.Sampler, error) {
	if p.Temperature < 0 || math.IsNaN(float64(p.Temperature)) || p.TopK < 0 || p.TopP < 0 || p.TopP > 1 {
		return nil, fmt.Errorf("%w: sampling temperature=%v top_k=%d top_p=%v", engine.ErrInvalidArgument, p.Temperature, p.TopK, p.TopP)
	}
	return &Sampler{p: p, state: mix(p.Seed ^ 0x5851f42d4c957f2d)}, nil
}

// Sample picks from the last logits: the arg-max (lowest id on ties) when
// greedy, else top-k → top-p → temperature → a draw. -1 without logits or
// with a foreign or closed sampler.
func (c *Context) Sample(smp engine.Sampler) engine.Token {
	s, ok := smp.(*Sampler)
	if !ok || s.closed || !c.hasLogits {
		return -1
	}
	if s.p.Temperature == 0 {
		best := 0
		for v, l := range c.logits {
			if l > c.logits[best] {
				best = v
			}
		}
		return engine.Token(best)
	}
	ids := make([]int, len(c.logits))
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(a, b int) bool { return c.logits[ids[a]] > c.logits[ids[b]] })
	if s.p.TopK > 0 && s.p.TopK < len(ids) {
		ids = ids[:s.p.TopK]
	}
	w := make([]float64, len(ids))
	sum := 0.0
	for i, id := range ids {
		w[i] = math.Exp(float64(c.logits[id]-c.logits[ids[0]]) / float64(s.p.Temperature))
		sum += w[i]
	}
	if s.p.TopP > 0 && s.p.TopP < 1 {
		acc := 0.0
		for i := range w {
			acc += w[i] / sum
			if acc >= float64(s.p.TopP) {
				ids, w = ids[:i+1], w[:i+1]
				break
			}
		}
		sum = 0
		for _, x := range w {
			sum += x
		}
	}
	s.state = mix(s.state + 0x9e3779b97f4a7c15)
	r := float64(s.state>>11) / float64(1<<53) * sum
	for i, x := range w {
		if r < x {
			return engine.Token(ids[i])
		}
		r -= x
	}
	return engine.Token(ids[len(ids)-1])
}
