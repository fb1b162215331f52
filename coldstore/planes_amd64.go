//go:build amd64 && !purego

package coldstore

// SSE2 (part of every amd64 CPU) versions of the stride-2 plane shuffles,
// 16 elements per step; planes_amd64.s. Build with -tags purego for the
// plain Go versions.

//go:noescape
func merge2SSE2(dst, lo, hi *byte, n int)

//go:noescape
func split2SSE2(lo, hi, src *byte, n int)

// merge2 interleaves lo and hi (n bytes each) into dst (2n bytes).
func merge2(dst, lo, hi []byte) {
	n := len(lo)
	_ = hi[:n]
	_ = dst[:2*n]
	v := n &^ 15
	if v > 0 {
		merge2SSE2(&dst[0], &lo[0], &hi[0], v)
	}
	merge2Generic(dst[2*v:2*n], lo[v:n], hi[v:n])
}

// split2 de-interleaves src (2n bytes) into lo and hi (n bytes each).
func split2(lo, hi, src []byte) {
	n := len(lo)
	_ = hi[:n]
	_ = src[:2*n]
	v := n &^ 15
	if v > 0 {
		split2SSE2(&lo[0], &hi[0], &src[0], v)
	}
	split2Generic(lo[v:n], hi[v:n], src[2*v:2*n])
}
