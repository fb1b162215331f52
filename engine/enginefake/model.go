package enginefake

import (
	"fmt"
	"strings"
	"sync"

	"github.com/ctxd/ctxd/engine"
)

// The vocabulary: 0 unknown, 1 BOS, 2 EOS, then the 256 bytes.
const (
	tokUnknown engine.Token = 0
	TokBOS     engine.Token = 1
	TokEOS     engine.Token = 2
	byteBase                = 3
	vocabSize               = byteBase + 256
)

// Control-token texts TokenizeSpecial parses.
const (
	TextBOS = "<s>"
	TextEOS = "</s>"
)

// ByteToken is the token of byte c.
func ByteToken(c byte) engine.Token { return engine.Token(c) + byteBase }

// Model is a fake loaded model.
type Model struct {
	b      *Backend
	facts  engine.Facts
	mu     sync.Mutex
	open   int
	closed bool
	ctxs   []*Context // every context made, newest last
}

func newModel(b *Backend, path, digest string) *Model {
	o := b.opts
	return &Model{b: b, facts: engine.Facts{
		Path: path, Digest: digest, Description: "enginefake",
		Layers: o.Layers, KVHeads: o.KVHeads, HeadDim: o.HeadDim, TrainedContext: o.TrainedContext,
		VocabSize: vocabSize, WeightsBytes: o.WeightsBytes, BOS: TokBOS, AddBOS: true, CanShift: !o.NoShift,
		Embd: o.KVHeads * o.HeadDim, Heads: o.KVHeads,
		Placement: engine.Placement{HostWeightsBytes: o.WeightsBytes},
	}}
}

// Facts describes the model.
func (m *Model) Facts() engine.Facts { return m.facts }

// Tokenize maps every byte of text to its token; addBOS prepends BOS.
func (m *Model) Tokenize(text string, addBOS bool) ([]engine.Token, error) {
	if err := m.alive(); err != nil {
		return nil, err
	}
	out := make([]engine.Token, 0, len(text)+1)
	if addBOS {
		out = append(out, TokBOS)
	}
	for i := 0; i < len(text); i++ {
		out = append(out, ByteToken(text[i]))
	}
	return out, nil
}

// TokenizeSpecial is Tokenize (without BOS) with "<s>" and "</s>" parsed
// as BOS and EOS.
func (m *Model) TokenizeSpecial(text string) ([]engine.Token, error) {
	if err := m.alive(); err != nil {
		return nil, err
	}
	var out []engine.Token
	for len(text) > 0 {
		switch {
		case strings.HasPrefix(text, TextBOS):
			out, text = append(out, TokBOS), text[len(TextBOS):]
		case strings.HasPrefix(text, TextEOS):
			out, text = append(out, TokEOS), text[len(TextEOS):]
		default:
			out, text = append(out, ByteToken(text[0])), text[1:]
		}
	}
	return out, nil
}

// Piece is a byte token's byte; control tokens have no text.
func (m *Model) Piece(t engine.Token) string {
	if t < byteBase || t >= vocabSize {
		return ""
	}
	return string([]byte{byte(t - byteBase)})
}

// IsEOG reports EOS.
func (m *Model) IsEOG(t engine.Token) bool { return t == TokEOS }

// NewContext makes a context, validating o as engine/llama does.
func (m *Model) NewContext(o engine.ContextOptions) (engine.Context, error) {
	if err := m.alive(); err != nil {
		return nil, err
	}
	o, err := o.Resolve(m.facts)
	if err != nil {
		return nil, err
	}
	per := int(m.facts.KVBytesPerToken(o.KVType))
	c := &Context{model: m, opts: o, cellBytes: max(per, cellMeta), cells: map[int]cell{}, logits: make([]float32, vocabSize)}
	c.settings = settingsHash(m.facts.Digest, o)
	m.mu.Lock()
	m.open++
	m.ctxs = append(m.ctxs, c)
	m.mu.Unlock()
	return c, nil
}

func (m *Model) alive() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return engine.ErrClosed
	}
	return nil
}

func (m *Model) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Close frees the model; it fails while contexts made from it are open.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	if m.open > 0 {
		return fmt.Errorf("%w: %d contexts still open on the model", engine.ErrInvalidArgument, m.open)
	}
	m.closed = true
	return nil
}

var _ engine.Model = (*Model)(nil)
