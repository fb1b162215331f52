package protocol

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/ctxd/ctxd/protocol/ctxdpb"
)

// countingConn counts the Write calls made on a net.Conn.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *countingConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

func tokenEvent(piece string) *ctxdpb.StreamEvent {
	return &ctxdpb.StreamEvent{Body: &ctxdpb.StreamEvent_Token{Token: &ctxdpb.TokenEvent{Piece: piece}}}
}

// readPieces reads n DATA frames and returns their pieces, then the stream
// and type of the frame after them when more is true.
func readPieces(t *testing.T, ch *Channel, n int) []string {
	t.Helper()
	var out []string
	for range n {
		var ev ctxdpb.StreamEvent
		h, err := ch.ReadMessage(&ev)
		if err != nil {
			t.Fatal(err)
		}
		if h.Type != TypeData {
			t.Fatalf("got %v, want a DATA frame", h)
		}
		out = append(out, ev.GetToken().GetPiece())
	}
	return out
}

// TestQueuedFramesLeaveInOrderWithTheNextWrite: frames Queue keeps are
// not written until the next frame is, then go out in front of it, in
// order, in one Write call.
func TestQueuedFramesLeaveInOrderWithTheNextWrite(t *testing.T) {
	a, b := unixPair(t)
	cc := &countingConn{Conn: a}
	w, r := NewChannel(cc, 0), NewChannel(b, 0)
	for _, p := range []string{"a", "b", "c"} {
		if err := w.Queue(7, TypeData, 0, tokenEvent(p)); err != nil {
			t.Fatal(err)
		}
	}
	if cc.count() != 0 || w.Queued() == 0 {
		t.Fatalf("after Queue: %d writes, %d bytes queued; want 0 writes and the frames kept", cc.count(), w.Queued())
	}
	if err := w.WriteMessage(7, TypeData, 0, tokenEvent("d")); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteMessage(7, TypeResponse, 0, &ctxdpb.Response{}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(readPieces(t, r, 4), ""); got != "abcd" {
		t.Fatalf("pieces %q, want abcd", got)
	}
	var resp ctxdpb.Response
	if h, err := r.ReadMessage(&resp); err != nil || h.Type != TypeResponse {
		t.Fatalf("then %v, %v; want the RESPONSE", h, err)
	}
	if n := cc.count(); n != 2 {
		t.Fatalf("%d writes, want 2 (the queued frames with d, then the response)", n)
	}
	if w.Queued() != 0 {
		t.Fatalf("%d bytes still queued", w.Queued())
	}
}

// TestFlushQueued writes what is queued, and nothing when nothing is.
func TestFlushQueued(t *testing.T) {
	a, b := unixPair(t)
	cc := &countingConn{Conn: a}
	w, r := NewChannel(cc, 0), NewChannel(b, 0)
	if err := w.FlushQueued(); err != nil || cc.count() != 0 {
		t.Fatalf("empty flush: %v, %d writes", err, cc.count())
	}
	w.Queue(3, TypeData, 0, tokenEvent("x"))
	w.Queue(3, TypeData, 0, tokenEvent("y"))
	if err := w.FlushQueued(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(readPieces(t, r, 2), ""); got != "xy" || cc.count() != 1 {
		t.Fatalf("pieces %q in %d writes, want xy in 1", got, cc.count())
	}
}

// TestQueueWritesAtTheLimit: a queue of QueueLimit bytes is written at
// once, so a reader that never gets another frame still gets these.
func TestQueueWritesAtTheLimit(t *testing.T) {
	a, b := unixPair(t)
	cc := &countingConn{Conn: a}
	w, r := NewChannel(cc, 0), NewChannel(b, 0)
	big := strings.Repeat("z", 1000)
	n := 0
	done := make(chan []string, 1)
	for cc.count() == 0 {
		if err := w.Queue(5, TypeData, 0, tokenEvent(big)); err != nil {
			t.Fatal(err)
		}
		n++
		if n > QueueLimit/1000+2 {
			t.Fatalf("%d frames of 1 kB queued without a write", n)
		}
	}
	go func() { done <- readPiecesNoFatal(r, n) }()
	if got := <-done; len(got) != n {
		t.Fatalf("read %d frames, want the %d queued", len(got), n)
	}
	if w.Queued() != 0 {
		t.Fatalf("%d bytes left queued", w.Queued())
	}
}

func readPiecesNoFatal(ch *Channel, n int) []string {
	var out []string
	for range n {
		var ev ctxdpb.StreamEvent
		if _, err := ch.ReadMessage(&ev); err != nil {
			return out
		}
		out = append(out, ev.GetToken().GetPiece())
	}
	return out
}

// TestQueueRefusals: an unencodable message queues nothing (the frames
// before it stay), and after a failed write Queue returns that error.
func TestQueueRefusals(t *testing.T) {
	a, b := unixPair(t)
	w, r := NewChannel(a, 0), NewChannel(b, 0)
	w.Queue(9, TypeData, 0, tokenEvent("ok"))
	before := w.Queued()
	err := w.Queue(9, TypeData, 0, tokenEvent("bad \xff"))
	var fe *FrameError
	if !errors.As(err, &fe) || !fe.Local || !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("invalid UTF-8: %v, want a local malformed-frame error", err)
	}
	if w.Queued() != before {
		t.Fatalf("queue %d bytes after the refusal, want %d", w.Queued(), before)
	}
	if err := w.Queue(0, TypeData, 0, tokenEvent("x")); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("DATA on stream 0: %v", err)
	}
	w.FlushQueued()
	if got := readPieces(t, r, 1); got[0] != "ok" {
		t.Fatalf("got %q", got)
	}
	b.Close()
	r.Close()
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		werr = w.WriteMessage(9, TypeData, 0, tokenEvent("after close"))
	}
	if werr == nil {
		t.Fatal("writes to a closed peer kept succeeding")
	}
	if err := w.Queue(9, TypeData, 0, tokenEvent("y")); err == nil || err.Error() != werr.Error() {
		t.Fatalf("Queue after a failed write: %v, want %v", err, werr)
	}
	if err := w.FlushQueued(); err == nil {
		t.Fatal("FlushQueued after a failed write: nil")
	}
}
