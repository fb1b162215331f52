package sidecar

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
)

// slot is the single model slot. Its token (a one-element channel) is the
// right to use the engine; holders may wait for it with a context.
type slot struct {
	token    chan struct{}
	model    engine.Model
	ectx     engine.Context
	facts    engine.Facts
	capacity policy.Capacity
	resident *session // whose tape is in sequence 0
	holders  int      // open sessions; a non-zero count pins the model
}

func newSlot() *slot {
	s := &slot{token: make(chan struct{}, 1)}
	s.token <- struct{}{}
	return s
}

// acquire takes the engine token or gives up when ctx ends.
func (s *slot) acquire(ctx context.Context) error {
	select {
	case <-s.token:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slot) release() { s.token <- struct{}{} }

// loadOptions are the settings a model is loaded with.
type loadOptions struct {
	path           string
	contextTokens  int
	kvType         policy.KVType
	flashAttention bool
	batchTokens    int
	threads        int
}

// load replaces the model; the caller holds the token and has checked that
// no session holds the slot.
func (s *slot) load(o loadOptions) (string, error) {
	if s.holders > 0 {
		return "", fmt.Errorf("%w: %d sessions are open on %s", protocol.ErrModelBusy, s.holders, s.facts.Path)
	}
	m, err := llama.Load(o.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("%w: model file %s", protocol.ErrNotFound, o.path)
	case err != nil:
		return "", fmt.Errorf("%w: %v", protocol.ErrBadModel, err)
	}
	facts := m.Facts()
	usable, err := hostAvailableBytes()
	if err != nil {
		m.Close()
		return "", fmt.Errorf("%w: measuring host memory: %v", protocol.ErrInternal, err)
	}
	capa, err := policy.PlanCapacity(policy.CapacityInput{
		Facts: policy.ModelFacts{
			Layers: facts.Layers, KVHeads: facts.KVHeads, HeadDim: facts.HeadDim,
			TrainedContext: facts.TrainedContext,
			// The weights are mmap'd and already counted in MemAvailable's
			// complement once loaded; count them again to stay safe.
			WeightsBytes: facts.WeightsBytes,
		},
		KVType:          o.kvType,
		UsableBytes:     usable,
		MemoryKind:      policy.MemoryHost,
		ModelMaxTokens:  facts.TrainedContext,
		RequestedTokens: o.contextTokens,
	})
	if err != nil {
		m.Close()
		return "", fmt.Errorf("%w: %v", protocol.ErrResourceExhausted, err)
	}
	ectx, err := m.NewContext(engine.ContextOptions{
		ContextTokens:  int(capa.ContextTokens),
		BatchTokens:    o.batchTokens,
		KVType:         o.kvType,
		FlashAttention: o.flashAttention,
		Threads:        o.threads,
		DecodeThreads:  policy.DecodeThreads(facts.WeightsBytes, threadsOr(o.threads)),
	})
	if err != nil {
		m.Close()
		if errors.Is(err, engine.ErrInvalidArgument) {
			return "", fmt.Errorf("%w: %v", protocol.ErrInvalidArgument, err)
		}
		return "", fmt.Errorf("%w: %v", protocol.ErrResourceExhausted, err)
	}
	s.unload()
	s.model, s.ectx, s.facts, s.capacity = m, ectx, facts, capa
	return capa.Warning, nil
}

// unload frees the model; the caller holds the token and checked holders.
func (s *slot) unload() {
	if s.ectx != nil {
		s.ectx.Close()
	}
	if s.model != nil {
		s.model.Close()
	}
	s.model, s.ectx, s.resident = nil, nil, nil
	s.facts = engine.Facts{}
	s.capacity = policy.Capacity{}
}

// contextTokens is the number of KV cells a session may fill.
func (s *slot) contextTokens() int {
	if s.ectx == nil {
		return 0
	}
	return int(s.capacity.ContextTokens)
}

// makeResident puts sess's tape into the engine, parking the resident
// session's KV in host memory. The caller holds the token.
func (s *slot) makeResident(sess *session) error {
	if s.resident == sess {
		return nil
	}
	if cur := s.resident; cur != nil {
		st, err := s.ectx.SaveSeq()
		if err != nil {
			return fmt.Errorf("%w: parking session %d: %v", protocol.ErrInternal, cur.id, err)
		}
		cur.parked = &st
		cur.logitsAt = -1
	}
	s.ectx.Clear()
	s.resident = nil
	if sess.parked != nil {
		if err := s.ectx.LoadSeq(*sess.parked); err != nil {
			// The parked bytes are unusable: start the session empty rather
			// than serve a tape that does not match the KV.
			sess.resetTape()
			s.ectx.Clear()
		}
		sess.parked = nil
	}
	sess.logitsAt = -1
	s.resident = sess
	return nil
}

// forget drops sess from the engine if resident.
func (s *slot) forget(sess *session) {
	if s.resident == sess {
		s.ectx.Clear()
		s.resident = nil
	}
	sess.parked = nil
}

func threadsOr(n int) int {
	if n > 0 {
		return n
	}
	return runtime.NumCPU()
}
