package enginefake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/ctxd/ctxd/engine"
)

// Options shape the fake model every Load returns. Zero fields take the
// defaults of DefaultOptions.
type Options struct {
	Layers, KVHeads, HeadDim int // KV bytes per token follow (Facts.KVBytesPerToken)
	TrainedContext           int
	WeightsBytes             int64
	NoShift                  bool // Facts.CanShift false (a model whose positions cannot move)
	Faults                   *Faults
}

// DefaultOptions: 128 KV bytes per f16 token, a 1,024-token window.
func DefaultOptions() Options {
	return Options{Layers: 2, KVHeads: 2, HeadDim: 8, TrainedContext: 1024, WeightsBytes: 1 << 20}
}

func (o Options) filled() Options {
	d := DefaultOptions()
	if o.Layers <= 0 {
		o.Layers = d.Layers
	}
	if o.KVHeads <= 0 {
		o.KVHeads = d.KVHeads
	}
	if o.HeadDim <= 0 {
		o.HeadDim = d.HeadDim
	}
	if o.TrainedContext <= 0 {
		o.TrainedContext = d.TrainedContext
	}
	if o.WeightsBytes <= 0 {
		o.WeightsBytes = d.WeightsBytes
	}
	return o
}

// Faults makes chosen calls fail. Each hook gets the 1-based count of
// such calls on the backend's contexts so far and returns the error to
// fail with (nil: go on); a failing call changes nothing. Hooks run on the
// caller's goroutine.
type Faults struct {
	Load    func(n int) error
	Decode  func(n int, tokens []engine.Token, pos0 int) error
	Extract func(n int) error
	Insert  func(n int) error
}

// Backend is the fake engine. Its counters are safe for concurrent use.
type Backend struct {
	opts Options

	loads, decodes, extracts, inserts atomic.Int64
	decoded                           atomic.Int64 // tokens decoded
	mu                                sync.Mutex
	models                            []*Model
}

// New returns a backend whose models follow o.
func New(o Options) *Backend { return &Backend{opts: o.filled()} }

// Options are the backend's options, defaults filled.
func (b *Backend) Options() Options { return b.opts }

// DecodedTokens is how many tokens the backend's contexts have decoded.
func (b *Backend) DecodedTokens() int64 { return b.decoded.Load() }

// Loads is how many models were loaded.
func (b *Backend) Loads() int64 { return b.loads.Load() }

// OpenModels is how many loaded models are not closed.
func (b *Backend) OpenModels() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, m := range b.models {
		if !m.isClosed() {
			n++
		}
	}
	return n
}

// LoadBackends finds no GPU backend anywhere: the fake runs on the CPU.
func (b *Backend) LoadBackends(dir string) error {
	return fmt.Errorf("%w in %s (the fake engine has none)", engine.ErrNoBackends, dir)
}

// Devices is the CPU alone.
func (b *Backend) Devices() []engine.Device {
	return []engine.Device{{Name: "CPU", Description: "enginefake", Backend: "CPU", Kind: engine.DeviceCPU}}
}

// ReadLayout is the layout of the models Load makes; path must be a
// readable file.
func (b *Backend) ReadLayout(path string) (engine.Layout, error) {
	if _, err := os.Stat(path); err != nil {
		return engine.Layout{}, fmt.Errorf("%w: %w", engine.ErrBadModel, err)
	}
	o := b.opts
	l := engine.Layout{Layers: o.Layers, KVHeads: o.KVHeads, HeadDim: o.HeadDim, Embd: o.KVHeads * o.HeadDim,
		Heads: o.KVHeads, VocabSize: vocabSize, TrainedContext: o.TrainedContext, LayerBytes: make([]int64, o.Layers)}
	for i := range l.LayerBytes {
		l.LayerBytes[i] = o.WeightsBytes / int64(o.Layers+1)
	}
	l.OutputBytes = o.WeightsBytes - int64(o.Layers)*l.LayerBytes[0]
	return l, nil
}

// Load "loads" any regular file: its digest is the file's sha256, the rest
// of its facts come from the backend's options. A missing file wraps
// os.ErrNotExist; a device other than the CPU wraps ErrInvalidArgument;
// a context that ends first wraps ctx.Err().
func (b *Backend) Load(ctx context.Context, path string, o engine.ModelOptions) (engine.Model, error) {
	if o.Device != "" && o.Device != "CPU" {
		return nil, fmt.Errorf("%w: no device %q (devices: CPU)", engine.ErrInvalidArgument, o.Device)
	}
	n := int(b.loads.Add(1))
	if f := b.opts.Faults; f != nil && f.Load != nil {
		if err := f.Load(n); err != nil {
			return nil, err
		}
	}
	digest, err := digestFile(path)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	m := newModel(b, path, digest)
	b.mu.Lock()
	b.models = append(b.models, m)
	b.mu.Unlock()
	return m, nil
}

func digestFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("model file %s: %w", path, err)
		}
		return "", fmt.Errorf("%w: %w", engine.ErrBadModel, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is not a regular file", engine.ErrBadModel, path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%w: reading %s: %v", engine.ErrBadModel, path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// SystemInfo names the fake.
func (b *Backend) SystemInfo() string { return "enginefake (pure Go, no accelerator)" }

// BlobCodec is the fake's blob codec (blob.go).
func (b *Backend) BlobCodec() engine.BlobCodec { return Codec{} }

var _ engine.Backend = (*Backend)(nil)

// Resident is what the newest open context holds in sequence 0.
type Resident struct {
	Positions []int
	Tokens    []engine.Token // in position order
	// State is the sequence as SaveSeq's blob would hold it: equal
	// States are equal KV, byte for byte.
	State []byte
}

// Resident reads the newest open context of the newest open model (the
// daemon's slot); ok is false when there is none. It may be called while
// the daemon runs: it waits for the engine call in progress.
func (b *Backend) Resident() (r Resident, ok bool) {
	b.mu.Lock()
	var c *Context
	for i := len(b.models) - 1; i >= 0 && c == nil; i-- {
		m := b.models[i]
		m.mu.Lock()
		for j := len(m.ctxs) - 1; j >= 0; j-- {
			if !m.ctxs[j].isClosed() {
				c = m.ctxs[j]
				break
			}
		}
		m.mu.Unlock()
	}
	b.mu.Unlock()
	if c == nil {
		return Resident{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cells := c.cellsIn(0, engine.MaxPos)
	r.Positions = c.seq.Positions()
	for _, pc := range cells {
		r.Tokens = append(r.Tokens, pc.tok)
	}
	r.State = c.encode(cells)
	return r, true
}
