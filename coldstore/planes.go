package coldstore

import "encoding/binary"

// splitPlanes writes src to dst as byte planes: with stride s and
// n = len(src)/s whole elements, dst[p*n+i] = src[i*s+p] for every plane p
// and element i; the len(src)%s trailing bytes that do not form a whole
// element follow unchanged. len(dst) must equal len(src). Stride 1 is a
// plain copy.
func splitPlanes(dst, src []byte, stride int) {
	if len(dst) != len(src) {
		panic("coldstore: splitPlanes length mismatch")
	}
	n := len(src) / stride
	whole := n * stride
	switch stride {
	case 1:
		copy(dst, src)
		return
	case 2:
		split2(dst[:n], dst[n:2*n], src[:whole])
	case 4:
		split4(dst[:n], dst[n:2*n], dst[2*n:3*n], dst[3*n:4*n], src[:whole])
	default:
		for p := 0; p < stride; p++ {
			plane := dst[p*n : (p+1)*n]
			for i := range plane {
				plane[i] = src[i*stride+p]
			}
		}
	}
	copy(dst[whole:], src[whole:])
}

// mergePlanes is the inverse of splitPlanes: dst gets the interleaved
// elements back from the planes in src.
func mergePlanes(dst, src []byte, stride int) {
	if len(dst) != len(src) {
		panic("coldstore: mergePlanes length mismatch")
	}
	n := len(src) / stride
	var planes [maxStride][]byte
	for p := range stride {
		planes[p] = src[p*n : (p+1)*n]
	}
	mergeFrom(dst, planes[:stride], src[n*stride:])
}

// maxStride is the largest supported element size.
const maxStride = 8

// mergeFrom interleaves len(planes) planes of n bytes each into
// dst[:n·len(planes)] and copies tail after them; the planes may live
// anywhere (decoded scratch or the compressed payload itself, for planes
// stored as is), so no plane is copied twice. len(dst) must be
// n·len(planes)+len(tail).
func mergeFrom(dst []byte, planes [][]byte, tail []byte) {
	stride := len(planes)
	n := len(planes[0])
	whole := n * stride
	if len(dst) != whole+len(tail) {
		panic("coldstore: mergeFrom length mismatch")
	}
	switch stride {
	case 1:
		copy(dst, planes[0])
	case 2:
		merge2(dst[:whole], planes[0], planes[1][:n])
	case 4:
		merge4(dst[:whole], planes[0], planes[1], planes[2], planes[3])
	default:
		for p, plane := range planes {
			for i, b := range plane[:n] {
				dst[i*stride+p] = b
			}
		}
	}
	copy(dst[whole:], tail)
}

// split2Generic de-interleaves 16-bit elements eight at a time through 64-bit
// words, then finishes byte by byte.
func split2Generic(lo, hi, src []byte) {
	n := len(lo)
	i := 0
	for ; i+8 <= n; i += 8 {
		a := binary.LittleEndian.Uint64(src[2*i:])
		b := binary.LittleEndian.Uint64(src[2*i+8:])
		binary.LittleEndian.PutUint64(lo[i:], even8(a, b))
		binary.LittleEndian.PutUint64(hi[i:], even8(a>>8, b>>8))
	}
	for ; i < n; i++ {
		lo[i] = src[2*i]
		hi[i] = src[2*i+1]
	}
}

// even8 gathers bytes 0, 2, 4, 6 of a and then of b into one word.
func even8(a, b uint64) uint64 {
	return pack4(a) | pack4(b)<<32
}

// pack4 gathers bytes 0, 2, 4, 6 of x into the low 32 bits.
func pack4(x uint64) uint64 {
	x &= 0x00FF00FF00FF00FF
	x = (x | x>>8) & 0x0000FFFF0000FFFF
	x = (x | x>>16) & 0x00000000FFFFFFFF
	return x
}

// spread4 is the inverse of pack4: the low four bytes of x go to bytes
// 0, 2, 4, 6 of the result.
func spread4(x uint64) uint64 {
	x &= 0x00000000FFFFFFFF
	x = (x | x<<16) & 0x0000FFFF0000FFFF
	x = (x | x<<8) & 0x00FF00FF00FF00FF
	return x
}

// merge2Generic interleaves eight 16-bit elements per step through 64-bit words
// (each half-word of lo and hi spread to every other byte), then finishes
// byte by byte.
func merge2Generic(dst, lo, hi []byte) {
	n := len(lo)
	i := 0
	for ; i+8 <= n; i += 8 {
		l := binary.LittleEndian.Uint64(lo[i:])
		h := binary.LittleEndian.Uint64(hi[i:])
		d := dst[2*i : 2*i+16 : 2*i+16]
		binary.LittleEndian.PutUint64(d[0:], spread4(l)|spread4(h)<<8)
		binary.LittleEndian.PutUint64(d[8:], spread4(l>>32)|spread4(h>>32)<<8)
	}
	for ; i < n; i++ {
		dst[2*i] = lo[i]
		dst[2*i+1] = hi[i]
	}
}

func split4(p0, p1, p2, p3, src []byte) {
	n := len(p0)
	src = src[:4*n]
	p1 = p1[:n]
	p2 = p2[:n]
	p3 = p3[:n]
	for i := 0; i < n; i++ {
		s := src[4*i : 4*i+4 : 4*i+4]
		p0[i] = s[0]
		p1[i] = s[1]
		p2[i] = s[2]
		p3[i] = s[3]
	}
}

func merge4(dst, p0, p1, p2, p3 []byte) {
	n := len(p0)
	dst = dst[:4*n]
	p1 = p1[:n]
	p2 = p2[:n]
	p3 = p3[:n]
	for i := 0; i < n; i++ {
		d := dst[4*i : 4*i+4 : 4*i+4]
		d[0] = p0[i]
		d[1] = p1[i]
		d[2] = p2[i]
		d[3] = p3[i]
	}
}
