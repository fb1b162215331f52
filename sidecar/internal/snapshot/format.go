package snapshot

import (
	"encoding/binary"
	"fmt"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/shm"
)

// Format versions Meta (2: a block's bytes are located by offset in its
// blob's engine bytes; the blob's envelope records any rewrite).
const Format = 2

// DenseBlockTokens cuts a dense session into blocks for the SSD tier.
const DenseBlockTokens = 1024

// ExtentBlocks parked blocks at most share one SSD-tier blob.
const ExtentBlocks = 16

// MinAutoTokens is the smallest session an automatic snapshot saves, and
// the shortest common prefix a resume uses.
const MinAutoTokens = 64

// Meta is a snapshot's session metadata (JSON in Snapshot.Meta).
type Meta struct {
	Format   int    `json:"format"`
	Mode     string `json:"mode"` // the layout's: "dense" or "hot"
	Session  string `json:"session,omitempty"`
	Template string `json:"template"`
	Tape     []byte `json:"tape"` // int32 little-endian
	Spans    []Span `json:"spans"`
	Hot      *Hot   `json:"hot,omitempty"`
	// ApproxFrom is the first tape index whose KV is approximate (segment
	// reuse past an early change); nil: all exact.
	ApproxFrom *int `json:"approx_from,omitempty"`
}

// Span is a run of tape tokens and the segment that produced it.
type Span struct {
	Seg       policy.Segment `json:"seg"`
	Start     int            `json:"start"`
	End       int            `json:"end"`
	Generated bool           `json:"generated,omitempty"`
}

// Hot is a hot-set session: its blocks and the engine's image. VStart
// and TailV are tape indexes, PStart, TailP and Pos0 engine positions.
type Hot struct {
	Limit, Window, Block, Sinks int
	TailV, TailP                int
	Turn, Evictions, Admissions int64
	Blocks                      []Block
	Image                       []Range // hot blocks and the tail, by position
	// Mark is the layout where the session's last turn started, which a
	// cut back to that point restores; nil: none (older snapshots too).
	Mark *TurnMark `json:",omitempty"`
}

// TurnMark is a hot-set session's layout at the start of its last turn:
// At is the tape length there, Blocks[i] what block i was (the blocks
// then are the first len(Blocks) of Hot.Blocks).
type TurnMark struct {
	At, TailV, TailP int
	Turn             int64
	Shortfall        bool // the turn's plan could not admit every block it named
	Blocks           []MarkBlock
}

// MarkBlock is a block at a turn's start.
type MarkBlock struct {
	Hot       bool
	PStart    int
	LastUsed  int64
	Score     float64
	Reason    string
	Retrieved bool
	Pinned    bool
}

// Block is one block of a hot-set session.
type Block struct {
	VStart, N int
	Class     policy.CacheClass
	Kind      policy.SegmentKind
	SegID     string
	Pinned    bool
	Chain     shm.Hash
	Hot       bool
	PStart    int
	Pos0      int
	KV        int // index into Snapshot.Blocks of its copy; -1: none
	Off, Len  int // its engine bytes in that blob; Len -1: the whole blob (a spilled block's own)
	LastUsed  int64
	Score     float64
	Reason    string
	Retrieved bool
}

// Range is a run of engine positions saved as one blob.
type Range struct {
	PStart, N int
	KV        int
}

// EncodeTape lays a tape out for Meta.Tape.
func EncodeTape(t []engine.Token) []byte {
	b := make([]byte, 4*len(t))
	for i, v := range t {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

// DecodeTape reads Meta.Tape.
func DecodeTape(b []byte) ([]engine.Token, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("tape of %d bytes is not whole tokens", len(b))
	}
	t := make([]engine.Token, len(b)/4)
	for i := range t {
		t[i] = engine.Token(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return t, nil
}
