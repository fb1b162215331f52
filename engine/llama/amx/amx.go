// Package amx compiles ggml's AMX kernels (Intel Advanced Matrix
// Extensions: Sapphire Rapids and later Xeons) into the binary.
//
// The Go module that carries llama.cpp keeps those sources in
// ggml-cpu/amx, a folder without a Go file, so cgo never compiles them;
// yet ggml-cpu.cpp asks for ggml_backend_amx_buffer_type whenever the
// compiler defines __AMX_INT8__ and __AVX512VNNI__ (as -march=native does
// on an AMX CPU), and the link failed there. This package compiles the two
// sources under exactly that condition, the one ggml itself uses, so that a
// build links on every x86-64 CPU and an AMX machine really runs AMX for
// quantized weights. Elsewhere its translation units are empty.
//
// The sources are included through the -idirafter folders that the
// Makefile adds to CGO_CPPFLAGS (ggml/src and ggml/src/ggml-cpu).
package amx

/*
#cgo CPPFLAGS: -DNDEBUG -DGGML_USE_LLAMAFILE
#cgo linux CPPFLAGS: -D_GNU_SOURCE
#cgo CXXFLAGS: -std=c++17

#if defined(__AMX_INT8__) && defined(__AVX512VNNI__)
static int ctxd_amx_compiled(void) { return 1; }
#else
static int ctxd_amx_compiled(void) { return 0; }
#endif
*/
import "C"

// Compiled reports whether ggml's AMX kernels are compiled into this
// binary: true exactly when the C compiler enabled AMX-INT8 and
// AVX512-VNNI for it.
func Compiled() bool { return C.ctxd_amx_compiled() == 1 }
