package policy

import "fmt"

// Hot-set defaults, defined here once: the daemon's configuration and the
// command line start from them.
const (
	// DefaultHotBlockTokens is the length of a sealed block.
	DefaultHotBlockTokens = 64
	// DefaultSinkTokens is the attention sink kept hot at the very start of
	// the stream.
	DefaultSinkTokens = 4
)

// HotLimitsInput is a hot-set configuration as given, before defaults.
type HotLimitsInput struct {
	// HotTokens is the hot budget; 0 means no hot set (dense); with Auto
	// it is ignored and AutoHotBudget derives the budget.
	HotTokens int
	Auto      bool
	// Window keeps positions below it; 0 means TrainedContext.
	Window         int
	TrainedContext int
	// MemoryTokens is Capacity.MemoryTokens, for the automatic budget.
	MemoryTokens int
	// BlockTokens is the block size; 0 means DefaultHotBlockTokens.
	BlockTokens int
	// SinkTokens is the attention sink; 0 means DefaultSinkTokens unless
	// NoSinks, which asks for none (a plain sliding window).
	SinkTokens int
	NoSinks    bool
	// RecentTokens is the recent window; 0 means a quarter of the budget.
	RecentTokens int
}

// HotLimits are the resolved token limits of a hot set. The zero value
// means no hot set: sessions stay dense.
type HotLimits struct {
	Budget int // the engine's hot budget
	Window int // positions stay below it
	Limit  int // min(Budget, Window): the most tokens the engine holds
	Block  int // sealed block length
	Sinks  int // attention-sink tokens
	Recent int // recent-window tokens
	// Reserve is the room kept after a turn's new tokens for decoding:
	// half a block.
	Reserve int
}

// Validate reports settings no model can make sense of: negative token
// counts (besides Auto), with an error wrapping ErrInvalidHotSet.
func (in HotLimitsInput) Validate() error {
	if (in.HotTokens < 0 && !in.Auto) || in.Window < 0 || in.BlockTokens < 0 || in.SinkTokens < 0 || in.RecentTokens < 0 || in.MemoryTokens < 0 || in.TrainedContext < 0 {
		return fmt.Errorf("%w: negative hot-set setting", ErrInvalidHotSet)
	}
	return nil
}

// ResolveHotLimits fills in the defaults and checks the budget holds what
// must stay hot (MinBudget). A budget below that floor is an error wrapping
// ErrHotBudget, except with Auto, where it means no hot set: the zero
// HotLimits. HotTokens 0 without Auto is the zero HotLimits too.
func ResolveHotLimits(in HotLimitsInput) (HotLimits, error) {
	if err := in.Validate(); err != nil {
		return HotLimits{}, err
	}
	if in.HotTokens == 0 && !in.Auto {
		return HotLimits{}, nil
	}
	l := HotLimits{Budget: in.HotTokens, Window: in.Window, Block: in.BlockTokens, Sinks: in.SinkTokens, Recent: in.RecentTokens}
	if l.Window == 0 {
		l.Window = in.TrainedContext
	}
	if l.Block == 0 {
		l.Block = DefaultHotBlockTokens
	}
	if in.Auto {
		l.Budget = AutoHotBudget(l.Window, in.MemoryTokens, l.Block)
	}
	switch {
	case in.NoSinks:
		l.Sinks = 0
	case l.Sinks == 0:
		l.Sinks = DefaultSinkTokens
	}
	if l.Recent == 0 {
		l.Recent = l.Budget / 4
	}
	l.Limit = min(l.Budget, l.Window)
	l.Reserve = l.Block / 2
	if need := l.MinBudget(); need > l.Limit {
		if in.Auto {
			return HotLimits{}, nil // too small a window or memory for a hot set: dense
		}
		return HotLimits{}, fmt.Errorf("%w: hot budget %d (window %d) is smaller than sinks %d + recent %d + two blocks of %d + decode reserve %d = %d",
			ErrHotBudget, l.Budget, l.Window, l.Sinks, l.Recent, l.Block, l.Reserve, need)
	}
	return l, nil
}

// MinBudget is the smallest limit the hot set works with: the sinks, the
// recent window, two blocks (one passing through while it is inserted, one
// to retrieve) and the decode reserve.
func (l HotLimits) MinBudget() int { return l.Sinks + l.Recent + 2*l.Block + l.Reserve }

// Lowered returns l with its budget and limit lowered to tokens, never
// below MinBudget; l itself when tokens is not below Limit.
func (l HotLimits) Lowered(tokens int) HotLimits {
	if tokens >= l.Limit {
		return l
	}
	l.Limit = max(tokens, l.MinBudget())
	l.Budget = l.Limit
	return l
}

// AdoptRoom is how many tokens a resumed stream may bring back into the
// engine at once: the limit less the decode reserve and two blocks of
// scratch room.
func (l HotLimits) AdoptRoom() int { return l.Limit - l.Reserve - 2*l.Block }

// ChunkTokens is how many new tokens a prefill makes room for at once: a
// quarter of the limit, at least one block, so eviction and compaction run
// once per chunk rather than once per block.
func (l HotLimits) ChunkTokens() int { return max(l.Block, l.Limit/4) }

// TurnSuffixTokens is the room a turn of newTokens plans for: the new
// tokens and the decode reserve, at most half the limit.
func (l HotLimits) TurnSuffixTokens(newTokens int) int { return min(newTokens+l.Reserve, l.Limit/2) }
