package httpapi

import (
	"context"
	"sync"
	"testing"

	"github.com/ctxd/ctxd/engine"
)

// factsLater is a backend whose model facts are missing at first (a model
// being swapped) and then carry a ChatML template.
type factsLater struct {
	*scripted
	mu    sync.Mutex
	fails int
}

func (f *factsLater) ModelFacts() (engine.Facts, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails > 0 {
		f.fails--
		return engine.Facts{}, false
	}
	tmpl := "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
	return engine.Facts{Path: f.model, Architecture: "llama", ChatTemplate: tmpl}, true
}

// TestMissingFactsDoNotPinFallback: when the model's facts cannot be had
// for a passing reason the request fails and the next one gets the
// model's own template; before, the fallback template was kept for the
// daemon's life.
func TestMissingFactsDoNotPinFallback(t *testing.T) {
	f := &factsLater{scripted: &scripted{model: "/models/chatml.gguf", pieces: []string{"hi"}}, fails: 1}
	s := New(f, Config{Logger: testLogger(t)})
	if _, err := s.models.get(context.Background()); err == nil {
		t.Fatal("facts missing: no error")
	}
	m, err := s.models.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if name := m.tmpl.Name(); name == "fallback" {
		t.Errorf("the fallback template was pinned after the facts were missing once")
	}
}
