package llama

/*
#include <stdint.h>
#include "ggml.h"

// ctxd_to_float converts n values of a ggml type to f32 with ggml's own
// type traits; -1 for a type without a conversion.
static int ctxd_to_float(int type, const void *src, float *dst, int64_t n) {
	if (type < 0 || type >= GGML_TYPE_COUNT) return -1;
	const struct ggml_type_traits *tt = ggml_get_type_traits((enum ggml_type)type);
	if (tt->blck_size <= 0 || tt->to_float == NULL || n % tt->blck_size != 0) return -1;
	tt->to_float(src, dst, n);
	return 0;
}

// ctxd_row_bytes is the size of a row of n values of a ggml type, 0 when
// the type has no such rows.
static int64_t ctxd_row_bytes(int type, int64_t n) {
	if (type < 0 || type >= GGML_TYPE_COUNT) return 0;
	const struct ggml_type_traits *tt = ggml_get_type_traits((enum ggml_type)type);
	if (tt->blck_size <= 0 || n % tt->blck_size != 0) return 0;
	return (int64_t)tt->type_size * (n / tt->blck_size);
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// keyBlob is the K part of a sequence-state blob (layout: blobfmt.go):
// the cells' positions in the blob's (KV cell) order and, per layer, the
// cells' K rows as stored.
type keyBlob struct {
	pos    []int32
	layers []keyLayer
	rowEl  int // values per K row: KV heads × head dim
}

// keyLayer is one layer's K rows: cells × rowBytes bytes of ggml type typ.
type keyLayer struct {
	typ      int32
	rowBytes int
	data     []byte
}

func (k keyBlob) cells() int { return len(k.pos) }

// parseKeys reads the K sections of blob, which must be one stream of a
// model with layers layers and rowEl values per K row, and checks that
// the V sections that follow fill the blob exactly.
func parseKeys(blob []byte, layers, rowEl int) (keyBlob, error) {
	r := blobReader{b: blob}
	kb := keyBlob{rowEl: rowEl}
	nStream := r.u32()
	streams := 0
	for s := uint32(0); s < nStream && r.err == nil; s++ {
		cells := int(r.u32())
		if cells == 0 || r.err != nil {
			continue
		}
		if streams++; streams > 1 {
			return keyBlob{}, fmt.Errorf("%w: cells in more than one KV stream", ErrBlobFormat)
		}
		if cells > len(blob) {
			return keyBlob{}, fmt.Errorf("%w: %d cells in a blob of %d bytes", ErrBlobFormat, cells, len(blob))
		}
		kb.pos = make([]int32, cells)
		for i := 0; i < cells && r.err == nil; i++ {
			kb.pos[i] = int32(r.u32())
			n := int(r.u32())
			r.skip(4 * n)
		}
		vTrans := r.u32()
		nl := int(r.u32())
		if r.err == nil && nl != layers {
			return keyBlob{}, fmt.Errorf("%w: %d layers, the model has %d", ErrBlobFormat, nl, layers)
		}
		for l := 0; l < nl && r.err == nil; l++ {
			typ := int32(r.u32())
			row := int(r.u64())
			off := r.off
			r.skip(row * cells)
			if r.err != nil {
				break
			}
			if want := int(C.ctxd_row_bytes(C.int(typ), C.int64_t(rowEl))); want == 0 || want != row {
				return keyBlob{}, fmt.Errorf("%w: layer %d K rows of %d bytes, type %d holds %d values in %d", ErrBlobFormat, l, row, typ, rowEl, want)
			}
			kb.layers = append(kb.layers, keyLayer{typ: typ, rowBytes: row, data: blob[off : off+row*cells]})
		}
		for l := 0; l < nl && r.err == nil; l++ {
			r.skip(4)
			if vTrans == 0 {
				row := r.u64()
				r.skip(int(row) * cells)
				continue
			}
			elem := int(r.u32())
			channels := int(r.u32())
			r.skip(channels * cells * elem)
		}
	}
	if r.err == nil && r.off != len(blob) {
		r.err = fmt.Errorf("%d trailing bytes", len(blob)-r.off)
	}
	if r.err != nil {
		return keyBlob{}, fmt.Errorf("%w: %w", ErrBlobFormat, r.err)
	}
	if streams == 0 {
		return keyBlob{}, fmt.Errorf("%w: no cells", ErrBlobFormat)
	}
	return kb, nil
}

// positionOrder returns, for each position pos0, pos0+1, … in turn, the
// cell holding it; every position must be held by exactly one cell.
func (k keyBlob) positionOrder(pos0 int) ([]int, error) {
	order := make([]int, len(k.pos))
	for i := range order {
		order[i] = -1
	}
	for cell, p := range k.pos {
		row := int(p) - pos0
		if row < 0 || row >= len(order) || order[row] >= 0 {
			return nil, fmt.Errorf("%w: cell %d holds position %d, outside or repeated in [%d,%d)", ErrBlobFormat, cell, p, pos0, pos0+len(order))
		}
		order[row] = cell
	}
	return order, nil
}

// toFloat converts layer l's K rows (cells × rowEl values) into dst.
func (k keyBlob) toFloat(l int, dst []float32) error {
	s := k.layers[l]
	n := k.cells() * k.rowEl
	if len(dst) < n {
		return fmt.Errorf("toFloat: %d values into %d", n, len(dst))
	}
	if s.typ == C.GGML_TYPE_F32 {
		for i := 0; i < n; i++ {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(s.data[4*i:]))
		}
		return nil
	}
	if C.ctxd_to_float(C.int(s.typ), unsafe.Pointer(&s.data[0]), (*C.float)(unsafe.Pointer(&dst[0])), C.int64_t(n)) != 0 {
		return fmt.Errorf("%w: K of ggml type %d cannot be read as floats", ErrBlobFormat, s.typ)
	}
	return nil
}
