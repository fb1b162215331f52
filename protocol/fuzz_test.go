package protocol

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/protocol/ctxdpb"
)

// FuzzReadFrame feeds arbitrary bytes to ReadFrame, frame after frame, and
// decodes each payload as the message its type carries. Nothing may panic;
// every accepted frame must be valid and re-encode to the bytes it came
// from; every failure must be io.EOF or a frame error.
func FuzzReadFrame(f *testing.F) {
	const limit = 1 << 12
	hello, _ := proto.Marshal(&ctxdpb.Request{Body: &ctxdpb.Request_Hello{Hello: &ctxdpb.HelloRequest{MinVersion: 1, MaxVersion: 1, ClientName: "fuzz"}}})
	tok, _ := proto.Marshal(&ctxdpb.StreamEvent{Body: &ctxdpb.StreamEvent_Token{Token: &ctxdpb.TokenEvent{Token: 7, Piece: "x", Logits: []float32{1, 2}}}})
	resp, _ := proto.Marshal(&ctxdpb.Response{Error: &ctxdpb.Error{Code: ctxdpb.ErrorCode_ERROR_CODE_CONTEXT_OVERFLOW, Overflow: &ctxdpb.Overflow{PromptTokens: 3, ContextTokens: 2}}})
	seeds := [][]byte{
		nil,
		{0},
		frameBytes(uint32(len(hello)), 1, TypeRequest, 0, hello),
		frameBytes(uint32(len(tok)), 1, TypeData, 0, tok),
		frameBytes(uint32(len(resp)), 0, TypeResponse, FlagEndStream, resp),
		frameBytes(0, 1, TypeCancel, 0, nil),
		append(frameBytes(uint32(len(tok)), 2, TypeData, 0, tok), frameBytes(0, 2, TypeCancel, 0, nil)...),
		frameBytes(0, 0, TypeRequest, 0, nil),
		frameBytes(0, 1, 0, 0, nil),
		frameBytes(0, 1, TypeData, 0x80, nil),
		frameBytes(limit+1, 1, TypeData, 0, nil),
		frameBytes(^uint32(0), 1, TypeData, 0, nil),
		frameBytes(5, 1, TypeRequest, 0, []byte{0x0A, 0x05}),
		frameBytes(3, 1, TypeRequest, 0, []byte{0x0A, 0x05, 0x01}),
		frameBytes(2, 1, TypeData, 0, []byte{0xFF, 0xFF}),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var buf []byte
		for consumed := 0; ; {
			h, p, err := ReadFrame(r, buf, limit)
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrMalformedFrame) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				if err != io.EOF && !errors.Is(err, ErrProtocol) {
					t.Fatalf("peer frame error %v does not match ErrProtocol", err)
				}
				if err == io.EOF && consumed != len(data) {
					t.Fatalf("io.EOF with %d of %d bytes consumed", consumed, len(data))
				}
				return
			}
			if h.Validate() != nil || h.Length > limit || int(h.Length) != len(p) {
				t.Fatalf("accepted an invalid frame %v with %d payload bytes", h, len(p))
			}
			n := HeaderSize + len(p)
			if !bytes.Equal(append(AppendHeader(nil, h), p...), data[consumed:consumed+n]) {
				t.Fatalf("frame %v does not re-encode to its input", h)
			}
			consumed += n
			if m := PayloadFor(h.Type); m != nil {
				if err := Unmarshal(h, p, m); err != nil && !errors.Is(err, ErrProtocol) {
					t.Fatalf("Unmarshal error %v does not match ErrProtocol", err)
				}
			}
			buf = p
		}
	})
}
