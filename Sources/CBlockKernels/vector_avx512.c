// The float-vector kernels (vector_impl.h) for the AVX-512 level: 16 lanes in one register.
#include "internal.h"

#if defined(__x86_64__)
#pragma STDC FP_CONTRACT ON
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), apply_to = function)
#define BK_VEC_WEIGH_QUERIES 4  // queries per pass over the values in attend_rows: 4 x 64 lanes: 16 of the 32 registers
#define BK_VEC_LOWRANK_ROWS 4  // rows sharing each load of Bt in lowrank_up, and
#define BK_VEC_LOWRANK_UNITS 4  // 16-output pieces per row at a time: 4 rows x 64 outputs: 16 of the 32 registers
#define BK_VEC(name) bk_avx512_##name
#include "vector_impl.h"
#pragma clang attribute pop
#endif
