package tiers

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/shm"
)

// The open tail of a closed session. A hot set parks only sealed blocks;
// what follows the last of them — its last message and generation prompt
// or reply, under one block — is only in the engine. When a hot set closes
// while resident, that tail is parked too, as an arena record of its own
// (kind TailRecordKind: its tokens, their KV, the position it was
// extracted at), beside the orphan tape it continues. It is no block of
// the tape: the tape's Tokens (its common prefix with a new prompt, what
// policy.ChooseResume weighs against a snapshot) stay the sealed blocks,
// so an automatic snapshot holding the same tail and the turn's layout
// mark still wins a tie on the prefix. The tail lends its segments past
// a first change, as part of a donor (layout/orphandonor.go) and in the
// runs a resume matches; a session adopting the tape takes it back into
// the engine when it keeps any of it (policy.AdoptionExtent,
// layout/adopt.go).
//
// The record is bound to the tape it continues: its chain hash is
// tailChain over the chain hash of the tape's last block and its own
// tokens, and the spans record (orphanspans.go) names its length and that
// hash. At load a tail is used only when it follows the last block of a
// rebuilt tape with that hash and the tape's spans record names it;
// anything else (corrupt, unreadable, following no tape's end, a second
// tail of a tape) is dropped and its block freed: the tape is adopted and
// lends by its blocks as without a tail.

// TailRecordKind marks an arena block holding an orphan tape's open tail
// (no segment kind uses it).
const TailRecordKind = 0xFE

// tailSegID is the segment id of a tail record's arena block.
const tailSegID = "ctxd:orphan-tail"

// OrphanTail is a closed session's open tail, parked beside its orphan
// tape: tape indices [len(Tokens of the tape), +len(Tokens)).
type OrphanTail struct {
	ID     uint64 // its arena block
	Tokens []engine.Token
	Pos    int32    // the engine position its KV was extracted at
	Chain  shm.Hash // tailChain(the tape's last block's chain, Tokens)
}

// tailChain is a tail record's chain hash: its tokens after the tape's
// last block, under a domain of its own, so it never equals a block's.
func tailChain(parent shm.Hash, tokens []engine.Token) shm.Hash {
	h := sha256.New()
	h.Write([]byte("ctxd/orphan tail\x00"))
	h.Write(parent[:])
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	var out shm.Hash
	h.Sum(out[:0])
	return out
}

// isTailRecord reports whether an arena block is a tail record.
func isTailRecord(m shm.Meta) bool {
	return m.NTokens > 0 && m.Kind == TailRecordKind && m.SegID == tailSegID
}

// AllTokens are o's tokens, then its tail's: what it lends as a donor and
// what a resume matches segments against past the common prefix.
func (o *OrphanTape) AllTokens() []engine.Token {
	if o.Tail == nil {
		return o.Tokens
	}
	return append(slices.Clip(o.Tokens), o.Tail.Tokens...)
}

// ParkTail parks the open tail of the session whose blocks o holds (tokens
// at tape index len(o.Tokens), their KV r extracted from the engine) as
// o's tail, under arena block id. Without an arena, blocks or tokens it
// does nothing; a tail the arena cannot take (full) is logged at debug
// level and left out: it is an aid, never worth a block. The caller holds
// the engine token and keeps o afterwards (KeepOrphan).
func (t *Tiers) ParkTail(o *OrphanTape, id uint64, tokens []engine.Token, r engine.Range) {
	if t.arena == nil || len(o.Blocks) == 0 || len(tokens) == 0 || r.Count != len(tokens) {
		return
	}
	tl := &OrphanTail{ID: id, Tokens: slices.Clone(tokens), Pos: int32(r.Pos0), Chain: tailChain(o.Blocks[len(o.Blocks)-1].Chain, tokens)}
	err := t.arena.Put(shm.Block{ID: id, Session: o.Session, Chain: tl.Chain, Kind: TailRecordKind, SegID: tailSegID, Pos: tl.Pos,
		Tokens: tl.Tokens, KV: r.Blob})
	if err != nil {
		t.log.Debug("arena: a closing session's open tail not parked", "session", o.Session, "err", err)
		return
	}
	o.Tail = tl
}

// TakeTail reads o's tail's KV and frees its record (a session adopting o
// takes the tail into its engine, or has no use for it); false when o has
// none or it cannot be read.
func (t *Tiers) TakeTail(o *OrphanTape) ([]byte, bool) {
	if o.Tail == nil {
		return nil, false
	}
	kv, err := t.ReadParked(o.Tail.ID, nil)
	t.dropTail(o)
	return kv, err == nil
}

// DropTail frees o's tail record, if it has one.
func (t *Tiers) DropTail(o *OrphanTape) { t.dropTail(o) }

func (t *Tiers) dropTail(o *OrphanTape) {
	if o.Tail != nil {
		t.DropParked(o.Tail.ID)
		o.Tail = nil
	}
}

// attachTails gives each rebuilt orphan tape the tail record that follows
// its last block (by the tail's chain hash), the newest when several do;
// every other tail record is freed.
func attachTails(a *shm.Arena, tapes []*OrphanTape, tails []shm.Meta, drop func(uint64), log *slog.Logger) {
	slices.SortFunc(tails, func(x, y shm.Meta) int { return cmp.Compare(y.ID, x.ID) }) // newest first
	for _, m := range tails {
		b, err := a.Get(m.ID)
		if err != nil || len(b.Tokens) != m.NTokens {
			log.Warn("arena: an orphan tape's tail dropped; the tape is still resumed by its blocks", "id", m.ID, "err", err)
			drop(m.ID)
			continue
		}
		var owner *OrphanTape
		for _, t := range tapes {
			if t.Tail == nil && len(t.Blocks) > 0 && tailChain(t.Blocks[len(t.Blocks)-1].Chain, b.Tokens) == m.Chain {
				owner = t
				break
			}
		}
		if owner == nil {
			log.Warn("arena: a tail record follows no orphan tape's end; dropped", "id", m.ID, "tokens", m.NTokens)
			drop(m.ID)
			continue
		}
		owner.Tail = &OrphanTail{ID: m.ID, Tokens: b.Tokens, Pos: m.Pos, Chain: m.Chain}
	}
}

// fitTail checks the tail r names against o's: a record naming a tail
// keeps its spans past o's blocks only when o holds that tail right after
// them; otherwise they are cut at the blocks' end (the error says why) and
// o's tail, which no record describes, is handed to drop (a tail lends
// nothing without its spans).
func fitTail(r *SpansRecord, o *OrphanTape, drop func(*OrphanTape)) error {
	var err error
	if r.TailTokens > 0 {
		tl := o.Tail
		switch {
		case tl == nil:
			err = fmt.Errorf("%w: it names a %d-token tail the tape does not hold", ErrBadSpansRecord, r.TailTokens)
		case r.Covered != len(o.Tokens) || len(tl.Tokens) != r.TailTokens || tl.Chain != r.TailChain:
			err = fmt.Errorf("%w: the tail it names is not the tape's", ErrBadSpansRecord)
		}
		if err != nil {
			r.clipToCovered()
		}
	}
	if r.TailTokens == 0 && o.Tail != nil {
		drop(o)
	}
	return err
}

// clipToCovered drops what r says of a tail: its spans past Covered and an
// approximate mark there.
func (r *SpansRecord) clipToCovered() {
	n := 0
	for n < len(r.Spans) && r.Spans[n].End <= r.Covered {
		n++
	}
	r.Spans = r.Spans[:n]
	if r.ApproxFrom >= r.Covered {
		r.ApproxFrom = -1
	}
	r.TailTokens, r.TailChain = 0, shm.Hash{}
}
