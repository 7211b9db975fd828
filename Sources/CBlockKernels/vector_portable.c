// The float-vector kernels (vector_impl.h) for any CPU: plain C vector extensions, no fused
// multiply-add.
#include "internal.h"

#pragma STDC FP_CONTRACT OFF
#define BK_VEC_WEIGH_QUERIES 1  // queries per pass over the values in attend_rows: one query (as bk_attend)
#define BK_VEC_LOWRANK_ROWS 1  // rows sharing each load of Bt in lowrank_up, and
#define BK_VEC_LOWRANK_UNITS 4  // 16-output pieces per row at a time: one row, 64 outputs (as before)
#define BK_VEC(name) bk_portable_##name
#include "vector_impl.h"
