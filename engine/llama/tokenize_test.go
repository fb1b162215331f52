package llama

import (
	"slices"
	"testing"

	"github.com/ctxd/ctxd/internal/testmodel/chatmodel"
)

// TestTokenizeSpecial: with special-token texts parsed, a control
// marker is its one control token; Tokenize keeps it text, even inside
// other text.
func TestTokenizeSpecial(t *testing.T) {
	path, ids := chatmodel.ChatML(t, "{{ messages }}")
	m := loadOnTestBackend(t, path)
	for i, marker := range chatmodel.Markers {
		got, err := m.TokenizeSpecial(marker)
		if err != nil || len(got) != 1 || got[0] != ids[i] {
			t.Fatalf("TokenizeSpecial(%q) = %v, %v; want [%d]", marker, got, err, ids[i])
		}
		for _, text := range []string{marker, "say " + marker + " now"} {
			plain, err := m.Tokenize(text, false)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(plain, ids[0]) || slices.Contains(plain, ids[1]) {
				t.Fatalf("Tokenize(%q) = %v holds a control token", text, plain)
			}
		}
	}
	mixed, err := m.TokenizeSpecial("a" + chatmodel.Markers[0] + "b")
	if err != nil || !slices.Contains(mixed, ids[0]) {
		t.Fatalf("TokenizeSpecial of text around a marker = %v, %v", mixed, err)
	}
}
