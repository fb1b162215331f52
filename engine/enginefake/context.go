package enginefake

import (
	"context"
	"fmt"
	"sync"

	"github.com/ctxd/ctxd/engine"
)

// cell is one decoded token in sequence 0: its token and the state it was
// computed with (from the cells before it when it was decoded). Its
// position is its key in Context.cells.
type cell struct {
	tok   engine.Token
	state uint64
}

// Context is a fake KV cache with a session sequence. The scratch
// sequence of engine/llama is not needed: ranges move as bytes directly.
type Context struct {
	mu        sync.Mutex // guards the KV for Backend.Resident, read from other goroutines
	model     *Model
	opts      engine.ContextOptions
	cellBytes int    // bytes per cell in blobs: Facts.KVBytesPerToken
	settings  uint64 // what a blob must have been made with
	seq       engine.PosSet
	cells     map[int]cell
	logits    []float32
	hasLogits bool
	closed    bool
}

// Options returns the options the context was made with (defaults filled).
func (c *Context) Options() engine.ContextOptions { return c.opts }

// Used is the number of occupied positions of sequence 0.
func (c *Context) Used() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq.Len()
}

// Occupied reports whether position p holds a token.
func (c *Context) Occupied(p int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq.Contains(p)
}

// Positions lists the occupied positions, ascending (for tests).
func (c *Context) Positions() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq.Positions()
}

// Decode runs tokens at pos0.. in batches of BatchTokens, checking ctx
// between batches; a failure leaves nothing of the call in the KV.
func (c *Context) Decode(ctx context.Context, tokens []engine.Token, pos0 int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return engine.ErrClosed
	}
	n := len(tokens)
	if n == 0 {
		return nil
	}
	if pos0 < 0 || pos0+n > engine.MaxPos {
		return fmt.Errorf("%w: positions [%d,%d)", engine.ErrInvalidArgument, pos0, pos0+n)
	}
	if c.seq.Count(pos0, pos0+n) != 0 {
		return fmt.Errorf("%w: positions [%d,%d) already hold tokens", engine.ErrInvalidArgument, pos0, pos0+n)
	}
	if c.seq.Len() > 0 && pos0 != c.seq.Max() {
		// llama.cpp keeps a sequence's positions consecutive: a decode
		// starts right after the last position it holds.
		return fmt.Errorf("%w: decode at %d, not right after the last position %d", engine.ErrInvalidArgument, pos0, c.seq.Max()-1)
	}
	if c.seq.Len()+n > c.opts.ContextTokens {
		return fmt.Errorf("%w: %d tokens resident + %d new > %d cells", engine.ErrContextFull, c.seq.Len(), n, c.opts.ContextTokens)
	}
	for i, t := range tokens {
		if t < 0 || t >= vocabSize {
			return fmt.Errorf("%w: token %d at index %d is outside the vocabulary [0,%d)", engine.ErrInvalidArgument, t, i, vocabSize)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b := c.model.b
	call := int(b.decodes.Add(1))
	if f := b.opts.Faults; f != nil && f.Decode != nil {
		if err := f.Decode(call, tokens, pos0); err != nil {
			return err
		}
	}
	c.hasLogits = false
	// The running state over the cells below pos0, in position order:
	// what the new tokens attend to.
	h := c.stateBelow(pos0)
	for off := 0; off < n; off += c.opts.BatchTokens {
		if err := ctx.Err(); err != nil {
			c.drop(pos0, pos0+off)
			return err
		}
		end := min(off+c.opts.BatchTokens, n)
		for i := off; i < end; i++ {
			p := pos0 + i
			st := cellState(h, tokens[i], p)
			c.cells[p] = cell{tok: tokens[i], state: st}
			h = attend(h, p, tokens[i], st)
		}
		c.seq.Add(pos0+off, pos0+end)
	}
	b.decoded.Add(int64(n))
	c.setLogits(c.stateBelow(pos0 + n))
	return nil
}

func (c *Context) drop(p0, p1 int) {
	for p := p0; p < p1; p++ {
		delete(c.cells, p)
	}
	c.seq.Remove(p0, p1)
}

// stateBelow folds every cell below position p, in position order.
func (c *Context) stateBelow(p int) uint64 {
	h := uint64(0x6a09e667f3bcc908)
	for _, s := range c.seq.Spans() {
		for q := s[0]; q < min(s[1], p); q++ {
			cl := c.cells[q]
			h = attend(h, q, cl.tok, cl.state)
		}
	}
	return h
}

// cellState is what a token decoded at p after the running state h stores.
func cellState(h uint64, t engine.Token, p int) uint64 {
	return mix(h ^ mix(uint64(uint32(t))<<32|uint64(uint32(p))))
}

// attend folds one cell into a running state.
func attend(h uint64, p int, t engine.Token, state uint64) uint64 {
	return mix(h*0x9e3779b97f4a7c15 ^ mix(uint64(uint32(p))<<32|uint64(uint32(t))) ^ state)
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func (c *Context) setLogits(h uint64) {
	for v := range c.logits {
		c.logits[v] = float32(mix(h+uint64(v)*0x9e3779b97f4a7c15)>>40) / float32(1<<24) * 8
	}
	c.hasLogits = true
}

// Logits of the last decoded token; nil before any decode and after
// anything else changes the KV.
func (c *Context) Logits() []float32 {
	if !c.hasLogits {
		return nil
	}
	return c.logits
}

// Clear empties the KV.
func (c *Context) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
}

func (c *Context) clear() {
	if c.closed {
		return
	}
	c.cells = map[int]cell{}
	c.seq.Reset()
	c.hasLogits = false
}

// Memory: the KV lives in host memory.
func (c *Context) Memory() engine.ContextMemory {
	return engine.ContextMemory{HostKVBytes: int64(c.opts.ContextTokens) * int64(c.cellBytes)}
}

func (c *Context) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close frees the context.
func (c *Context) Close() error {
	c.mu.Lock()
	was := c.closed
	c.closed, c.cells = true, nil
	c.mu.Unlock() // before the model's lock: Backend.Resident takes them the other way
	if was {
		return nil
	}
	c.model.mu.Lock()
	c.model.open--
	c.model.mu.Unlock()
	return nil
}

var _ engine.Context = (*Context)(nil)
