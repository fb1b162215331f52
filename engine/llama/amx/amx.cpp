// ggml's AMX buffer type and traits (see amx.go): empty unless the
// compiler enables AMX-INT8 and AVX512-VNNI, ggml's own condition.
#if defined(__AMX_INT8__) && defined(__AVX512VNNI__)
#include "ggml-cpu/amx/amx.cpp"
#endif
