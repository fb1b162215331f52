package llama

/*
#include <stdlib.h>
#include "llama.h"
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/ctxd/ctxd/engine"
)

// ftypes maps the engine's weight types to llama.cpp's file types.
var ftypes = map[engine.WeightType]C.enum_llama_ftype{
	engine.WeightQ8_0:  C.LLAMA_FTYPE_MOSTLY_Q8_0,
	engine.WeightQ4_0:  C.LLAMA_FTYPE_MOSTLY_Q4_0,
	engine.WeightQ4_KM: C.LLAMA_FTYPE_MOSTLY_Q4_K_M,
}

// Quantize writes the model at in to out with its weights in type to,
// with llama.cpp's own quantizer (llama_model_quantize: k-quant mixtures,
// per-tensor fallbacks for rows a type's block does not divide). See
// engine.Quantizer for the contract.
func Quantize(ctx context.Context, in, out string, to engine.WeightType, threads int) error {
	ft, ok := ftypes[to]
	if !ok {
		_, err := engine.ParseWeightType(string(to))
		if err == nil {
			err = fmt.Errorf("%w: weight type %q has no llama.cpp file type", engine.ErrInvalidArgument, to)
		}
		return err
	}
	if threads < 0 {
		return fmt.Errorf("%w: %d quantizing threads", engine.ErrInvalidArgument, threads)
	}
	if err := sameFile(in, out); err != nil {
		return err
	}
	if err := checkModelFile(in); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("quantizing %s: %w", in, err)
	}
	backendInit()
	cin, cout := C.CString(in), C.CString(out)
	defer C.free(unsafe.Pointer(cin))
	defer C.free(unsafe.Pointer(cout))
	p := C.llama_model_quantize_default_params()
	p.nthread = C.int32_t(threads)
	p.ftype = ft
	if rc := C.llama_model_quantize(cin, cout, &p); rc != 0 {
		return fmt.Errorf("%w: llama.cpp could not quantize %s to %s (see the log)", engine.ErrBadModel, in, to)
	}
	return nil
}

// Quantize is the engine.Quantizer of llama.cpp.
func (Backend) Quantize(ctx context.Context, in, out string, to engine.WeightType, threads int) error {
	return Quantize(ctx, in, out, to, threads)
}

// sameFile refuses an output path naming the input file.
func sameFile(in, out string) error {
	a, err1 := filepath.Abs(in)
	b, err2 := filepath.Abs(out)
	if err1 == nil && err2 == nil && a == b {
		return fmt.Errorf("%w: quantizing %s onto itself", engine.ErrInvalidArgument, in)
	}
	si, err := os.Stat(in)
	if err != nil {
		return fmt.Errorf("quantizing: %w", err)
	}
	if so, err := os.Stat(out); err == nil && os.SameFile(si, so) {
		return fmt.Errorf("%w: %s and %s are the same file", engine.ErrInvalidArgument, in, out)
	}
	return nil
}
