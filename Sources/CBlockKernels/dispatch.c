// The public entry points: checks type and shape, picks the feature level once per process
// (__builtin_cpu_supports, capped by ADAPTER_CPU_LEVEL) or as bk_set_level says, and hands the
// work to that level's file.
// The kernels live in portable.c, avx2.c, avx512.c and (q8 activations, every block type but
// Q2_K) q8_portable.c, q8.c;
// q8k.c (Q4_K with per-256 activations) has its own entry points.
// Level selection follows the usual ifunc-style pattern: detect once, call through a switch.
#include "CBlockKernels.h"
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static int detect_best(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")))
        return BK_LEVEL_PORTABLE;
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
          && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")))
        return BK_LEVEL_AVX2;
    if (!__builtin_cpu_supports("avx512vnni")) return BK_LEVEL_AVX512;
    return BK_LEVEL_AVX512_VNNI;
#else
    return BK_LEVEL_PORTABLE;
#endif
}

// ADAPTER_CPU_LEVEL: the level named by the environment (bk_level_request's values).
static int parse_request(void) {
    const char *v = getenv("ADAPTER_CPU_LEVEL");
    if (v == NULL || v[0] == 0) return BK_LEVEL_UNSET;
    for (int level = 0; level < BK_LEVEL_COUNT; level++)
        if (strcmp(v, bk_level_name(level)) == 0) return level;
    return BK_LEVEL_UNKNOWN;
}

// Unset (-1; the request -3) until first use; each word is written with a value every thread
// would compute alike.
static _Atomic int cpu_level = -1;
static _Atomic int request = -3;
static _Atomic int best_level = -1;
static _Atomic int chosen_level = -1;

int bk_cpu_level(void) {
    int level = atomic_load_explicit(&cpu_level, memory_order_relaxed);
    if (level < 0) {
        level = detect_best();
        atomic_store_explicit(&cpu_level, level, memory_order_relaxed);
    }
    return level;
}

int bk_level_request(void) {
    int r = atomic_load_explicit(&request, memory_order_relaxed);
    if (r == -3) {
        r = parse_request();
        atomic_store_explicit(&request, r, memory_order_relaxed);
    }
    return r;
}

int bk_best_level(void) {
    int level = atomic_load_explicit(&best_level, memory_order_relaxed);
    if (level < 0) {
        level = bk_cpu_level();
        const int r = bk_level_request();
        if (r >= 0 && r < level) level = r;
        atomic_store_explicit(&best_level, level, memory_order_relaxed);
    }
    return level;
}

int bk_level_supported(int level) { return level >= 0 && level <= bk_best_level(); }

int bk_active_level(void) {
    int level = atomic_load_explicit(&chosen_level, memory_order_relaxed);
    return level < 0 ? bk_best_level() : level;
}

int bk_set_level(int level) {
    if (!bk_level_supported(level)) return 0;
    atomic_store_explicit(&chosen_level, level, memory_order_relaxed);
    return 1;
}

const char *bk_level_name(int level) {
    switch (level) {
    case BK_LEVEL_PORTABLE: return "portable";
    case BK_LEVEL_AVX2: return "avx2";
    case BK_LEVEL_AVX512: return "avx512";
    case BK_LEVEL_AVX512_VNNI: return "avx512vnni";
    default: return "?";
    }
}

int bk_type_supported(uint32_t type) {
    switch (type) {
    case BK_F32: case BK_F16: case BK_BF16: case BK_Q8_0: case BK_Q4_0: case BK_Q4_1: case BK_Q5_0: case BK_Q5_1: case BK_IQ4_NL:
    case BK_Q2_K: case BK_Q3_K: case BK_Q4_K: case BK_Q5_K: case BK_Q6_K:
        return 1;
    default:
        return 0;
    }
}

static size_t block_values(uint32_t type) {
    switch (type) {
    case BK_F32: case BK_F16: case BK_BF16: return 1;
    case BK_Q8_0: case BK_Q4_0: case BK_Q4_1: case BK_Q5_0: case BK_Q5_1: case BK_IQ4_NL: return 32;
    default: return 256;
    }
}

// Only Q4_1, Q5_1 and the K-quants with a min use the per-32 activation sums.
static int needs_xsum(uint32_t type) { return bk_has_min32(type) || type == BK_Q4_K || type == BK_Q5_K; }

int bk_matmul_nt_at(int level, uint32_t type, const float *x, size_t m, size_t k, const void *w,
                    size_t rowBytes, size_t n0, size_t n1, float *y, size_t ldy) {
    if (!bk_level_supported(level)) return BK_ERROR_LEVEL;
    if (!bk_type_supported(type)) return BK_ERROR_TYPE;
    if (k == 0 || k % block_values(type) != 0) return BK_ERROR_SHAPE;
    if (m == 0 || n1 <= n0) return BK_OK;
    float stack[BK_XSUM_STACK];
    float *xsum = stack;
    size_t sums = needs_xsum(type) ? m * (k / 32) : 0;
    if (sums > BK_XSUM_STACK) {
        xsum = malloc(sums * sizeof(float));
        if (!xsum) return BK_ERROR_MEMORY;
    }
    float *xorder = NULL;
    const size_t orderFloats = level >= BK_LEVEL_AVX2 && type == BK_Q6_K ? m * k + m * k / 16
                               : level >= BK_LEVEL_AVX512 && type == BK_Q4_K ? m * k : 0;
    if (orderFloats && !(xorder = bk_order_scratch(orderFloats * sizeof(float)))) {
        if (xsum != stack) free(xsum);
        return BK_ERROR_MEMORY;
    }
    const uint8_t *wb = (const uint8_t *)w;
    switch (level) {
#if defined(__x86_64__)
    case BK_LEVEL_AVX2: bk_avx2_matmul(type, x, m, k, wb, rowBytes, n0, n1, y, ldy, xsum, xorder); break;
    case BK_LEVEL_AVX512:
    case BK_LEVEL_AVX512_VNNI: bk_avx512_matmul(type, x, m, k, wb, rowBytes, n0, n1, y, ldy, xsum, xorder); break;
#endif
    default: bk_portable_matmul(type, x, m, k, wb, rowBytes, n0, n1, y, ldy, xsum); break;
    }
    if (xsum != stack) free(xsum);
    return BK_OK;
}

int bk_dequantize_rows_at(int level, uint32_t type, const void *w, size_t rowBytes, size_t r0, size_t r1,
                          size_t k, float *out) {
    if (!bk_level_supported(level)) return BK_ERROR_LEVEL;
    if (!bk_type_supported(type)) return BK_ERROR_TYPE;
    if (k == 0 || k % block_values(type) != 0) return BK_ERROR_SHAPE;
    if (r1 <= r0) return BK_OK;
    const uint8_t *wb = (const uint8_t *)w;
    switch (level) {
#if defined(__x86_64__)
    case BK_LEVEL_AVX2: bk_avx2_dequantize(type, wb, rowBytes, r0, r1, k, out); break;
    case BK_LEVEL_AVX512:
    case BK_LEVEL_AVX512_VNNI: bk_avx512_dequantize(type, wb, rowBytes, r0, r1, k, out); break;
#endif
    default: bk_portable_dequantize(type, wb, rowBytes, r0, r1, k, out); break;
    }
    return BK_OK;
}

int bk_matmul_nt(uint32_t type, const float *x, size_t m, size_t k, const void *w, size_t rowBytes,
                 size_t n0, size_t n1, float *y, size_t ldy) {
    return bk_matmul_nt_at(bk_active_level(), type, x, m, k, w, rowBytes, n0, n1, y, ldy);
}

int bk_dequantize_rows(uint32_t type, const void *w, size_t rowBytes, size_t r0, size_t r1, size_t k,
                       float *out) {
    return bk_dequantize_rows_at(bk_active_level(), type, w, rowBytes, r0, r1, k, out);
}

static void *grown(void **scratch, size_t *size, size_t bytes) {
    if (*size < bytes) {
        free(*scratch);
        *size = (bytes + 63) / 64 * 64;
        *scratch = aligned_alloc(64, *size);
        if (!*scratch) *size = 0;
    }
    return *scratch;
}

void *bk_tile_scratch(size_t bytes) {
    static _Thread_local void *scratch;
    static _Thread_local size_t size;
    return grown(&scratch, &size, bytes);
}

void *bk_order_scratch(size_t bytes) {
    static _Thread_local void *scratch;
    static _Thread_local size_t size;
    return grown(&scratch, &size, bytes);
}

// ---------------------------------------------------------------------------------------------
// q8 activations

size_t bk_q8_bytes(size_t m, size_t k) { return m * k + m * k / 2; }

int bk_quantize_q8_at(int level, const float *x, size_t m, size_t k, void *xq) {
    if (!bk_level_supported(level)) return BK_ERROR_LEVEL;
    if (k == 0 || k % 32 != 0) return BK_ERROR_SHAPE;
    if (m == 0) return BK_OK;
#if defined(__x86_64__)
    if (level >= BK_LEVEL_AVX2) {
        bk_avx2_quantize_q8(x, m, k, xq);
        return BK_OK;
    }
#endif
    bk_portable_quantize_q8(x, m, k, xq);
    return BK_OK;
}

int bk_matmul_nt_q8_at(int level, uint32_t type, const void *xq, size_t m, size_t k, const void *w,
                       size_t rowBytes, size_t n0, size_t n1, float *y, size_t ldy) {
    if (!bk_level_supported(level)) return BK_ERROR_LEVEL;
    // Q2_K has no q8 product: its callers take bk_matmul_nt (float activations) instead
    if (!bk_type_supported(type) || block_values(type) == 1 || type == BK_Q2_K) return BK_ERROR_TYPE;
    if (k == 0 || k % block_values(type) != 0) return BK_ERROR_SHAPE;
    if (m == 0 || n1 <= n0) return BK_OK;
    const uint8_t *wb = (const uint8_t *)w;
    switch (level) {
#if defined(__x86_64__)
    case BK_LEVEL_AVX2:
    case BK_LEVEL_AVX512: bk_avx2_matmul_q8(type, xq, m, k, wb, rowBytes, n0, n1, y, ldy); break;
    case BK_LEVEL_AVX512_VNNI: bk_vnni_matmul_q8(type, xq, m, k, wb, rowBytes, n0, n1, y, ldy); break;
#endif
    default: bk_portable_matmul_q8(type, xq, m, k, wb, rowBytes, n0, n1, y, ldy); break;
    }
    return BK_OK;
}

int bk_quantize_q8(const float *x, size_t m, size_t k, void *xq) {
    return bk_quantize_q8_at(bk_active_level(), x, m, k, xq);
}

int bk_matmul_nt_q8(uint32_t type, const void *xq, size_t m, size_t k, const void *w, size_t rowBytes,
                    size_t n0, size_t n1, float *y, size_t ldy) {
    return bk_matmul_nt_q8_at(bk_active_level(), type, xq, m, k, w, rowBytes, n0, n1, y, ldy);
}

// ---------------------------------------------------------------------------------------------
// float-vector kernels

#if defined(__x86_64__)
#define BK_VECTOR_CALL(level, name, ...)                                            \
    switch (level) {                                                                \
    case BK_LEVEL_AVX2: return bk_avx2_##name(__VA_ARGS__);                         \
    case BK_LEVEL_AVX512: case BK_LEVEL_AVX512_VNNI: return bk_avx512_##name(__VA_ARGS__); \
    default: return bk_portable_##name(__VA_ARGS__);                                \
    }
#else
#define BK_VECTOR_CALL(level, name, ...) return bk_portable_##name(__VA_ARGS__);
#endif

static int vector_level(int level) { return bk_level_supported(level) ? level : BK_LEVEL_PORTABLE; }

float bk_dot_at(int level, const float *a, const float *b, size_t n) {
    BK_VECTOR_CALL(vector_level(level), dot, a, b, n)
}

void bk_axpy_at(int level, float alpha, const float *x, float *y, size_t n) {
    BK_VECTOR_CALL(vector_level(level), axpy, alpha, x, y, n)
}

void bk_attend_at(int level, const float *q, const void *keys, const void *values, int half, size_t stride, size_t len,
                  size_t hd, float scale, float *scores, float *out) {
    if (len == 0) return;
    BK_VECTOR_CALL(vector_level(level), attend, q, keys, values, half, stride, len, hd, scale, scores, out)
}

void bk_attend_rows_at(int level, const float *q, size_t ldq, size_t rows, size_t heads, const size_t *len, const void *keys,
                       const void *values, int half, size_t stride, size_t hd, float scale, float *scores, float *out,
                       size_t ldo) {
    if (rows == 0 || heads == 0) return;
    BK_VECTOR_CALL(vector_level(level), attend_rows, q, ldq, rows, heads, len, keys, values, half, stride, hd, scale, scores,
                   out, ldo)
}

void bk_attend_rows(const float *q, size_t ldq, size_t rows, size_t heads, const size_t *len, const void *keys,
                    const void *values, int half, size_t stride, size_t hd, float scale, float *scores, float *out,
                    size_t ldo) {
    bk_attend_rows_at(bk_active_level(), q, ldq, rows, heads, len, keys, values, half, stride, hd, scale, scores, out, ldo);
}

void bk_to_half_at(int level, const float *x, uint16_t *y, size_t n) {
    BK_VECTOR_CALL(vector_level(level), to_half, x, y, n)
}

void bk_to_half(const float *x, uint16_t *y, size_t n) { bk_to_half_at(bk_active_level(), x, y, n); }

void bk_softmax_at(int level, float *x, size_t n, float scale) {
    if (n == 0) return;
    BK_VECTOR_CALL(vector_level(level), softmax, x, n, scale)
}

void bk_softmax(float *x, size_t n, float scale) { bk_softmax_at(bk_active_level(), x, n, scale); }

void bk_swiglu_at(int level, const float *gate, const float *up, float *out, size_t n) {
    BK_VECTOR_CALL(vector_level(level), swiglu, gate, up, out, n)
}

void bk_swiglu(const float *gate, const float *up, float *out, size_t n) {
    bk_swiglu_at(bk_active_level(), gate, up, out, n);
}

float bk_dot(const float *a, const float *b, size_t n) { return bk_dot_at(bk_active_level(), a, b, n); }

void bk_axpy(float alpha, const float *x, float *y, size_t n) { bk_axpy_at(bk_active_level(), alpha, x, y, n); }

void bk_lowrank_up_at(int level, const float *u, size_t m, size_t r, const void *bt, int half, size_t out, size_t o0,
                      size_t o1, float *y, size_t ldy) {
    BK_VECTOR_CALL(vector_level(level), lowrank_up, u, m, r, bt, half, out, o0, o1, y, ldy)
}

void bk_lowrank_up(const float *u, size_t m, size_t r, const void *bt, int half, size_t out, size_t o0, size_t o1,
                   float *y, size_t ldy) {
    bk_lowrank_up_at(bk_active_level(), u, m, r, bt, half, out, o0, o1, y, ldy);
}

void bk_attend(const float *q, const void *keys, const void *values, int half, size_t stride, size_t len, size_t hd,
               float scale, float *scores, float *out) {
    bk_attend_at(bk_active_level(), q, keys, values, half, stride, len, hd, scale, scores, out);
}
