package chat

import (
	"testing"

	"github.com/ctxd/ctxd/internal/gguf"
	"github.com/ctxd/ctxd/internal/testmodel"
)

// stories260K, the model the suite serves, has no tokenizer.chat_template:
// it gets the fallback, whose markers it reads as plain text.
func TestStoriesGetsFallback(t *testing.T) {
	f, err := gguf.Open(testmodel.Stories(t))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, has := f.String("tokenizer.chat_template")
	if has {
		t.Fatalf("stories260K has a chat template now (%d bytes): test the template instead", len(tmpl))
	}
	arch, _ := f.String("general.architecture")
	tm, err := NewTemplate(ModelInfo{ChatTemplate: tmpl, Architecture: arch})
	if err != nil {
		t.Fatal(err)
	}
	if tm.Name() != "fallback" {
		t.Fatalf("Name() = %q, want fallback", tm.Name())
	}
	checkConversation(t, tm, conversation, testTools)
}
