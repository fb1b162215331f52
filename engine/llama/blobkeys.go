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
	sb, err := parseSeqBlob(blob)
	if err != nil {
		return keyBlob{}, err
	}
	switch len(sb.streams) {
	case 0:
		return keyBlob{}, fmt.Errorf("%w: no cells", ErrBlobFormat)
	case 1:
	default:
		return keyBlob{}, fmt.Errorf("%w: cells in more than one KV stream", ErrBlobFormat)
	}
	st := sb.streams[0]
	if len(st.k) != layers {
		return keyBlob{}, fmt.Errorf("%w: %d layers, the model has %d", ErrBlobFormat, len(st.k), layers)
	}
	kb := keyBlob{rowEl: rowEl, pos: st.pos}
	cells := len(st.pos)
	for l, k := range st.k {
		if want := int(C.ctxd_row_bytes(C.int(k.typ), C.int64_t(rowEl))); want == 0 || want != k.rowBytes {
			return keyBlob{}, fmt.Errorf("%w: layer %d K rows of %d bytes, type %d holds %d values in %d", ErrBlobFormat, l, k.rowBytes, k.typ, rowEl, want)
		}
		kb.layers = append(kb.layers, keyLayer{typ: k.typ, rowBytes: k.rowBytes, data: blob[k.off : k.off+k.rowBytes*cells]})
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
