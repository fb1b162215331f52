package llama

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/testmodel"
)

// TestBackendLoads loads through the engine.Backend door: the model it
// returns is the one LoadWith returns, and a missing file wraps
// os.ErrNotExist.
func TestBackendLoads(t *testing.T) {
	var b engine.Backend = Backend{}
	m, err := b.Load(context.Background(), testmodel.Stories(t), engine.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if f := m.Facts(); f.Layers <= 0 || f.Digest == "" {
		t.Fatalf("facts %+v", f)
	}
	if _, err := b.Load(context.Background(), filepath.Join(t.TempDir(), "none.gguf"), engine.ModelOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v, want os.ErrNotExist", err)
	}
	if b.SystemInfo() == "" {
		t.Fatal("empty system info")
	}
	if _, err := b.BlobCodec().FromTokenMajor([]byte("junk")); !errors.Is(err, engine.ErrInvalidArgument) || !errors.Is(err, ErrBlobFormat) {
		t.Fatalf("codec on junk: %v", err)
	}
}

// TestLoadAbandoned ends a load's context before and during the load: the
// error wraps the context's, and nothing is returned.
func TestLoadAbandoned(t *testing.T) {
	path := testmodel.Stories(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m, err := LoadContext(ctx, path, engine.ModelOptions{})
	if !errors.Is(err, context.Canceled) || m != nil {
		t.Fatalf("cancelled load: %v, %v", m, err)
	}
	// A deadline that may fall anywhere in the load: either the model
	// comes back whole or the error is the deadline's.
	for _, d := range []time.Duration{time.Microsecond, 200 * time.Microsecond, 2 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		m, err := LoadContext(ctx, path, engine.ModelOptions{})
		cancel()
		switch {
		case err == nil:
			m.Close()
		case !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("deadline %v: %v", d, err)
		}
	}
	// The context is not kept: a later load of the same file works.
	m, err = LoadContext(context.Background(), path, engine.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

// doneOnAsk is a context that ends when first asked for its Done channel:
// after the file is hashed (which checks Err only), at the moment the load
// starts watching it, so the abort reaches llama.cpp's progress callback.
type doneOnAsk struct {
	context.Context
	once sync.Once
	done chan struct{}
	err  atomic.Pointer[error]
}

var errAbandoned = errors.New("abandoned by the test")

func (c *doneOnAsk) Done() <-chan struct{} {
	c.once.Do(func() {
		c.err.Store(&errAbandoned)
		close(c.done)
	})
	return c.done
}

func (c *doneOnAsk) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

// TestLoadAbandonedInLlama ends the context once llama.cpp is loading:
// the load stops at a progress report (or finishes first: then the model
// is whole), and the same file loads afterwards.
func TestLoadAbandonedInLlama(t *testing.T) {
	path := testmodel.Needle(t)
	abandoned := 0
	for i := 0; i < 5; i++ {
		ctx := &doneOnAsk{Context: context.Background(), done: make(chan struct{})}
		m, err := LoadContext(ctx, path, engine.ModelOptions{})
		switch {
		case err == nil:
			m.Close()
		case errors.Is(err, errAbandoned) && m == nil:
			abandoned++
		default:
			t.Fatalf("load %d: %v", i, err)
		}
	}
	t.Logf("%d of 5 loads abandoned inside llama.cpp", abandoned)
	m, err := LoadContext(context.Background(), path, engine.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}
