package client_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/policy"
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
	p, err := sidecar.StartPrivate(sidecar.Config{ModelPath: model, ContextTokens: 1024})
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

	m := policy.Manifest{Segments: []policy.Segment{
		{ID: "system", Kind: policy.KindSystem, Text: "Once upon a time, there was a little girl named Lily.", Stable: true},
		{ID: "turn", Kind: policy.KindUserTurn, Text: " She loved to play"},
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
	s.EnsurePrefix(ctx, policy.Manifest{Segments: []policy.Segment{{ID: "p", Kind: policy.KindUserTurn, Text: "Once upon a time"}}})
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
