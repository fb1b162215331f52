//go:build amd64 && !purego

#include "textflag.h"

// func merge2SSE2(dst, lo, hi *byte, n int)
// n is a positive multiple of 16; dst gets lo[0] hi[0] lo[1] hi[1] ...
TEXT ·merge2SSE2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ lo+8(FP), SI
	MOVQ hi+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $4, CX

merge2loop:
	MOVOU (SI), X0
	MOVOU (DX), X1
	MOVOU X0, X2
	PUNPCKLBW X1, X0
	PUNPCKHBW X1, X2
	MOVOU X0, (DI)
	MOVOU X2, 16(DI)
	ADDQ $16, SI
	ADDQ $16, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  merge2loop
	RET

// func split2SSE2(lo, hi, src *byte, n int)
// n is a positive multiple of 16; lo gets the even bytes of src[:2n], hi the odd.
TEXT ·split2SSE2(SB), NOSPLIT, $0-32
	MOVQ lo+0(FP), DI
	MOVQ hi+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $4, CX
	PCMPEQW X7, X7
	PSRLW   $8, X7      // 0x00ff in every word

split2loop:
	MOVOU (SI), X0
	MOVOU 16(SI), X1
	MOVOU X0, X2
	MOVOU X1, X3
	PAND  X7, X0
	PAND  X7, X1
	PACKUSWB X1, X0     // even bytes
	PSRLW $8, X2
	PSRLW $8, X3
	PACKUSWB X3, X2     // odd bytes
	MOVOU X0, (DI)
	MOVOU X2, (DX)
	ADDQ $32, SI
	ADDQ $16, DI
	ADDQ $16, DX
	DECQ CX
	JNZ  split2loop
	RET
