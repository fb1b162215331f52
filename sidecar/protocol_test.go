package sidecar

import (
	"context"
	"errors"
	"math"
	"net"
	"testing"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// rawConn is a connection that speaks frames by hand.
func rawConn(t *testing.T, ts *testServer) (net.Conn, *protocol.Channel) {
	t.Helper()
	nc, err := net.Dial("unix", ts.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc, protocol.NewChannel(nc, protocol.DefaultMaxFrame)
}

func hello(t *testing.T, ch *protocol.Channel, stream uint32) {
	t.Helper()
	if err := ch.WriteMessage(stream, protocol.TypeRequest, 0, &pb.Request{Body: &pb.Request_Hello{Hello: &pb.HelloRequest{MinVersion: 1, MaxVersion: 1}}}); err != nil {
		t.Fatal(err)
	}
}

// connError reads the stream-0 RESPONSE a refused connection gets and
// checks that the connection then ends.
func connError(t *testing.T, nc net.Conn, ch *protocol.Channel, code pb.ErrorCode) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var resp pb.Response
	h, err := ch.ReadMessage(&resp)
	if err != nil {
		t.Fatalf("no stream-0 error: %v", err)
	}
	if h.StreamID != 0 || resp.GetError().GetCode() != code {
		t.Fatalf("got stream %d, %v; want stream 0 with %v", h.StreamID, resp.GetError(), code)
	}
	if _, _, err := ch.ReadFrame(); err == nil {
		t.Fatal("the connection stayed open")
	}
}

// TestSecondHelloClosesTheConnection: a repeated hello is a protocol
// error: answered on stream 0, then the connection closes.
func TestSecondHelloClosesTheConnection(t *testing.T) {
	ts := startServer(t, Config{})
	nc, ch := rawConn(t, ts)
	hello(t, ch, 1)
	var resp pb.Response
	if _, err := ch.ReadMessage(&resp); err != nil || resp.GetHello() == nil {
		t.Fatalf("first hello: %v %v", resp.GetError(), err)
	}
	hello(t, ch, 2)
	connError(t, nc, ch, pb.ErrorCode_ERROR_CODE_PROTOCOL)
}

// TestHandshakeTimeout: a peer that sends no hello is dropped.
func TestHandshakeTimeout(t *testing.T) {
	ts := startServer(t, Config{HandshakeTimeout: 200 * time.Millisecond})
	nc, ch := rawConn(t, ts)
	connError(t, nc, ch, pb.ErrorCode_ERROR_CODE_PROTOCOL)
}

// TestConnectionCap: connections beyond MaxConns are refused with
// RESOURCE_EXHAUSTED on stream 0; one closing makes room again.
func TestConnectionCap(t *testing.T) {
	ts := startServer(t, Config{MaxConns: 2})
	ctx := context.Background()
	a := dial(t, ts)
	b := dial(t, ts)
	nc, ch := rawConn(t, ts)
	connError(t, nc, ch, pb.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED)
	if err := a.Ping(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := client.Dial(ctx, ts.socket)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no room after a connection closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBadSamplingRefused: non-finite or negative sampling parameters are
// invalid arguments; the session stays usable.
func TestBadSamplingRefused(t *testing.T) {
	ts := startServer(t, Config{})
	s := openSession(t, dial(t, ts))
	ctx := context.Background()
	if _, err := s.EnsurePrefix(ctx, manifest(" One day.")); err != nil {
		t.Fatal(err)
	}
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for name, o := range map[string]client.DecodeOptions{
		"temperature +Inf": {Temperature: inf}, "temperature NaN": {Temperature: nan}, "temperature -1": {Temperature: -1},
		"top_p NaN": {Temperature: 1, TopP: nan}, "top_p 2": {Temperature: 1, TopP: 2}, "top_p -Inf": {Temperature: 1, TopP: float32(math.Inf(-1))},
		"top_k -1": {Temperature: 1, TopK: -1},
	} {
		o.MaxTokens = 2
		if _, err := s.Decode(ctx, o, nil); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if len(greedyN(t, s, 2)) != 2 {
		t.Fatal("session unusable after refused decodes")
	}
}

// TestInvalidUTF8IsInvalidArgument: text that is not UTF-8 is refused by
// the client before sending, as an invalid argument; the connection is
// fine.
func TestInvalidUTF8IsInvalidArgument(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	s := openSession(t, c)
	ctx := context.Background()
	bad := client.Manifest{Segments: []client.Segment{{ID: "system", Kind: client.KindSystem, Text: "caf\xe9", Stable: true}}}
	if _, err := s.EnsurePrefix(ctx, bad); !errors.Is(err, client.ErrInvalidArgument) || errors.Is(err, client.ErrClosed) {
		t.Fatalf("invalid UTF-8: %v, want ErrInvalidArgument", err)
	}
	if err := c.Ping(ctx, nil); err != nil {
		t.Fatalf("connection broken after a refused call: %v", err)
	}
	if _, err := s.EnsurePrefix(ctx, manifest(" One day.")); err != nil {
		t.Fatal(err)
	}
}
