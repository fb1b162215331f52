package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// streamServer is a fake daemon on a real Unix socket that answers the
// handshake, OpenSession and Decode; a Decode streams MaxTokens token
// events the way ctxd's stream writer does (sidecar/stream.go): groups of
// group frames, all but the last queued (protocol.Channel.Queue) so a
// group leaves in one write, then the RESPONSE.
type streamServer struct {
	socket string
	group  int
	pieces []string
	done   chan error
}

func startStreamServer(tb testing.TB, group int) *streamServer {
	tb.Helper()
	ln, err := net.Listen("unix", filepath.Join(tb.TempDir(), "s.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	s := &streamServer{socket: ln.Addr().String(), group: group, done: make(chan error, 1),
		pieces: []string{" the", " cat", " sat", " on", " a", " mat", ".", "\n", " Once", " upon", " time", ","}}
	go func() {
		defer ln.Close()
		nc, err := ln.Accept()
		if err != nil {
			s.done <- err
			return
		}
		err = s.serve(protocol.NewChannel(nc, 0))
		nc.Close()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			err = nil
		}
		s.done <- err
	}()
	tb.Cleanup(func() {
		if err := <-s.done; err != nil {
			tb.Errorf("stream server: %v", err)
		}
	})
	return s
}

// serve answers each call on its own goroutine, as ctxd does, so calls
// on one connection stream at the same time.
func (s *streamServer) serve(ch *protocol.Channel) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	errs := make(chan error, 1)
	for {
		h, payload, err := ch.ReadFrame()
		if err != nil {
			select {
			case err = <-errs:
			default:
			}
			return err
		}
		if h.Type == protocol.TypeCancel {
			continue
		}
		req := new(pb.Request)
		if err := protocol.Unmarshal(h, payload, req); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.answer(ch, h.StreamID, req); err != nil {
				select {
				case errs <- err:
				default:
				}
				ch.Close()
			}
		}()
	}
}

func (s *streamServer) answer(ch *protocol.Channel, id uint32, req *pb.Request) error {
	resp := &pb.Response{}
	switch body := req.Body.(type) {
	case *pb.Request_Hello:
		resp.Body = &pb.Response_Hello{Hello: &pb.HelloReply{Version: protocol.ProtocolVersion, ServerVersion: "fake"}}
	case *pb.Request_OpenSession:
		resp.Body = &pb.Response_OpenSession{OpenSession: &pb.OpenSessionReply{SessionId: uint64(id), ContextTokens: 1 << 20}}
	case *pb.Request_Decode:
		n, err := s.stream(ch, id, body.Decode)
		if err != nil {
			return err
		}
		resp.Body = &pb.Response_Decode{Decode: &pb.DecodeReply{Reason: pb.StopReason_STOP_REASON_MAX_TOKENS, Tokens: n}}
	default:
		resp.Error = &pb.Error{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: fmt.Sprintf("fake server: %T", body)}
	}
	return ch.WriteMessage(id, protocol.TypeResponse, 0, resp)
}

// stream writes d.MaxTokens token events on stream id, group by group.
func (s *streamServer) stream(ch *protocol.Channel, id uint32, d *pb.DecodeRequest) (int32, error) {
	tok := &pb.TokenEvent{}
	ev := &pb.StreamEvent{Body: &pb.StreamEvent_Token{Token: tok}}
	for i := int32(0); i < d.MaxTokens; i++ {
		tok.Token, tok.Piece, tok.ElapsedUs = 100+i%int32(len(s.pieces)), s.pieces[int(i)%len(s.pieces)], int64(i)*450
		if d.ReturnLogits {
			tok.Logits = []float32{float32(i), -1, 0.5}
		}
		var err error
		if (int(i)+1)%s.group == 0 || i == d.MaxTokens-1 {
			err = ch.WriteMessage(id, protocol.TypeData, 0, ev)
		} else {
			err = ch.Queue(id, protocol.TypeData, 0, ev)
		}
		if err != nil {
			return i, err
		}
	}
	return d.MaxTokens, nil
}

// streamSession starts a fake streaming server writing group frames per
// write, dials it (closed at the end of the test) and, when name is not
// empty, opens a session.
func streamSession(tb testing.TB, group int, name string) (*streamServer, *Client, *Session) {
	tb.Helper()
	srv := startStreamServer(tb, group)
	ctx := context.Background()
	c, err := Dial(ctx, srv.socket)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if name == "" {
		return srv, c, nil
	}
	s, err := c.OpenSession(ctx, name)
	if err != nil {
		tb.Fatal(err)
	}
	return srv, c, s
}

// TestStreamedTokensArriveInOrder: every token of a streamed decode
// reaches onToken once, in order, with its piece and time.
func TestStreamedTokensArriveInOrder(t *testing.T) {
	srv, _, s := streamSession(t, 4, "t")
	ctx := context.Background()
	const n = 1000
	got := 0
	res, err := s.Decode(ctx, DecodeOptions{MaxTokens: n}, func(tk Token) error {
		i := int32(got)
		if tk.ID != 100+i%int32(len(srv.pieces)) || tk.Piece != srv.pieces[got%len(srv.pieces)] || tk.Elapsed.Microseconds() != int64(i)*450 {
			t.Fatalf("token %d: %+v", got, tk)
		}
		got++
		return nil
	})
	if err != nil || res.Tokens != n || got != n {
		t.Fatalf("decode: %+v, %v; %d tokens delivered", res, err, got)
	}

	// With logits the events take protobuf's path; the same tokens arrive.
	got = 0
	res, err = s.Decode(ctx, DecodeOptions{MaxTokens: 50, ReturnLogits: true}, func(tk Token) error {
		if tk.ID != 100+int32(got%len(srv.pieces)) || tk.Piece != srv.pieces[got%len(srv.pieces)] || len(tk.Logits) != 3 || tk.Logits[0] != float32(got) {
			t.Fatalf("token %d with logits: %+v", got, tk)
		}
		got++
		return nil
	})
	if err != nil || res.Tokens != 50 || got != 50 {
		t.Fatalf("decode with logits: %+v, %v; %d tokens delivered", res, err, got)
	}
}

// TestConcurrentStreamsOnOneClient: calls streaming at once on one
// connection each get all their tokens, in order, whoever holds the
// reader role when their frames arrive.
func TestConcurrentStreamsOnOneClient(t *testing.T) {
	srv, c, _ := streamSession(t, 4, "")
	ctx := context.Background()
	const calls, n = 4, 3000
	errs := make(chan error, calls)
	for k := 0; k < calls; k++ {
		go func() {
			s, err := c.OpenSession(ctx, "t")
			if err != nil {
				errs <- err
				return
			}
			got := 0
			res, err := s.Decode(ctx, DecodeOptions{MaxTokens: n}, func(tk Token) error {
				if tk.Elapsed.Microseconds() != int64(got)*450 || tk.Piece != srv.pieces[got%len(srv.pieces)] {
					return fmt.Errorf("token %d: %+v", got, tk)
				}
				got++
				if got%500 == 0 {
					runtime.Gosched() // let the other calls take the reader role
				}
				return nil
			})
			if err == nil && (res.Tokens != n || got != n) {
				err = fmt.Errorf("%d tokens, %d delivered", res.Tokens, got)
			}
			errs <- err
		}()
	}
	for k := 0; k < calls; k++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestStreamedTokenAllocations guards the client's decode path: reading,
// decoding and delivering a streamed token allocates nothing once its
// piece has been seen (the whole process is counted, fake server
// included, so the bound has room for its per-call allocations).
func TestStreamedTokenAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	_, _, s := streamSession(t, 4, "t")
	ctx := context.Background()
	onToken := func(Token) error { return nil }
	if _, err := s.Decode(ctx, DecodeOptions{MaxTokens: 100}, onToken); err != nil { // warm up
		t.Fatal(err)
	}
	const n = 20000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := s.Decode(ctx, DecodeOptions{MaxTokens: n}, onToken); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if per := float64(after.Mallocs-before.Mallocs) / n; per > 0.05 {
		t.Errorf("%.2f allocations per streamed token, want none", per)
	}
}

// BenchmarkStreamDecode measures the client's side of a streamed decode
// per token over a real Unix socket: reading the frames (four to a
// write, as the daemon coalesces a fast model's tokens), decoding them
// and delivering each to onToken. The fake server's encoding and writes
// run in the same process and are included.
func BenchmarkStreamDecode(b *testing.B) {
	for _, group := range []int{1, 4} {
		b.Run(fmt.Sprintf("frames-per-write=%d", group), func(b *testing.B) {
			_, _, s := streamSession(b, group, "b")
			ctx := context.Background()
			got := 0
			b.ReportAllocs()
			b.ResetTimer()
			if _, err := s.Decode(ctx, DecodeOptions{MaxTokens: b.N}, func(Token) error { got++; return nil }); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if got != b.N {
				b.Fatalf("%d of %d tokens delivered", got, b.N)
			}
		})
	}
}

// TestStreamCallbackErrorEndsTheCall: onToken's error stops deliveries
// (no token after it reaches onToken) and is what Decode returns once the
// call's RESPONSE arrives.
func TestStreamCallbackErrorEndsTheCall(t *testing.T) {
	_, _, s := streamSession(t, 4, "t")
	ctx := context.Background()
	stop := errors.New("enough")
	calls := 0
	_, err := s.Decode(ctx, DecodeOptions{MaxTokens: 500}, func(Token) error {
		calls++
		if calls == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 10 {
		t.Fatalf("err %v after %d calls, want %v after 10", err, calls, stop)
	}
	// The connection still serves calls.
	if _, err := s.Decode(ctx, DecodeOptions{MaxTokens: 5}, nil); err != nil {
		t.Fatal(err)
	}
}
