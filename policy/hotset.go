package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrInvalidHotSet reports hot-set input that cannot be planned: negative
// budgets or token counts, a block without positive length, duplicate block
// IDs or Seqs, an undefined cache class, a NaN score, or token counts that
// overflow int. LatencyHotBudget and FitPrefillCost use it too.
var ErrInvalidHotSet = errors.New("policy: invalid hot-set input")

// ErrHotBudget reports a hot budget too small for what must stay hot: the
// protected blocks (sinks, pinned, recent window) plus the new suffix. The
// error is a *HotBudgetError, whose message carries the numbers.
var ErrHotBudget = errors.New("policy: hot budget too small")

// HotBlock is one KV block of a session as PlanHotSet sees it. A session's
// blocks partition its token stream: laid end to end in Seq order they are
// the session's original tokens.
type HotBlock struct {
	// ID names the block; unique within a session.
	ID uint64
	// Tokens is the block's length in tokens; positive.
	Tokens int
	// Class is the block's eviction class; ClassUnspecified means
	// DefaultClass(Kind), as with Segment.EffectiveClass.
	Class CacheClass
	// Kind is the kind of the manifest segment the block comes from.
	Kind SegmentKind
	// Seq is the block's place in the session's original token stream;
	// unique within a session.
	Seq int
	// Score is the block's relevance this turn, e.g. from a Scorer; higher
	// is more relevant. It must not be NaN.
	Score float64
	// LastUsed is the logical time (e.g. turn number) the block was last
	// used; larger is more recent.
	LastUsed int64
	// Hot says the block is resident in the engine now; otherwise it is
	// parked in host RAM.
	Hot bool
	// Pinned blocks always stay hot, e.g. the task_pinned core.
	Pinned bool
	// Sink marks the attention sink at the very start of the stream; it
	// always stays hot.
	Sink bool
	// Recent marks a block of the recent window; it always stays hot.
	Recent bool
}

// EffectiveClass returns b.Class, or DefaultClass(b.Kind) when b.Class is
// ClassUnspecified.
func (b HotBlock) EffectiveClass() CacheClass {
	if b.Class == ClassUnspecified {
		return DefaultClass(b.Kind)
	}
	return b.Class
}

// HotSetInput is everything PlanHotSet needs.
type HotSetInput struct {
	// Blocks are all of the session's blocks, hot and parked, in any order.
	Blocks []HotBlock
	// HotBudget is the most tokens the engine may hold: the hot blocks plus
	// the new suffix.
	HotBudget int
	// SinkTokens marks as sinks, besides blocks flagged Sink, the blocks
	// overlapping the first SinkTokens tokens of the stream (in Seq order).
	SinkTokens int
	// RecentTokens marks as recent, besides blocks flagged Recent, the
	// blocks overlapping the last RecentTokens tokens of the stream.
	RecentTokens int
	// SuffixTokens is the length of the new suffix about to be prefilled;
	// it goes right after the last hot block.
	SuffixTokens int
	// TrainedWindow is the model's trained context: every position of the
	// layout, the suffix's included, stays below it. 0 means no limit
	// besides HotBudget.
	TrainedWindow int
	// MaxRetrieved caps the retrieved (not protected) blocks; 0 means no cap.
	MaxRetrieved int
	// MinScore is the least score a block needs to be retrieved (Score ≥
	// MinScore); protected blocks need none. The zero value admits every
	// non-negative score; pass math.Inf(-1) to admit any. Not NaN.
	MinScore float64
}

// HotRole says why a block of a layout is hot. Layouts hold the roles in
// this order: sinks, pinned, retrieved, recent.
type HotRole int

// Hot roles, in layout order. A block with several flags takes the first
// that applies: sink, then pinned, then recent.
const (
	RoleSink      HotRole = 1 // attention sink at the start of the stream
	RolePinned    HotRole = 2 // flagged Pinned
	RoleRetrieved HotRole = 3 // chosen by score
	RoleRecent    HotRole = 4 // part of the recent window
)

var hotRoleNames = [...]string{RoleSink: "sink", RolePinned: "pinned", RoleRetrieved: "retrieved", RoleRecent: "recent"}

// String returns the role's name, e.g. "retrieved", or "HotRole(n)" for an
// undefined value.
func (r HotRole) String() string {
	if r >= RoleSink && r <= RoleRecent {
		return hotRoleNames[r]
	}
	return fmt.Sprintf("HotRole(%d)", int(r))
}

// LayoutEntry places one hot block at positions [Start, Start+Tokens).
type LayoutEntry struct {
	ID     uint64
	Start  int
	Tokens int
	Seq    int
	Role   HotRole
	// Reason says why the block is hot: "attention sink", "pinned",
	// "recent window", or for retrieved blocks their score and rank among
	// all candidates, e.g. "score 3.21, rank 1 of 40".
	Reason string
}

// HotSetPlan is the outcome of PlanHotSet. ID lists never repeat an ID, and
// the hot set after the turn, Layout's IDs, is (hot − Evict) ∪ Admit.
type HotSetPlan struct {
	// Layout is the hot set after the turn in position order: sinks,
	// pinned, retrieved, recent, each group in Seq order, contiguous from
	// position 0.
	Layout []LayoutEntry
	// Keep are the blocks hot now that stay hot, in layout order.
	Keep []uint64
	// Admit are the parked blocks to make hot, in layout order.
	Admit []uint64
	// Evict are the hot blocks to park, in EvictionOrder.
	Evict []uint64
	// SuffixStart is the first position of the new suffix: the end of the
	// layout. SuffixStart + SuffixTokens ≤ Limit.
	SuffixStart int
	// Limit is min(HotBudget, TrainedWindow), or HotBudget when
	// TrainedWindow is 0.
	Limit int
	// Token counts of the layout by role; ProtectedTokens is sinks +
	// pinned + recent.
	SinkTokens, PinnedTokens, RecentTokens, RetrievedTokens int
	ProtectedTokens                                         int
	// AdmittedTokens and EvictedTokens are the tokens of Admit and Evict.
	AdmittedTokens, EvictedTokens int
	// FreeTokens is the room left unused: Limit − SuffixStart − SuffixTokens.
	FreeTokens int
	// Unpinned is set by PlanHotSetUnpinning when the pinned blocks did not
	// fit: the budget error that made it plan as if no block were pinned.
	Unpinned *HotBudgetError
}

// HotBudgetError is the error PlanHotSet returns when the protected blocks
// and the suffix do not fit; it wraps ErrHotBudget.
type HotBudgetError struct {
	SinkTokens, PinnedTokens, RecentTokens int // protected tokens by role
	SuffixTokens                           int
	HotBudget, TrainedWindow               int // as given
	Limit                                  int // min(HotBudget, TrainedWindow)
}

// Need returns the tokens that must fit, protected plus suffix, saturating
// at math.MaxInt.
func (e *HotBudgetError) Need() int {
	need := 0
	for _, n := range [...]int{e.SinkTokens, e.PinnedTokens, e.RecentTokens, e.SuffixTokens} {
		if n > math.MaxInt-need {
			return math.MaxInt
		}
		need += n
	}
	return need
}

// Error states the numbers, e.g. "policy: hot budget too small: sinks 4 +
// pinned 900 + recent 512 + suffix 200 = 1616 tokens exceed the limit of
// 1024 (hot budget 1024, trained window 4096)".
func (e *HotBudgetError) Error() string {
	return fmt.Sprintf("%v: sinks %d + pinned %d + recent %d + suffix %d = %d tokens exceed the limit of %d (hot budget %d, trained window %d)",
		ErrHotBudget, e.SinkTokens, e.PinnedTokens, e.RecentTokens, e.SuffixTokens, e.Need(), e.Limit, e.HotBudget, e.TrainedWindow)
}

// Unwrap returns ErrHotBudget.
func (e *HotBudgetError) Unwrap() error { return ErrHotBudget }

// PlanHotSet decides which blocks are hot for the next turn and where they
// sit.
//
// Protected blocks (sinks, pinned, recent window) always stay hot; if they
// and the suffix exceed Limit the result is a *HotBudgetError. The room left
// is filled with the other blocks scoring at least MinScore, by descending
// Score, then more recent LastUsed, then lower Seq; a block that does not fit
// is skipped and smaller ones after it may still fit, until MaxRetrieved
// blocks are chosen. Hot blocks not chosen are evicted, in EvictionOrder.
//
// The plan does not depend on the order of in.Blocks. Invalid input gives
// an error wrapping ErrInvalidHotSet.
func PlanHotSet(in HotSetInput) (HotSetPlan, error) {
	if err := checkHotSetInput(in); err != nil {
		return HotSetPlan{}, err
	}
	blocks := slices.Clone(in.Blocks)
	slices.SortFunc(blocks, func(a, b HotBlock) int { return cmp.Compare(a.Seq, b.Seq) })
	roles := protectedRoles(blocks, in.SinkTokens, in.RecentTokens)

	limit := in.HotBudget
	if in.TrainedWindow > 0 {
		limit = min(limit, in.TrainedWindow)
	}
	p := HotSetPlan{Limit: limit}
	for i, b := range blocks {
		switch roles[i] {
		case RoleSink:
			p.SinkTokens += b.Tokens
		case RolePinned:
			p.PinnedTokens += b.Tokens
		case RoleRecent:
			p.RecentTokens += b.Tokens
		}
	}
	p.ProtectedTokens = p.SinkTokens + p.PinnedTokens + p.RecentTokens
	if in.SuffixTokens > limit || p.ProtectedTokens > limit-in.SuffixTokens {
		return HotSetPlan{}, &HotBudgetError{
			SinkTokens: p.SinkTokens, PinnedTokens: p.PinnedTokens, RecentTokens: p.RecentTokens,
			SuffixTokens: in.SuffixTokens, HotBudget: in.HotBudget, TrainedWindow: in.TrainedWindow, Limit: limit,
		}
	}

	reasons := retrieve(blocks, roles, in, limit-in.SuffixTokens-p.ProtectedTokens)
	for i, b := range blocks {
		if roles[i] == RoleRetrieved {
			p.RetrievedTokens += b.Tokens
		}
	}
	p.layout(blocks, roles, reasons)
	p.FreeTokens = limit - p.SuffixStart - in.SuffixTokens
	return p, nil
}

// PlanHotSetUnpinning is PlanHotSet, except that when the protected blocks
// and the suffix do not fit it plans again as if no block were pinned
// (pinned segments larger than the budget lose their pin rather than fail
// the turn) and reports why in HotSetPlan.Unpinned. It fails only when the
// sinks, the recent window and the suffix alone do not fit, or on invalid
// input.
func PlanHotSetUnpinning(in HotSetInput) (HotSetPlan, error) {
	p, err := PlanHotSet(in)
	var be *HotBudgetError
	if !errors.As(err, &be) || be.PinnedTokens == 0 {
		return p, err
	}
	unpinned := in
	unpinned.Blocks = slices.Clone(in.Blocks)
	for i := range unpinned.Blocks {
		unpinned.Blocks[i].Pinned = false
	}
	p, err = PlanHotSet(unpinned)
	if err != nil {
		return HotSetPlan{}, err
	}
	p.Unpinned = be
	return p, nil
}

// protectedRoles returns each block's role if protected, else 0. blocks are
// sorted by Seq.
func protectedRoles(blocks []HotBlock, sinkTokens, recentTokens int) []HotRole {
	total := 0
	for _, b := range blocks {
		total += b.Tokens
	}
	roles := make([]HotRole, len(blocks))
	off := 0
	for i, b := range blocks {
		end := off + b.Tokens
		switch {
		case b.Sink || off < sinkTokens:
			roles[i] = RoleSink
		case b.Pinned:
			roles[i] = RolePinned
		case b.Recent || recentTokens > 0 && end > total-recentTokens:
			roles[i] = RoleRecent
		}
		off = end
	}
	return roles
}

// retrieve marks the chosen unprotected blocks RoleRetrieved within room
// tokens and returns their reasons by index into blocks.
func retrieve(blocks []HotBlock, roles []HotRole, in HotSetInput, room int) map[int]string {
	var cand []int
	for i, b := range blocks {
		if roles[i] == 0 && b.Score >= in.MinScore {
			cand = append(cand, i)
		}
	}
	slices.SortFunc(cand, func(i, j int) int {
		a, b := &blocks[i], &blocks[j]
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		if c := cmp.Compare(b.LastUsed, a.LastUsed); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	reasons := make(map[int]string)
	for rank, i := range cand {
		if in.MaxRetrieved > 0 && len(reasons) == in.MaxRetrieved {
			break
		}
		if blocks[i].Tokens > room {
			continue
		}
		room -= blocks[i].Tokens
		roles[i] = RoleRetrieved
		reasons[i] = fmt.Sprintf("score %.3g, rank %d of %d", blocks[i].Score, rank+1, len(cand))
	}
	return reasons
}

// layout fills p's Layout, Keep, Admit, Evict and their counts. blocks are
// sorted by Seq.
func (p *HotSetPlan) layout(blocks []HotBlock, roles []HotRole, reasons map[int]string) {
	pos := 0
	for role := RoleSink; role <= RoleRecent; role++ {
		for i, b := range blocks {
			if roles[i] != role {
				continue
			}
			e := LayoutEntry{ID: b.ID, Start: pos, Tokens: b.Tokens, Seq: b.Seq, Role: role}
			switch role {
			case RoleSink:
				e.Reason = "attention sink"
			case RolePinned:
				e.Reason = "pinned"
			case RoleRecent:
				e.Reason = "recent window"
			default:
				e.Reason = reasons[i]
			}
			p.Layout = append(p.Layout, e)
			pos += b.Tokens
			if b.Hot {
				p.Keep = append(p.Keep, b.ID)
			} else {
				p.Admit = append(p.Admit, b.ID)
				p.AdmittedTokens += b.Tokens
			}
		}
	}
	p.SuffixStart = pos
	var evicted []HotBlock
	for i, b := range blocks {
		if b.Hot && roles[i] == 0 {
			evicted = append(evicted, b)
			p.EvictedTokens += b.Tokens
		}
	}
	p.Evict = EvictionOrder(evicted)
}

// checkHotSetInput reports the first invalid field of in.
func checkHotSetInput(in HotSetInput) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidHotSet}, args...)...)
	}
	switch {
	case in.HotBudget < 0:
		return bad("hot budget must not be negative, got %d", in.HotBudget)
	case in.SinkTokens < 0:
		return bad("sink tokens must not be negative, got %d", in.SinkTokens)
	case in.RecentTokens < 0:
		return bad("recent tokens must not be negative, got %d", in.RecentTokens)
	case in.SuffixTokens < 0:
		return bad("suffix tokens must not be negative, got %d", in.SuffixTokens)
	case in.TrainedWindow < 0:
		return bad("trained window must not be negative, got %d", in.TrainedWindow)
	case in.MaxRetrieved < 0:
		return bad("max retrieved must not be negative, got %d", in.MaxRetrieved)
	case math.IsNaN(in.MinScore):
		return bad("min score is NaN")
	}
	ids := make(map[uint64]struct{}, len(in.Blocks))
	seqs := make(map[int]uint64, len(in.Blocks))
	total := 0
	for i, b := range in.Blocks {
		blk := func(format string, args ...any) error {
			return bad("block %d (id %d): %s", i, b.ID, fmt.Sprintf(format, args...))
		}
		switch {
		case b.Tokens <= 0:
			return blk("tokens must be positive, got %d", b.Tokens)
		case !b.Class.Valid():
			return blk("unknown class %s", b.Class)
		case b.EffectiveClass() == ClassUnspecified:
			return blk("no class: class unspecified and kind %s has no default", b.Kind)
		case math.IsNaN(b.Score):
			return blk("score is NaN")
		case b.Tokens > math.MaxInt-total:
			return blk("tokens overflow int")
		}
		total += b.Tokens
		if _, dup := ids[b.ID]; dup {
			return blk("duplicate id")
		}
		ids[b.ID] = struct{}{}
		if other, dup := seqs[b.Seq]; dup {
			return blk("seq %d also held by id %d", b.Seq, other)
		}
		seqs[b.Seq] = b.ID
	}
	return nil
}
