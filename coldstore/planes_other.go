//go:build !amd64 || purego

package coldstore

func merge2(dst, lo, hi []byte) { merge2Generic(dst, lo, hi) }

func split2(lo, hi, src []byte) { split2Generic(lo, hi, src) }
