package tiers

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/protocol"
)

// Parts that are no engine blob are stored as they are and come back
// byte for byte, concatenated; a damaged envelope is an internal error,
// never wrong bytes.
func TestBlobEnvelopeRoundTrip(t *testing.T) {
	parts := [][]byte{[]byte("first part"), {}, bytes.Repeat([]byte{7}, 1000)}
	enc := EncodeBlob(enginefake.Codec{}, parts)
	if (len(enc)-len(bytes.Join(parts, nil)))%8 != 0 {
		t.Fatalf("header of %d bytes is not 8-byte aligned", len(enc)-len(bytes.Join(parts, nil)))
	}
	got, err := DecodeBlob(enginefake.Codec{}, enc)
	if err != nil || !bytes.Equal(got, bytes.Join(parts, nil)) {
		t.Fatalf("round trip: %v, %d bytes", err, len(got))
	}
	for _, bad := range [][]byte{nil, enc[:12], append([]byte("ctxdkvR1"), enc[8:]...), enc[:len(enc)-1], append(append([]byte(nil), enc...), 0)} {
		if _, err := DecodeBlob(enginefake.Codec{}, bad); !errors.Is(err, protocol.ErrInternal) {
			t.Errorf("damaged envelope (%d bytes): %v, want ErrInternal", len(bad), err)
		}
	}
}

func TestContentKeyCoversPartsInOrder(t *testing.T) {
	var c [32]byte
	cc := Compat("digest", 1, false, 1, "")
	a := ContentKey(cc, c, 0, []byte("ab"), []byte("c"))
	if b := ContentKey(cc, c, 0, []byte("abc")); a != b {
		t.Fatal("the key depends on how bytes are cut into parts")
	}
	if b := ContentKey(cc, c, 1, []byte("abc")); a == b {
		t.Fatal("the key ignores the position")
	}
}
