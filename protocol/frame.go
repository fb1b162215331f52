package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// HeaderSize is the size in bytes of a frame header:
//
//	offset  size  field
//	0       4     length     payload bytes, header not included (uint32, big endian)
//	4       4     stream_id  (uint32, big endian)
//	8       1     type       TypeRequest, TypeResponse, TypeData or TypeCancel
//	9       1     flags      FlagEndStream; every other bit must be zero
const HeaderSize = 10

// DefaultMaxFrame is the largest payload, in bytes, either side sends or
// accepts until the handshake announces another maximum in
// HelloReply.max_frame_bytes.
const DefaultMaxFrame uint32 = 4 << 20

// Protocol versions this package speaks; the handshake picks one in
// [MinProtocolVersion, ProtocolVersion].
const (
	ProtocolVersion    uint32 = 1
	MinProtocolVersion uint32 = 1
)

// Frame types.
const (
	TypeRequest  uint8 = 1 // client to server; payload: ctxdpb.Request
	TypeResponse uint8 = 2 // server to client, ends the call; payload: ctxdpb.Response
	TypeData     uint8 = 3 // server to client, within a call; payload: ctxdpb.StreamEvent
	TypeCancel   uint8 = 4 // client to server; empty payload
)

// FlagEndStream is reserved for half-closing a stream in a later protocol
// version. Version 1 senders leave it clear and receivers accept and ignore
// it; a RESPONSE ends its call whether or not the flag is set. Every other
// flag bit is malformed.
const FlagEndStream uint8 = 0x01

// knownFlags are the flag bits a valid header may carry.
const knownFlags = FlagEndStream

// Header is a decoded frame header.
type Header struct {
	Length   uint32 // payload bytes, header not included
	StreamID uint32
	Type     uint8
	Flags    uint8
}

// String renders h for logs and errors, e.g. "REQUEST stream=3 len=20".
func (h Header) String() string {
	s := fmt.Sprintf("%s stream=%d len=%d", TypeName(h.Type), h.StreamID, h.Length)
	if h.Flags != 0 {
		s += fmt.Sprintf(" flags=%#04x", h.Flags)
	}
	return s
}

// TypeName is the name of frame type t: "REQUEST", "RESPONSE", "DATA",
// "CANCEL", or "TYPE(n)" for unknown types.
func TypeName(t uint8) string {
	switch t {
	case TypeRequest:
		return "REQUEST"
	case TypeResponse:
		return "RESPONSE"
	case TypeData:
		return "DATA"
	case TypeCancel:
		return "CANCEL"
	}
	return fmt.Sprintf("TYPE(%d)", t)
}

// Validate checks everything in h but its length: the type is known, no
// unknown flag bit is set, and REQUEST, DATA and CANCEL frames carry a
// non-zero stream id (RESPONSE may use stream 0 for connection errors).
// The error is a *FrameError wrapping ErrMalformedFrame.
func (h Header) Validate() error {
	switch h.Type {
	case TypeRequest, TypeData, TypeCancel:
		if h.StreamID == 0 {
			return malformed(h, fmt.Sprintf("%s on stream 0", TypeName(h.Type)), nil)
		}
	case TypeResponse:
	default:
		return malformed(h, fmt.Sprintf("unknown frame type %d", h.Type), nil)
	}
	if h.Flags&^knownFlags != 0 {
		return malformed(h, fmt.Sprintf("unknown flag bits %#04x", h.Flags&^knownFlags), nil)
	}
	return nil
}

// EncodeHeader writes h into b[:HeaderSize]. It panics if len(b) < HeaderSize.
func EncodeHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	binary.BigEndian.PutUint32(b[0:4], h.Length)
	binary.BigEndian.PutUint32(b[4:8], h.StreamID)
	b[8] = h.Type
	b[9] = h.Flags
}

// AppendHeader appends the encoding of h to b.
func AppendHeader(b []byte, h Header) []byte {
	b = binary.BigEndian.AppendUint32(b, h.Length)
	b = binary.BigEndian.AppendUint32(b, h.StreamID)
	return append(b, h.Type, h.Flags)
}

// DecodeHeader decodes and validates the header at the start of b. A short
// b gives a *FrameError wrapping ErrMalformedFrame and io.ErrUnexpectedEOF;
// an invalid header gives the decoded Header with Validate's error. The
// length is not checked against any maximum.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, malformed(Header{}, fmt.Sprintf("header truncated at %d of %d bytes", len(b), HeaderSize), io.ErrUnexpectedEOF)
	}
	h := Header{
		Length:   binary.BigEndian.Uint32(b[0:4]),
		StreamID: binary.BigEndian.Uint32(b[4:8]),
		Type:     b[8],
		Flags:    b[9],
	}
	return h, h.Validate()
}

// ReadFrame reads one frame from r. It reuses buf's storage for the header
// and the payload and returns the payload as a slice of it (or of a larger
// buffer it allocated), so callers pass the returned payload back in as buf
// to read without allocating; the payload is valid until then. limit bounds
// the payload (0 means DefaultMaxFrame).
//
// Errors: io.EOF when r ends cleanly before a frame; a *FrameError wrapping
// ErrMalformedFrame for an invalid header or a frame cut short (then also
// io.ErrUnexpectedEOF); a *FrameError wrapping ErrFrameTooLarge when the
// header announces more than limit, returned before the payload is read. Any
// error leaves r mid-frame: the connection cannot be read further.
func ReadFrame(r io.Reader, buf []byte, limit uint32) (Header, []byte, error) {
	if limit == 0 {
		limit = DefaultMaxFrame
	}
	if cap(buf) < HeaderSize {
		buf = make([]byte, HeaderSize, 512)
	}
	hb := buf[:HeaderSize]
	if n, err := io.ReadFull(r, hb); err != nil {
		if err == io.EOF {
			return Header{}, buf[:0], io.EOF
		}
		if err == io.ErrUnexpectedEOF {
			return Header{}, buf[:0], malformed(Header{}, fmt.Sprintf("header truncated at %d of %d bytes", n, HeaderSize), err)
		}
		return Header{}, buf[:0], err
	}
	h, err := DecodeHeader(hb)
	if err != nil {
		return h, buf[:0], err
	}
	if h.Length > limit {
		return h, buf[:0], tooLarge(h, h.Length, limit, false)
	}
	if uint32(cap(buf)) < h.Length {
		buf = make([]byte, h.Length)
	}
	payload := buf[:h.Length]
	if n, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return h, payload[:0], malformed(h, fmt.Sprintf("payload truncated at %d of %d bytes", n, h.Length), io.ErrUnexpectedEOF)
		}
		return h, payload[:0], err
	}
	return h, payload, nil
}

// ErrMalformedFrame reports a frame that breaks the frame layout: unknown
// type, stray flag bits, stream id 0 where one is required, a truncated
// frame, or a payload that is not the message its type calls for.
var ErrMalformedFrame = errors.New("protocol: malformed frame")

// ErrFrameTooLarge reports a payload over the negotiated maximum frame size.
var ErrFrameTooLarge = errors.New("protocol: frame too large")

// FrameError details a frame-layer failure. It unwraps to Kind
// (ErrMalformedFrame or ErrFrameTooLarge), to ErrProtocol when the frame came
// from the peer, and to Err, the underlying cause, when there is one.
type FrameError struct {
	Kind   error  // ErrMalformedFrame or ErrFrameTooLarge
	Header Header // the offending header; zero when it could not be read
	Reason string // what is wrong, for people
	Err    error  // underlying cause such as io.ErrUnexpectedEOF; may be nil
	// Local is set when this side refused to send the frame: nothing was
	// written and the connection is intact. Otherwise the frame came from
	// the peer and the connection must be closed.
	Local bool
}

// Error returns e.g. "protocol: malformed frame: unknown frame type 9
// (TYPE(9) stream=3 len=0)".
func (e *FrameError) Error() string {
	s := e.Kind.Error() + ": " + e.Reason
	if e.Header != (Header{}) {
		s += " (" + e.Header.String() + ")"
	}
	return s
}

// Unwrap returns Kind, ErrProtocol unless Local, and Err when set.
func (e *FrameError) Unwrap() []error {
	errs := make([]error, 0, 3)
	errs = append(errs, e.Kind)
	if !e.Local {
		errs = append(errs, ErrProtocol)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

func malformed(h Header, reason string, cause error) error {
	return &FrameError{Kind: ErrMalformedFrame, Header: h, Reason: reason, Err: cause}
}

func tooLarge(h Header, n, limit uint32, local bool) error {
	return &FrameError{
		Kind:   ErrFrameTooLarge,
		Header: h,
		Reason: fmt.Sprintf("payload of %d bytes exceeds the maximum of %d", n, limit),
		Local:  local,
	}
}
