package llama

/*
#include "llama.h"
*/
import "C"

import (
	"fmt"
	"math"

	"github.com/ctxd/ctxd/engine"
)

// Sampler is a llama.cpp sampler chain.
type Sampler struct {
	s      *C.struct_llama_sampler
	greedy bool
}

// Close frees the chain.
func (s *Sampler) Close() {
	if s.s != nil {
		C.llama_sampler_free(s.s)
		s.s = nil
	}
}

// NewSampler builds greedy (temperature 0) or seeded
// top-k → top-p → temperature → dist sampling.
func (c *Context) NewSampler(p engine.SamplingParams) (engine.Sampler, error) {
	if p.Temperature < 0 || math.IsNaN(float64(p.Temperature)) || p.TopK < 0 || p.TopP < 0 || p.TopP > 1 {
		return nil, fmt.Errorf("%w: sampling temperature=%v top_k=%d top_p=%v", engine.ErrInvalidArgument, p.Temperature, p.TopK, p.TopP)
	}
	chain := C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
	if p.Temperature == 0 {
		C.llama_sampler_chain_add(chain, C.llama_sampler_init_greedy())
		return &Sampler{s: chain, greedy: true}, nil
	}
	if p.TopK > 0 {
		C.llama_sampler_chain_add(chain, C.llama_sampler_init_top_k(C.int32_t(p.TopK)))
	}
	if p.TopP > 0 && p.TopP < 1 {
		C.llama_sampler_chain_add(chain, C.llama_sampler_init_top_p(C.float(p.TopP), 1))
	}
	C.llama_sampler_chain_add(chain, C.llama_sampler_init_temp(C.float(p.Temperature)))
	C.llama_sampler_chain_add(chain, C.llama_sampler_init_dist(C.uint32_t(p.Seed)))
	return &Sampler{s: chain}, nil
}

// Sample picks a token from the last decoded logits. For the greedy chain
// it is the arg-max, lowest id first on ties.
func (c *Context) Sample(s engine.Sampler) engine.Token {
	ls, ok := s.(*Sampler)
	if !ok || ls.s == nil || !c.hasLogits {
		return -1
	}
	t := C.llama_sampler_sample(ls.s, c.ctx, -1)
	return engine.Token(t)
}
