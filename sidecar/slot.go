package sidecar

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/shm"
)

// slot is the single model slot. Its token (a one-element channel) is the
// right to use the engine; holders may wait for it with a context.
type slot struct {
	token           chan struct{}
	model           engine.Model
	ectx            engine.Context
	facts           engine.Facts
	capacity        policy.Capacity
	resident        *session // whose tape is in sequence 0
	holders         int      // open sessions; a non-zero count pins the model
	hot             hotConfig
	arena           *shm.Arena
	arenaBytes      int64
	nextBlock       uint64
	kv              policy.KVType
	fig             figures       // measured at load: restore or recompute
	coldBytes       int64         // the SSD tier's quota (0: off); counts toward sessionTokens
	orphans         []*orphanTape // parked blocks without a session, oldest first
	arenaMaxSession uint64        // largest session id found in a re-attached arena
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
	cfg            *Config
	dataDir        string
	log            func(msg string, args ...any)
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
	hc, err := resolveHot(o.cfg, facts, capa)
	if err != nil {
		m.Close()
		return "", err
	}
	if hc.noShift {
		o.log("hot set off: llama.cpp reports this model cannot shift positions; serving dense attention within its window", "window", facts.TrainedContext)
		capa.ContextTokens = min(capa.ContextTokens, int64(facts.TrainedContext))
		hc = hotConfig{}
	}
	cells := int(capa.ContextTokens)
	if hc.budget > 0 {
		// The hot set, plus room for a block passing through the scratch
		// sequence while it is inserted.
		cells = hc.limit + 2*hc.block
	}
	ectx, err := m.NewContext(engine.ContextOptions{
		ContextTokens:  cells,
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
	costAt := 0
	if hc.budget > 0 {
		costAt = min(hc.limit/2, 256)
	}
	fig := measureFigures(context.Background(), ectx, facts, elemBytes(o.kvType), costAt)
	if hc.budget > 0 && o.cfg.TurnLatency > 0 {
		var msg string
		if hc, msg = latencyBound(hc, fig, o.cfg.TurnLatency, o.cfg.TurnSuffixTokens); msg != "" {
			o.log(msg)
		}
	}
	var arena *shm.Arena
	var arenaBytes int64
	var orphans []*orphanTape
	var maxID, maxSession uint64
	if hc.budget > 0 {
		arenaBytes = o.cfg.ArenaBytes
		if arenaBytes == 0 {
			arenaBytes = usable / 4
		}
		compat := policy.CompatKey{ModelDigest: facts.Digest, Template: "blocks", KVType: o.kvType,
			FlashAttention: o.flashAttention, ContextTokens: int64(cells), FormatVersion: formatVersion}.String()
		a, rep, err := shm.Open(filepath.Join(o.dataDir, "shm"), shm.Options{BudgetBytes: arenaBytes, Compat: compat})
		if err != nil {
			ectx.Close()
			m.Close()
			return "", fmt.Errorf("%w: host-RAM arena: %v", protocol.ErrResourceExhausted, err)
		}
		for _, sa := range rep.SetAside {
			o.log("arena file set aside", "path", sa.Path, "moved_to", sa.MovedTo, "err", sa.Err)
		}
		for _, d := range rep.Dropped {
			o.log("arena block dropped", "id", d.ID, "err", d.Err)
		}
		// Parked blocks of a previous run become orphan tapes that new
		// sessions resume from (orphan.go); ids continue above theirs.
		orphans, maxID, maxSession = collectOrphans(a)
		if n := len(orphans); n > 0 {
			o.log("arena re-attached: parked blocks of an earlier ctxd kept for resume", "tapes", n)
		}
		arena = a
	}
	s.unload()
	s.model, s.ectx, s.facts, s.capacity = m, ectx, facts, capa
	s.hot, s.arena, s.arenaBytes, s.kv = hc, arena, arenaBytes, o.kvType
	s.fig = fig
	s.orphans, s.nextBlock, s.arenaMaxSession = orphans, max(s.nextBlock, maxID), maxSession
	return capa.Warning, nil
}

// unload frees the model; the caller holds the token and checked holders.
func (s *slot) unload() {
	if s.arena != nil {
		s.arena.Close()
		s.arena = nil
	}
	s.hot = hotConfig{}
	s.orphans = nil
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

// sessionTokens is the most tokens a session may hold: the context in
// dense mode; the hot budget plus what the arena holds in hot-set mode.
func (s *slot) sessionTokens() int {
	if s.hot.budget == 0 {
		return s.contextTokens()
	}
	kv := max(s.facts.KVBytesPerToken(s.kvType()), 1)
	// Blocks a full arena spills to the SSD tier stay retrievable.
	cold := int(policy.TokensForBytes(s.coldBytes, kv))
	if s.arena == nil {
		return s.hot.limit + int(policy.TokensForBytes(s.arenaBytes, kv)) + cold
	}
	// Count whole blocks the arena's slabs hold: a block of B tokens takes
	// its header, tokens and KV bytes, rounded up to slabs.
	st := s.arena.Stats()
	b := int64(s.hot.block)
	blockBytes := 256 + 4*b + (kv+kv/32)*b // header, tokens, KV (+3% state framing)
	slabs := max((blockBytes+st.SlabBytes-1)/st.SlabBytes, 1)
	return s.hot.limit + int(st.CapacitySlabs/slabs*b) + cold
}

func (s *slot) kvType() policy.KVType { return s.kv }

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
	if sess.hot != nil && s.arena != nil {
		for _, b := range sess.hot.blocks {
			if b.stored {
				s.arena.Delete(b.id)
			}
		}
	}
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

// resolveHot fills the hot-set settings from the configuration and the
// model, refusing budgets that cannot hold what must stay hot.
func resolveHot(cfg *Config, facts engine.Facts, capa policy.Capacity) (hotConfig, error) {
	if cfg == nil || cfg.HotTokens == 0 {
		return hotConfig{}, nil
	}
	if !facts.CanShift {
		// Without position shifts blocks cannot move: dense attention
		// within the window is all that is left.
		return hotConfig{noShift: true}, nil
	}
	scorers, err := cfg.ScorerSet()
	if err != nil {
		return hotConfig{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	hc := hotConfig{budget: cfg.HotTokens, window: cfg.Window, block: cfg.BlockTokens, sinks: cfg.SinkTokens,
		recent: cfg.RecentTokens, scorers: scorers, maxRetrieved: cfg.MaxRetrieved}
	if hc.window == 0 {
		hc.window = facts.TrainedContext
	}
	if hc.block == 0 {
		hc.block = 64
	}
	if hc.sinks == 0 && !cfg.NoSinks {
		hc.sinks = 4
	}
	if cfg.NoSinks {
		hc.sinks = 0
	}
	if hc.recent == 0 {
		hc.recent = hc.budget / 4
	}
	hc.limit = min(hc.budget, hc.window)
	hc.reserve = hc.block / 2
	if need := hc.sinks + hc.recent + 2*hc.block + hc.reserve; need > hc.limit {
		return hotConfig{}, fmt.Errorf("%w: hot budget %d (window %d) is smaller than sinks %d + recent %d + two blocks of %d + decode reserve %d = %d",
			ErrConfig, hc.budget, hc.window, hc.sinks, hc.recent, hc.block, hc.reserve, need)
	}
	return hc, nil
}
