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

int ctxd_amx_kernels_linked(void); // amx.cpp
*/
import "C"

// ggml (and its CPU backend, which asks for the AMX buffer type) is what
// these kernels extend; importing it lets this package link on its own.
import _ "github.com/ollama/ollama/ml/backend/ggml/ggml/src"

// Compiled reports whether ggml's AMX kernels are compiled into this
// binary, as the compiled amx.cpp object itself says: true exactly when
// the C++ compiler enabled AMX-INT8 and AVX512-VNNI for it.
func Compiled() bool { return C.ctxd_amx_kernels_linked() == 1 }
