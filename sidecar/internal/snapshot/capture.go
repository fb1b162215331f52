package snapshot

import (
	"time"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
)

// pendingBlob is a blob a snapshot needs that the store may not hold yet:
// one or more engine blobs, laid out by Commit (tiers.EncodeBlob).
type pendingBlob struct {
	idx   int // its entry in Snap.Blocks, whose key Commit fills in
	meta  coldstore.BlockMeta
	parts [][]byte
}

// Capture is a session's state copied out under the engine token: memory
// copies only. The rewrite for compression, hashing and the writes wait
// for Commit, after the engine is released.
type Capture struct {
	Snap      coldstore.Snapshot
	Tape      []engine.Token
	Spans     []Span // the tape's segments (Meta.Spans), for the index
	Mode      string // the layout's
	Raw       int64  // engine bytes captured
	elemBytes int
	pending   []pendingBlob
}

// NewCapture starts capturing snapshot name of a session holding tape,
// its blobs keyed under compat and split into elemBytes planes.
func NewCapture(name string, compat coldstore.Compat, tape []engine.Token, elemBytes int) *Capture {
	return &Capture{Snap: coldstore.Snapshot{Name: name, Created: time.Now(), Compat: compat}, Tape: tape, elemBytes: elemBytes}
}

// Add appends a blob of parts and returns its index in Snap.Blocks.
func (c *Capture) Add(meta coldstore.BlockMeta, parts ...[]byte) int {
	meta.ElemBytes = c.elemBytes
	c.Snap.Blocks = append(c.Snap.Blocks, coldstore.SnapshotBlock{Tokens: len(meta.Tokens)})
	for _, p := range parts {
		c.Raw += int64(len(p))
	}
	c.pending = append(c.pending, pendingBlob{idx: len(c.Snap.Blocks) - 1, meta: meta, parts: parts})
	return len(c.Snap.Blocks) - 1
}

// AddStored adds a blob the SSD tier already holds (a spill) by its key.
func (c *Capture) AddStored(key coldstore.Key, tokens int) int {
	c.Snap.Blocks = append(c.Snap.Blocks, coldstore.SnapshotBlock{Key: key, Tokens: tokens})
	return len(c.Snap.Blocks) - 1
}
