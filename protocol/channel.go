package protocol

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Channel sends and receives frames on one connection.
//
// Writes are goroutine-safe: each frame goes out in a single Write call under
// the Channel's writer lock, so frames never interleave. Reads are for one
// goroutine. The maximum frame size bounds both directions; it starts at the
// value given to NewChannel and is changed with SetMaxFrame once the
// handshake has negotiated it.
type Channel struct {
	conn     net.Conn
	maxFrame atomic.Uint32

	wmu  sync.Mutex // serialises writes and guards werr and queued
	werr error      // first write failure; sticky, the stream may hold a partial frame
	// queued holds frames Queue encoded but did not write: they go out
	// in front of the next frame written, or with FlushQueued.
	queued []byte

	br   *bufio.Reader // reader side: one goroutine
	rbuf []byte

	closeOnce sync.Once
	closeErr  error
}

// readBufferSize is the read-ahead of a Channel: a typical frame arrives in
// one read system call.
const readBufferSize = 32 << 10

// maxKeptBuffer bounds the buffers a Channel keeps for reading and the pool
// keeps for writing; larger ones, needed only for rare large frames, are
// left to the garbage collector.
const maxKeptBuffer = 1 << 20

// marshalOptions encode outgoing messages.
var marshalOptions = proto.MarshalOptions{}

// writeBuffers holds *[]byte with cap in [minPooledBuffer, maxKeptBuffer].
var writeBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, minPooledBuffer)
	return &b
}}

const minPooledBuffer = 4 << 10

// NewChannel wraps conn. maxFrame bounds the payload of every frame sent or
// received; 0 means DefaultMaxFrame.
func NewChannel(conn net.Conn, maxFrame uint32) *Channel {
	return newChannel(conn, conn, maxFrame)
}

// NewClientChannel is NewChannel for the end that receives streamed
// calls (a client): on a Unix socket under Linux it reads with raw
// non-blocking read(2) calls (rawread_linux.go), which keep each wakeup
// of a streamed decode from waking the Go runtime's monitor thread — a
// quarter of a streaming client's CPU. The daemon reads a few requests
// per call and keeps NewChannel.
func NewClientChannel(conn net.Conn, maxFrame uint32) *Channel {
	if r := newRawReader(conn); r != nil {
		return newChannel(conn, r, maxFrame)
	}
	return newChannel(conn, conn, maxFrame)
}

func newChannel(conn net.Conn, src io.Reader, maxFrame uint32) *Channel {
	c := &Channel{
		conn: conn,
		br:   bufio.NewReaderSize(src, readBufferSize),
	}
	c.SetMaxFrame(maxFrame)
	return c
}

// MaxFrame is the current maximum payload size in bytes.
func (c *Channel) MaxFrame() uint32 { return c.maxFrame.Load() }

// SetMaxFrame changes the maximum payload size, e.g. to the value of
// HelloReply.max_frame_bytes; 0 means DefaultMaxFrame. It is safe to call
// while other goroutines write.
func (c *Channel) SetMaxFrame(n uint32) {
	if n == 0 {
		n = DefaultMaxFrame
	}
	c.maxFrame.Store(n)
}

// Conn is the wrapped connection, for deadlines and addresses. Reading or
// writing it directly breaks the framing.
func (c *Channel) Conn() net.Conn { return c.conn }

// WriteFrame sends one frame with h's stream id, type and flags and the
// given payload; h.Length is ignored and set from len(payload). It refuses
// an invalid header (ErrMalformedFrame) or a payload over MaxFrame
// (ErrFrameTooLarge) without writing anything; both errors are Local.
func (c *Channel) WriteFrame(h Header, payload []byte) error {
	if err := h.Validate(); err != nil {
		return asLocal(err)
	}
	if limit := c.MaxFrame(); uint64(len(payload)) > uint64(limit) {
		return tooLarge(h, clampLen(len(payload)), limit, true)
	}
	h.Length = uint32(len(payload))
	bp := writeBuffers.Get().(*[]byte)
	b := AppendHeader((*bp)[:0], h)
	b = append(b, payload...)
	err := c.write(b)
	putWriteBuffer(bp, b)
	return err
}

// WriteMessage marshals m and sends it as the payload of one frame. Errors
// are those of WriteFrame, or a Local *FrameError wrapping the marshalling
// error (e.g. a string field holding invalid UTF-8), in which case nothing
// was written.
func (c *Channel) WriteMessage(streamID uint32, typ, flags uint8, m proto.Message) error {
	h := Header{StreamID: streamID, Type: typ, Flags: flags}
	if err := h.Validate(); err != nil {
		return asLocal(err)
	}
	bp := writeBuffers.Get().(*[]byte)
	b, err := marshalAppend((*bp)[:HeaderSize], m)
	if err != nil {
		putWriteBuffer(bp, *bp)
		// Refused before sending (a string field holding invalid UTF-8):
		// the connection is intact.
		return &FrameError{Kind: ErrMalformedFrame, Header: h, Local: true,
			Reason: fmt.Sprintf("cannot encode %s", m.ProtoReflect().Descriptor().FullName()), Err: err}
	}
	n := len(b) - HeaderSize
	if limit := c.MaxFrame(); uint64(n) > uint64(limit) {
		putWriteBuffer(bp, b)
		return tooLarge(h, clampLen(n), limit, true)
	}
	h.Length = uint32(n)
	EncodeHeader(b, h)
	err = c.write(b)
	putWriteBuffer(bp, b)
	return err
}

// write sends one whole frame, behind any queued ones and in the same
// Write call, under the writer lock. A failed or short write may leave
// part of a frame on the stream, so it poisons the Channel.
func (c *Channel) write(frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if len(c.queued) > 0 {
		c.queued = append(c.queued, frame...)
		return c.writeQueued()
	}
	if _, err := c.conn.Write(frame); err != nil {
		c.werr = err
		return err
	}
	return nil
}

// Queue encodes m as one frame and keeps it for the next write: it leaves
// in front of the next frame written (by any goroutine) or with
// FlushQueued, in the order queued, so a sender can put several frames on
// the wire in one system call (and wake the reader once). Once QueueLimit
// bytes are queued, Queue writes them at once. Errors are WriteMessage's;
// an encoding error queues nothing.
func (c *Channel) Queue(streamID uint32, typ, flags uint8, m proto.Message) error {
	h := Header{StreamID: streamID, Type: typ, Flags: flags}
	if err := h.Validate(); err != nil {
		return asLocal(err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	start := len(c.queued)
	b, err := marshalAppend(append(c.queued, make([]byte, HeaderSize)...), m)
	if err != nil {
		c.queued = c.queued[:start]
		return &FrameError{Kind: ErrMalformedFrame, Header: h, Local: true,
			Reason: fmt.Sprintf("cannot encode %s", m.ProtoReflect().Descriptor().FullName()), Err: err}
	}
	n := len(b) - start - HeaderSize
	if limit := c.MaxFrame(); uint64(n) > uint64(limit) {
		c.queued = b[:start]
		return tooLarge(h, clampLen(n), limit, true)
	}
	h.Length = uint32(n)
	EncodeHeader(b[start:], h)
	c.queued = b
	if len(c.queued) >= QueueLimit {
		return c.writeQueued()
	}
	return nil
}

// FlushQueued writes the frames Queue kept, if any.
func (c *Channel) FlushQueued() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if len(c.queued) == 0 {
		return nil
	}
	return c.writeQueued()
}

// Queued is the number of bytes Queue kept that are not written yet.
func (c *Channel) Queued() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return len(c.queued)
}

// QueueLimit is the most bytes Queue keeps before writing them.
const QueueLimit = 64 << 10

// writeQueued writes c.queued in one Write call; the caller holds wmu.
func (c *Channel) writeQueued() error {
	_, err := c.conn.Write(c.queued)
	if cap(c.queued) > maxKeptBuffer {
		c.queued = nil
	} else {
		c.queued = c.queued[:0]
	}
	if err != nil {
		c.werr = err
	}
	return err
}

// ReadFrame reads the next frame. Only one goroutine may read; the payload
// is valid until the next ReadFrame. Errors are those of the package-level
// ReadFrame; after any error the Channel cannot be read further.
func (c *Channel) ReadFrame() (Header, []byte, error) {
	h, payload, err := ReadFrame(c.br, c.rbuf, c.MaxFrame())
	if cap(payload) <= maxKeptBuffer {
		c.rbuf = payload
	} else {
		c.rbuf = nil
	}
	return h, payload, err
}

// FrameBuffered reports whether a whole frame is already read ahead, so
// the next ReadFrame returns without a system call. Reader goroutine only.
func (c *Channel) FrameBuffered() bool {
	n := c.br.Buffered()
	if n < HeaderSize {
		return false
	}
	b, err := c.br.Peek(HeaderSize)
	if err != nil {
		return false
	}
	return uint64(n-HeaderSize) >= uint64(binary.BigEndian.Uint32(b))
}

// ReadMessage reads the next frame and unmarshals its payload into m, for
// callers that know what comes next, such as either side of the handshake.
// A frame whose type does not carry m's message (see PayloadFor), including
// CANCEL, gives a *FrameError wrapping ErrMalformedFrame with the header.
func (c *Channel) ReadMessage(m proto.Message) (Header, error) {
	h, payload, err := c.ReadFrame()
	if err != nil {
		return h, err
	}
	want := m.ProtoReflect().Descriptor().FullName()
	if payloadName(h.Type) != want {
		return h, malformed(h, fmt.Sprintf("%s frame where %s was expected", TypeName(h.Type), want), nil)
	}
	return h, Unmarshal(h, payload, m)
}

// Close closes the connection; later calls return the first call's result.
// Blocked reads and writes return errors.
func (c *Channel) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.conn.Close() })
	return c.closeErr
}

// PayloadFor returns a new, empty message of the kind frames of type typ
// carry: *ctxdpb.Request for REQUEST, *ctxdpb.Response for RESPONSE and
// *ctxdpb.StreamEvent for DATA; nil for CANCEL (empty payload) and unknown
// types.
func PayloadFor(typ uint8) proto.Message {
	switch typ {
	case TypeRequest:
		return new(ctxdpb.Request)
	case TypeResponse:
		return new(ctxdpb.Response)
	case TypeData:
		return new(ctxdpb.StreamEvent)
	}
	return nil
}

// payloadName is the full name of PayloadFor(typ), "" for none.
func payloadName(typ uint8) protoreflect.FullName {
	switch typ {
	case TypeRequest:
		return (*ctxdpb.Request)(nil).ProtoReflect().Descriptor().FullName()
	case TypeResponse:
		return (*ctxdpb.Response)(nil).ProtoReflect().Descriptor().FullName()
	case TypeData:
		return (*ctxdpb.StreamEvent)(nil).ProtoReflect().Descriptor().FullName()
	}
	return ""
}

// Unmarshal decodes the payload of the frame h into m. A payload that is not
// a valid encoding of m gives a *FrameError wrapping ErrMalformedFrame (and
// so ErrProtocol).
func Unmarshal(h Header, payload []byte, m proto.Message) error {
	if err := proto.Unmarshal(payload, m); err != nil {
		return malformed(h, fmt.Sprintf("payload is not a valid %s", m.ProtoReflect().Descriptor().FullName()), err)
	}
	return nil
}

func putWriteBuffer(bp *[]byte, b []byte) {
	if cap(b) > maxKeptBuffer {
		return
	}
	*bp = b[:0]
	writeBuffers.Put(bp)
}

// asLocal marks a frame error as refused by this side before sending.
func asLocal(err error) error {
	if fe, ok := err.(*FrameError); ok {
		fe.Local = true
	}
	return err
}

func clampLen(n int) uint32 {
	if uint64(n) > uint64(^uint32(0)) {
		return ^uint32(0)
	}
	return uint32(n)
}
