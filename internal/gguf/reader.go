package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// Open reads the header of the GGUF file at path and checks that every
// tensor's data lies within the file.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	f, err := Read(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := f.CheckSize(st.Size()); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Read parses a GGUF header from r: magic, version, metadata and tensor
// descriptions. Reads are buffered, so r may be consumed past the start
// of the data section (File.DataOffset says where it is). Tensor offsets
// are checked for alignment, and for overlap when the sizes of their
// types are known.
func Read(r io.Reader) (*File, error) {
	d := &decoder{r: bufio.NewReaderSize(r, 1<<16)}
	magic := make([]byte, 4)
	if err := d.full(magic); err != nil {
		return nil, err
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("%w (magic %q)", ErrNotGGUF, magic)
	}
	f := &File{Version: d.u32()}
	if d.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: %d (this reader knows 2 and 3)", ErrVersion, f.Version)
	}
	nTensors, nKV := d.u64(), d.u64()
	if d.err != nil {
		return nil, d.err
	}
	if nTensors > MaxTensors || nKV > MaxKV {
		return nil, d.errorf("%d tensors and %d metadata entries (caps %d, %d)", nTensors, nKV, MaxTensors, MaxKV)
	}
	f.KV = make([]KV, 0, nKV)
	for i := uint64(0); i < nKV; i++ {
		key := d.str()
		typ := ValueType(d.u32())
		v := d.value(typ, 0)
		if d.err != nil {
			return nil, fmt.Errorf("metadata entry %d (%q): %w", i, key, d.err)
		}
		f.KV = append(f.KV, KV{Key: key, Value: v})
	}
	align, err := alignmentOf(f.KV)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	f.Alignment = align
	f.Tensors = make([]TensorInfo, 0, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		t := TensorInfo{Name: d.str()}
		nd := d.u32()
		if d.err == nil && (nd == 0 || nd > MaxDims) {
			return nil, d.errorf("tensor %q: %d dimensions (1..%d)", t.Name, nd, MaxDims)
		}
		for j := uint32(0); j < nd && d.err == nil; j++ {
			t.Dims = append(t.Dims, d.u64())
		}
		t.Type = TensorType(d.u32())
		t.Offset = d.u64()
		if d.err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, d.err)
		}
		if t.Offset%align != 0 {
			return nil, d.errorf("tensor %q: offset %d is not a multiple of the alignment %d", t.Name, t.Offset, align)
		}
		f.Tensors = append(f.Tensors, t)
	}
	if err := checkLayout(f.Tensors); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	f.DataOffset = int64(alignUp(d.n, align))
	// Consume the padding, so that r is left at the data section.
	if pad := uint64(f.DataOffset) - d.n; pad > 0 {
		if err := d.full(make([]byte, pad)); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// checkLayout verifies that tensors with known sizes do not overlap.
func checkLayout(ts []TensorInfo) error {
	type span struct {
		name   string
		lo, hi uint64
	}
	var spans []span
	names := make(map[string]bool, len(ts))
	for _, t := range ts {
		if names[t.Name] {
			return fmt.Errorf("tensor %q appears twice", t.Name)
		}
		names[t.Name] = true
		n, err := t.Size()
		if err != nil {
			if _, known := tensorTypes[t.Type]; known {
				return err
			}
			continue // unknown type: its size cannot be checked
		}
		if t.Offset > math.MaxUint64-n {
			return fmt.Errorf("tensor %q: offset %d + size %d overflows", t.Name, t.Offset, n)
		}
		spans = append(spans, span{t.Name, t.Offset, t.Offset + n})
	}
	// Writers lay tensors out in order; sort-free check for that common
	// case, falling back to the quadratic check for shuffled offsets.
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			for a := range spans {
				for b := a + 1; b < len(spans); b++ {
					if spans[a].lo < spans[b].hi && spans[b].lo < spans[a].hi {
						return fmt.Errorf("tensors %q and %q overlap", spans[a].name, spans[b].name)
					}
				}
			}
			break
		}
	}
	return nil
}

// DataSize is the size of the data section: the end of the last tensor.
// Tensors of a type this package does not know are not counted (their
// size is unknown); a known type with impossible dimensions is an error.
func (f *File) DataSize() (uint64, error) {
	var end uint64
	for _, t := range f.Tensors {
		if _, known := tensorTypes[t.Type]; !known {
			continue
		}
		n, err := t.Size()
		if err != nil {
			return 0, err
		}
		end = max(end, t.Offset+n)
	}
	return end, nil
}

// CheckSize reports an error wrapping ErrFormat when a file of fileSize
// bytes cannot hold every tensor's data.
func (f *File) CheckSize(fileSize int64) error {
	n, err := f.DataSize()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if need := uint64(f.DataOffset) + n; need > uint64(fileSize) {
		return fmt.Errorf("%w: tensor data ends at byte %d, file has %d (truncated)", ErrFormat, need, fileSize)
	}
	return nil
}

// TensorData returns a reader over one tensor's data in ra, the file the
// header was read from.
func (f *File) TensorData(ra io.ReaderAt, name string) (*io.SectionReader, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: no tensor %q", ErrInvalid, name)
	}
	n, err := t.Size()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return io.NewSectionReader(ra, f.DataOffset+int64(t.Offset), int64(n)), nil
}

// decoder reads little-endian values and keeps the first error; after an
// error every read returns zero values.
type decoder struct {
	r   io.Reader
	n   uint64 // bytes consumed
	err error
	buf [8]byte
}

func (d *decoder) errorf(format string, a ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrFormat, d.n, fmt.Sprintf(format, a...))
}

func (d *decoder) full(p []byte) error {
	if d.err != nil {
		return d.err
	}
	k, err := io.ReadFull(d.r, p)
	d.n += uint64(k)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			d.err = d.errorf("truncated (wanted %d more bytes)", len(p)-k)
		} else {
			d.err = err
		}
	}
	return d.err
}

func (d *decoder) fixed(n int) []byte {
	if d.full(d.buf[:n]) != nil {
		clear(d.buf[:])
	}
	return d.buf[:n]
}

func (d *decoder) u8() uint8   { return d.fixed(1)[0] }
func (d *decoder) u16() uint16 { return binary.LittleEndian.Uint16(d.fixed(2)) }
func (d *decoder) u32() uint32 { return binary.LittleEndian.Uint32(d.fixed(4)) }
func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.fixed(8)) }

func (d *decoder) str() string {
	n := d.u64()
	if d.err != nil {
		return ""
	}
	if n > MaxStringLen {
		d.err = d.errorf("string of %d bytes (cap %d)", n, MaxStringLen)
		return ""
	}
	b := make([]byte, n)
	d.full(b)
	return string(b)
}

// value reads one value of type t; depth counts array nesting.
func (d *decoder) value(t ValueType, depth int) any {
	if d.err != nil {
		return nil
	}
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		return int8(d.u8())
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		return int16(d.u16())
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		return int32(d.u32())
	case TypeFloat32:
		return math.Float32frombits(d.u32())
	case TypeBool:
		b := d.u8()
		if d.err == nil && b > 1 {
			d.err = d.errorf("bool byte %d", b)
		}
		return b == 1
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		return int64(d.u64())
	case TypeFloat64:
		return math.Float64frombits(d.u64())
	case TypeArray:
		if depth >= maxNesting {
			d.err = d.errorf("arrays nested deeper than %d", maxNesting)
			return nil
		}
		elem := ValueType(d.u32())
		n := d.u64()
		if d.err != nil {
			return nil
		}
		if n > MaxArrayLen {
			d.err = d.errorf("array of %d items (cap %d)", n, MaxArrayLen)
			return nil
		}
		if elem > TypeFloat64 {
			d.err = d.errorf("unknown array element type %d", uint32(elem))
			return nil
		}
		// Grow as items arrive rather than trusting n for the allocation.
		items := make([]any, 0, min(n, 1<<16))
		for i := uint64(0); i < n && d.err == nil; i++ {
			items = append(items, d.value(elem, depth+1))
		}
		return Array{Elem: elem, Items: items}
	}
	d.err = d.errorf("unknown value type %d", uint32(t))
	return nil
}
