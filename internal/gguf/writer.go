package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Writer writes a GGUF file in one pass: NewWriter writes the header,
// metadata and tensor descriptions; WriteTensor then streams each
// tensor's data in the order given, padding between tensors; Close checks
// that every tensor was written and flushes.
type Writer struct {
	bw      *bufio.Writer
	n       uint64 // bytes written so far
	align   uint64
	tensors []TensorInfo
	sizes   []uint64
	next    int    // index of the next tensor to write
	header  uint64 // header length, padding included
	err     error
}

// NewWriter writes the header of a version-3 GGUF file with kvs and the
// descriptions of tensors to w. Tensor offsets are computed here (each
// tensor follows the previous one, aligned); the Offset fields given are
// ignored. Errors wrap ErrInvalid for input that cannot be written.
func NewWriter(w io.Writer, kvs []KV, tensors []TensorInfo) (*Writer, error) {
	align, err := alignmentOf(kvs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	gw := &Writer{bw: bufio.NewWriterSize(w, 1<<20), align: align}
	seenKey := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		if seenKey[kv.Key] {
			return nil, fmt.Errorf("%w: metadata key %q appears twice", ErrInvalid, kv.Key)
		}
		seenKey[kv.Key] = true
		if err := checkValue(kv.Value, 0); err != nil {
			return nil, fmt.Errorf("%w: metadata %q: %v", ErrInvalid, kv.Key, err)
		}
	}
	seenTensor := make(map[string]bool, len(tensors))
	var off uint64
	for _, t := range tensors {
		if seenTensor[t.Name] {
			return nil, fmt.Errorf("%w: tensor %q appears twice", ErrInvalid, t.Name)
		}
		seenTensor[t.Name] = true
		size, err := t.Size()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		t.Dims = append([]uint64(nil), t.Dims...)
		t.Offset = off
		gw.tensors = append(gw.tensors, t)
		gw.sizes = append(gw.sizes, size)
		off = alignUp(off+size, align)
	}

	gw.bytes([]byte(Magic))
	gw.u32(Version)
	gw.u64(uint64(len(tensors)))
	gw.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		gw.str(kv.Key)
		typ, _ := TypeOf(kv.Value)
		gw.u32(uint32(typ))
		gw.value(kv.Value)
	}
	for _, t := range gw.tensors {
		gw.str(t.Name)
		gw.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			gw.u64(d)
		}
		gw.u32(uint32(t.Type))
		gw.u64(t.Offset)
	}
	gw.pad()
	if gw.err != nil {
		return nil, gw.err
	}
	gw.header = gw.n
	return gw, nil
}

// Tensors returns the descriptions as written, offsets included.
func (w *Writer) Tensors() []TensorInfo { return append([]TensorInfo(nil), w.tensors...) }

// HeaderSize is the length of the header, padding included: where the
// data section starts.
func (w *Writer) HeaderSize() uint64 { return w.header }

// Size is the file's total size once every tensor is written.
func (w *Writer) Size() uint64 {
	if len(w.tensors) == 0 {
		return w.header
	}
	last := len(w.tensors) - 1
	return w.header + alignUp(w.tensors[last].Offset+w.sizes[last], w.align)
}

// Next returns the description of the tensor WriteTensor expects next.
func (w *Writer) Next() (TensorInfo, bool) {
	if w.next >= len(w.tensors) {
		return TensorInfo{}, false
	}
	return w.tensors[w.next], true
}

// WriteTensor copies the next tensor's data from src, which must yield
// exactly its size in bytes, then pads to the alignment (after the last
// tensor too, as llama.cpp does).
func (w *Writer) WriteTensor(src io.Reader) error {
	if w.err != nil {
		return w.err
	}
	if w.next >= len(w.tensors) {
		return fmt.Errorf("%w: all %d tensors already written", ErrInvalid, len(w.tensors))
	}
	t, size := w.tensors[w.next], w.sizes[w.next]
	k, err := io.Copy(w.bw, io.LimitReader(src, int64(size)))
	w.n += uint64(k)
	if err != nil {
		w.err = fmt.Errorf("tensor %q: %w", t.Name, err)
		return w.err
	}
	if uint64(k) != size {
		w.err = fmt.Errorf("%w: tensor %q: %d bytes of data, want %d", ErrInvalid, t.Name, k, size)
		return w.err
	}
	var probe [1]byte
	if m, _ := src.Read(probe[:]); m > 0 {
		w.err = fmt.Errorf("%w: tensor %q: more than %d bytes of data", ErrInvalid, t.Name, size)
		return w.err
	}
	w.next++
	w.pad()
	return w.err
}

// Close checks that every tensor was written and flushes; it does not
// close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.next < len(w.tensors) {
		return fmt.Errorf("%w: %d of %d tensors written (next: %q)", ErrInvalid, w.next, len(w.tensors), w.tensors[w.next].Name)
	}
	return w.bw.Flush()
}

func (w *Writer) pad() {
	if p := alignUp(w.n, w.align) - w.n; p > 0 {
		w.bytes(make([]byte, p))
	}
}

func (w *Writer) bytes(p []byte) {
	if w.err != nil {
		return
	}
	k, err := w.bw.Write(p)
	w.n += uint64(k)
	w.err = err
}

func (w *Writer) u8(v uint8) { w.bytes([]byte{v}) }
func (w *Writer) u16(v uint16) {
	w.bytes(binary.LittleEndian.AppendUint16(nil, v))
}
func (w *Writer) u32(v uint32) {
	w.bytes(binary.LittleEndian.AppendUint32(nil, v))
}
func (w *Writer) u64(v uint64) {
	w.bytes(binary.LittleEndian.AppendUint64(nil, v))
}
func (w *Writer) str(s string) {
	w.u64(uint64(len(s)))
	w.bytes([]byte(s))
}

// value writes v, already checked by checkValue.
func (w *Writer) value(v any) {
	switch x := v.(type) {
	case uint8:
		w.u8(x)
	case int8:
		w.u8(uint8(x))
	case uint16:
		w.u16(x)
	case int16:
		w.u16(uint16(x))
	case uint32:
		w.u32(x)
	case int32:
		w.u32(uint32(x))
	case float32:
		w.u32(math.Float32bits(x))
	case bool:
		if x {
			w.u8(1)
		} else {
			w.u8(0)
		}
	case string:
		w.str(x)
	case uint64:
		w.u64(x)
	case int64:
		w.u64(uint64(x))
	case float64:
		w.u64(math.Float64bits(x))
	case Array:
		w.u32(uint32(x.Elem))
		w.u64(uint64(len(x.Items)))
		for _, it := range x.Items {
			w.value(it)
		}
	}
}

// checkValue reports a value the writer cannot encode: a Go type GGUF has
// no tag for, an array item whose type differs from the array's Elem, or
// arrays nested too deep.
func checkValue(v any, depth int) error {
	typ, ok := TypeOf(v)
	if !ok {
		return fmt.Errorf("Go type %T has no GGUF type", v)
	}
	if typ != TypeArray {
		return nil
	}
	if depth >= maxNesting {
		return fmt.Errorf("arrays nested deeper than %d", maxNesting)
	}
	a := v.(Array)
	if a.Elem > TypeFloat64 {
		return fmt.Errorf("unknown array element type %d", uint32(a.Elem))
	}
	for i, it := range a.Items {
		if t, _ := TypeOf(it); t != a.Elem {
			return fmt.Errorf("array of %s: item %d is %T", a.Elem, i, it)
		}
		if err := checkValue(it, depth+1); err != nil {
			return err
		}
	}
	return nil
}
