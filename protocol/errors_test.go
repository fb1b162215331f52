package protocol

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ctxd/ctxd/protocol/ctxdpb"
)

// TestEveryCodeHasOneSentinel fails when ctxd.proto gains an ErrorCode
// without a sentinel here.
func TestEveryCodeHasOneSentinel(t *testing.T) {
	seen := map[error]ctxdpb.ErrorCode{}
	for n := range ctxdpb.ErrorCode_name {
		code := ctxdpb.ErrorCode(n)
		if code == ctxdpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
			continue
		}
		s := ErrorForCode(code)
		if s == ErrInternal && code != ctxdpb.ErrorCode_ERROR_CODE_INTERNAL {
			t.Errorf("%v has no sentinel", code)
			continue
		}
		if prev, dup := seen[s]; dup {
			t.Errorf("%v and %v share the sentinel %v", prev, code, s)
		}
		seen[s] = code
	}
	if ErrorForCode(ctxdpb.ErrorCode_ERROR_CODE_UNSPECIFIED) != ErrInternal || ErrorForCode(99) != ErrInternal {
		t.Error("UNSPECIFIED and unknown codes must map to ErrInternal")
	}
}

func TestSentinelRoundTrip(t *testing.T) {
	for code := ctxdpb.ErrorCode_ERROR_CODE_PROTOCOL; code <= lastCode; code++ {
		s := ErrorForCode(code)
		for _, err := range []error{s, fmt.Errorf("session 7: %w", s)} {
			w := ToWire(err)
			if w.GetCode() != code || w.GetMessage() != err.Error() {
				t.Fatalf("ToWire(%v) = %v, want code %v", err, w, code)
			}
			back := FromWire(w)
			if !errors.Is(back, s) {
				t.Fatalf("FromWire(ToWire(%v)) = %v does not match its sentinel", err, back)
			}
			var re *RemoteError
			if !errors.As(back, &re) || re.Code != code {
				t.Fatalf("FromWire gave %#v", back)
			}
			if !proto.Equal(ToWire(back), w) {
				t.Fatalf("ToWire(FromWire(%v)) = %v", w, ToWire(back))
			}
			if back.Error() != err.Error() {
				t.Fatalf("text changed across the wire: %q -> %q", err, back)
			}
		}
	}
}

func TestOverflowRoundTrip(t *testing.T) {
	oe := OverflowError{PromptTokens: 2300, ContextTokens: 2048}
	const text = "context overflow: prompt needs 2300 tokens, context holds 2048"
	if oe.Error() != text || !errors.Is(oe, ErrContextOverflow) {
		t.Fatalf("OverflowError: %q", oe)
	}
	for _, err := range []error{oe, &oe, fmt.Errorf("ensure prefix: %w", oe), fmt.Errorf("ensure prefix: %w", &oe)} {
		w := ToWire(err)
		if w.GetCode() != ctxdpb.ErrorCode_ERROR_CODE_CONTEXT_OVERFLOW ||
			w.GetOverflow().GetPromptTokens() != 2300 || w.GetOverflow().GetContextTokens() != 2048 {
			t.Fatalf("ToWire(%v) = %v", err, w)
		}
		back := FromWire(w)
		var re *RemoteError
		if !errors.Is(back, ErrContextOverflow) || !errors.As(back, &re) ||
			re.Overflow == nil || *re.Overflow != (OverflowInfo{PromptTokens: 2300, ContextTokens: 2048}) {
			t.Fatalf("FromWire(%v) = %#v", w, back)
		}
		if back.Error() != err.Error() {
			t.Fatalf("text %q, want %q", back, err)
		}
		if !proto.Equal(ToWire(back), w) {
			t.Fatalf("ToWire(FromWire(%v)) = %v", w, ToWire(back))
		}
	}
	// The numbers alone make the message.
	re := &RemoteError{Code: ctxdpb.ErrorCode_ERROR_CODE_CONTEXT_OVERFLOW, Overflow: &OverflowInfo{PromptTokens: 2300, ContextTokens: 2048}}
	if re.Error() != text {
		t.Fatalf("got %q", re)
	}
	re.Message = "context overflow"
	if re.Error() != text {
		t.Fatalf("got %q", re)
	}
}

func TestRemoteErrorText(t *testing.T) {
	cases := []struct {
		re   RemoteError
		want string
	}{
		{RemoteError{Code: ctxdpb.ErrorCode_ERROR_CODE_NOT_FOUND}, "not found"},
		{RemoteError{Code: ctxdpb.ErrorCode_ERROR_CODE_NOT_FOUND, Message: "session 7"}, "not found: session 7"},
		{RemoteError{Code: ctxdpb.ErrorCode_ERROR_CODE_NOT_FOUND, Message: "session 7 not found"}, "session 7 not found"},
		{RemoteError{Code: ctxdpb.ErrorCode_ERROR_CODE_INTERNAL, Message: "decode failed"}, "internal error: decode failed"},
		{RemoteError{Code: 99, Message: "from the future"}, "error code 99: from the future"},
		{RemoteError{Code: 0}, "error code 0"},
		{RemoteError{Code: ctxdpb.ErrorCode_ERROR_CODE_CONTEXT_OVERFLOW, Message: "while prefilling",
			Overflow: &OverflowInfo{PromptTokens: 10, ContextTokens: 8}},
			"context overflow: prompt needs 10 tokens, context holds 8: while prefilling"},
	}
	for _, c := range cases {
		if got := c.re.Error(); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.re, got, c.want)
		}
	}
}

func TestUnknownCodePassesThrough(t *testing.T) {
	w := &ctxdpb.Error{Code: 99, Message: "from the future"}
	back := FromWire(w)
	if !errors.Is(back, ErrInternal) {
		t.Fatalf("unknown code does not unwrap to ErrInternal: %v", back)
	}
	if !proto.Equal(ToWire(back), w) {
		t.Fatalf("ToWire(FromWire(%v)) = %v", w, ToWire(back))
	}
	// A wrapped RemoteError keeps its code and overflow; the message grows.
	wrapped := fmt.Errorf("proxy: %w", back)
	if got := ToWire(wrapped); got.GetCode() != 99 || got.GetMessage() != wrapped.Error() {
		t.Fatalf("wrapped: %v", got)
	}
}

func TestToWireMapping(t *testing.T) {
	peerMalformed := func() error {
		_, _, err := ReadFrame(bytes.NewReader(frameBytes(0, 1, 9, 0, nil)), nil, 0)
		return err
	}()
	peerTooLarge := func() error {
		_, _, err := ReadFrame(bytes.NewReader(frameBytes(11, 1, TypeData, 0, nil)), nil, 10)
		return err
	}()
	c := NewChannel(&discardConn{}, 10)
	localTooLarge := c.WriteFrame(Header{StreamID: 1, Type: TypeData}, make([]byte, 11))
	localMalformed := c.WriteFrame(Header{StreamID: 0, Type: TypeData}, nil)

	cases := []struct {
		err  error
		want ctxdpb.ErrorCode
	}{
		{context.Canceled, ctxdpb.ErrorCode_ERROR_CODE_CANCELLED},
		{fmt.Errorf("decode: %w", context.Canceled), ctxdpb.ErrorCode_ERROR_CODE_CANCELLED},
		{context.DeadlineExceeded, ctxdpb.ErrorCode_ERROR_CODE_CANCELLED},
		{errors.New("something broke"), ctxdpb.ErrorCode_ERROR_CODE_INTERNAL},
		{peerMalformed, ctxdpb.ErrorCode_ERROR_CODE_PROTOCOL},
		{peerTooLarge, ctxdpb.ErrorCode_ERROR_CODE_PROTOCOL},
		{localTooLarge, ctxdpb.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED},
		{localMalformed, ctxdpb.ErrorCode_ERROR_CODE_INTERNAL},
		{fmt.Errorf("%w", fmt.Errorf("%w: compat key differs", ErrIncompatible)), ctxdpb.ErrorCode_ERROR_CODE_INCOMPATIBLE},
		{fmt.Errorf("no: %w", ErrVersion), ctxdpb.ErrorCode_ERROR_CODE_VERSION},
		// Two sentinels in the chain (%w: %w keeps the cause): the
		// outermost, the one the server chose for the wire, wins.
		{fmt.Errorf("%w: %w", ErrInternal, fmt.Errorf("%w: waiting", ErrCancelled)), ctxdpb.ErrorCode_ERROR_CODE_INTERNAL},
		{fmt.Errorf("%w: %w", ErrInvalidManifest, ErrProtocol), ctxdpb.ErrorCode_ERROR_CODE_INVALID_MANIFEST},
		{fmt.Errorf("%w: %w", ErrResourceExhausted, localTooLarge), ctxdpb.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED},
		{fmt.Errorf("%w: %w", ErrCancelled, context.Canceled), ctxdpb.ErrorCode_ERROR_CODE_CANCELLED},
		{fmt.Errorf("%w: %w", ErrInternal, OverflowError{PromptTokens: 9, ContextTokens: 8}), ctxdpb.ErrorCode_ERROR_CODE_INTERNAL},
		{fmt.Errorf("%w: %w", ErrNotFound, peerMalformed), ctxdpb.ErrorCode_ERROR_CODE_NOT_FOUND},
	}
	for _, c := range cases {
		if got := ToWire(c.err).GetCode(); got != c.want {
			t.Errorf("ToWire(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if ToWire(nil) != nil || FromWire(nil) != nil {
		t.Error("nil must map to nil")
	}
	if err := FromWire(&ctxdpb.Error{}); err == nil || !errors.Is(err, ErrInternal) {
		t.Errorf("zero Error: %v", err)
	}
}
