package tiers

import (
	"time"

	"github.com/ctxd/ctxd/shm"
)

// Phase numbers a phase of a block fetch: bringing a parked block back
// into the engine. The numbers are the first argument of the daemon's
// tracing markers (sidecar/trace.go) and must not change.
type Phase int

// Fetch phases.
const (
	PhaseArenaLookup  Phase = 1 // reading the block's KV from the arena
	PhaseDecompress   Phase = 2 // reading and decompressing a block from the SSD tier
	PhaseEngineInsert Phase = 3 // inserting the KV into the engine
	PhaseCount              = 4 // one past the last phase
)

func (p Phase) String() string {
	switch p {
	case PhaseArenaLookup:
		return "arena_lookup"
	case PhaseDecompress:
		return "decompress"
	case PhaseEngineInsert:
		return "engine_insert"
	}
	return "unknown"
}

// Observer records what the tiers do: the daemon's metrics and tracing
// markers. Its methods must be safe for concurrent use.
type Observer interface {
	// FetchPhase marks the start of phase p of fetching block and returns
	// the function that marks its end and reports how long it took.
	FetchPhase(p Phase, block uint64) (end func() time.Duration)
	// Fetched records a block's KV read from tier in d.
	Fetched(tier Tier, d time.Duration)
	// SSDRead records n bytes read back from the SSD tier in d.
	SSDRead(n int, d time.Duration)
	// Parked counts a block copied into the arena.
	Parked()
	// ArenaChanged reports the loaded model's arena (nil after unload).
	ArenaChanged(a *shm.Arena)
}
