package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/protocol/ctxdpb"
)

// unixPair returns two ends of a connected Unix stream socket, through a
// listener in a temporary folder.
func unixPair(tb testing.TB) (net.Conn, net.Conn) {
	tb.Helper()
	ln, err := net.Listen("unix", filepath.Join(tb.TempDir(), "s.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// seqPayload is a payload that names its writer and sequence number and is
// filled with a pattern derived from both, so any interleaving shows.
func seqPayload(stream, seq uint32, size int) []byte {
	if size < 8 {
		size = 8
	}
	p := make([]byte, size)
	binary.BigEndian.PutUint32(p[0:4], stream)
	binary.BigEndian.PutUint32(p[4:8], seq)
	for i := 8; i < size; i++ {
		p[i] = byte(stream*31 + seq*7 + uint32(i))
	}
	return p
}

func checkSeqPayload(h Header, p []byte) (seq uint32, ok bool) {
	if len(p) < 8 || binary.BigEndian.Uint32(p[0:4]) != h.StreamID {
		return 0, false
	}
	seq = binary.BigEndian.Uint32(p[4:8])
	return seq, bytes.Equal(p, seqPayload(h.StreamID, seq, len(p)))
}

// testConcurrentWriters has writers goroutines send frames of mixed sizes,
// some larger than a socket buffer, and checks that every frame arrives
// whole and in per-writer order.
func testConcurrentWriters(t *testing.T, a, b net.Conn) {
	const writers, perWriter = 8, 60
	w := NewChannel(a, 0)
	r := NewChannel(b, 0)
	sizes := []int{8, 100, 4 << 10, 300 << 10, 17, 1 << 20}

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := 1; i <= writers; i++ {
		wg.Add(1)
		go func(stream uint32) {
			defer wg.Done()
			for seq := uint32(0); seq < perWriter; seq++ {
				p := seqPayload(stream, seq, sizes[(int(stream)+int(seq))%len(sizes)])
				if err := w.WriteFrame(Header{StreamID: stream, Type: TypeData}, p); err != nil {
					errs <- err
					return
				}
			}
		}(uint32(i))
	}

	next := make(map[uint32]uint32)
	for n := 0; n < writers*perWriter; n++ {
		h, p, err := r.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		seq, ok := checkSeqPayload(h, p)
		if !ok || h.Type != TypeData || int(h.Length) != len(p) {
			t.Fatalf("frame %d (%v) is corrupt: frames interleaved", n, h)
		}
		if seq != next[h.StreamID] {
			t.Fatalf("stream %d: got seq %d, want %d", h.StreamID, seq, next[h.StreamID])
		}
		next[h.StreamID]++
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestChannelConcurrentWritersPipe(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	testConcurrentWriters(t, a, b)
}

func TestChannelConcurrentWritersUnixSocket(t *testing.T) {
	a, b := unixPair(t)
	testConcurrentWriters(t, a, b)
}

func TestChannelMessages(t *testing.T) {
	a, b := net.Pipe()
	client, server := NewChannel(a, 0), NewChannel(b, 0)
	defer client.Close()
	defer server.Close()

	go func() {
		req := &ctxdpb.Request{Body: &ctxdpb.Request_Hello{Hello: &ctxdpb.HelloRequest{MinVersion: 1, MaxVersion: 3, ClientName: "test"}}}
		if err := client.WriteMessage(1, TypeRequest, 0, req); err != nil {
			t.Error(err)
		}
	}()
	var req ctxdpb.Request
	h, err := server.ReadMessage(&req)
	if err != nil {
		t.Fatal(err)
	}
	if h.Type != TypeRequest || h.StreamID != 1 || req.GetHello().GetClientName() != "test" {
		t.Fatalf("got %v %v", h, &req)
	}
	v, err := NegotiateVersion(req.GetHello().GetMinVersion(), req.GetHello().GetMaxVersion())
	if err != nil || v != ProtocolVersion {
		t.Fatalf("version %d, %v", v, err)
	}

	go func() {
		ev := &ctxdpb.StreamEvent{Body: &ctxdpb.StreamEvent_Token{Token: &ctxdpb.TokenEvent{Token: 42, Piece: " hi"}}}
		if err := server.WriteMessage(1, TypeData, 0, ev); err != nil {
			t.Error(err)
		}
		resp := &ctxdpb.Response{Body: &ctxdpb.Response_Hello{Hello: &ctxdpb.HelloReply{Version: v, MaxFrameBytes: 1 << 16}}}
		if err := server.WriteMessage(1, TypeResponse, 0, resp); err != nil {
			t.Error(err)
		}
	}()
	// ReadMessage refuses a frame that does not carry the message asked for.
	var resp ctxdpb.Response
	if h, err := client.ReadMessage(&resp); !errors.Is(err, ErrMalformedFrame) || h.Type != TypeData {
		t.Fatalf("DATA read as Response: %v %v", h, err)
	}
	if _, err := client.ReadMessage(&resp); err != nil || resp.GetHello().GetMaxFrameBytes() != 1<<16 {
		t.Fatalf("%v %v", &resp, err)
	}
	client.SetMaxFrame(resp.GetHello().GetMaxFrameBytes())
	if client.MaxFrame() != 1<<16 {
		t.Fatalf("MaxFrame = %d", client.MaxFrame())
	}
}

// discardConn is a net.Conn whose writes succeed or fail without I/O.
type discardConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
	err    error
}

func (c *discardConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	if c.err != nil {
		return 0, c.err
	}
	return len(p), nil
}

func (c *discardConn) Close() error { return nil }

func TestChannelRefusesWithoutWriting(t *testing.T) {
	conn := &discardConn{}
	c := NewChannel(conn, 100)

	err := c.WriteFrame(Header{StreamID: 1, Type: TypeData}, make([]byte, 101))
	var fe *FrameError
	if !errors.Is(err, ErrFrameTooLarge) || !errors.As(err, &fe) || !fe.Local || errors.Is(err, ErrProtocol) {
		t.Fatalf("oversized WriteFrame: %v", err)
	}
	big := &ctxdpb.Request{Body: &ctxdpb.Request_Ping{Ping: &ctxdpb.PingRequest{Payload: make([]byte, 200)}}}
	if err := c.WriteMessage(1, TypeRequest, 0, big); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized WriteMessage: %v", err)
	}
	for _, h := range []Header{
		{StreamID: 0, Type: TypeRequest},
		{StreamID: 1, Type: 9},
		{StreamID: 1, Type: TypeData, Flags: 0x40},
	} {
		if err := c.WriteFrame(h, nil); !errors.Is(err, ErrMalformedFrame) || errors.Is(err, ErrProtocol) {
			t.Fatalf("WriteFrame(%v): %v", h, err)
		}
		if err := c.WriteMessage(h.StreamID, h.Type, h.Flags, &ctxdpb.Request{}); !errors.Is(err, ErrMalformedFrame) {
			t.Fatalf("WriteMessage(%v): %v", h, err)
		}
	}
	bad := &ctxdpb.Response{Body: &ctxdpb.Response_Decode{Decode: &ctxdpb.DecodeReply{Text: "\xff"}}}
	if err := c.WriteMessage(1, TypeResponse, 0, bad); !errors.As(err, &fe) || !fe.Local || errors.Is(err, ErrProtocol) {
		t.Fatalf("invalid UTF-8 in a string field: %v, want a Local *FrameError", err)
	}
	if conn.writes != 0 {
		t.Fatalf("%d writes reached the connection", conn.writes)
	}
	// Exactly the maximum goes out.
	if err := c.WriteFrame(Header{StreamID: 1, Type: TypeData}, make([]byte, 100)); err != nil || conn.writes != 1 {
		t.Fatalf("frame at the maximum: %v, %d writes", err, conn.writes)
	}
}

func TestChannelWriteErrorIsSticky(t *testing.T) {
	boom := errors.New("boom")
	conn := &discardConn{err: boom}
	c := NewChannel(conn, 0)
	if err := c.WriteFrame(Header{StreamID: 1, Type: TypeCancel}, nil); !errors.Is(err, boom) {
		t.Fatalf("first write: %v", err)
	}
	conn.err = nil
	if err := c.WriteFrame(Header{StreamID: 1, Type: TypeCancel}, nil); !errors.Is(err, boom) {
		t.Fatalf("write after a failure: %v", err)
	}
	if conn.writes != 1 {
		t.Fatalf("%d writes after the failure, want 1", conn.writes)
	}
}

func TestChannelReadLimitAndClose(t *testing.T) {
	a, b := unixPair(t)
	r := NewChannel(b, 16)
	go a.Write(frameBytes(17, 1, TypeData, 0, make([]byte, 17)))
	if _, _, err := r.ReadFrame(); !errors.Is(err, ErrFrameTooLarge) || !errors.Is(err, ErrProtocol) {
		t.Fatalf("err = %v", err)
	}

	w := NewChannel(a, 0)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.WriteFrame(Header{StreamID: 1, Type: TypeCancel}, nil); err == nil {
		t.Fatal("write after Close succeeded")
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(b); err != nil {
		t.Fatalf("peer did not see EOF: %v", err)
	}
}

func TestUnmarshalMalformedPayload(t *testing.T) {
	h := Header{Length: 3, StreamID: 1, Type: TypeRequest}
	err := Unmarshal(h, []byte{0x0A, 0x05, 0x01}, new(ctxdpb.Request)) // field 1, length 5, 1 byte
	var fe *FrameError
	if !errors.Is(err, ErrMalformedFrame) || !errors.Is(err, ErrProtocol) || !errors.As(err, &fe) || fe.Header != h {
		t.Fatalf("err = %v", err)
	}
}

func TestPayloadFor(t *testing.T) {
	for typ, want := range map[uint8]proto.Message{
		TypeRequest:  &ctxdpb.Request{},
		TypeResponse: &ctxdpb.Response{},
		TypeData:     &ctxdpb.StreamEvent{},
	} {
		got := PayloadFor(typ)
		if got == nil || got.ProtoReflect().Descriptor() != want.ProtoReflect().Descriptor() {
			t.Fatalf("PayloadFor(%d) = %T", typ, got)
		}
	}
	if PayloadFor(TypeCancel) != nil || PayloadFor(0) != nil {
		t.Fatal("CANCEL or unknown types carry a message")
	}
}

func TestHotPathAllocations(t *testing.T) {
	c := NewChannel(&discardConn{}, 0)
	ev := &ctxdpb.StreamEvent{Body: &ctxdpb.StreamEvent_Token{Token: &ctxdpb.TokenEvent{Token: 42, Piece: " world", ElapsedUs: 1234}}}
	if n := testing.AllocsPerRun(1000, func() {
		if err := c.WriteMessage(5, TypeData, 0, ev); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("WriteMessage: %v allocations per frame", n)
	}
	payload := make([]byte, 64)
	if n := testing.AllocsPerRun(1000, func() {
		if err := c.WriteFrame(Header{StreamID: 5, Type: TypeData}, payload); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("WriteFrame: %v allocations per frame", n)
	}

	one := frameBytes(64, 5, TypeData, 0, payload)
	in := bytes.Repeat(one, 2000)
	rc := NewChannel(&readConn{Reader: bytes.NewReader(in)}, 0)
	if n := testing.AllocsPerRun(1000, func() {
		if _, _, err := rc.ReadFrame(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ReadFrame: %v allocations per frame", n)
	}
}

// readConn is a net.Conn reading from an io.Reader.
type readConn struct {
	net.Conn
	io.Reader
}

func (c *readConn) Read(p []byte) (int, error) { return c.Reader.Read(p) }
