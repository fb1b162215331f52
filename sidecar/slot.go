package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// slot is the single model slot. Its token (turns, handed out first come,
// first served) is the right to use the engine; holders may wait for it
// with a context.
type slot struct {
	token           turns
	log             *slog.Logger
	view            atomic.Pointer[slotView] // published for readers that never wait for the engine
	switchCost      time.Duration            // running mean of a session switch (park + restore)
	copyPerToken    float64                  // running mean of a donor copy's seconds per token moved (donors.go)
	model           engine.Model
	ectx            engine.Context
	facts           engine.Facts
	capacity        policy.Capacity
	resident        *session // whose tape is in sequence 0
	holders         int      // open sessions; a non-zero count pins the model
	hot             layout.HotConfig
	tiers           *tiers.Tiers // the loaded model's arena lives there
	nextBlock       uint64
	kv              policy.KVType
	fig             figures // measured at load: restore or recompute
	ssdBytes        int64   // the SSD tier's quota (0: off); counts toward sessionTokens
	arenaMaxSession uint64  // largest session id found in a re-attached arena
	deviceReason    string  // why the model runs where it does (Status)
}

func newSlot(log *slog.Logger, t *tiers.Tiers) *slot {
	s := &slot{log: log, tiers: t}
	s.view.Store(&slotView{})
	return s
}

// acquire takes the engine token, in turn, or gives up when ctx ends.
func (s *slot) acquire(ctx context.Context) error { return s.token.acquire(ctx) }

// acquireAs waits for the engine for a call of the session whose recent
// engine use is u (the scheduler serves the least used first).
func (s *slot) acquireAs(ctx context.Context, u *usage) error { return s.token.acquireAs(ctx, u) }

func (s *slot) release() { s.token.release() }

// loadOptions are the settings a model is loaded with.
type loadOptions struct {
	cfg            *Config
	dataDir        string
	log            func(msg string, args ...any)
	info           func(msg string, args ...any)
	path           string
	contextTokens  int
	kvType         policy.KVType
	flashAttention bool
	batchTokens    int
	threads        int
}

// load replaces the model; the caller holds the token and has checked that
// no session holds the slot.
func (s *slot) load(ctx context.Context, o loadOptions) (string, error) {
	if s.holders > 0 {
		return "", fmt.Errorf("%w: %d sessions are open on %s", protocol.ErrModelBusy, s.holders, s.facts.Path)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%w: loading %s: %w", protocol.ErrCancelled, o.path, err)
	}
	plan, err := planDevice(o.cfg, o.path, o.contextTokens, o.kvType)
	if err != nil {
		return "", err
	}
	m, err := o.cfg.Engine.Load(ctx, o.path, plan.modelOptions())
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("%w: model file %s", protocol.ErrNotFound, o.path)
	case err != nil && ctx.Err() != nil:
		return "", fmt.Errorf("%w: loading %s: %w", protocol.ErrCancelled, o.path, err)
	case err != nil:
		return "", fmt.Errorf("%w: %w", protocol.ErrBadModel, err)
	}
	facts := m.Facts()
	// A window of 0 or −1 (2^32−1 in the file) is a bad model; one past
	// any real model's is capped, with a warning, before memory sizes the
	// daemon after it (policy.PlausibleWindow).
	window, capped, err := policy.PlausibleWindow(int64(facts.TrainedContext))
	if err != nil {
		m.Close()
		return "", fmt.Errorf("%w: %s: %w", protocol.ErrBadModel, o.path, err)
	}
	if capped {
		o.log("the model claims an implausible trained context; planning with a capped window (pass --window to set one)",
			"claimed", facts.TrainedContext, "window", window)
	}
	facts.TrainedContext = window
	pl := facts.Placement
	if plan.device.Name != "" && pl.Device.Name == "" {
		plan.reason = fmt.Sprintf("%s took no weights (llama.cpp reported no buffer on it): every layer on the CPU", plan.device.Name)
	}
	if o.info != nil {
		o.info("model placement", "device", pl.Device.Name, "backend", pl.Device.Backend, "description", pl.Device.Description,
			"gpu_layers", pl.GPULayers, "layers", facts.Layers, "output_on_device", pl.OutputOnGPU,
			"device_weights", pl.DeviceWeightsBytes, "host_weights", pl.HostWeightsBytes, "reason", plan.reason)
	}
	usable, err := hostAvailableBytes()
	if err != nil {
		m.Close()
		return "", fmt.Errorf("%w: measuring host memory: %w", protocol.ErrInternal, err)
	}
	capIn := policy.CapacityInput{
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
	}
	if pl.OutputOnGPU && pl.GPULayers == facts.Layers {
		// Every layer's KV lives on the device: its free memory (as
		// measured before the load) bounds the context, after the weights
		// placed there and the compute buffers planned.
		capIn.Facts.WeightsBytes = pl.DeviceWeightsBytes
		capIn.UsableBytes = pl.Device.FreeBytes
		capIn.MemoryKind = policy.MemoryDevice
		capIn.OverheadBytes = max(plan.offload.ComputeBytes+plan.offload.MarginBytes, 1)
	}
	capa, err := policy.PlanCapacity(capIn)
	if err != nil {
		m.Close()
		return "", fmt.Errorf("%w: %w", protocol.ErrResourceExhausted, err)
	}
	hc, err := resolveHot(o.cfg, facts, capa)
	if err != nil {
		m.Close()
		return "", err
	}
	if hc.NoShift {
		o.log("hot set off: llama.cpp reports this model cannot shift positions; serving dense attention within its window", "window", facts.TrainedContext)
		capa.ContextTokens = min(capa.ContextTokens, int64(facts.TrainedContext))
		hc = layout.HotConfig{}
	}
	cells := int(capa.ContextTokens)
	if hc.Budget > 0 {
		// The hot set, plus room for a block passing through the scratch
		// sequence while it is inserted.
		cells = hc.Limit + 2*hc.Block
	}
	ectx, err := m.NewContext(engine.ContextOptions{
		ContextTokens:  cells,
		BatchTokens:    o.batchTokens,
		KVType:         o.kvType,
		FlashAttention: o.flashAttention,
		Threads:        o.threads,
		DecodeThreads:  decodeThreads(o.threads, facts.WeightsBytes),
		ThreadsPinned:  o.threads != policy.ThreadsAuto,
	})
	if err != nil {
		m.Close()
		if errors.Is(err, engine.ErrInvalidArgument) {
			return "", fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
		}
		return "", fmt.Errorf("%w: %w", protocol.ErrResourceExhausted, err)
	}
	if err := checkScorers(hc.Scorers, ectx); hc.Budget > 0 && err != nil {
		if o.cfg.Scorers != "" {
			ectx.Close()
			m.Close()
			return "", fmt.Errorf("%w: %w", ErrConfig, err)
		}
		// The default asks for what this engine lacks: lexical alone.
		hc.Scorers = policy.ScorerLexical
		o.log("retrieval ranks with the lexical scorer only", "reason", err)
	}
	costAt := 0
	if hc.Budget > 0 {
		costAt = min(hc.Limit/2, 256)
	}
	fig := measureFigures(ctx, ectx, facts, tiers.ElemBytes(o.kvType), costAt)
	if err := ctx.Err(); err != nil {
		ectx.Close()
		m.Close()
		return "", fmt.Errorf("%w: loading %s: %w", protocol.ErrCancelled, o.path, err)
	}
	if hc.Budget > 0 && o.cfg.TurnLatency > 0 {
		var msg string
		if hc, msg = latencyBound(hc, fig, o.cfg.TurnLatency, o.cfg.TurnSuffixTokens); msg != "" {
			o.log(msg)
		}
	}
	opened := &tiers.OpenedArena{}
	if hc.Budget > 0 {
		// The tiers open the arena; the shell says where and how large.
		compat := policy.CompatKey{ModelDigest: facts.Digest, Template: "blocks", KVType: o.kvType,
			FlashAttention: o.flashAttention, ContextTokens: int64(cells), FormatVersion: formatVersion,
			Backend: backendSettings(facts.Placement)}.String()
		if opened, err = s.tiers.OpenArena(filepath.Join(o.dataDir, "shm"), policy.ArenaBudget(o.cfg.ArenaBytes, usable), compat); err != nil {
			ectx.Close()
			m.Close()
			return "", fmt.Errorf("%w: host-RAM arena: %w", protocol.ErrResourceExhausted, err)
		}
	}
	s.unload()
	s.model, s.ectx, s.facts, s.capacity = m, ectx, facts, capa
	s.hot, s.kv = hc, o.kvType
	s.fig = fig
	s.deviceReason = plan.reason
	s.nextBlock, s.arenaMaxSession = max(s.nextBlock, opened.MaxID), opened.MaxSession
	s.tiers.Attach(opened.Arena, opened.Bytes, opened.Orphans, ssdCompatOf(facts, o.kvType, o.flashAttention), tiers.ElemBytes(o.kvType))
	return capa.Warning, nil
}

// unload frees the model; the caller holds the token and checked holders.
func (s *slot) unload() {
	s.tiers.Detach()
	s.hot = layout.HotConfig{}
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
	if s.hot.Budget == 0 {
		return s.contextTokens()
	}
	in := policy.SessionTokensInput{HotLimit: s.hot.Limit, BlockTokens: s.hot.Block,
		KVBytesPerToken:   s.facts.KVBytesPerToken(s.kvType()),
		RecordHeaderBytes: shm.BlockHeaderBytes, TokenBytes: shm.TokenBytes,
		ArenaBytes: s.tiers.ArenaBytes(), ColdBytes: s.ssdBytes}
	if st, ok := s.tiers.ArenaStats(); ok {
		in.SlabBytes, in.CapacitySlabs = st.SlabBytes, st.CapacitySlabs
	}
	return policy.SessionTokens(in)
}

func (s *slot) kvType() policy.KVType { return s.kv }

// newBlockID names a new hot-set block; ids continue above those an
// earlier run left in the arena.
func (s *slot) newBlockID() uint64 {
	s.nextBlock++
	return s.nextBlock
}

// makeResident puts sess's tape into the engine, parking the resident
// session's KV in host memory. The caller holds the token.
func (s *slot) makeResident(sess *session) error {
	if s.resident == sess {
		return nil
	}
	start := time.Now()
	defer func() {
		// A running mean of what switching sessions costs: the fair
		// scheduler's quantum is derived from it (policy.EngineQuantum).
		s.switchCost = policy.SwitchCostEstimate(s.switchCost, time.Since(start))
	}()
	if cur := s.resident; cur != nil {
		st, err := s.ectx.SaveSeq()
		if err != nil {
			return fmt.Errorf("%w: parking session %d: %w", protocol.ErrInternal, cur.id, err)
		}
		cur.parked = &st
		cur.tape.LogitsLost()
	}
	s.ectx.Clear()
	s.resident = nil
	if sess.parked != nil {
		if err := s.ectx.LoadSeq(*sess.parked); err != nil {
			// The parked bytes are unusable: start the session empty rather
			// than serve a tape that does not match the KV.
			sess.layout.Reset()
			s.ectx.Clear()
		}
		sess.parked = nil
	}
	sess.tape.LogitsLost()
	s.resident = sess
	return nil
}

// forget drops sess from the engine if resident; its layout has released
// what it kept below the engine.
func (s *slot) forget(sess *session) {
	if s.resident == sess {
		s.ectx.Clear()
		s.resident = nil
	}
	sess.parked = nil
}

// decodeThreads is the ceiling of single-token steps: a pinned --threads
// as given, else policy.DecodeThreads over every CPU.
func decodeThreads(threads int, weightsBytes int64) int {
	if threads != policy.ThreadsAuto {
		return threads
	}
	return policy.DecodeThreads(weightsBytes, runtime.NumCPU())
}

// resolveHot fills the hot-set settings from the configuration and the
// model, refusing budgets that cannot hold what must stay hot.
func resolveHot(cfg *Config, facts engine.Facts, capa policy.Capacity) (layout.HotConfig, error) {
	if cfg == nil || cfg.HotTokens == 0 {
		return layout.HotConfig{}, nil
	}
	if !facts.CanShift {
		// Without position shifts blocks cannot move: dense attention
		// within the window is all that is left.
		return layout.HotConfig{NoShift: true}, nil
	}
	scorers, err := cfg.ScorerSet()
	if err != nil {
		return layout.HotConfig{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	in := cfg.hotLimitsInput()
	in.TrainedContext, in.MemoryTokens = facts.TrainedContext, int(capa.MemoryTokens)
	l, err := policy.ResolveHotLimits(in)
	if err != nil {
		return layout.HotConfig{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if l.Budget == 0 {
		return layout.HotConfig{}, nil // too small a window or memory for a hot set: dense
	}
	hc := layout.HotConfig{Scorers: scorers}.WithLimits(l)
	return hc, nil
}
