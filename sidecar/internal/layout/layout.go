package layout

import (
	"context"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// A session's layout is how its tape sits in the engine. There are two,
// chosen once when the session opens (by whether the loaded model runs a
// hot set) and never mixed:
//
//   - NewDense (dense.go): token i of the tape at position i;
//   - NewHotSet (hotset.go): the tape cut into blocks, a bounded set of them in
//     the engine below the trained window, the rest parked in the tiers.
//
// Everything that differs between the two is one method here; the code
// around them (calls, invalidation, snapshots, resume) never asks which
// layout it has. Every method runs under the engine token with the session
// resident, and leaves the tape and the KV equal to each other, on
// failure too.
type Layout interface {
	// Mode names the layout in snapshots: "dense" or "hot".
	Mode() string
	// MaxTokens is the most tokens the session may hold.
	MaxTokens() int
	// Sync makes the tape equal target (tokens and spans), keeping the
	// longest reusable prefix and prefilling the rest. With needLogits the
	// last token's logits are left in the engine (recomputing one token
	// if all was reused); with keepTail a tape that already extends
	// target is left as is; with retrieve a hot set brings back parked
	// blocks the new tokens ask for.
	Sync(ctx context.Context, target Prompt, needLogits, keepTail, retrieve bool) (SyncResult, error)
	// AppendTokens decodes toks after the tape.
	AppendTokens(ctx context.Context, toks []engine.Token) error
	// Cut drops the tape and its KV from tape index n on (a hot set keeps
	// less only when the block n falls in has no KV left anywhere, or
	// policy finds it cheaper to prefill its part again: up to the start
	// of that block; cut back to where its last turn started, it restores
	// that turn's layout) and returns the length kept.
	Cut(ctx context.Context, n int) (int, error)
	// Clear empties the session in the engine and the tiers.
	Clear() error
	// Reset forgets the session's state without touching the engine (the
	// caller cleared it), after clear failed.
	Reset()
	// Release frees what the session keeps below the engine as it closes;
	// with keep, a hot set's parked blocks stay as an orphan tape for a
	// later session to resume, and with resident (the session is the
	// engine's: the one method that may run without) its open tail too.
	Release(keep, resident bool)
	// Explain fills the layout's figures and returns the tape ranges that
	// are in the engine.
	Explain(rep *pb.ExplainReply) [][2]int
	// OrphanPrefixes are, per orphan tape a hot set could adopt (oldest
	// first), the tokens it shares with target; nil for a dense session.
	OrphanPrefixes(target []engine.Token) []int
	// AdoptOrphan makes the first upto tokens of orphan tape i the empty
	// session's tape and returns the tokens and blocks it holds then.
	AdoptOrphan(i, upto int) (tokens, blocks int, err error)
	// Capture copies the session's KV out for a snapshot (capture.go).
	Capture(c *snapshot.Capture, meta *snapshot.Meta) error
	// Restore rebuilds the session from a snapshot (restore.go),
	// bringing back at least the first upto tokens.
	Restore(ctx context.Context, r Restore, upto int) error
	// DonorCopy is how another session copies this one's KV (Donor.Copy,
	// donor.go) without touching it; nil when only the daemon can (a dense
	// session's KV is resident or parked by the slot).
	// A hot set copies its sealed blocks from the tiers and what only its
	// engine state holds through ec.
	DonorCopy(ec EngineCopy) func(ctx context.Context, ranges []policy.SpanRange) ([]DonorPiece, bool, error)
	// DonorFacts are what other sessions copying from this one weigh:
	// how many of its first tokens hold a cold prefill's KV at their tape
	// positions, and from which tape index its KV is only in its engine
	// state (Donor).
	DonorFacts() (exact, tailFrom int)
}

// Env is what a layout uses of the daemon: the loaded model's engine and
// settings, fixed while any session is open, and the session's turn.
type Env struct {
	Engine          engine.Context
	Tiers           *tiers.Tiers
	Counters        Counters
	Hot             *HotConfig // the slot's: the scorers may change between turns
	ContextTokens   int        // KV cells a dense session may fill
	KVBytesPerToken int64      // the loaded model's, for its KV type
	KVType          policy.KVType
	Attention       policy.AttentionShape // the loaded model's, for the attention scorer
	SessionTokens   func() int            // the most tokens a hot-set session may hold
	NewBlockID      func() uint64
	// RestoreRates are the measured figures a dense restore weighs:
	// SSD-tier read and decompression bytes per second, prefill tokens
	// per second.
	RestoreRates func() (readBPS, decompressBPS, prefillTPS float64)
	// Yield lets other sessions' turns run between chunks of a long call;
	// when it returns the session is resident again with its tape and KV
	// equal (the engine may have lost its last logits).
	Yield func() error
	// Contended reports whether others wait for the engine.
	Contended func() bool
	// Progress reports a long call's progress; WantsProgress whether the
	// caller asked for it.
	Progress      func(ctx context.Context, phase string, done, total int)
	WantsProgress func(ctx context.Context) bool
	// Reuse is how a dense session may reuse KV past an early change
	// (segreuse.go); nil: never.
	Reuse func() ReuseSettings
}

// ReuseSettings are the daemon's segment-reuse mode and the measured
// figures policy.PlanSegmentReuse weighs.
type ReuseSettings struct {
	Mode           policy.ReuseMode
	Cost           policy.PrefillCost
	LatencySeconds float64
	// CopySecondsPerToken is the measured time to copy one token's KV
	// (0: not measured yet): what bringing a whole block back to keep
	// part of it costs (policy.PartialBlockWorthCopying).
	CopySecondsPerToken float64
}

// Counters count what hot sets do (the daemon's metrics).
type Counters interface {
	Evicted()      // a block left the engine
	Admitted()     // a block came back into the engine
	ArenaDropped() // a parked block was dropped from a full arena
}
