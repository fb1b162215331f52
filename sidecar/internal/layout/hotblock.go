package layout

import (
	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/shm"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// A hot set's blocks: where each block's KV is (its residency, one value)
// and what the hot set knows of it.

// residency is where a block's KV is: in the engine or not, and which
// tier below it (package tiers) holds a copy. One value, so no combination of
// flags can contradict another.
type residency uint8

const (
	resLost       residency = iota // nowhere: the block can never come back
	resParked                      // in the arena only
	resSpilled                     // in the SSD tier only (a full arena spilled it)
	resHotOnly                     // in the engine only: lost if evicted
	resHotParked                   // in the engine, a copy in the arena
	resHotSpilled                  // in the engine, a copy in the SSD tier
)

// residencyOf is the residency of a block in the engine or not, with a
// copy in where.
func residencyOf(inEngine bool, where tiers.Tier) residency {
	r := [...]residency{tiers.None: resLost, tiers.Arena: resParked, tiers.SSD: resSpilled}[where]
	if inEngine {
		r += resHotOnly
	}
	return r
}

// inEngine reports whether the block's KV is in the engine (it is hot).
func (r residency) inEngine() bool { return r >= resHotOnly }

// copyTier is the tier holding the block's copy below the engine.
func (r residency) copyTier() tiers.Tier {
	return [...]tiers.Tier{tiers.None, tiers.Arena, tiers.SSD}[r%resHotOnly]
}

// evicted is the residency after the engine lets the block go.
func (r residency) evicted() residency { return residencyOf(false, r.copyTier()) }

// admitted is the residency after the block came back into the engine.
func (r residency) admitted() residency { return residencyOf(true, r.copyTier()) }

// withCopy is the residency with the copy below the engine in where.
func (r residency) withCopy(where tiers.Tier) residency { return residencyOf(r.inEngine(), where) }

func (r residency) String() string {
	return [...]string{"lost", "parked", "spilled", "hot", "hot+parked", "hot+spilled"}[r]
}

// hotBlock is one sealed block of a session's stream.
type hotBlock struct {
	id        uint64
	seq       int
	vstart, n int // tape range [vstart, vstart+n)
	class     policy.CacheClass
	kind      policy.SegmentKind
	segID     string
	pinned    bool
	chain     shm.Hash
	res       residency
	pstart    int           // engine position while in the engine
	pos0      int           // engine position its KV was extracted at (its copies')
	ssdKey    coldstore.Key // its KV's key in the SSD tier once known; zero: none
	lastUsed  int64
	score     float64
	reason    string
	retrieved bool // in the engine because this turn's retrieval chose it
}
