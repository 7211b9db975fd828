// The float-vector kernels (vector_impl.h) for the AVX2 + FMA level: a·b + c fused.
#include "internal.h"

#if defined(__x86_64__)
#pragma STDC FP_CONTRACT ON
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#define BK_VEC(name) bk_avx2_##name
#include "vector_impl.h"
#pragma clang attribute pop
#endif
