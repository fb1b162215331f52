package llama

/*
#include <stdlib.h>
#include "llama.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/ctxd/ctxd/engine"
)

const (
	seqSession = C.llama_seq_id(engine.SessionSeq)
	seqScratch = C.llama_seq_id(engine.ScratchSeq)
)

func (c *Context) checkRange(p0, p1 int) error {
	if c.closed {
		return engine.ErrClosed
	}
	return engine.CheckPositions(p0, p1)
}

// Remove drops positions [p0,p1) of the session sequence (p1 < 0: to the
// end) and returns how many tokens it dropped.
func (c *Context) Remove(p0, p1 int) (int, error) {
	if p1 < 0 {
		p1 = max(p0, c.seq.Max())
	}
	if err := c.checkRange(p0, p1); err != nil {
		return 0, err
	}
	if c.seq.Count(p0, p1) == 0 {
		return 0, nil
	}
	if !C.llama_memory_seq_rm(c.mem, seqSession, C.llama_pos(p0), C.llama_pos(p1)) {
		return 0, fmt.Errorf("%w: llama.cpp refused to remove [%d,%d)", engine.ErrInvalidArgument, p0, p1)
	}
	c.hasLogits = false
	return c.seq.Remove(p0, p1), nil
}

// Shift moves positions [p0,p1) of the session sequence by delta. The
// target positions must be free (outside the moved range) and non-negative.
func (c *Context) Shift(p0, p1, delta int) error {
	if err := c.checkRange(p0, p1); err != nil {
		return err
	}
	if delta == 0 || p0 == p1 {
		return nil
	}
	if !c.model.facts.CanShift {
		return engine.ErrNoShift
	}
	n := c.seq.Count(p0, p1)
	if n == 0 {
		return nil
	}
	if p0+delta < 0 || p1+delta > engine.MaxPos {
		return fmt.Errorf("%w: shift of [%d,%d) by %d leaves the position range", engine.ErrInvalidArgument, p0, p1, delta)
	}
	// Target positions outside the moved range must be empty.
	var occupied int
	if delta > 0 {
		occupied = c.seq.Count(max(p1, p0+delta), p1+delta)
	} else {
		occupied = c.seq.Count(p0+delta, min(p0, p1+delta))
	}
	if occupied != 0 {
		return fmt.Errorf("%w: shift of [%d,%d) by %d would overlap %d resident tokens", engine.ErrInvalidArgument, p0, p1, delta, occupied)
	}
	C.llama_memory_seq_add(c.mem, seqSession, C.llama_pos(p0), C.llama_pos(p1), C.llama_pos(delta))
	c.shiftPending = true
	moved := c.spansIn(p0, p1)
	c.seq.Remove(p0, p1)
	for _, s := range moved {
		c.seq.Add(s[0]+delta, s[1]+delta)
	}
	c.hasLogits = false
	return nil
}

func (c *Context) spansIn(p0, p1 int) [][2]int {
	var out [][2]int
	for _, s := range c.seq.Spans() {
		a, b := max(s[0], p0), min(s[1], p1)
		if a < b {
			out = append(out, [2]int{a, b})
		}
	}
	return out
}

// ExtractRange copies the contiguous positions [p0,p1) of the session
// sequence out as bytes, through the scratch sequence. The range stays in
// the KV.
func (c *Context) ExtractRange(p0, p1 int) (engine.Range, error) {
	if c.closed {
		return engine.Range{}, engine.ErrClosed
	}
	if err := c.seq.CheckExtract(p0, p1); err != nil {
		return engine.Range{}, err
	}
	c.applyShifts()
	C.llama_memory_seq_rm(c.mem, seqScratch, -1, -1)
	C.llama_memory_seq_cp(c.mem, seqSession, seqScratch, C.llama_pos(p0), C.llama_pos(p1))
	blob, err := c.seqBytes(seqScratch)
	C.llama_memory_seq_rm(c.mem, seqScratch, -1, -1)
	if err != nil {
		return engine.Range{}, err
	}
	return engine.Range{Pos0: p0, Count: p1 - p0, Blob: blob}, nil
}

// InsertRange puts r into the session sequence at positions [at, at+Count).
func (c *Context) InsertRange(r engine.Range, at int) error {
	if c.closed {
		return engine.ErrClosed
	}
	if err := c.seq.CheckInsert(r, at, c.nCtx, c.model.facts.CanShift); err != nil {
		return err
	}
	C.llama_memory_seq_rm(c.mem, seqScratch, -1, -1)
	if C.llama_state_seq_set_data(c.ctx, (*C.uint8_t)(unsafe.Pointer(&r.Blob[0])), C.size_t(len(r.Blob)), seqScratch) == 0 {
		C.llama_memory_seq_rm(c.mem, seqScratch, -1, -1)
		return fmt.Errorf("%w: llama.cpp rejected the range bytes (foreign settings or corrupt)", engine.ErrInvalidArgument)
	}
	lo := int(C.llama_memory_seq_pos_min(c.mem, seqScratch))
	hi := int(C.llama_memory_seq_pos_max(c.mem, seqScratch)) + 1
	if lo != r.Pos0 || hi-lo != r.Count {
		C.llama_memory_seq_rm(c.mem, seqScratch, -1, -1)
		return fmt.Errorf("%w: range bytes hold [%d,%d), expected [%d,%d)", engine.ErrInvalidArgument, lo, hi, r.Pos0, r.Pos0+r.Count)
	}
	if at != r.Pos0 {
		C.llama_memory_seq_add(c.mem, seqScratch, -1, -1, C.llama_pos(at-r.Pos0))
		c.shiftPending = true
	}
	C.llama_memory_seq_cp(c.mem, seqScratch, seqSession, -1, -1)
	C.llama_memory_seq_rm(c.mem, seqScratch, -1, -1)
	c.seq.Add(at, at+r.Count)
	c.hasLogits = false
	return nil
}

// Copy duplicates positions [p0,p1) of the session sequence at [at,
// at+p1-p0). Cells shared by seq_cp cannot be moved independently, so the
// copy is materialised: extracted as bytes and inserted as new cells.
func (c *Context) Copy(p0, p1, at int) error {
	r, err := c.ExtractRange(p0, p1)
	if err != nil {
		return err
	}
	return c.InsertRange(r, at)
}

// SaveSeq copies the whole session sequence out.
func (c *Context) SaveSeq() (engine.SeqState, error) {
	if c.closed {
		return engine.SeqState{}, engine.ErrClosed
	}
	if c.seq.Len() == 0 {
		return engine.SeqState{}, nil
	}
	c.applyShifts()
	blob, err := c.seqBytes(seqSession)
	if err != nil {
		return engine.SeqState{}, err
	}
	return engine.SeqState{Positions: c.seq.Positions(), Blob: blob}, nil
}

// LoadSeq replaces the session sequence with s.
func (c *Context) LoadSeq(s engine.SeqState) error {
	if c.closed {
		return engine.ErrClosed
	}
	if len(s.Positions) > c.nCtx {
		return fmt.Errorf("%w: state of %d tokens > %d cells", engine.ErrContextFull, len(s.Positions), c.nCtx)
	}
	C.llama_memory_seq_rm(c.mem, seqSession, -1, -1)
	c.seq.Reset()
	c.hasLogits = false
	if len(s.Positions) == 0 {
		return nil
	}
	if len(s.Blob) == 0 {
		return fmt.Errorf("%w: state without bytes", engine.ErrInvalidArgument)
	}
	if C.llama_state_seq_set_data(c.ctx, (*C.uint8_t)(unsafe.Pointer(&s.Blob[0])), C.size_t(len(s.Blob)), seqSession) == 0 {
		return fmt.Errorf("%w: llama.cpp rejected the sequence state", engine.ErrInvalidArgument)
	}
	var set engine.PosSet
	for _, p := range s.Positions {
		set.Add(p, p+1)
	}
	lo := int(C.llama_memory_seq_pos_min(c.mem, seqSession))
	hi := int(C.llama_memory_seq_pos_max(c.mem, seqSession)) + 1
	if set.Min() != lo || set.Max() != hi {
		C.llama_memory_seq_rm(c.mem, seqSession, -1, -1)
		return fmt.Errorf("%w: state holds [%d,%d), record says [%d,%d)", engine.ErrInvalidArgument, lo, hi, set.Min(), set.Max())
	}
	c.seq = set
	return nil
}

func (c *Context) seqBytes(seq C.llama_seq_id) ([]byte, error) {
	size := C.llama_state_seq_get_size(c.ctx, seq)
	if size == 0 {
		return nil, fmt.Errorf("%w: empty sequence state", engine.ErrInvalidArgument)
	}
	buf := make([]byte, int(size))
	if got := C.llama_state_seq_get_data(c.ctx, (*C.uint8_t)(unsafe.Pointer(&buf[0])), size, seq); got != size {
		return nil, fmt.Errorf("%w: state copy returned %d of %d bytes", engine.ErrDecode, int(got), int(size))
	}
	return buf, nil
}
