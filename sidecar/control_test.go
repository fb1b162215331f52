package sidecar

import (
	"context"
	"errors"
	"testing"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/testmodel/chatmodel"
)

// TestControlSpansTokenizeAsControlTokens: a control span of a segment is
// one control token, the same text outside a span stays text, and a
// manifest of a client-rendered template ("chat:<name>") gets a
// compatibility key of its own.
func TestControlSpansTokenizeAsControlTokens(t *testing.T) {
	path, _ := chatmodel.ChatML(t, "{{ messages }}")
	ts := startServer(t, Config{ModelPath: path})
	c := dial(t, ts)
	ctx := context.Background()
	text := "<|im_start|>user\nhi"
	seg := func(control []client.ControlSpan) client.Manifest {
		return client.Manifest{Template: "chat:chatml", Segments: []client.Segment{
			{ID: "s", Kind: client.KindSystem, Text: text, Stable: true, Control: control},
		}}
	}
	s := openSession(t, c)
	special, err := s.EnsurePrefix(ctx, seg([]client.ControlSpan{{Start: 0, End: 12}}))
	if err != nil {
		t.Fatal(err)
	}
	s2 := openSession(t, c)
	plain, err := s2.EnsurePrefix(ctx, seg(nil))
	if err != nil {
		t.Fatal(err)
	}
	// "<|im_start|>" is one token in the span, several as text.
	if special.PromptTokens >= plain.PromptTokens-1 {
		t.Fatalf("with a control span %d prompt tokens, as text %d", special.PromptTokens, plain.PromptTokens)
	}
	// A span that is no control token of the model stays text.
	same, err := openSession(t, c).EnsurePrefix(ctx, seg([]client.ControlSpan{{Start: 0, End: 12}, {Start: 12, End: 16}}))
	if err != nil {
		t.Fatal(err)
	}
	if same.PromptTokens != special.PromptTokens {
		t.Fatalf("a span over plain text changed the tokens: %d, want %d", same.PromptTokens, special.PromptTokens)
	}
	// Another template's manifest does not take this session's KV.
	other := seg(nil)
	other.Template = "plain"
	if _, err := s2.EnsurePrefix(ctx, other); !errors.Is(err, client.ErrIncompatible) {
		t.Fatalf("plain manifest on a chat:chatml session: %v, want ErrIncompatible", err)
	}
	bad := seg([]client.ControlSpan{{Start: 0, End: 40}})
	if _, err := s.EnsurePrefix(ctx, bad); !errors.Is(err, client.ErrInvalidManifest) {
		t.Fatalf("span past the text: %v, want ErrInvalidManifest", err)
	}
	if _, err := s.EnsurePrefix(ctx, client.Manifest{Template: "chat:", Segments: seg(nil).Segments}); !errors.Is(err, client.ErrInvalidManifest) {
		t.Fatalf("template chat: with no name: %v, want ErrInvalidManifest", err)
	}
}
