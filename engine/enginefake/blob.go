package enginefake

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"

	"github.com/ctxd/ctxd/engine"
)

// A blob is a header, the cells, and a checksum:
//
//	"FKV1" | layout u8 | 3 zero bytes | u32 cells | u32 cell bytes | u64 settings
//	cells × cell bytes: each i32 position | i32 token | u64 state | padding
//	u32 CRC-32 (IEEE) of everything before it
//
// With layout records the cells follow one another. With layout planes
// (contexts without flash attention, as llama.cpp stores V transposed) the
// cells × (cell bytes / 2) matrix of 2-byte elements is stored transposed:
// element j of every cell, then element j+1. Codec.TokenMajor rewrites a
// planes body as records, leaving header and checksum alone (the checksum
// covers the layout the header names, so an unrestored rewrite is refused
// by InsertRange); FromTokenMajor transposes it back.
const (
	blobMagic    = "FKV1"
	headerBytes  = 24
	trailerBytes = 4
	cellMeta     = 16 // position, token, state
	layoutPlanes = 0
	layoutRecord = 1
)

// settingsHash keys blobs by the model and the settings that change KV
// bytes, as llama.cpp's blobs only load into a context like theirs.
func settingsHash(digest string, o engine.ContextOptions) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(digest); i++ {
		h = (h ^ uint64(digest[i])) * 0x100000001b3
	}
	fa := uint64(0)
	if o.FlashAttention {
		fa = 1
	}
	return mix(h ^ uint64(o.KVType)<<1 ^ fa)
}

type posCell struct {
	pos int
	cell
}

// encode writes cells (ascending positions) as a blob of c's settings.
func (c *Context) encode(cells []posCell) []byte {
	layout := byte(layoutPlanes)
	if c.opts.FlashAttention {
		layout = layoutRecord
	}
	n, cb := len(cells), c.cellBytes
	out := make([]byte, headerBytes+n*cb+trailerBytes)
	copy(out, blobMagic)
	out[4] = layout
	binary.LittleEndian.PutUint32(out[8:], uint32(n))
	binary.LittleEndian.PutUint32(out[12:], uint32(cb))
	binary.LittleEndian.PutUint64(out[16:], c.settings)
	rec := out[headerBytes : headerBytes+n*cb]
	for i, pc := range cells {
		r := rec[i*cb : (i+1)*cb]
		binary.LittleEndian.PutUint32(r[0:], uint32(int32(pc.pos)))
		binary.LittleEndian.PutUint32(r[4:], uint32(pc.tok))
		binary.LittleEndian.PutUint64(r[8:], pc.state)
		for k := cellMeta; k < cb; k++ {
			r[k] = byte(pc.state>>(8*(k%8))) ^ byte(k)
		}
	}
	if layout == layoutPlanes {
		body := append([]byte(nil), rec...)
		transpose(rec, body, n, cb/2, 2)
	}
	binary.LittleEndian.PutUint32(out[len(out)-trailerBytes:], crc32.ChecksumIEEE(out[:len(out)-trailerBytes]))
	return out
}

// header parses a blob's header, checking its length.
func header(blob []byte) (layout byte, n, cb int, err error) {
	if len(blob) < headerBytes+trailerBytes || !bytes.Equal(blob[:4], []byte(blobMagic)) {
		return 0, 0, 0, fmt.Errorf("%w: not an enginefake blob", engine.ErrInvalidArgument)
	}
	layout = blob[4]
	n = int(binary.LittleEndian.Uint32(blob[8:]))
	cb = int(binary.LittleEndian.Uint32(blob[12:]))
	if (layout != layoutPlanes && layout != layoutRecord) || cb < cellMeta || cb%2 != 0 ||
		int64(n)*int64(cb) != int64(len(blob)-headerBytes-trailerBytes) {
		return 0, 0, 0, fmt.Errorf("%w: malformed enginefake blob header", engine.ErrInvalidArgument)
	}
	return layout, n, cb, nil
}

// decode parses a blob made by a context with c's settings.
func (c *Context) decode(blob []byte) ([]posCell, error) {
	layout, n, cb, err := header(blob)
	if err != nil {
		return nil, err
	}
	want := byte(layoutPlanes)
	if c.opts.FlashAttention {
		want = layoutRecord
	}
	if cb != c.cellBytes || layout != want || binary.LittleEndian.Uint64(blob[16:]) != c.settings {
		return nil, fmt.Errorf("%w: blob made with other settings (foreign model, KV type or attention)", engine.ErrInvalidArgument)
	}
	end := len(blob) - trailerBytes
	if crc32.ChecksumIEEE(blob[:end]) != binary.LittleEndian.Uint32(blob[end:]) {
		return nil, fmt.Errorf("%w: blob checksum mismatch (corrupt, or a token-major rewrite not undone)", engine.ErrInvalidArgument)
	}
	rec := blob[headerBytes:end]
	if layout == layoutPlanes {
		rec = make([]byte, n*cb)
		transpose(rec, blob[headerBytes:end], cb/2, n, 2)
	}
	out := make([]posCell, n)
	for i := range out {
		r := rec[i*cb:]
		out[i] = posCell{pos: int(int32(binary.LittleEndian.Uint32(r[0:]))),
			cell: cell{tok: engine.Token(binary.LittleEndian.Uint32(r[4:])), state: binary.LittleEndian.Uint64(r[8:])}}
		if i > 0 && out[i].pos <= out[i-1].pos {
			return nil, fmt.Errorf("%w: blob positions not ascending", engine.ErrInvalidArgument)
		}
	}
	return out, nil
}

// cellsIn lists the cells of [p0,p1) in position order.
func (c *Context) cellsIn(p0, p1 int) []posCell {
	var out []posCell
	for _, s := range c.seq.Spans() {
		for p := max(s[0], p0); p < min(s[1], p1); p++ {
			out = append(out, posCell{pos: p, cell: c.cells[p]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pos < out[j].pos })
	return out
}

// Codec is the fake's engine.BlobCodec.
type Codec struct{}

// TokenMajor rewrites a planes blob's body cell by cell.
func (Codec) TokenMajor(blob []byte) ([]byte, bool) {
	layout, n, cb, err := header(blob)
	if err != nil || layout != layoutPlanes || n == 0 {
		return blob, false
	}
	out := append([]byte(nil), blob...)
	end := len(blob) - trailerBytes
	transpose(out[headerBytes:end], blob[headerBytes:end], cb/2, n, 2)
	return out, true
}

// FromTokenMajor inverts TokenMajor.
func (Codec) FromTokenMajor(blob []byte) ([]byte, error) {
	layout, n, cb, err := header(blob)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), blob...)
	if layout == layoutPlanes {
		end := len(blob) - trailerBytes
		transpose(out[headerBytes:end], blob[headerBytes:end], n, cb/2, 2)
	}
	return out, nil
}

// transpose writes the rows×cols matrix of elem-byte elements in src
// (row-major) to dst as cols×rows.
func transpose(dst, src []byte, rows, cols, elem int) {
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			copy(dst[(c*rows+r)*elem:(c*rows+r+1)*elem], src[(r*cols+c)*elem:(r*cols+c+1)*elem])
		}
	}
}

var _ engine.BlobCodec = Codec{}
