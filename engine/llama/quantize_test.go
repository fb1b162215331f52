package llama

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/testmodel"
)

// Quantize's refusals are typed and touch no file: a missing input, a
// file that is not GGUF, the output naming the input, an unknown type, a
// cancelled context.
func TestQuantizeRefusals(t *testing.T) {
	dir := t.TempDir()
	stories := testmodel.Stories(t)
	notGGUF := filepath.Join(dir, "text.gguf")
	if err := os.WriteFile(notGGUF, []byte("hello, not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.gguf")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name    string
		ctx     context.Context
		in, out string
		to      engine.WeightType
		want    error
	}{
		{"missing", context.Background(), filepath.Join(dir, "none.gguf"), out, engine.WeightQ8_0, os.ErrNotExist},
		{"not gguf", context.Background(), notGGUF, out, engine.WeightQ8_0, engine.ErrBadModel},
		{"onto itself", context.Background(), stories, stories, engine.WeightQ8_0, engine.ErrInvalidArgument},
		{"unknown type", context.Background(), stories, out, engine.WeightType("q3_k_xs"), engine.ErrInvalidArgument},
		{"cancelled", cancelled, stories, out, engine.WeightQ8_0, context.Canceled},
	} {
		err := Quantize(c.ctx, c.in, c.out, c.to, 1)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: wrote %s", c.name, out)
		}
	}
}
