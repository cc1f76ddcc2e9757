//go:build amd64 && !purego

#include "textflag.h"

// func kernelNN(n, k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
//
// C[0:4, 0:n] += A[0:4, 0:k] · B[0:k, 0:n] for row-major float32 matrices
// (leading dimensions in elements), n a multiple of 8. Columns go in tiles
// of 16 (eight AVX2 accumulators: four rows × two vectors) and, when 8
// remain, one tile of 8. Each step of k broadcasts one element of each of
// the four rows of A and multiplies it into one row of B with FMA.
TEXT ·kernelNN(SB), NOSPLIT, $0-64
	MOVQ n+0(FP), R8
	MOVQ a+16(FP), SI
	MOVQ lda+24(FP), R10
	MOVQ b+32(FP), DI
	MOVQ ldb+40(FP), R11
	MOVQ c+48(FP), DX
	MOVQ ldc+56(FP), R12
	SHLQ $2, R10
	SHLQ $2, R11
	SHLQ $2, R12
	LEAQ (R10)(R10*2), R13 // 3·lda bytes
	LEAQ (R12)(R12*2), CX  // 3·ldc bytes

tile16:
	CMPQ R8, $16
	JLT  tile8
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS (DX)(R12*1), Y2
	VMOVUPS 32(DX)(R12*1), Y3
	VMOVUPS (DX)(R12*2), Y4
	VMOVUPS 32(DX)(R12*2), Y5
	VMOVUPS (DX)(CX*1), Y6
	VMOVUPS 32(DX)(CX*1), Y7
	MOVQ k+8(FP), R9
	MOVQ SI, AX
	MOVQ DI, BX
	TESTQ R9, R9
	JE   store16

loop16:
	VMOVUPS      (BX), Y8
	VMOVUPS      32(BX), Y9
	VBROADCASTSS (AX), Y10
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VBROADCASTSS (AX)(R10*1), Y11
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VBROADCASTSS (AX)(R10*2), Y12
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y9, Y12, Y5
	VBROADCASTSS (AX)(R13*1), Y13
	VFMADD231PS  Y8, Y13, Y6
	VFMADD231PS  Y9, Y13, Y7
	ADDQ         $4, AX
	ADDQ         R11, BX
	DECQ         R9
	JNZ          loop16

store16:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, (DX)(R12*1)
	VMOVUPS Y3, 32(DX)(R12*1)
	VMOVUPS Y4, (DX)(R12*2)
	VMOVUPS Y5, 32(DX)(R12*2)
	VMOVUPS Y6, (DX)(CX*1)
	VMOVUPS Y7, 32(DX)(CX*1)
	ADDQ    $64, DI
	ADDQ    $64, DX
	SUBQ    $16, R8
	JMP     tile16

tile8:
	CMPQ R8, $8
	JLT  done
	VMOVUPS (DX), Y0
	VMOVUPS (DX)(R12*1), Y2
	VMOVUPS (DX)(R12*2), Y4
	VMOVUPS (DX)(CX*1), Y6
	MOVQ k+8(FP), R9
	MOVQ SI, AX
	MOVQ DI, BX
	TESTQ R9, R9
	JE   store8

loop8:
	VMOVUPS      (BX), Y8
	VBROADCASTSS (AX), Y10
	VFMADD231PS  Y8, Y10, Y0
	VBROADCASTSS (AX)(R10*1), Y11
	VFMADD231PS  Y8, Y11, Y2
	VBROADCASTSS (AX)(R10*2), Y12
	VFMADD231PS  Y8, Y12, Y4
	VBROADCASTSS (AX)(R13*1), Y13
	VFMADD231PS  Y8, Y13, Y6
	ADDQ         $4, AX
	ADDQ         R11, BX
	DECQ         R9
	JNZ          loop8

store8:
	VMOVUPS Y0, (DX)
	VMOVUPS Y2, (DX)(R12*1)
	VMOVUPS Y4, (DX)(R12*2)
	VMOVUPS Y6, (DX)(CX*1)

done:
	VZEROUPPER
	RET
