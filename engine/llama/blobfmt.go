package llama

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sequence-state blobs (llama_state_seq_get_data) store K token by token,
// but without flash attention they store V transposed: per layer, each of
// the n_embd_v channels as one run over all cells. Values of one token
// then sit n_cells elements apart, which hides their common scale from a
// compressor. TokenMajor rewrites such V sections token by token and
// FromTokenMajor restores the exact original bytes; nothing else in the
// blob moves. The layout parsed here is llama.cpp's (llama_kv_cache::
// state_write): u32 n_stream, then per stream u32 cell_count, the cells'
// metadata (i32 pos, u32 n_seq, n_seq × i32), u32 v_trans, u32 n_layer,
// per layer K (i32 type, u64 row bytes, rows), then per layer V (not
// transposed: like K; transposed: i32 type, u32 element bytes, u32 n_embd,
// n_embd runs of cell_count elements).

// ErrBlobFormat reports a blob that does not parse as a sequence state.
var ErrBlobFormat = errors.New("llama: unrecognised sequence-state blob")

// seqBlob is a parsed sequence-state blob: where each part sits, nothing
// copied. It is the one reader of the layout above; TokenMajor,
// FromTokenMajor and RangeKeys (blobkeys.go) all go through parseSeqBlob.
type seqBlob struct {
	streams []blobStream // the streams that hold cells
}

// blobStream is one KV stream's cells inside a blob.
type blobStream struct {
	pos    []int32    // the cells' positions, in cell order
	vTrans bool       // V stored channel by channel
	k      []kSection // per layer
	v      []vSection // per layer
}

// kSection is one layer's K rows: cells rows of rowBytes bytes of ggml
// type typ, starting at off.
type kSection struct {
	typ           int32
	rowBytes, off int
}

// vSection is one layer's V data: transposed (channels runs of cells
// elements of elem bytes) or, when channels is 0, cells rows of rowBytes.
type vSection struct {
	off, channels, cells, elem int
	rowBytes                   int
}

// parseSeqBlob parses blob; every byte must belong to a part.
func parseSeqBlob(blob []byte) (seqBlob, error) {
	r := blobReader{b: blob}
	var out seqBlob
	nStream := r.u32()
	for s := uint32(0); s < nStream && r.err == nil; s++ {
		cells := int(r.u32())
		if cells == 0 || r.err != nil {
			continue
		}
		if cells > len(blob) {
			return seqBlob{}, fmt.Errorf("%w: %d cells in a blob of %d bytes", ErrBlobFormat, cells, len(blob))
		}
		st := blobStream{pos: make([]int32, cells)}
		for i := 0; i < cells && r.err == nil; i++ {
			st.pos[i] = int32(r.u32())
			n := int(r.u32())
			r.skip(4 * n)
		}
		st.vTrans = r.u32() != 0
		layers := int(r.u32())
		for l := 0; l < layers && r.err == nil; l++ {
			typ := int32(r.u32())
			row := int(r.u64())
			off := r.off
			r.skip(row * cells)
			if r.err == nil {
				st.k = append(st.k, kSection{typ: typ, rowBytes: row, off: off})
			}
		}
		for l := 0; l < layers && r.err == nil; l++ {
			r.skip(4)
			if !st.vTrans {
				row := int(r.u64())
				off := r.off
				r.skip(row * cells)
				if r.err == nil {
					st.v = append(st.v, vSection{off: off, cells: cells, rowBytes: row})
				}
				continue
			}
			elem := int(r.u32())
			channels := int(r.u32())
			sec := vSection{off: r.off, channels: channels, cells: cells, elem: elem}
			r.skip(channels * cells * elem)
			if r.err == nil {
				st.v = append(st.v, sec)
			}
		}
		if r.err == nil {
			out.streams = append(out.streams, st)
		}
	}
	if r.err == nil && r.off != len(blob) {
		r.err = fmt.Errorf("%d trailing bytes", len(blob)-r.off)
	}
	if r.err != nil {
		return seqBlob{}, fmt.Errorf("%w: %w", ErrBlobFormat, r.err)
	}
	return out, nil
}

// transposedV parses blob and returns its transposed V sections.
func transposedV(blob []byte) ([]vSection, error) {
	sb, err := parseSeqBlob(blob)
	if err != nil {
		return nil, err
	}
	var out []vSection
	for _, st := range sb.streams {
		if st.vTrans {
			out = append(out, st.v...)
		}
	}
	return out, nil
}

// TokenMajor returns blob with every transposed V section stored token by
// token, and whether it changed anything (false for blobs without
// transposed V, e.g. with flash attention, and for blobs that do not
// parse; out is then blob itself).
func TokenMajor(blob []byte) (out []byte, changed bool) {
	secs, err := transposedV(blob)
	if err != nil || len(secs) == 0 {
		return blob, false
	}
	out = make([]byte, len(blob))
	copy(out, blob)
	for _, s := range secs {
		transpose(out[s.off:], blob[s.off:], s.channels, s.cells, s.elem)
	}
	return out, true
}

// FromTokenMajor inverts TokenMajor.
func FromTokenMajor(blob []byte) ([]byte, error) {
	secs, err := transposedV(blob) // the headers are unchanged
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(blob))
	copy(out, blob)
	for _, s := range secs {
		transpose(out[s.off:], blob[s.off:], s.cells, s.channels, s.elem)
	}
	return out, nil
}

// transpose writes the rows×cols matrix of elem-byte elements in src
// (row-major) to dst as cols×rows.
func transpose(dst, src []byte, rows, cols, elem int) {
	if elem == 2 {
		for r := 0; r < rows; r++ {
			s := src[2*r*cols : 2*(r+1)*cols]
			for c := 0; c < cols; c++ {
				d := 2 * (c*rows + r)
				dst[d], dst[d+1] = s[2*c], s[2*c+1]
			}
		}
		return
	}
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			copy(dst[(c*rows+r)*elem:(c*rows+r+1)*elem], src[(r*cols+c)*elem:(r*cols+c+1)*elem])
		}
	}
}

// blobReader reads little-endian fields, remembering the first error.
type blobReader struct {
	b   []byte
	off int
	err error
}

func (r *blobReader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || r.off+n > len(r.b) {
		r.err = fmt.Errorf("field of %d bytes at %d runs past %d", n, r.off, len(r.b))
		return false
	}
	return true
}

func (r *blobReader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *blobReader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	if v > uint64(len(r.b)) {
		r.err = fmt.Errorf("row of %d bytes in a blob of %d", v, len(r.b))
	}
	return v
}

func (r *blobReader) skip(n int) {
	if r.need(n) {
		r.off += n
	}
}
