package enginefake

import (
	"fmt"

	"github.com/ctxd/ctxd/engine"
)

func (c *Context) checkRange(p0, p1 int) error {
	if c.closed {
		return engine.ErrClosed
	}
	return engine.CheckPositions(p0, p1)
}

// Remove drops positions [p0,p1) (p1 < 0: to the end) and returns how
// many tokens it dropped.
func (c *Context) Remove(p0, p1 int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p1 < 0 {
		p1 = max(p0, c.seq.Max())
	}
	if err := c.checkRange(p0, p1); err != nil {
		return 0, err
	}
	if c.seq.Count(p0, p1) == 0 {
		return 0, nil
	}
	for _, pc := range c.cellsIn(p0, p1) {
		delete(c.cells, pc.pos)
	}
	c.hasLogits = false
	return c.seq.Remove(p0, p1), nil
}

// Shift moves positions [p0,p1) by delta onto free, non-negative
// positions; the cells keep the state they were decoded with.
func (c *Context) Shift(p0, p1, delta int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkRange(p0, p1); err != nil {
		return err
	}
	if delta == 0 || p0 == p1 {
		return nil
	}
	if !c.model.facts.CanShift {
		return engine.ErrNoShift
	}
	if c.seq.Count(p0, p1) == 0 {
		return nil
	}
	if p0+delta < 0 || p1+delta > engine.MaxPos {
		return fmt.Errorf("%w: shift of [%d,%d) by %d leaves the position range", engine.ErrInvalidArgument, p0, p1, delta)
	}
	var occupied int
	if delta > 0 {
		occupied = c.seq.Count(max(p1, p0+delta), p1+delta)
	} else {
		occupied = c.seq.Count(p0+delta, min(p0, p1+delta))
	}
	if occupied != 0 {
		return fmt.Errorf("%w: shift of [%d,%d) by %d would overlap %d resident tokens", engine.ErrInvalidArgument, p0, p1, delta, occupied)
	}
	moved := c.cellsIn(p0, p1)
	for _, pc := range moved {
		delete(c.cells, pc.pos)
	}
	c.seq.Remove(p0, p1)
	for _, pc := range moved {
		c.cells[pc.pos+delta] = pc.cell
		c.seq.Add(pc.pos+delta, pc.pos+delta+1)
	}
	c.hasLogits = false
	return nil
}

// ExtractRange copies the fully resident positions [p0,p1) out as bytes.
func (c *Context) ExtractRange(p0, p1 int) (engine.Range, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return engine.Range{}, engine.ErrClosed
	}
	if err := c.seq.CheckExtract(p0, p1); err != nil {
		return engine.Range{}, err
	}
	b := c.model.b
	if f := b.opts.Faults; f != nil && f.Extract != nil {
		if err := f.Extract(int(b.extracts.Add(1))); err != nil {
			return engine.Range{}, err
		}
	}
	return engine.Range{Pos0: p0, Count: p1 - p0, Blob: c.encode(c.cellsIn(p0, p1))}, nil
}

// InsertRange puts r into sequence 0 at [at, at+Count), shifted from
// r.Pos0 when at differs.
func (c *Context) InsertRange(r engine.Range, at int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return engine.ErrClosed
	}
	if err := c.seq.CheckInsert(r, at, c.opts.ContextTokens, c.model.facts.CanShift); err != nil {
		return err
	}
	b := c.model.b
	if f := b.opts.Faults; f != nil && f.Insert != nil {
		if err := f.Insert(int(b.inserts.Add(1))); err != nil {
			return err
		}
	}
	cells, err := c.decode(r.Blob)
	if err != nil {
		return err
	}
	if len(cells) != r.Count || cells[0].pos != r.Pos0 || cells[len(cells)-1].pos != r.Pos0+r.Count-1 {
		lo, hi := 0, 0
		if len(cells) > 0 {
			lo, hi = cells[0].pos, cells[len(cells)-1].pos+1
		}
		return fmt.Errorf("%w: range bytes hold [%d,%d), expected [%d,%d)", engine.ErrInvalidArgument, lo, hi, r.Pos0, r.Pos0+r.Count)
	}
	for _, pc := range cells {
		c.cells[pc.pos-r.Pos0+at] = pc.cell
	}
	c.seq.Add(at, at+r.Count)
	c.hasLogits = false
	return nil
}

// Copy duplicates positions [p0,p1) at [at, at+p1-p0), as engine/llama's
// Copy does: extracted and inserted.
func (c *Context) Copy(p0, p1, at int) error {
	r, err := c.ExtractRange(p0, p1)
	if err != nil {
		return err
	}
	return c.InsertRange(r, at)
}

// SaveSeq copies the whole sequence out.
func (c *Context) SaveSeq() (engine.SeqState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return engine.SeqState{}, engine.ErrClosed
	}
	if c.seq.Len() == 0 {
		return engine.SeqState{}, nil
	}
	return engine.SeqState{Positions: c.seq.Positions(), Blob: c.encode(c.cellsIn(0, engine.MaxPos))}, nil
}

// LoadSeq replaces the sequence with s. As in engine/llama the sequence
// is emptied first, so a refused state leaves it empty.
func (c *Context) LoadSeq(s engine.SeqState) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return engine.ErrClosed
	}
	if len(s.Positions) > c.opts.ContextTokens {
		return fmt.Errorf("%w: state of %d tokens > %d cells", engine.ErrContextFull, len(s.Positions), c.opts.ContextTokens)
	}
	c.clear()
	if len(s.Positions) == 0 {
		return nil
	}
	if len(s.Blob) == 0 {
		return fmt.Errorf("%w: state without bytes", engine.ErrInvalidArgument)
	}
	cells, err := c.decode(s.Blob)
	if err != nil {
		return err
	}
	if len(cells) != len(s.Positions) {
		return fmt.Errorf("%w: state holds %d tokens, record says %d", engine.ErrInvalidArgument, len(cells), len(s.Positions))
	}
	for i, pc := range cells {
		if pc.pos != s.Positions[i] {
			return fmt.Errorf("%w: state holds position %d where the record says %d", engine.ErrInvalidArgument, pc.pos, s.Positions[i])
		}
	}
	for _, pc := range cells {
		c.cells[pc.pos] = pc.cell
		c.seq.Add(pc.pos, pc.pos+1)
	}
	return nil
}
