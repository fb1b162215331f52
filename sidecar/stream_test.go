package sidecar

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// streamPair is a Unix socket pair wrapped in Channels: w for the daemon's
// side, r for the client's.
func streamPair(t *testing.T) (w, r *protocol.Channel) {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	w, r = protocol.NewChannel(b, 0), protocol.NewChannel(a, 0)
	t.Cleanup(func() { w.Close(); r.Close() })
	return w, r
}

func tok(piece string) *pb.StreamEvent {
	return &pb.StreamEvent{Body: &pb.StreamEvent_Token{Token: &pb.TokenEvent{Piece: piece}}}
}

// readStream reads frames until the RESPONSE and returns the DATA pieces
// and when each frame arrived.
func readStream(t *testing.T, r *protocol.Channel) (pieces []string, at []time.Time) {
	t.Helper()
	for {
		h, payload, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		at = append(at, time.Now())
		if h.Type == protocol.TypeResponse {
			return pieces, at
		}
		var ev pb.StreamEvent
		if err := protocol.Unmarshal(h, payload, &ev); err != nil {
			t.Fatal(err)
		}
		pieces = append(pieces, ev.GetToken().GetPiece())
	}
}

// TestStreamHoldsFastTokensInOrder: the first token goes out at once;
// tokens right after it wait for the next write, and the RESPONSE carries
// them, in order, before itself.
func TestStreamHoldsFastTokensInOrder(t *testing.T) {
	w, r := streamPair(t)
	sw := newStreamWriter(w, 1, time.Hour)
	if err := sw.emit(tok("a")); err != nil {
		t.Fatal(err)
	}
	if w.Queued() != 0 {
		t.Fatal("the first token of a call was held")
	}
	for _, p := range []string{"b", "c", "d"} {
		if err := sw.emit(tok(p)); err != nil {
			t.Fatal(err)
		}
	}
	if w.Queued() == 0 {
		t.Fatal("tokens inside the window were written one by one")
	}
	if err := w.WriteMessage(1, protocol.TypeResponse, 0, &pb.Response{}); err != nil {
		t.Fatal(err)
	}
	pieces, _ := readStream(t, r)
	if got := strings.Join(pieces, ""); got != "abcd" {
		t.Fatalf("pieces %q, want abcd before the RESPONSE", got)
	}
}

// TestStreamFlushSendsHeldTokens: a held token whose successor does not
// come yet (the call is about to wait for another session's turn) goes
// out when the call flushes its stream through its context.
func TestStreamFlushSendsHeldTokens(t *testing.T) {
	w, r := streamPair(t)
	sw := newStreamWriter(w, 1, time.Hour)
	ctx := withStreamFlush(context.Background(), sw)
	sw.emit(tok("a"))
	sw.emit(tok("b")) // held
	if w.Queued() == 0 {
		t.Fatal("b was not held")
	}
	flushStream(ctx)
	if w.Queued() != 0 {
		t.Fatal("flushStream left frames queued")
	}
	got := make(chan []string, 1)
	go func() { got <- readN(r, 2) }()
	select {
	case p := <-got:
		if strings.Join(p, "") != "ab" {
			t.Fatalf("pieces %q, want ab", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("flushed token never arrived")
	}
	flushStream(context.Background()) // no stream on ctx: nothing happens
}

func readN(r *protocol.Channel, n int) []string {
	var out []string
	for range n {
		var ev pb.StreamEvent
		if _, err := r.ReadMessage(&ev); err != nil {
			return out
		}
		out = append(out, ev.GetToken().GetPiece())
	}
	return out
}

// TestStreamSlowTokensGoOneByOne: tokens further apart than the window
// are written at once, each in its own write.
func TestStreamSlowTokensGoOneByOne(t *testing.T) {
	w, _ := streamPair(t)
	const window = 5 * time.Millisecond
	sw := newStreamWriter(w, 1, window)
	for _, p := range []string{"a", "b", "c"} {
		if err := sw.emit(tok(p)); err != nil {
			t.Fatal(err)
		}
		if w.Queued() != 0 {
			t.Fatalf("token %q past the window was held", p)
		}
		time.Sleep(window + time.Millisecond)
	}
}

// TestStreamNoWindowNeverHolds: with coalescing off (StreamCoalesce < 0)
// every token is written at once.
func TestStreamNoWindowNeverHolds(t *testing.T) {
	w, r := streamPair(t)
	sw := newStreamWriter(w, 1, -1)
	for _, p := range []string{"a", "b", "c"} {
		sw.emit(tok(p))
		if w.Queued() != 0 {
			t.Fatalf("token %q held with coalescing off", p)
		}
	}
	w.WriteMessage(1, protocol.TypeResponse, 0, &pb.Response{})
	if pieces, _ := readStream(t, r); strings.Join(pieces, "") != "abc" {
		t.Fatalf("pieces %q", pieces)
	}
}

// TestStreamHeldTokensWaitForTheNextWrite: held tokens are not written
// on their own however long the call takes to its next write; they leave
// with it, in front of it.
func TestStreamHeldTokensWaitForTheNextWrite(t *testing.T) {
	w, r := streamPair(t)
	const window = 5 * time.Millisecond
	sw := newStreamWriter(w, 1, window)
	sw.emit(tok("a"))
	sw.emit(tok("b"))
	time.Sleep(4 * window)
	if w.Queued() == 0 {
		t.Fatal("a held token was written without a write to carry it")
	}
	w.WriteMessage(1, protocol.TypeResponse, 0, &pb.Response{})
	if pieces, _ := readStream(t, r); strings.Join(pieces, "") != "ab" {
		t.Fatalf("pieces %q, want ab", pieces)
	}
}

// TestStreamedDecodeOverTheSocketKeepsEveryToken: a fast decode (the fake
// engine: microseconds a token, so nearly every token is held) streamed
// over the socket delivers every token once, in order, before its reply,
// and the pieces make the reply's text.
func TestStreamedDecodeOverTheSocketKeepsEveryToken(t *testing.T) {
	model := filepath.Join(t.TempDir(), "fake.gguf")
	if err := os.WriteFile(model, []byte("enginefake model v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{ModelPath: model, Engine: enginefake.New(enginefake.DefaultOptions()),
		ContextTokens: 1024, TurnLatency: -1, IdleSnapshot: -1, StreamCoalesce: time.Second})
	ctx := context.Background()
	s := openSession(t, dial(t, ts))
	if _, err := s.EnsurePrefix(ctx, client.Manifest{Segments: []client.Segment{{ID: "p", Kind: client.KindUserTurn, Text: "hello there"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrefillSuffix(ctx); err != nil {
		t.Fatal(err)
	}
	var pieces []string
	var last time.Duration
	res, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 200, Forced: forcedTokens(200)}, func(tk client.Token) error {
		if tk.Elapsed < last {
			t.Errorf("token %d elapsed %v after %v: out of order", len(pieces), tk.Elapsed, last)
		}
		last = tk.Elapsed
		pieces = append(pieces, tk.Piece)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) != res.Tokens || res.Tokens != 200 {
		t.Fatalf("%d token events, reply counts %d, want 200", len(pieces), res.Tokens)
	}
	if got := strings.Join(pieces, ""); got != res.Text {
		t.Fatalf("streamed pieces %q differ from the reply's text %q", got, res.Text)
	}
}

// forcedTokens are n ordinary tokens for teacher forcing (no end of
// generation among them).
func forcedTokens(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(100 + i%50)
	}
	return out
}
