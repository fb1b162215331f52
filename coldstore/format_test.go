package coldstore

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestBlockFileLayout(t *testing.T) {
	s, _ := openStore(t, Config{Dir: t.TempDir()})
	b := makeBlock(7, 3001)
	mustPut(t, s, b)
	raw, err := os.ReadFile(s.blockPath(b.key))
	if err != nil {
		t.Fatal(err)
	}
	if string(raw[:8]) != blockMagic || binary.LittleEndian.Uint32(raw[8:]) != FormatVersion {
		t.Fatalf("prefix %q version %d", raw[:8], binary.LittleEndian.Uint32(raw[8:]))
	}
	hl := int(binary.LittleEndian.Uint32(raw[12:]))
	pl := int(binary.LittleEndian.Uint64(raw[16:]))
	if len(raw) != prefixLen+hl+pl {
		t.Fatalf("file %d bytes, framing %d+%d+%d", len(raw), prefixLen, hl, pl)
	}
	if crc(raw[prefixLen+hl:]) != binary.LittleEndian.Uint32(raw[24:]) {
		t.Fatal("payload CRC32C mismatch")
	}
	h, err := decodeBlockHeader(raw[prefixLen:prefixLen+hl], int64(pl))
	if err != nil {
		t.Fatal(err)
	}
	if h.key != b.key || h.rawLen != int64(len(b.blob)) || !metaEqual(h.meta, b.meta) || h.chunkRaw != defaultChunkRaw {
		t.Fatalf("header %+v", h)
	}
	if st := s.Stats(); st.Bytes != int64(len(raw)) || st.WrittenBytes != int64(len(raw)) {
		t.Fatalf("stats bytes %d written %d, file %d", st.Bytes, st.WrittenBytes, len(raw))
	}
}

func TestReadFrameChecks(t *testing.T) {
	dir := t.TempDir()
	header := []byte("header bytes")
	payload := []byte("payload bytes")
	good := append(encodePrefix(snapMagic, header, payload), payload...)
	for _, tc := range []struct {
		name string
		data []byte
		kind string
		is   error
	}{
		{"empty", nil, KindTruncated, ErrCorrupt},
		{"magic-only", []byte(snapMagic[:5]), KindTruncated, ErrCorrupt},
		{"short-foreign", []byte("xy"), KindForeign, ErrCorrupt},
		{"prefix-cut", good[:20], KindTruncated, ErrCorrupt},
		{"header-cut", good[:prefixLen+3], KindTruncated, ErrCorrupt},
		{"payload-cut", good[:len(good)-1], KindTruncated, ErrCorrupt},
		{"trailing", append(append([]byte(nil), good...), 0), KindSize, ErrCorrupt},
		{"other-magic", append([]byte(blockMagic), good[8:]...), KindForeign, ErrCorrupt},
		{"version", func() []byte {
			b := append([]byte(nil), good...)
			binary.LittleEndian.PutUint32(b[8:], 99)
			return b
		}(), KindVersion, ErrVersion},
		{"header-flip", func() []byte { b := append([]byte(nil), good...); b[prefixLen+1] ^= 1; return b }(), KindChecksum, ErrCorrupt},
		{"payload-flip", func() []byte { b := append([]byte(nil), good...); b[len(b)-1] ^= 1; return b }(), KindChecksum, ErrCorrupt},
		{"length-flip", func() []byte { b := append([]byte(nil), good...); b[12] ^= 1; return b }(), KindChecksum, ErrCorrupt},
	} {
		p := filepath.Join(dir, tc.name)
		os.WriteFile(p, tc.data, 0o600)
		_, err := readFrameFile(p, snapMagic, true, nil)
		var fe *fileError
		if !errors.As(err, &fe) || fe.kind != tc.kind || !errors.Is(err, tc.is) {
			t.Errorf("%s: %v, want kind %s", tc.name, err, tc.kind)
		}
	}
	p := filepath.Join(dir, "good")
	os.WriteFile(p, good, 0o600)
	fr, err := readFrameFile(p, snapMagic, true, nil)
	if err != nil || string(fr.header) != string(header) || string(fr.payload) != string(payload) {
		t.Fatalf("good frame: %v", err)
	}
	if _, err := readFrameFile(filepath.Join(dir, "none"), snapMagic, true, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestBlockHeaderRejects(t *testing.T) {
	h := blockHeader{key: Key{1}, meta: BlockMeta{ElemBytes: 2, Tokens: []int32{1, 2}, Segment: "s"}, rawLen: 10, chunkRaw: defaultChunkRaw, table: []uint32{5 | rawChunkFlag, 5 | rawChunkFlag}}
	enc := encodeBlockHeader(h)
	if _, err := decodeBlockHeader(enc, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := decodeBlockHeader(enc, 11); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("payload length mismatch: %v", err)
	}
	if _, err := decodeBlockHeader(enc[:len(enc)-1], 10); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short header: %v", err)
	}
	if _, err := decodeBlockHeader(append(enc, 0), 10); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("long header: %v", err)
	}
	bad := h
	bad.meta.ElemBytes = 3
	if _, err := decodeBlockHeader(encodeBlockHeader(bad), 10); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("element size 3: %v", err)
	}
	bad = h
	bad.table = bad.table[:1]
	if _, err := decodeBlockHeader(encodeBlockHeader(bad), 5); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short table: %v", err)
	}
}

// FuzzBlockFile feeds damaged block files to the read path: it must
// reject them with a *fileError (or return the original block), never
// panic.
func FuzzBlockFile(f *testing.F) {
	dir := f.TempDir()
	s, _, err := Open(context.Background(), Config{Dir: filepath.Join(dir, "store")})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	b := makeBlock(1, 5000)
	b.meta.Tokens = b.meta.Tokens[:3]
	mustPut(f, s, b)
	good, _ := os.ReadFile(s.blockPath(b.key))
	f.Add(good, 0, byte(0))
	f.Add(good, 40, byte(1))
	f.Add(good, len(good)-1, byte(0x80))
	f.Add(good[:100], 0, byte(0))
	f.Fuzz(func(t *testing.T, data []byte, at int, x byte) {
		if len(data) > 0 {
			data = append([]byte(nil), data...)
			data[(at%len(data)+len(data))%len(data)] ^= x
		}
		p := s.blockPath(b.key)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := checkBlockFile(p, b.key, true); err != nil {
			var fe *fileError
			if !errors.As(err, &fe) {
				t.Fatalf("not a fileError: %v", err)
			}
		}
		h, blob, err := s.readBlock(context.Background(), p, b.key, nil)
		if err == nil && (string(blob) != string(b.blob) || !metaEqual(h.meta, b.meta)) {
			t.Fatal("a damaged file read back as a different block")
		}
	})
}
