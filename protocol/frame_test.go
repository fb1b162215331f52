package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// frameBytes encodes one frame with an explicit length field, which may
// disagree with len(payload) to build truncated input.
func frameBytes(length, stream uint32, typ, flags uint8, payload []byte) []byte {
	b := AppendHeader(nil, Header{Length: length, StreamID: stream, Type: typ, Flags: flags})
	return append(b, payload...)
}

func TestHeaderRoundTrip(t *testing.T) {
	headers := []Header{
		{Length: 0, StreamID: 1, Type: TypeRequest},
		{Length: 17, StreamID: 0, Type: TypeResponse},
		{Length: DefaultMaxFrame, StreamID: 0xFFFFFFFF, Type: TypeData, Flags: FlagEndStream},
		{Length: 0, StreamID: 7, Type: TypeCancel},
		{Length: 0x01020304, StreamID: 0x05060708, Type: TypeResponse, Flags: FlagEndStream},
	}
	for _, h := range headers {
		var fixed [HeaderSize]byte
		EncodeHeader(fixed[:], h)
		appended := AppendHeader([]byte{0xAA}, h)
		if !bytes.Equal(appended[1:], fixed[:]) || appended[0] != 0xAA {
			t.Fatalf("%v: AppendHeader %x != EncodeHeader %x", h, appended, fixed)
		}
		got, err := DecodeHeader(fixed[:])
		if err != nil {
			t.Fatalf("%v: %v", h, err)
		}
		if got != h {
			t.Fatalf("round trip: got %v, want %v", got, h)
		}
	}
}

func TestHeaderLayout(t *testing.T) {
	var b [HeaderSize]byte
	EncodeHeader(b[:], Header{Length: 0x01020304, StreamID: 0x0A0B0C0D, Type: TypeData, Flags: FlagEndStream})
	want := []byte{0x01, 0x02, 0x03, 0x04, 0x0A, 0x0B, 0x0C, 0x0D, 3, 1}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("layout %x, want %x", b, want)
	}
}

func TestReadFrameMalformed(t *testing.T) {
	cases := []struct {
		name  string
		input []byte
		eof   bool // also wraps io.ErrUnexpectedEOF
	}{
		{"type 0", frameBytes(0, 1, 0, 0, nil), false},
		{"type 5", frameBytes(0, 1, 5, 0, nil), false},
		{"type 255", frameBytes(0, 1, 255, 0, nil), false},
		{"flag 0x02", frameBytes(0, 1, TypeRequest, 0x02, nil), false},
		{"flag 0x80", frameBytes(0, 1, TypeResponse, 0x80, nil), false},
		{"flags 0xFF", frameBytes(0, 1, TypeData, 0xFF, nil), false},
		{"request on stream 0", frameBytes(0, 0, TypeRequest, 0, nil), false},
		{"data on stream 0", frameBytes(0, 0, TypeData, 0, nil), false},
		{"cancel on stream 0", frameBytes(0, 0, TypeCancel, 0, nil), false},
		{"header 1 byte", []byte{0}, true},
		{"header 9 bytes", frameBytes(0, 1, TypeRequest, 0, nil)[:9], true},
		{"payload missing", frameBytes(5, 1, TypeRequest, 0, nil), true},
		{"payload short", frameBytes(5, 1, TypeRequest, 0, []byte{1, 2, 3}), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := ReadFrame(bytes.NewReader(c.input), nil, 0)
			if !errors.Is(err, ErrMalformedFrame) {
				t.Fatalf("err = %v, want ErrMalformedFrame", err)
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v does not match ErrProtocol", err)
			}
			if errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("err = %v matches ErrFrameTooLarge", err)
			}
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != c.eof {
				t.Fatalf("errors.Is(%v, io.ErrUnexpectedEOF) = %v, want %v", err, got, c.eof)
			}
			var fe *FrameError
			if !errors.As(err, &fe) || fe.Local || fe.Reason == "" {
				t.Fatalf("err = %#v, want a peer *FrameError with a reason", err)
			}
		})
	}
}

func TestResponseOnStreamZeroIsValid(t *testing.T) {
	in := frameBytes(3, 0, TypeResponse, 0, []byte{1, 2, 3})
	h, p, err := ReadFrame(bytes.NewReader(in), nil, 0)
	if err != nil || h.StreamID != 0 || !bytes.Equal(p, []byte{1, 2, 3}) {
		t.Fatalf("got %v %x %v", h, p, err)
	}
}

func TestReadFrameTooLarge(t *testing.T) {
	// The payload is absent: the header alone must be rejected, before any
	// payload read or allocation.
	for _, c := range []struct {
		length, limit uint32
	}{
		{DefaultMaxFrame + 1, 0},
		{^uint32(0), 0},
		{101, 100},
		{1, 0}, // limit 0 means the default, which 1 fits
	} {
		in := frameBytes(c.length, 1, TypeData, 0, nil)
		_, _, err := ReadFrame(bytes.NewReader(in), nil, c.limit)
		limit := c.limit
		if limit == 0 {
			limit = DefaultMaxFrame
		}
		if c.length <= limit {
			if !errors.Is(err, ErrMalformedFrame) || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("length %d limit %d: err = %v, want truncated payload", c.length, c.limit, err)
			}
			continue
		}
		if !errors.Is(err, ErrFrameTooLarge) || !errors.Is(err, ErrProtocol) || errors.Is(err, ErrMalformedFrame) {
			t.Fatalf("length %d limit %d: err = %v, want ErrFrameTooLarge", c.length, c.limit, err)
		}
	}
	// Exactly the maximum is accepted.
	payload := bytes.Repeat([]byte{7}, 100)
	h, p, err := ReadFrame(bytes.NewReader(frameBytes(100, 1, TypeData, 0, payload)), nil, 100)
	if err != nil || h.Length != 100 || !bytes.Equal(p, payload) {
		t.Fatalf("frame at the maximum: %v %v", h, err)
	}
}

func TestReadFrameEOF(t *testing.T) {
	_, _, err := ReadFrame(bytes.NewReader(nil), nil, 0)
	if err != io.EOF {
		t.Fatalf("empty input: err = %v, want io.EOF", err)
	}
}

func TestReadFrameSequenceReusesBuffer(t *testing.T) {
	var in []byte
	for i := 1; i <= 50; i++ {
		in = append(in, frameBytes(uint32(i), uint32(i), TypeData, 0, bytes.Repeat([]byte{byte(i)}, i))...)
	}
	r := bytes.NewReader(in)
	buf := make([]byte, 0, 64)
	first := &buf[:1][0]
	for i := 1; i <= 50; i++ {
		h, p, err := ReadFrame(r, buf, 0)
		if err != nil {
			t.Fatal(err)
		}
		if h.StreamID != uint32(i) || len(p) != i || p[0] != byte(i) || p[i-1] != byte(i) {
			t.Fatalf("frame %d: %v %x", i, h, p)
		}
		if &p[:1][0] != first {
			t.Fatalf("frame %d: buffer not reused", i)
		}
		buf = p
	}
	if _, _, err := ReadFrame(r, buf, 0); err != io.EOF {
		t.Fatalf("after the last frame: %v", err)
	}
}

func TestReadFrameGrowsBuffer(t *testing.T) {
	payload := bytes.Repeat([]byte{9}, 5000)
	h, p, err := ReadFrame(bytes.NewReader(frameBytes(5000, 3, TypeData, 0, payload)), make([]byte, 0, 16), 0)
	if err != nil || h.Length != 5000 || !bytes.Equal(p, payload) {
		t.Fatalf("%v %v", h, err)
	}
}

func TestDecodeHeaderShort(t *testing.T) {
	_, err := DecodeHeader(make([]byte, HeaderSize-1))
	if !errors.Is(err, ErrMalformedFrame) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v", err)
	}
}

func TestFrameErrorText(t *testing.T) {
	_, _, err := ReadFrame(bytes.NewReader(frameBytes(0, 3, 9, 0, nil)), nil, 0)
	want := "protocol: malformed frame: unknown frame type 9 (TYPE(9) stream=3 len=0)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
	_, _, err = ReadFrame(bytes.NewReader(frameBytes(11, 3, TypeData, 0, nil)), nil, 10)
	if err == nil || !strings.Contains(err.Error(), "payload of 11 bytes exceeds the maximum of 10") {
		t.Fatalf("got %q", err)
	}
}

// readerFunc adapts a function to io.Reader.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func TestReadFramePassesReaderErrors(t *testing.T) {
	boom := errors.New("boom")
	_, _, err := ReadFrame(readerFunc(func([]byte) (int, error) { return 0, boom }), nil, 0)
	if !errors.Is(err, boom) || errors.Is(err, ErrProtocol) {
		t.Fatalf("err = %v, want boom unwrapped", err)
	}
}
