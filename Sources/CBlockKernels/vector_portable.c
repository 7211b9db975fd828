// The float-vector kernels (vector_impl.h) for any CPU: plain C vector extensions, no fused
// multiply-add.
#include "internal.h"

#pragma STDC FP_CONTRACT OFF
#define BK_VEC(name) bk_portable_##name
#include "vector_impl.h"
