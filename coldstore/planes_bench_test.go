package coldstore

import "testing"

// BenchmarkPlanes times the byte-plane shuffles alone (f16, 1 MiB).
func BenchmarkPlanes(b *testing.B) {
	src := kvLikeF16(1<<20, 1)
	planes := make([]byte, len(src))
	dst := make([]byte, len(src))
	n := len(src) / 2
	for _, v := range []struct {
		name string
		f    func()
	}{
		{"split2", func() { split2(planes[:n], planes[n:], src) }},
		{"split2/generic", func() { split2Generic(planes[:n], planes[n:], src) }},
		{"merge2", func() { merge2(dst, planes[:n], planes[n:]) }},
		{"merge2/generic", func() { merge2Generic(dst, planes[:n], planes[n:]) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				v.f()
			}
		})
	}
}
