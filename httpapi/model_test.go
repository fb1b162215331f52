package httpapi

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxd/ctxd/internal/gguf"
)

// TestTransientErrorDoesNotPinFallback: when the model file cannot be read
// for a passing reason (EMFILE) the request fails and the next one reads
// the model's own template; before, the fallback template was kept for
// the daemon's life.
func TestTransientErrorDoesNotPinFallback(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chatml.gguf")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
	w, err := gguf.NewWriter(fh, []gguf.KV{{Key: "general.architecture", Value: "llama"}, {Key: "tokenizer.chat_template", Value: tmpl}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	f := &scripted{pieces: []string{"hi"}}
	s := New(f, Config{Logger: testLogger(t)})
	f.model = path
	fails := 1
	s.openModel = func(p string) (*gguf.File, error) {
		if fails > 0 {
			fails--
			return nil, &os.PathError{Op: "open", Path: p, Err: syscall.EMFILE}
		}
		return gguf.Open(p)
	}
	if _, err := s.models.get(context.Background()); err == nil {
		t.Fatal("EMFILE reading the model: no error")
	}
	m, err := s.models.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if name := m.tmpl.Name(); name == "fallback" {
		t.Errorf("the fallback template was pinned after a transient error")
	}
}
