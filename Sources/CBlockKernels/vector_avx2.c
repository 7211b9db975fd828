// The float-vector kernels (vector_impl.h) for the AVX2 + FMA level: a·b + c fused.
#include "internal.h"

#if defined(__x86_64__)
#pragma STDC FP_CONTRACT ON
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#define BK_VEC_WEIGH_QUERIES 1  // queries per pass over the values in attend_rows: 64 lanes are 8 of the 16 registers: one query (as bk_attend)
#define BK_VEC_LOWRANK_ROWS 2  // rows sharing each load of Bt in lowrank_up, and
#define BK_VEC_LOWRANK_UNITS 2  // 16-output pieces per row at a time: 2 rows x 32 outputs: 8 of the 16 registers
#define BK_VEC(name) bk_avx2_##name
#include "vector_impl.h"
#pragma clang attribute pop
#endif
