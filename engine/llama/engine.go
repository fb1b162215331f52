package llama

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/engine"
)

// Backend is llama.cpp as an engine.Backend: the value the daemon is
// configured with. It holds no state of its own (ggml's backend registry
// is process-wide), so its zero value is ready and copies are alike.
type Backend struct{}

// LoadBackends is the package's LoadBackends.
func (Backend) LoadBackends(dir string) error { return LoadBackends(dir) }

// Devices is the package's Devices.
func (Backend) Devices() []engine.Device { return Devices() }

// ReadLayout is the package's ReadLayout.
func (Backend) ReadLayout(path string) (engine.Layout, error) { return ReadLayout(path) }

// Load is LoadContext.
func (Backend) Load(ctx context.Context, path string, o engine.ModelOptions) (engine.Model, error) {
	m, err := LoadContext(ctx, path, o)
	if err != nil {
		return nil, err // not a typed nil
	}
	return m, nil
}

// SystemInfo is the package's SystemInfo.
func (Backend) SystemInfo() string { return SystemInfo() }

// BlobCodec is the sequence-state codec of blobfmt.go.
func (Backend) BlobCodec() engine.BlobCodec { return BlobCodec{} }

// BlobCodec is the token-major rewrite of llama.cpp's sequence-state blobs
// (TokenMajor, FromTokenMajor) as an engine.BlobCodec.
type BlobCodec struct{}

// TokenMajor is the package's TokenMajor.
func (BlobCodec) TokenMajor(blob []byte) ([]byte, bool) { return TokenMajor(blob) }

// FromTokenMajor is the package's FromTokenMajor; a blob that does not
// parse wraps both engine.ErrInvalidArgument and ErrBlobFormat.
func (BlobCodec) FromTokenMajor(blob []byte) ([]byte, error) {
	out, err := FromTokenMajor(blob)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrInvalidArgument, err)
	}
	return out, nil
}

var (
	_ engine.Backend   = Backend{}
	_ engine.BlobCodec = BlobCodec{}
)
