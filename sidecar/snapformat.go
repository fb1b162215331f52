package sidecar

import (
	"encoding/binary"
	"fmt"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/shm"
)

// The snapshot format. A snapshot is a session written to the SSD tier
// (coldstore.Snapshot): its manifest, the ordered list of its KV blobs
// (content-addressed, so blobs shared with earlier snapshots are written
// once) and snapMeta, JSON that rebuilds the session exactly: the token
// tape, the segment spans and, for hot-set sessions, every block's place
// plus an image of what the engine held. How a blob's bytes were laid out
// for compression is recorded once, in the blob's own envelope
// (ssdblob.go); snapMeta only says where a block's engine bytes sit.

// snapFormat versions snapMeta (2: a block's bytes are located by offset
// in its blob's engine bytes; the envelope records any rewrite).
const snapFormat = 2

// denseBlockTokens cuts a dense session into blocks for the SSD tier.
const denseBlockTokens = 1024

// extentBlocks parked blocks at most share one SSD-tier blob.
const extentBlocks = 16

// minAutoSnapshotTokens is the smallest session an automatic snapshot
// saves, and the shortest common prefix a resume uses.
const minAutoSnapshotTokens = 64

// snapMeta is a snapshot's session metadata (JSON in Snapshot.Meta).
type snapMeta struct {
	Format   int        `json:"format"`
	Mode     string     `json:"mode"` // the layout's: "dense" or "hot"
	Session  string     `json:"session,omitempty"`
	Template string     `json:"template"`
	Tape     []byte     `json:"tape"` // int32 little-endian
	Spans    []snapSpan `json:"spans"`
	Hot      *snapHot   `json:"hot,omitempty"`
}

type snapSpan struct {
	Seg       policy.Segment `json:"seg"`
	Start     int            `json:"start"`
	End       int            `json:"end"`
	Generated bool           `json:"generated,omitempty"`
}

// snapHot is a hot-set session: its blocks and the engine's image.
// VStart and TailV are tape indexes, PStart, TailP and Pos0 engine
// positions (hot.go states the convention).
type snapHot struct {
	Limit, Window, Block, Sinks int
	TailV, TailP                int
	Turn, Evictions, Admissions int64
	Blocks                      []snapBlock
	Image                       []snapRange // hot blocks and the tail, by position
}

type snapBlock struct {
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

type snapRange struct {
	PStart, N int
	KV        int
}

func encodeTape(t []engine.Token) []byte {
	b := make([]byte, 4*len(t))
	for i, v := range t {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

func decodeTape(b []byte) ([]engine.Token, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("tape of %d bytes is not whole tokens", len(b))
	}
	t := make([]engine.Token, len(b)/4)
	for i := range t {
		t[i] = engine.Token(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return t, nil
}
