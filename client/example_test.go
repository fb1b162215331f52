package client_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/sidecar"
)

// daemon starts a private ctxd for the examples; an agent would dial the
// socket of the ctxd it runs beside (sidecar.DefaultSocketPath()).
func daemon() (socket string, stop func()) {
	model := os.Getenv("CTXD_MODEL")
	if model == "" {
		root, _ := testmodel.RepoRoot()
		model = root + "/../shared/models/stories260K.gguf"
	}
	p, err := sidecar.StartPrivate(sidecar.Config{Engine: llama.Backend{}, ModelPath: model, ContextTokens: 1024})
	if err != nil {
		log.Fatal(err)
	}
	return p.Socket, p.Stop
}

// An agent's turn: the stable prefix is ensured (and reused across turns),
// the volatile suffix prefilled, and the answer streamed.
func Example() {
	socket, stop := daemon()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, socket)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.OpenSession(ctx, "example agent")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)

	m := client.Manifest{Segments: []client.Segment{
		{ID: "system", Kind: client.KindSystem, Text: "Once upon a time, there was a little girl named Lily.", Stable: true},
		{ID: "turn", Kind: client.KindUserTurn, Text: " She loved to play"},
	}}
	for turn := 1; turn <= 2; turn++ {
		p, err := s.EnsurePrefix(ctx, m)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := s.PrefillSuffix(ctx); err != nil {
			log.Fatal(err)
		}
		res, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 8}, nil)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("turn %d: reused %d of %d prefix tokens: %q\n", turn, p.ReusedTokens, p.PromptTokens, res.Text)
	}
	// Output:
	// turn 1: reused 0 of 16 prefix tokens: " outside in the p"
	// turn 2: reused 16 of 16 prefix tokens: " outside in the p"
}

// Cancelling the context stops a decode within one token; the session
// keeps what was generated and stays usable.
func ExampleSession_Decode_cancel() {
	socket, stop := daemon()
	defer stop()
	ctx := context.Background()
	c, _ := client.Dial(ctx, socket)
	defer c.Close()
	s, _ := c.OpenSession(ctx, "cancel")
	s.EnsurePrefix(ctx, client.Manifest{Segments: []client.Segment{{ID: "p", Kind: client.KindUserTurn, Text: "Once upon a time"}}})
	s.PrefillSuffix(ctx)

	dctx, cancel := context.WithCancel(ctx)
	n := 0
	res, err := s.Decode(dctx, client.DecodeOptions{MaxTokens: 500}, func(client.Token) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	fmt.Println(res.Reason, err, n)
	// Output: cancelled context canceled 3
}

// A whole agent turn, step by step: open a session, ensure the stable
// prefix, prefill the turn's suffix, stream the answer token by token,
// ask the daemon what the session now holds, and close it.
func ExampleSession_agentTurn() {
	socket, stop := daemon()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, socket, client.Options{Name: "example agent"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := c.OpenSession(ctx, "turn")
	if err != nil {
		log.Fatal(err)
	}

	m := client.Manifest{Segments: []client.Segment{
		{ID: "system", Kind: client.KindSystem, Text: "Once upon a time, there was a little girl named Lily.", Stable: true},
		{ID: "rules", Kind: client.KindRepoRules, Class: client.ClassTaskPinned, Text: " She lived in a small house.", Stable: true},
		{ID: "turn", Kind: client.KindUserTurn, Text: " One day, she", InvalidateOnTurn: true},
	}}
	if _, err := s.EnsurePrefix(ctx, m); err != nil {
		log.Fatal(err)
	}
	if _, err := s.PrefillSuffix(ctx); err != nil {
		log.Fatal(err)
	}
	var streamed []string
	res, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 6}, func(t client.Token) error {
		streamed = append(streamed, t.Piece)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	ex, err := s.Explain(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d tokens streamed, stopped: %v\n", len(streamed), res.Reason)
	fmt.Println("stopped for max tokens:", res.Reason == client.StopMaxTokens)
	fmt.Println("generated tokens held:", ex.GeneratedTokens)
	for _, seg := range ex.Segments {
		fmt.Printf("segment %s (%v, %v) stable=%v\n", seg.ID, seg.Kind, seg.Class, seg.Stable)
	}
	if err := s.Close(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 6 tokens streamed, stopped: max_tokens
	// stopped for max tokens: true
	// generated tokens held: 6
	// segment <bos> (system, task_pinned) stable=true
	// segment system (system, task_pinned) stable=true
	// segment rules (repo_rules, task_pinned) stable=true
	// segment turn (user_turn, volatile) stable=false
	// segment <generated> (user_turn, volatile) stable=false
}
