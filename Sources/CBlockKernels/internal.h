// What the per-level kernel files share: ggml type ids and block geometry, the fp16 -> float
// conversion for scales, and each level's entry points. Nothing here is public API.
// Type ids and block sizes follow ggml.h (`enum ggml_type`) and ggml-common.h (block_q*).
#ifndef CBLOCKKERNELS_INTERNAL_H
#define CBLOCKKERNELS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum {
    BK_F32 = 0, BK_F16 = 1, BK_Q4_0 = 2, BK_Q4_1 = 3, BK_Q5_0 = 6, BK_Q5_1 = 7, BK_Q8_0 = 8,
    BK_Q2_K = 10, BK_Q3_K = 11, BK_IQ4_NL = 20, BK_Q4_K = 12, BK_Q5_K = 13, BK_Q6_K = 14, BK_BF16 = 30
};

// Bytes per block (values per block: 1 for the float types, 32 for Q*_0/Q4_1, 256 for K-quants).
enum {
    BK_Q8_0_BYTES = 34,   // fp16 d, 32 int8
    BK_Q4_0_BYTES = 18,   // fp16 d, 16 bytes of nibbles
    BK_Q4_1_BYTES = 20,   // fp16 d, fp16 m, 16 bytes of nibbles
    BK_Q5_0_BYTES = 22,   // fp16 d, 32 fifth bits (uint32 qh, bit i for value i), nibbles as Q4_0
    BK_Q5_1_BYTES = 24,   // fp16 d, fp16 m, then as Q5_0: qh, nibbles
    BK_IQ4_NL_BYTES = 18, // fp16 d, 16 bytes of 4-bit indexes into bk_iq4nl_values, nibbles as Q4_0
    BK_Q2_K_BYTES = 84,   // 16 bytes of 4-bit scales | mins << 4, 64 bytes qs (2 bits each), fp16 d, fp16 dmin
    BK_Q3_K_BYTES = 110,  // 32 bytes hmask (third bits), 64 bytes qs (2 bits each), 12 bytes of 6-bit scales, fp16 d
    BK_Q4_K_BYTES = 144,  // fp16 d, fp16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
    BK_Q5_K_BYTES = 176,  // as Q4_K plus 32 bytes of fifth bits (qh) before the nibbles
    BK_Q6_K_BYTES = 210   // 128 bytes ql, 64 bytes qh, 16 int8 scales, fp16 d (last)
};

// Bytes of one block of a 32-value type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL).
static inline size_t bk_bytes32(uint32_t type) {
    switch (type) {
    case BK_Q8_0: return BK_Q8_0_BYTES;
    case BK_Q4_0: return BK_Q4_0_BYTES;
    case BK_Q4_1: return BK_Q4_1_BYTES;
    case BK_Q5_0: return BK_Q5_0_BYTES;
    case BK_IQ4_NL: return BK_IQ4_NL_BYTES;
    default: return BK_Q5_1_BYTES;
    }
}

// 1 for the 32-value types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL).
static inline int bk_is32(uint32_t type) {
    return type == BK_Q8_0 || type == BK_Q4_0 || type == BK_Q4_1 || type == BK_Q5_0 || type == BK_Q5_1 || type == BK_IQ4_NL;
}

// IQ4_NL's 16 levels (ggml's kvalues_iq4nl); a weight is d times the level its nibble indexes.
static const int8_t bk_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// 1 for the 32-value types with a minimum m (x = d·q + m): Q4_1, Q5_1.
static inline int bk_has_min32(uint32_t type) { return type == BK_Q4_1 || type == BK_Q5_1; }

// Where a Q5_0/Q5_1 block keeps its fifth bits (qh) and nibbles (qs): after d, or after d and m.
static inline size_t bk_q5_qh(uint32_t type) { return type == BK_Q5_0 ? 2 : 4; }
static inline size_t bk_q5_qs(uint32_t type) { return type == BK_Q5_0 ? 6 : 8; }

// Bytes of one block of a 256-value type (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
static inline size_t bk_bytes256(uint32_t type) {
    switch (type) {
    case BK_Q2_K: return BK_Q2_K_BYTES;
    case BK_Q3_K: return BK_Q3_K_BYTES;
    case BK_Q4_K: return BK_Q4_K_BYTES;
    case BK_Q5_K: return BK_Q5_K_BYTES;
    default: return BK_Q6_K_BYTES;
    }
}

// Block products of several rows cut k into chunks when the rows' activations outgrow `budget`
// bytes of L1 (avx512.c's product says why): values per chunk, about equal and a multiple of
// `unit` (the block), or k when one row or a short k leaves nothing to gain.
static inline size_t bk_chunk_values(size_t m, size_t k, size_t unit, size_t budget) {
    if (m < 2 || m * k * sizeof(float) <= budget || k <= unit) return k;
    const size_t count = (m * k * sizeof(float) + budget - 1) / budget;
    return ((k + count - 1) / count + unit - 1) / unit * unit;
}

// Where a thread's block products keep tile accumulators between chunks of k: one 64-byte
// aligned buffer per thread, grown as needed and kept for the thread's life (dispatch.c); NULL
// when memory runs out (the product then takes k whole).
void *bk_tile_scratch(size_t bytes);
// A second such buffer, for activations copied in another order (the xorder of bk_avx2_matmul
// and bk_avx512_matmul).
void *bk_order_scratch(size_t bytes);

// Activation sums per 32 values (the Q4_1/Q5_1 and K-quant min terms) live in a stack buffer of
// this many floats when m * k / 32 fits, else in one malloc per call.
enum { BK_XSUM_STACK = 4096 };

static inline uint16_t bk_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t bk_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

// Value i (0..31) of a Q5_0/Q5_1 block with its fifth bit: byte i % 16 of the nibbles (low nibble for
// i < 16, high for i >= 16) and bit i of the little-endian word qh.
static inline int bk_q5_value(const uint8_t *qs, uint32_t qh, int i) {
    int nibble = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
    return nibble | (int)((qh >> i) & 1) << 4;
}

// IEEE half -> float, exact for every input (subnormals included). A NaN keeps its payload and
// comes out quiet, as F16C's vcvtph2ps makes it, so every level gives the same bits.
static inline float bk_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else {
        float f = (float)mant * 0x1p-24f;  // zero or subnormal: exact in float
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

static inline float bk_bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

// The 8 six-bit scales and 8 six-bit mins of a Q4_K/Q5_K super-block, unpacked to bytes
// (`get_scale_min_k4` for all j at once, on 32-bit words).
static inline void bk_k4_scales(const uint8_t *packed, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t a = bk_u32(packed), b = bk_u32(packed + 4), c = bk_u32(packed + 8);
    uint32_t s03 = a & 0x3f3f3f3fu, m03 = b & 0x3f3f3f3fu;
    uint32_t s47 = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
    uint32_t m47 = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
    memcpy(sc, &s03, 4); memcpy(sc + 4, &s47, 4);
    memcpy(mn, &m03, 4); memcpy(mn + 4, &m47, 4);
}

#if defined(__x86_64__)
#include <immintrin.h>
// bk_k4_scales in vector registers, for two super-blocks at once: each 128-bit lane of v holds a
// Q4_K/Q5_K head (bytes 0-15: d, dmin, the 12 packed bytes), and comes back as its eight scales
// then its eight mins, one byte each ([s03, s47, m03, m47] as 32-bit words). Eight vector
// operations where bk_k4_scales takes ~20 scalar ones and a store and reload per row and
// super-block (a fifth of the one-row q8k product's work, 15% of the float32 one's).
static inline __attribute__((target("avx2"), always_inline)) __m256i bk_k4_unpack2(__m256i v) {
    const __m256i x = _mm256_srlv_epi32(_mm256_shuffle_epi32(v, _MM_SHUFFLE(3, 3, 2, 1)), _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4));
    const __m256i top = _mm256_setr_epi32(0, 0, 0x03030303, 0x03030303, 0, 0, 0x03030303, 0x03030303);
    const __m256i y = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(_mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 0, 0)), 6), top), 4);
    const __m256i low = _mm256_setr_epi32(0x3f3f3f3f, 0x3f3f3f3f, 0x0f0f0f0f, 0x0f0f0f0f, 0x3f3f3f3f, 0x3f3f3f3f, 0x0f0f0f0f, 0x0f0f0f0f);
    // [a, b, c, c >> 4] & low | [-, -, (a >> 6 & 3) << 4, (b >> 6 & 3) << 4] = [s03, m03, s47, m47]
    return _mm256_shuffle_epi32(_mm256_or_si256(_mm256_and_si256(x, low), y), _MM_SHUFFLE(3, 1, 2, 0));
}

// One super-block's head at p unpacked as bk_k4_unpack2 does: scales in bytes 0-7, mins in 8-15.
static inline __attribute__((target("avx2"), always_inline)) __m128i bk_k4_unpack1(const uint8_t *p) {
    return _mm256_castsi256_si128(bk_k4_unpack2(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p))));
}
#endif

// The 16 signed scales (-32..31) of a Q3_K super-block from its 12 packed bytes: the low 4 bits
// of scale i are the low (i < 8) or high (i >= 8) nibble of byte i % 8, the top 2 bits are bits
// 2(i/4), 2(i/4)+1 of byte 8 + i % 4, stored with an offset of 32.
static inline void bk_q3k_scales(const uint8_t *packed, int8_t sc[16]) {
    for (int i = 0; i < 16; i++) {
        int low = i < 8 ? packed[i] & 15 : packed[i - 8] >> 4;
        int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        sc[i] = (int8_t)((low | high << 4) - 32);
    }
}

// Value i (0..255) of a Q3_K block, -4..3: bits 2j, 2j+1 of qs[32h + l] (i = 128h + 32j + l), less
// 4 unless bit i / 32 of hmask[l] is set.
static inline int bk_q3k_value(const uint8_t *p, int i) {
    int h = i / 128, j = (i % 128) / 32, l = i % 32;
    int low = (p[32 + 32 * h + l] >> (2 * j)) & 3;
    return (p[l] >> (i / 32)) & 1 ? low : low - 4;
}

// Q2_K's 2-bit value i (0..255): bits 2j, 2j+1 of qs[32h + l] (i = 128h + 32j + l).
static inline int bk_q2k_value(const uint8_t *p, int i) {
    return (p[16 + 32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

// Each level's work, called by dispatch.c once type and shape are checked (k a whole number of
// blocks, m >= 1, n0 < n1). `xsum` holds m * k / 32 floats of scratch.
void bk_portable_matmul(uint32_t type, const float *x, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                        size_t n0, size_t n1, float *y, size_t ldy, float *xsum);
void bk_portable_dequantize(uint32_t type, const uint8_t *w, size_t rowBytes, size_t r0, size_t r1, size_t k,
                            float *out);
#if defined(__x86_64__)
// `xorder`: m * k + m * k / 16 floats of scratch for Q6_K (its tiles read the activations
// reordered, and their sums per 16 after them).
void bk_avx2_matmul(uint32_t type, const float *x, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                    size_t n0, size_t n1, float *y, size_t ldy, float *xsum, float *xorder);
void bk_avx2_dequantize(uint32_t type, const uint8_t *w, size_t rowBytes, size_t r0, size_t r1, size_t k,
                        float *out);
// `xorder`: m * k + m * k / 16 floats of scratch for Q6_K (its tiles read the activations
// reordered, and their sums per 16 after them), m * k for Q4_K (reordered).
void bk_avx512_matmul(uint32_t type, const float *x, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                      size_t n0, size_t n1, float *y, size_t ldy, float *xsum, float *xorder);
void bk_avx512_dequantize(uint32_t type, const uint8_t *w, size_t rowBytes, size_t r0, size_t r1, size_t k,
                          float *out);
#endif

// The q8 activation form of m rows of k values, as four arrays one after the other:
// q[m*k] int8, then per 32 values d (scale) and s32 = d * sum(q), then per 16 values s16 = d * sum(q).
typedef struct {
    const int8_t *q;
    const float *d, *s32, *s16;
} bk_q8_rows;

static inline bk_q8_rows bk_q8_layout(const void *xq, size_t m, size_t k) {
    const uint8_t *base = (const uint8_t *)xq;
    size_t values = m * k;
    bk_q8_rows v = {(const int8_t *)base, (const float *)(base + values), (const float *)(base + values + values / 8),
                    (const float *)(base + values + values / 4)};
    return v;
}

// Row r of a q8 view.
static inline bk_q8_rows bk_q8_row(bk_q8_rows v, size_t r, size_t k) {
    bk_q8_rows o = {v.q + r * k, v.d + r * (k / 32), v.s32 + r * (k / 32), v.s16 + r * (k / 16)};
    return o;
}

void bk_portable_quantize_q8(const float *x, size_t m, size_t k, void *xq);
void bk_portable_matmul_q8(uint32_t type, const void *xq, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                           size_t n0, size_t n1, float *y, size_t ldy);
#if defined(__x86_64__)
void bk_avx2_quantize_q8(const float *x, size_t m, size_t k, void *xq);
void bk_avx2_matmul_q8(uint32_t type, const void *xq, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                       size_t n0, size_t n1, float *y, size_t ldy);
void bk_vnni_matmul_q8(uint32_t type, const void *xq, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                       size_t n0, size_t n1, float *y, size_t ldy);
#endif

// The float-vector kernels (vector_impl.h), one set per level.
#define BK_VECTOR_DECLS(level)                                                                          \
    float bk_##level##_dot(const float *a, const float *b, size_t n);                                   \
    void bk_##level##_axpy(float alpha, const float *x, float *y, size_t n);                            \
    void bk_##level##_lowrank_up(const float *u, size_t m, size_t r, const void *bt, int half, size_t out, \
                                 size_t o0, size_t o1, float *y, size_t ldy);                           \
    void bk_##level##_attend(const float *q, const void *keys, const void *values, int half, size_t stride, \
                             size_t len, size_t hd, float scale, float *scores, float *out);            \
    void bk_##level##_attend_rows(const float *q, size_t ldq, size_t rows, size_t heads, const size_t *len,  \
                                  const void *keys, const void *values, int half, size_t stride, size_t hd, \
                                  float scale, float *scores, float *out, size_t ldo);                   \
    void bk_##level##_to_half(const float *x, uint16_t *y, size_t n);                                 \
    void bk_##level##_softmax(float *x, size_t n, float scale);                                         \
    void bk_##level##_swiglu(const float *gate, const float *up, float *out, size_t n);
BK_VECTOR_DECLS(portable)
#if defined(__x86_64__)
BK_VECTOR_DECLS(avx2)
BK_VECTOR_DECLS(avx512)
#endif

#endif
