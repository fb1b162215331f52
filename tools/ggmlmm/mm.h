// mm.h: one timed ggml matrix product, shared by ggmlmm (the vendored ggml)
// and upstream/main.c (any other libggml).
#include <stdlib.h>
#include <time.h>
#include "ggml.h"
#include "ggml-cpu.h"
static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec*1e-9; }
// bench_mm times y = W x with W f16 [M x K] and x f32 [K x N], on threads.
static double bench_mm(int M, int K, int N, int threads, int iters) {
	size_t mem = (size_t)M*K*2 + (size_t)K*N*4 + (size_t)M*N*4 + (size_t)K*N*2 + (64u<<20);
	struct ggml_init_params ip = { mem, NULL, false };
	struct ggml_context *ctx = ggml_init(ip);
	struct ggml_tensor *w = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, K, M);
	struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, N);
	ggml_fp16_t *wd = (ggml_fp16_t *)w->data;
	srand(1);
	for (long i = 0; i < (long)M*K; i++) wd[i] = ggml_fp32_to_fp16((rand() % 2001 - 1000) * 1e-4f);
	float *xd = (float *)x->data;
	for (long i = 0; i < (long)K*N; i++) xd[i] = (rand() % 2001 - 1000) * 1e-3f;
	struct ggml_tensor *y = ggml_mul_mat(ctx, w, x);
	struct ggml_cgraph *g = ggml_new_graph(ctx);
	ggml_build_forward_expand(g, y);
	ggml_graph_compute_with_ctx(ctx, g, threads);
	double t0 = now_s();
	for (int i = 0; i < iters; i++) ggml_graph_compute_with_ctx(ctx, g, threads);
	double dt = (now_s() - t0) / iters;
	ggml_free(ctx);
	return dt;
}
