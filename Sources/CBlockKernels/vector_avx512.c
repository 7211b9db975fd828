// The float-vector kernels (vector_impl.h) for the AVX-512 level: 16 lanes in one register.
#include "internal.h"

#if defined(__x86_64__)
#pragma STDC FP_CONTRACT ON
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), apply_to = function)
#define BK_VEC(name) bk_avx512_##name
#include "vector_impl.h"
#pragma clang attribute pop
#endif
