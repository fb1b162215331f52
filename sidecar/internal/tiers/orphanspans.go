package tiers

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"

	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/shm"
)

// Segment spans recorded with parked blocks. An orphan tape knows its
// tokens from its blocks; to lend its unchanged segments to a prompt that
// differs early (layout/orphandonor.go) it must also know where each
// segment lies. A hot set records its tape's spans in the arena beside its
// blocks: one small record per session, stored as an arena block of its
// own (no tokens, the record as its bytes, kind SpansRecordKind), so it
// shares the arena's atomic commit, its checksums and its survival of a
// crash. The record is bound to the blocks it describes: it names the
// tape length it covers and the chain hash of the block ending there, and
// is used only when the orphan tape holds that block with that hash.
// Anything else — a record that does not decode, a version this ctxd does
// not know, spans out of order or past what it covers, a chain that does
// not match — is dropped (and its arena block freed): the orphan tape
// stays usable by its common prefix, it just lends no segments.

// SpansRecordKind marks an arena block holding a spans record (no segment
// kind uses it).
const SpansRecordKind = 0xFF

// spansSegID is the segment id of a spans record's arena block.
const spansSegID = "ctxd:orphan-spans"

// SpansRecordVersion is the record's format version (2: it may name the
// tape's open tail, orphantail.go); a record of another version than 1
// (no tail) or 2 is dropped at load.
const SpansRecordVersion = 2

// Record limits: a manifest has at most policy.MaxSegments segments, and a
// tape adds its generated spans to them.
const (
	maxRecordSpans  = 2 * policy.MaxSegments
	maxRecordIDLen  = 255
	maxRecordCompat = 4096
)

const spansMagic = "CTXDSPAN"

// ErrBadSpansRecord is a spans record that cannot be used: it does not
// decode, or does not fit the blocks it is stored with.
var ErrBadSpansRecord = errors.New("bad orphan spans record")

// OrphanSpan is one segment span of an orphan tape: tape indices
// [Start, End) and the segment's identity (its text is the tape's tokens).
type OrphanSpan struct {
	Start, End int
	ID         string
	Kind       policy.SegmentKind
	Class      policy.CacheClass
	Stable     bool
	Generated  bool
}

// SpansRecord is what a session records with its parked blocks.
type SpansRecord struct {
	// Compat is the compatibility key (model, template, KV settings) the
	// session's KV was built under: only a prompt under the same key may
	// copy from the tape.
	Compat string
	// Covered is the tape length the record describes; Chain is the chain
	// hash of the block ending there.
	Covered int
	Chain   shm.Hash
	// TailTokens is the length of the open tail parked after Covered
	// (orphantail.go), TailChain its chain hash; 0: none. The spans and
	// the approximate mark may reach past Covered into it.
	TailTokens int
	TailChain  shm.Hash
	// ApproxFrom is the first tape index whose KV is approximate (moved
	// past an early change), or -1: what an exact request may keep.
	ApproxFrom int
	Spans      []OrphanSpan
}

// EncodeSpansRecord lays a record out: magic, version, covered length,
// chain hash, the tail's length and chain hash, the approximate mark (+1,
// 0: none), compat key, the spans (start, end, kind, class, flags, id),
// and a CRC32C of everything before it. Span ids longer than 255 bytes are
// cut (they only name the span).
func EncodeSpansRecord(r SpansRecord) ([]byte, error) {
	if err := checkSpans(r.Spans, r.Covered, r.TailTokens, r.ApproxFrom); err != nil {
		return nil, err
	}
	if len(r.Compat) > maxRecordCompat {
		return nil, fmt.Errorf("%w: compat key of %d bytes", ErrBadSpansRecord, len(r.Compat))
	}
	b := make([]byte, 0, 64+len(r.Compat)+len(r.Spans)*16)
	b = append(b, spansMagic...)
	b = le32(b, SpansRecordVersion)
	b = le32(b, uint32(r.Covered))
	b = append(b, r.Chain[:]...)
	b = le32(b, uint32(r.TailTokens))
	b = append(b, r.TailChain[:]...)
	b = le32(b, uint32(r.ApproxFrom+1))
	b = le32(b, uint32(len(r.Compat)))
	b = append(b, r.Compat...)
	b = le32(b, uint32(len(r.Spans)))
	for _, s := range r.Spans {
		id := s.ID
		if len(id) > maxRecordIDLen {
			id = id[:maxRecordIDLen]
		}
		var flags byte
		if s.Stable {
			flags |= 1
		}
		if s.Generated {
			flags |= 2
		}
		b = le32(b, uint32(s.Start))
		b = le32(b, uint32(s.End))
		b = append(b, byte(s.Kind), byte(s.Class), flags, byte(len(id)))
		b = append(b, id...)
	}
	return le32(b, crc32.Checksum(b, castagnoli)), nil
}

// DecodeSpansRecord parses a record; every malformed one (short, bad
// magic, CRC or version, counts past the limits, spans out of order or
// past Covered, unknown kinds or classes, trailing bytes) wraps
// ErrBadSpansRecord.
func DecodeSpansRecord(b []byte) (SpansRecord, error) {
	var r SpansRecord
	bad := func(what string) (SpansRecord, error) {
		return SpansRecord{}, fmt.Errorf("%w: %s", ErrBadSpansRecord, what)
	}
	if len(b) < len(spansMagic)+4+4+32+4+4+4+4 || string(b[:len(spansMagic)]) != spansMagic {
		return bad("no record magic")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != leU32(b[len(b)-4:]) {
		return bad("checksum mismatch")
	}
	d := decoder{b: body[len(spansMagic):]}
	v := d.u32()
	if v != 1 && v != SpansRecordVersion {
		return bad(fmt.Sprintf("version %d, this ctxd reads 1 and %d", v, SpansRecordVersion))
	}
	r.Covered = int(d.u32())
	copy(r.Chain[:], d.bytes(32))
	if v >= 2 {
		r.TailTokens = int(d.u32())
		copy(r.TailChain[:], d.bytes(32))
	}
	r.ApproxFrom = int(d.u32()) - 1
	nc := d.u32()
	if nc > maxRecordCompat {
		return bad("compat key too long")
	}
	r.Compat = string(d.bytes(int(nc)))
	ns := d.u32()
	if ns > maxRecordSpans {
		return bad(fmt.Sprintf("%d spans, at most %d", ns, maxRecordSpans))
	}
	for i := 0; i < int(ns) && !d.short; i++ {
		var s OrphanSpan
		s.Start, s.End = int(d.u32()), int(d.u32())
		h := d.bytes(4)
		if d.short {
			break
		}
		s.Kind, s.Class = policy.SegmentKind(h[0]), policy.CacheClass(h[1])
		if h[2]&^3 != 0 {
			return bad("unknown span flags")
		}
		s.Stable, s.Generated = h[2]&1 != 0, h[2]&2 != 0
		s.ID = string(d.bytes(int(h[3])))
		r.Spans = append(r.Spans, s)
	}
	if d.short || len(d.b) != 0 {
		return bad("truncated or trailing bytes")
	}
	if err := checkSpans(r.Spans, r.Covered, r.TailTokens, r.ApproxFrom); err != nil {
		return SpansRecord{}, err
	}
	return r, nil
}

// checkSpans verifies spans are well formed, in order, disjoint and
// inside [0, covered+tail), and the approximate mark inside [-1,
// covered+tail].
func checkSpans(spans []OrphanSpan, covered, tail, approxFrom int) error {
	if covered < 0 || covered > 1<<30 || tail < 0 || tail > 1<<30 || len(spans) > maxRecordSpans || approxFrom < -1 || approxFrom > covered+tail {
		return fmt.Errorf("%w: %d spans over %d+%d tokens", ErrBadSpansRecord, len(spans), covered, tail)
	}
	covered += tail
	at := 0
	for i, s := range spans {
		if s.Start < at || s.End <= s.Start || s.End > covered || !s.Kind.Valid() || !s.Class.Valid() {
			return fmt.Errorf("%w: span %d [%d,%d) (kind %d, class %d) out of order or outside %d tokens", ErrBadSpansRecord, i, s.Start, s.End, s.Kind, s.Class, covered)
		}
		at = s.End
	}
	return nil
}

// spansChain is the arena chain hash of a spans record's block: a hash
// of its bytes under a domain of its own, so it never equals a token
// block's.
func spansChain(rec []byte) shm.Hash {
	h := sha256.New()
	h.Write([]byte("ctxd/orphan spans record\x00"))
	h.Write(rec)
	var out shm.Hash
	h.Sum(out[:0])
	return out
}

// isSpansRecord reports whether an arena block is a spans record.
func isSpansRecord(m shm.Meta) bool {
	return m.NTokens == 0 && m.Kind == SpansRecordKind && m.SegID == spansSegID
}

// spanRec is the spans record a live session has in the arena.
type spanRec struct {
	id     uint64
	compat string
	sum    shm.Hash // spansChain of the bytes written: unchanged records are not rewritten
}

// RecordSpans writes r as session's spans record (replacing the one it
// had; newID names the first). A record that cannot be written (a full
// arena, bad spans) is logged at debug level and the old one, if any,
// freed: spans are an aid, never worth a parked block. The caller holds
// the engine token.
func (t *Tiers) RecordSpans(session uint64, newID func() uint64, r SpansRecord) {
	if t.arena == nil {
		return
	}
	old := t.spanRecs[session]
	b, err := EncodeSpansRecord(r)
	if err == nil {
		sum := spansChain(b)
		if old != nil && old.sum == sum {
			return
		}
		rec := &spanRec{compat: r.Compat, sum: sum}
		if old != nil {
			rec.id = old.id
		} else {
			rec.id = newID()
		}
		if err = t.arena.Put(shm.Block{ID: rec.id, Session: session, Chain: sum, Kind: SpansRecordKind, SegID: spansSegID, KV: b}); err == nil {
			if t.spanRecs == nil {
				t.spanRecs = map[uint64]*spanRec{}
			}
			t.spanRecs[session] = rec
			return
		}
	}
	t.log.Debug("arena: segment spans not recorded", "session", session, "err", err)
	t.DropSpans(session)
}

// DropSpans frees session's spans record, if it has one.
func (t *Tiers) DropSpans(session uint64) {
	if old := t.spanRecs[session]; old != nil {
		delete(t.spanRecs, session)
		t.DropParked(old.id)
	}
}

// keepSpans hands session's spans record to orphan tape o, rewritten to
// cover o (the blocks a closing session leaves may be fewer than the
// record covered). Without a record (the session never recorded one, or
// asked for none) o lends no segments; when the record cannot be
// rewritten o keeps its spans for this run only.
func (t *Tiers) keepSpans(o *OrphanTape) {
	rec := t.spanRecs[o.Session]
	delete(t.spanRecs, o.Session)
	if rec == nil || len(o.Spans) == 0 || len(o.Blocks) == 0 {
		if rec != nil {
			t.DropParked(rec.id)
		}
		o.Spans = nil
		t.dropTail(o) // a tail lends nothing without spans
		return
	}
	o.Compat = rec.compat
	r := SpansRecord{Compat: rec.compat, Covered: len(o.Tokens), Chain: o.Blocks[len(o.Blocks)-1].Chain, ApproxFrom: o.ApproxFrom, Spans: o.Spans}
	if o.Tail != nil {
		r.TailTokens, r.TailChain = len(o.Tail.Tokens), o.Tail.Chain
	} else {
		r.clipToCovered() // spans past the blocks only with the tail they lie in
	}
	o.Spans, o.ApproxFrom = r.Spans, r.ApproxFrom
	b, err := EncodeSpansRecord(r)
	if err == nil && spansChain(b) != rec.sum {
		err = t.arena.Put(shm.Block{ID: rec.id, Session: o.Session, Chain: spansChain(b), Kind: SpansRecordKind, SegID: spansSegID, KV: b})
	}
	if err != nil {
		// Kept for this run; after a restart the tail, named by no
		// record, is dropped.
		t.log.Debug("arena: orphan tape's spans not recorded (kept until a restart)", "session", o.Session, "err", err)
		t.DropParked(rec.id)
		return
	}
	o.spansID = rec.id
}

// attachSpans gives each rebuilt orphan tape the spans record of the
// session whose blocks end it, when that record decodes and fits the tape
// (it covers a block boundary of the tape whose chain hash it names); a
// tape left without one takes any other record that fits it (a session
// that adopted the tape and closed before sealing a block of its own
// recorded under its own id). Every record no tape takes is freed.
func attachSpans(a *shm.Arena, tapes []*OrphanTape, recs map[uint64]shm.Meta, drop func(uint64), log *slog.Logger) {
	read := map[uint64]SpansRecord{} // decoded records that are well formed
	for sid, m := range recs {
		r, err := readSpansRecord(a, m.ID)
		if err != nil {
			log.Warn("arena: a spans record dropped; its orphan tape is still resumed by its prefix", "session", sid, "err", err)
			drop(m.ID)
			delete(recs, sid)
			continue
		}
		read[sid] = r
	}
	dropTail := func(t *OrphanTape) {
		drop(t.Tail.ID)
		t.Tail = nil
	}
	take := func(t *OrphanTape, sid uint64) bool {
		r, ok := read[sid]
		if !ok || fitsTape(r, t) != nil {
			return false
		}
		if err := fitTail(&r, t, dropTail); err != nil {
			log.Warn("arena: an orphan tape's tail does not fit its spans record; the tape lends its blocks only", "session", sid, "err", err)
		}
		t.Spans, t.Compat, t.ApproxFrom, t.spansID = r.Spans, r.Compat, r.ApproxFrom, recs[sid].ID
		delete(read, sid)
		return true
	}
	var left []*OrphanTape
	for _, t := range tapes {
		if !take(t, t.Session) {
			left = append(left, t)
		}
	}
	if len(left) > 0 {
		sids := make([]uint64, 0, len(read))
		for sid := range read {
			sids = append(sids, sid)
		}
		slices.SortFunc(sids, func(x, y uint64) int { return cmp.Compare(recs[y].ID, recs[x].ID) }) // newest first
		for _, t := range left {
			for _, sid := range sids {
				if take(t, sid) {
					break
				}
			}
		}
	}
	for sid, r := range read {
		log.Warn("arena: a spans record fits no orphan tape; dropped", "session", sid, "covered", r.Covered)
		drop(recs[sid].ID)
	}
	for _, t := range left {
		if t.Tail != nil && t.spansID == 0 {
			dropTail(t) // no record describes it
		}
	}
}

func readSpansRecord(a *shm.Arena, id uint64) (SpansRecord, error) {
	b, err := a.Get(id)
	if err != nil {
		return SpansRecord{}, fmt.Errorf("%w: %w", ErrBadSpansRecord, err)
	}
	if len(b.Tokens) != 0 || b.Chain != spansChain(b.KV) {
		return SpansRecord{}, fmt.Errorf("%w: the block's hash does not match its bytes", ErrBadSpansRecord)
	}
	return DecodeSpansRecord(b.KV)
}

// fitsTape checks that r covers a block boundary of t whose chain hash is
// r.Chain: then t's first r.Covered tokens are the ones r describes.
func fitsTape(r SpansRecord, t *OrphanTape) error {
	end := 0
	for _, m := range t.Blocks {
		end += m.NTokens
		if end == r.Covered {
			if m.Chain != r.Chain {
				return fmt.Errorf("%w: the block ending at token %d has another chain hash", ErrBadSpansRecord, end)
			}
			return nil
		}
		if end > r.Covered {
			break
		}
	}
	return fmt.Errorf("%w: it covers %d tokens, no block of the tape (%d tokens) ends there", ErrBadSpansRecord, r.Covered, len(t.Tokens))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func le32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

func leU32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// decoder reads little-endian fields; short records a read past the end.
type decoder struct {
	b     []byte
	short bool
}

func (d *decoder) bytes(n int) []byte {
	if n < 0 || n > len(d.b) {
		d.short, d.b = true, nil
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u32() uint32 {
	if len(d.b) < 4 {
		d.short, d.b = true, nil
		return 0
	}
	return leU32(d.bytes(4))
}

// dropOrphanSpans frees orphan tape o's spans record (o keeps its spans in
// memory; its tail, if any, stays for the taker: TakeTail).
func (t *Tiers) dropOrphanSpans(o *OrphanTape) {
	if o.spansID != 0 {
		t.DropParked(o.spansID)
		o.spansID = 0
	}
}

// Orphans are the orphan tapes, oldest first; the caller must not modify
// them (donors read their tokens, spans and blocks under the engine token).
func (t *Tiers) Orphans() []*OrphanTape { return t.orphans }

// SpanRanges are the tape's recorded spans as policy's ranges.
func (o *OrphanTape) SpanRanges() []policy.SpanRange {
	out := make([]policy.SpanRange, len(o.Spans))
	for i, s := range o.Spans {
		out[i] = policy.SpanRange{Start: s.Start, End: s.End}
	}
	return out
}
