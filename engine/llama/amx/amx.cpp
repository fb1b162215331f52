// ggml's AMX buffer type and traits (see amx.go): empty unless the
// compiler enables AMX-INT8 and AVX512-VNNI, ggml's own condition.
#if defined(__AMX_INT8__) && defined(__AVX512VNNI__)
#include "ggml-cpu/amx/amx.cpp"

// ctxd_amx_kernels_linked is read by Compiled: 1 from this object when it
// holds the buffer type ggml-cpu.cpp asks for.
extern "C" int ctxd_amx_kernels_linked(void) { return ggml_backend_amx_buffer_type != nullptr; }
#else
extern "C" int ctxd_amx_kernels_linked(void) { return 0; }
#endif
