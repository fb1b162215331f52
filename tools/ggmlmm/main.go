// Command ggmlmm times one f16 matrix product, y = W·x with W f16 M×K and
// x f32 K×N, through the ggml that ctxd links (the vendored llama.cpp of
// github.com/ollama/ollama) — the operation that takes ≈ 90 % of a cold
// turn on the CPU. upstream/main.c is the same measurement (mm.h) for a
// ggml built elsewhere, e.g. upstream llama.cpp's libggml:
//
//	source env.sh && go build -o ggmlmm ./tools/ggmlmm
//	gcc -O2 -o ggmlmm-up tools/ggmlmm/upstream/main.c -I$U/ggml/include -L$U/build/bin \
//	    -lggml -lggml-base -lggml-cpu -Wl,-rpath,$U/build/bin -lm
//	./ggmlmm 4864 896 512 1 3; ./ggmlmm-up 4864 896 512 1 3   # M K N threads iterations
//
// The shapes of the 0.5B benchmark model: 4864×896 (FFN), 896×896
// (attention output), N = 512 for a prefill batch, 1 for a decode step.
package main

/*
#cgo LDFLAGS: -lm
#include "mm.h"
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"

	_ "github.com/ollama/ollama/llama" // links the vendored ggml
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: ggmlmm M K N THREADS ITERATIONS")
		os.Exit(2)
	}
	var a [5]int
	for i := range a {
		v, err := strconv.Atoi(os.Args[i+1])
		if err != nil || v < 1 {
			fmt.Fprintf(os.Stderr, "ggmlmm: %q is not a positive integer\n", os.Args[i+1])
			os.Exit(2)
		}
		a[i] = v
	}
	dt := float64(C.bench_mm(C.int(a[0]), C.int(a[1]), C.int(a[2]), C.int(a[3]), C.int(a[4])))
	fmt.Printf("vendored M=%d K=%d N=%d threads=%d: %.2f ms, %.1f GFLOP/s\n", a[0], a[1], a[2], a[3], dt*1e3, 2*float64(a[0])*float64(a[1])*float64(a[2])/dt/1e9)
}
