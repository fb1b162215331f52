#include <stdio.h>
#include "../mm.h"
int main(int argc, char **argv) {
	int M = atoi(argv[1]), K = atoi(argv[2]), N = atoi(argv[3]), th = atoi(argv[4]), it = atoi(argv[5]);
	double dt = bench_mm(M, K, N, th, it);
	printf("upstream M=%d K=%d N=%d threads=%d: %.2f ms, %.1f GFLOP/s\n", M, K, N, th, dt*1e3, 2.0*M*K*N/dt/1e9);
	return 0;
}
