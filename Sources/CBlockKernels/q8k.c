// The q8k activation form for Q4_K, Q5_K and Q6_K weights: llama.cpp's q8_K arithmetic. Each activation row is
// quantized per 256 values (one float scale, int8 values, an integer sum per 32), and a Q4_K
// super-block meets it in integer arithmetic throughout: sumi = Σ_s sc_s·Σ_(i in s) q_w·q_x and
// summ = Σ_s m_s·bsum_s are exact, then per super-block and row
//     acc = fma(d_w·d_x, (float)sumi, acc),  macc = fma(dmin_w·d_x, (float)summ, macc),
// and y = acc - macc (Q5_K the same with a fifth bit on each value). Q6_K has no mins; its values q - 32 (q in 0..63) meet the activations as
// the unsigned q, and the 32 comes back through the sums per 16 values:
//     sumi = Σ_s sc_s·(Σ_(i in s) q_w·q_x - 32·bsum16_s),  acc = fma(d_w·d_x, (float)sumi, acc).
// The plain C below fixes those steps; the AVX-512 VNNI product computes the
// integer sums with vpmaddubsw + vpdpwssd (64 values and one sub-block scale per instruction
// pair) and the float steps lane by lane for eight rows at once, AVX2 the same with 32 values per
// pair and four rows, so every level and every row count gives the same bits. Against the per-32
// q8 form (q8.c), a row costs far fewer operations: one float conversion per 256 values instead
// of one per 32.
#include "CBlockKernels.h"
#include "internal.h"

#include <math.h>

#pragma STDC FP_CONTRACT OFF

// Layout of m rows of k values (k a multiple of 256), B = k / 256 super-blocks per row:
// q int8 [m][k], then d float [B][m] (block-major: a tile's rows adjacent), then bsum int16
// [B][4][m][2]: the sums of each 32 values' q, for super-block b and sub-blocks 2g, 2g+1 of all
// rows side by side, so a tile multiplies them by the pair of mins (mn_2g, mn_2g+1) with one
// vpmaddwd for all its rows; then bsum16 int16 [B][8][m][2], the same per 16 values (Q6_K's
// sub-blocks, paired 2j, 2j+1); then the q of the first 16·⌊m/16⌋ rows again, 16 rows in lanes:
// [m/16][k/4][16][4] (block R's values 4i..4i+3 of its rows 0..15 side by side, one vector: the
// VNNI K-quant kernels' vpdpbusd against four weight values broadcast).
typedef struct {
    const int8_t *q;
    const float *d;
    const int16_t *bsum, *bsum16;
    const int8_t *lanes;  // NULL when m < 16
} q8k_view;

static size_t lanes_offset(size_t m, size_t k) { return m * k + m * (k / 256) * (4 + 16 + 32); }

static q8k_view q8k_layout(const void *xq, size_t m, size_t k) {
    const uint8_t *base = (const uint8_t *)xq;
    const size_t B = k / 256;
    q8k_view v = {(const int8_t *)base, (const float *)(base + m * k), (const int16_t *)(base + m * k + 4 * m * B),
                  (const int16_t *)(base + m * k + 4 * m * B + 16 * m * B), m >= 16 ? (const int8_t *)(base + lanes_offset(m, k)) : 0};
    return v;
}

// Index in bsum of row r, super-block b, sub-block s.
static inline size_t bsum_index(size_t m, size_t r, size_t b, int s) { return ((b * 4 + s / 2) * m + r) * 2 + (s & 1); }
// Index in bsum16 of row r, super-block b, 16-value sub-block s (0..15).
static inline size_t bsum16_index(size_t m, size_t r, size_t b, int s) { return ((b * 8 + s / 2) * m + r) * 2 + (s & 1); }

size_t bk_q8k_bytes(size_t m, size_t k) { return lanes_offset(m, k) + m / 16 * 16 * k; }

// The plain C quantizer serves every level (it is a small part of a product's time).
static void quantize_q8k(const float *x, size_t m, size_t k, void *xq) {
    const size_t B = k / 256;
    uint8_t *base = (uint8_t *)xq;
    int8_t *q = (int8_t *)base;
    float *d = (float *)(base + m * k);
    int16_t *bsum = (int16_t *)(base + m * k + 4 * m * B), *bsum16 = bsum + 8 * m * B;
    for (size_t r = 0; r < m; r++) {
        for (size_t b = 0; b < B; b++) {
            const float *p = x + r * k + 256 * b;
            float amax = 0;
            for (int i = 0; i < 256; i++) amax = fmaxf(amax, fabsf(p[i]));
            const float scale = amax / 127.0f, inverse = scale != 0 ? 1.0f / scale : 0.0f;
            int8_t *out = q + r * k + 256 * b;
            for (int s = 0; s < 16; s++) {
                int sum = 0;
                for (int i = 16 * s; i < 16 * s + 16; i++) {
                    int v = (int)rintf(p[i] * inverse);
                    v = v > 127 ? 127 : v < -127 ? -127 : v;
                    out[i] = (int8_t)v;
                    sum += v;
                }
                bsum16[bsum16_index(m, r, b, s)] = (int16_t)sum;
            }
            for (int s = 0; s < 8; s++)
                bsum[bsum_index(m, r, b, s)] = (int16_t)(bsum16[bsum16_index(m, r, b, 2 * s)] + bsum16[bsum16_index(m, r, b, 2 * s + 1)]);
            d[b * m + r] = scale;
        }
    }
    int8_t *lanes = (int8_t *)(base + lanes_offset(m, k));
    for (size_t R = 0; R < m / 16; R++)
        for (size_t i = 0; i < k / 4; i++)
            for (size_t r = 0; r < 16; r++) memcpy(lanes + ((R * (k / 4) + i) * 16 + r) * 4, q + (16 * R + r) * k + 4 * i, 4);
}

// Q6_K's value i (0..255) of the super-block at p as the unsigned q (0..63), in ggml's order:
// half i / 128; within it value v, e = v / 32 picks ql's low (e < 2) or high nibble of byte
// v % 32 + 32·(e & 1), and bits 2e, 2e+1 of qh[v % 32].
static inline int q6k_unsigned(const uint8_t *p, int i) {
    const int hf = i / 128, v = i % 128, e = v / 32, l = v % 32;
    const int lo = p[64 * hf + l + 32 * (e & 1)];
    return (e < 2 ? lo & 15 : lo >> 4) | ((p[128 + 32 * hf + l] >> (2 * e)) & 3) << 4;
}

static void portable_q8k6(q8k_view x, size_t m, size_t k, const uint8_t *w, size_t rowBytes, size_t n0, size_t n1,
                          float *y, size_t ldy) {
    const size_t B = k / 256;
    for (size_t r = 0; r < m; r++) {
        for (size_t o = n0; o < n1; o++) {
            float acc = 0;
            for (size_t b = 0; b < B; b++) {
                const uint8_t *p = w + o * rowBytes + b * BK_Q6_K_BYTES;
                const int8_t *qx = x.q + r * k + 256 * b;
                int32_t sumi = 0;
                for (int s = 0; s < 16; s++) {
                    int32_t isum = 0;
                    for (int l = 16 * s; l < 16 * s + 16; l++) isum += q6k_unsigned(p, l) * qx[l];
                    sumi += (int8_t)p[192 + s] * (isum - 32 * x.bsum16[bsum16_index(m, r, b, s)]);
                }
                acc = fmaf(bk_half_to_float(bk_u16(p + 208)) * x.d[b * m + r], (float)sumi, acc);
            }
            y[r * ldy + o] = acc;
        }
    }
}

// The reference product: every (row, output) in the order the header gives.
static void portable_q8k(const uint32_t type, q8k_view x, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                         size_t n0, size_t n1, float *y, size_t ldy) {
    const size_t B = k / 256, bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : BK_Q5_K_BYTES;
    for (size_t r = 0; r < m; r++) {
        for (size_t o = n0; o < n1; o++) {
            float acc = 0, macc = 0;
            for (size_t b = 0; b < B; b++) {
                const uint8_t *p = w + o * rowBytes + b * bytes;
                uint8_t sc[8], mn[8];
                bk_k4_scales(p + 4, sc, mn);
                const int8_t *qx = x.q + r * k + 256 * b;
                int32_t sumi = 0, summ = 0;
                for (int s = 0; s < 8; s++) {
                    const uint8_t *qs = p + (type == BK_Q4_K ? 16 : 48) + 32 * (s / 2);
                    int32_t isum = 0;
                    for (int l = 0; l < 32; l++) {  // Q5_K: bit s of qh[l] is the value's bit 4
                        const int high = type == BK_Q5_K ? ((p[16 + l] >> s) & 1) << 4 : 0;
                        isum += ((s & 1 ? qs[l] >> 4 : qs[l] & 15) | high) * qx[32 * s + l];
                    }
                    sumi += sc[s] * isum;
                    summ += mn[s] * x.bsum[bsum_index(m, r, b, s)];
                }
                const float dx = x.d[b * m + r];
                acc = fmaf(bk_half_to_float(bk_u16(p)) * dx, (float)sumi, acc);
                macc = fmaf(bk_half_to_float(bk_u16(p + 2)) * dx, (float)summ, macc);
            }
            y[r * ldy + o] = acc - macc;
        }
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

// What both SIMD levels share (AVX2 code; the VNNI functions below inline it too).
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)

// The same super-block eight weight rows on (two groups ahead), into L2: as prefetch_ahead in
// avx512.c, without which the row streams starved (one row here ran at 60% of the q8 form's speed).
INLINE void prefetch_ahead(const uint8_t *p, size_t rowBytes, size_t bytes) {
    const char *a = (const char *)p + 8 * rowBytes;
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(a + off, _MM_HINT_T1);
}

// `ahead` bytes further along the one stream of weights a core reads (the four-row tiles read
// their rows one after the other), into L1 without displacing what the step reuses (NTA). Eight
// rows on, as prefetch_ahead, is 37 KB ahead for a Q4_K row of 8,192 values and 53 KB for Q6_K's,
// and those long rows streamed slowest. `bench kernels --types q4_K q6_K --modes q8k --levels 3`,
// Zen 5, cold, one thread, eight rows on (T1) -> 12 KB: Q4_K 8192x2048 338-347 -> 297-306 us,
// Q6_K 8192x2048 571-589 -> 468-484, 2048x8192 the same or faster; in a C harness (one thread,
// cold) 2-6 KB ahead lost 10-40% on k = 8192, 8-24 KB all gained, T0 and T1 less than NTA. The
// VNNI tile takes 12 KB; the AVX2 one eight rows on up to 12 KB (12 KB for every row was mixed
// there, at ADAPTER_CPU_LEVEL=avx2 on Zen 5: Phi-4-mini q8 decoding +2-9%, Qwen3-1.7B -1-6%; the
// cap: Phi-4-mini 20.8-22.8 -> 22.2-23.4 tokens/s, Qwen3-1.7B 36.1-46.1 -> 45.8-46.5, Qwen3-0.6B
// and Gemma-3-1B level). The cap in the VNNI tile ran 2-5% slower on 8192x2048, where it gives
// the same 12 KB (the distance no longer a constant in the address).
INLINE void prefetch_stream(const uint8_t *p, size_t ahead, size_t bytes) {
    const char *a = (const char *)p + ahead;
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(a + off, _MM_HINT_NTA);
}

// The mins of sub-blocks 2g and 2g+1 as the two 16-bit halves of a word (vpmaddwd's pairs).
INLINE int32_t min_pair(const uint8_t mn[8], int g) { return (int32_t)(mn[2 * g] | (uint32_t)mn[2 * g + 1] << 16); }

// Row r0's float steps for super-block b at p, given its exact integer sum sumi (summ from the
// bsums and the mins mn).
INLINE void steps1(q8k_view x, size_t m, size_t r0, size_t b, const uint8_t *p, const uint8_t mn[8], int32_t sumi,
                   float *acc, float *macc) {
    int32_t summ = 0;
    if (m == 1) {  // decoding: the row's sums are contiguous
        const __m128i t = _mm_madd_epi16(_mm_loadu_si128((const __m128i *)(x.bsum + 8 * b)), _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn)));
        summ = _mm_cvtsi128_si32(_mm_hadd_epi32(_mm_hadd_epi32(t, t), t));
    } else {
        for (int s = 0; s < 8; s++) summ += mn[s] * x.bsum[bsum_index(m, r0, b, s)];
    }
    const float dx = x.d[b * m + r0];
    *acc = fmaf(bk_half_to_float(bk_u16(p)) * dx, (float)sumi, *acc);
    *macc = fmaf(bk_half_to_float(bk_u16(p + 2)) * dx, (float)summ, *macc);
}

// Four 32-bit lanes of rows r0.. from p (a row's pair of int16 sums, or its float), or with
// rows == 2 the low two (the next rows' data may lie past the end).
INLINE __m128i load_lanes(const void *p, int rows) {
    return rows == 4 ? _mm_loadu_si128((const __m128i *)p) : _mm_loadl_epi64((const __m128i *)p);
}

// The same for rows r0..r0+rows-1 (rows 4 or 2, a constant at each call) in the low lanes.
INLINE void steps4(q8k_view x, size_t m, size_t r0, size_t b, const uint8_t *p, const uint8_t mn[8], __m128i sumi,
                   __m128 *acc, __m128 *macc, int rows) {
    __m128i summ = _mm_setzero_si128();
    for (int g = 0; g < 4; g++)
        summ = _mm_add_epi32(summ, _mm_madd_epi16(load_lanes(x.bsum + bsum_index(m, r0, b, 2 * g), rows),
                                                  _mm_set1_epi32(min_pair(mn, g))));
    const __m128 dx = _mm_castsi128_ps(load_lanes(x.d + b * m + r0, rows));
    *acc = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(bk_half_to_float(bk_u16(p))), dx), _mm_cvtepi32_ps(sumi), *acc);
    *macc = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(bk_half_to_float(bk_u16(p + 2))), dx), _mm_cvtepi32_ps(summ), *macc);
}

// Q6_K's float steps: sumi = sums - 32·Σ_s sc_s·bsum16_s (exact), then acc = fma(d·dx, sumi, acc);
// for one row, four (or two) rows in lanes, and eight.
INLINE int32_t sc_pair(const int8_t *sc, int j) { return (int32_t)((uint16_t)(int16_t)sc[2 * j] | (uint32_t)(uint16_t)(int16_t)sc[2 * j + 1] << 16); }

INLINE void steps6_1(q8k_view x, size_t m, size_t r0, size_t b, const uint8_t *p, int32_t sums, float *acc) {
    const int8_t *sc = (const int8_t *)(p + 192);
    int32_t corr = 0;
    if (m == 1) {  // decoding: the row's sums are contiguous
        const __m256i t = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x.bsum16 + 16 * b)),
                                            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc)));
        const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        corr = _mm_cvtsi128_si32(_mm_hadd_epi32(_mm_hadd_epi32(h, h), h));
    } else {
        for (int s = 0; s < 16; s++) corr += sc[s] * x.bsum16[bsum16_index(m, r0, b, s)];
    }
    *acc = fmaf(bk_half_to_float(bk_u16(p + 208)) * x.d[b * m + r0], (float)(sums - 32 * corr), *acc);
}

// The float step of `rows` (4 or 2) rows once their offset sums Σ_s sc_s·bsum16_s (corr) are known.
INLINE void steps6_rows(q8k_view x, size_t m, size_t r0, size_t b, const uint8_t *p, __m128i sums, __m128i corr, __m128 *acc, int rows) {
    const __m128i sumi = _mm_sub_epi32(sums, _mm_slli_epi32(corr, 5));
    const __m128 dx = _mm_castsi128_ps(load_lanes(x.d + b * m + r0, rows));
    *acc = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(bk_half_to_float(bk_u16(p + 208))), dx), _mm_cvtepi32_ps(sumi), *acc);
}
INLINE void steps6_4(q8k_view x, size_t m, size_t r0, size_t b, const uint8_t *p, __m128i sums, __m128 *acc, int rows) {
    const int8_t *sc = (const int8_t *)(p + 192);
    __m128i corr = _mm_setzero_si128();
    for (int j = 0; j < 8; j++)
        corr = _mm_add_epi32(corr, _mm_madd_epi16(load_lanes(x.bsum16 + bsum16_index(m, r0, b, 2 * j), rows),
                                                  _mm_set1_epi32(sc_pair(sc, j))));
    steps6_rows(x, m, r0, b, p, sums, corr, acc, rows);
}

INLINE void steps6_8(q8k_view x, size_t m, size_t r0, size_t b, const uint8_t *p, __m256i sums, __m256 *acc) {
    const int8_t *sc = (const int8_t *)(p + 192);
    __m256i corr = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++)
        corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x.bsum16 + bsum16_index(m, r0, b, 2 * j))),
                                                        _mm256_set1_epi32(sc_pair(sc, j))));
    const __m256i sumi = _mm256_sub_epi32(sums, _mm256_slli_epi32(corr, 5));
    const __m256 dx = _mm256_loadu_ps(x.d + b * m + r0);
    *acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(bk_half_to_float(bk_u16(p + 208))), dx), _mm256_cvtepi32_ps(sumi), *acc);
}

// Output rows in groups of four; within a group, rows in tiles of `wide` (when given), four,
// two (when `two`), then one: tile(T, r0, w, y, MR) computes MR rows r0.. of type T against
// weight row w into y + r0 * ldy; a single row meets a whole group through tile4(T, r0, w, y)
// where that returns 1 (y + r0 * ldy + o: the group's four outputs). (A 7-row batch took 4 + 1 + 1 + 1 before the two-row tile, a 14-token prefill
// 8 + 4 + 1 + 1: each one-row tile reads the weights once more.) Before the tiles, lead(T, o,
// group) computes the group's first rows some other way and returns how many (VNNI: 16 rows per
// vector; AVX2: none).
#define Q8K_PRODUCT(tile, T, wide, two, tile4, lead)                                                         \
    for (size_t o = n0; o < n1; o += 4) {                                                               \
        const size_t group = n1 - o < 4 ? n1 - o : 4;                                                   \
        size_t r = lead(T, o, group);                                                                   \
        if (wide > 4)                                                                                   \
            for (; r + wide <= m; r += wide)                                                            \
                for (size_t j = 0; j < group; j++) tile(T, r, w + (o + j) * rowBytes, y + o + j, wide); \
        for (; r + 4 <= m; r += 4)                                                                      \
            for (size_t j = 0; j < group; j++) tile(T, r, w + (o + j) * rowBytes, y + o + j, 4);        \
        if (two)                                                                                        \
            for (; r + 2 <= m; r += 2)                                                                  \
                for (size_t j = 0; j < group; j++) tile(T, r, w + (o + j) * rowBytes, y + o + j, 2);    \
        for (; r < m; r++) {                                                                            \
            if (group == 4 && tile4(T, r, w + o * rowBytes, y + r * ldy + o)) continue;                 \
            for (size_t j = 0; j < group; j++) tile(T, r, w + (o + j) * rowBytes, y + o + j, 1);        \
        }                                                                                               \
    }

// The AVX2 level (also AVX-512 without VNNI): 32 values per instruction pair (vpmaddubsw, then
// vpmaddwd by the sub-block's scale), tiles of four rows.
INLINE __m256i avx2_sub_bytes(const uint32_t type, const uint8_t *p, int s) {
    const __m256i qs = _mm256_loadu_si256((const __m256i *)(p + (type == BK_Q4_K ? 16 : 48) + 32 * (s / 2))), nibble = _mm256_set1_epi8(15);
    const __m256i v = _mm256_and_si256(s & 1 ? _mm256_srli_epi16(qs, 4) : qs, nibble);
    if (type == BK_Q4_K) return v;
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 16));  // bit s of each byte to bit 4 (16-bit shift, byte mask)
    return _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, s), _mm256_set1_epi8(1)), 4));
}

// Q6_K quarter e (0..3) of half hf: the 32 unsigned values (0..63) 128hf + 32e ..., built with
// byte-wide operations (ql's low or high nibbles, qh's bits 2e, 2e+1 moved to bits 4-5).
INLINE __m256i avx2_q6_quarter(const uint8_t *p, int hf, int e) {
    const __m256i nibble = _mm256_set1_epi8(15), top2 = _mm256_set1_epi8(0x30);
    __m256i ql = _mm256_loadu_si256((const __m256i *)(p + 64 * hf + (e & 1 ? 32 : 0)));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * hf));
    ql = _mm256_and_si256(e < 2 ? ql : _mm256_srli_epi16(ql, 4), nibble);
    switch (e) {  // 16-bit shifts; the mask drops what crosses bytes
    case 0: qh = _mm256_slli_epi16(qh, 4); break;
    case 1: qh = _mm256_slli_epi16(qh, 2); break;
    case 2: break;
    default: qh = _mm256_srli_epi16(qh, 2); break;
    }
    return _mm256_or_si256(ql, _mm256_and_si256(qh, top2));
}

// The sub-block scales as vpmaddwd's 16-bit words, kept in registers: Q4_K/Q5_K's eight unsigned
// scales as words in both 128-bit lanes (k4_words1, below), Q6_K's sixteen signed ones as two vectors whose lanes
// both hold scales 0-7 (lo) or 8-15 (hi); one vpshufb then spreads the scale(s) of 32 values.
// Broadcasting a scale byte took three operations (movzx, vmovd, vpbroadcastw) per sub-block and
// weight row; a store of the words and vpbroadcastd loads of them made Q6_K slower still (its
// 32-bit loads from a fresh 256-bit store; 612 -> 690 us on 2048x8192, Zen 5 at the avx2 level).
// vpshufb's byte picks: K4_PICK[s] puts word s of each lane in all its words (Q4_K/Q5_K's sub-block
// s); Q6_PICK[i] puts word 2i in the low lane's words and word 2i + 1 in the high lane's. Tables
// in memory, so that each spread is one instruction whatever the compiler unrolls.
static const uint8_t K4_PICK[8][32] __attribute__((aligned(32))) = {
#define P(s) {2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, \
              2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1}
    P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7)
#undef P
};
static const uint8_t Q6_PICK[4][32] __attribute__((aligned(32))) = {
#define P(i) {4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, 4 * i, 4 * i + 1, \
              4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3, 4 * i + 2, 4 * i + 3}
    P(0), P(1), P(2), P(3)
#undef P
};
// Q4_K/Q5_K's sub-block s: its scale in all 16 words.
// The table's address is hidden from the optimizer: once the sub-block loop is unrolled it
// would otherwise turn each constant vpshufb into vpshuflw/vpshufhw + vpshufd, two operations.
INLINE const uint8_t *opaque(const uint8_t *p) {
    __asm__("" : "+r"(p));
    return p;
}
INLINE __m256i k4_sub_words(__m256i words, int s) { return _mm256_shuffle_epi8(words, _mm256_load_si256((const __m256i *)(opaque(K4_PICK[0]) + 32 * s))); }
INLINE void q6_scale_words(const int8_t *sc, __m256i *lo, __m256i *hi) {
    const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
    *lo = _mm256_permute2x128_si256(w, w, 0x00);
    *hi = _mm256_permute2x128_si256(w, w, 0x11);
}
// Q6_K's 32 values 32s...: [scale 2s x 8 words | scale 2s+1 x 8 words].
INLINE __m256i q6_pair_words(__m256i lo, __m256i hi, int s) {
    return _mm256_shuffle_epi8(s < 4 ? lo : hi, _mm256_load_si256((const __m256i *)(opaque(Q6_PICK[0]) + 32 * (s % 4))));
}

// MR (4 or 1) rows r0.. of type T (Q4_K, Q5_K or Q6_K) against one weight row.
INLINE void avx2_tile(const uint32_t type, q8k_view x, size_t m, size_t k, size_t r0, const uint8_t *w, size_t rowBytes,
                      float *y, size_t ldy, const int MR) {
    const size_t B = k / 256, bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : type == BK_Q5_K ? BK_Q5_K_BYTES : BK_Q6_K_BYTES;
    __m128 acc = _mm_setzero_ps(), macc = _mm_setzero_ps();  // Q6_K has no mins: its maccs stay zero
    float acc1 = 0, macc1 = 0;
    for (size_t b = 0; b < B; b++) {
        const uint8_t *p = w + b * bytes;
        prefetch_ahead(p, rowBytes, bytes);
        uint8_t sc[8], mn[8];
        if (type != BK_Q6_K) bk_k4_scales(p + 4, sc, mn);
        const int8_t *sc6 = (const int8_t *)(p + 192);
        __m256i a[4];
        for (int r = 0; r < MR; r++) a[r] = _mm256_setzero_si256();
        #pragma clang loop unroll(full)  // s a constant: no branch or jump table per sub-block, loads shared
        for (int s = 0; s < 8; s++) {  // values 32s ...: a Q4_K/Q5_K sub-block, or Q6_K's sub-blocks 2s, 2s + 1
            const __m256i u = type == BK_Q6_K ? avx2_q6_quarter(p, s / 4, s % 4) : avx2_sub_bytes(type, p, s);
            const __m256i s16 = type == BK_Q6_K
                ? _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(sc6[2 * s])), _mm_set1_epi16(sc6[2 * s + 1]), 1)
                : _mm256_set1_epi16(sc[s]);
            for (int r = 0; r < MR; r++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(x.q + (r0 + r) * k + 256 * b + 32 * s));
                a[r] = _mm256_add_epi32(a[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), s16));
            }
        }
        if (MR == 4) {
            const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
            const __m128i sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            if (type == BK_Q6_K) steps6_4(x, m, r0, b, p, sums, &acc, 4);
            else steps4(x, m, r0, b, p, mn, sums, &acc, &macc, 4);
        } else {
            const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(a[0]), _mm256_extracti128_si256(a[0], 1));
            const int32_t sum = _mm_cvtsi128_si32(_mm_hadd_epi32(_mm_hadd_epi32(h, h), _mm_setzero_si128()));
            if (type == BK_Q6_K) steps6_1(x, m, r0, b, p, sum, &acc1);
            else steps1(x, m, r0, b, p, mn, sum, &acc1, &macc1);
        }
    }
    if (MR == 4) {
        float out[4];
        _mm_storeu_ps(out, _mm_sub_ps(acc, macc));
        for (int r = 0; r < 4; r++) y[(r0 + r) * ldy] = out[r];
    } else {
        y[r0 * ldy] = acc1 - macc1;
    }
}

// Two adjacent int16 sums as one 32-bit word.
INLINE int32_t pair32(const int16_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

// Row r0's 16-bit sums of super-block b: Q4_K/Q5_K's eight (per 32 values) or Q6_K's sixteen (per
// 16), in sub-block order, whatever m (the pairs lie m rows apart when m > 1).
INLINE __m128i row_bsum(q8k_view x, size_t m, size_t r0, size_t b) {
    if (m == 1) return _mm_loadu_si128((const __m128i *)(x.bsum + 8 * b));
    return _mm_setr_epi32(pair32(x.bsum + bsum_index(m, r0, b, 0)), pair32(x.bsum + bsum_index(m, r0, b, 2)),
                          pair32(x.bsum + bsum_index(m, r0, b, 4)), pair32(x.bsum + bsum_index(m, r0, b, 6)));
}
INLINE __m256i row_bsum16(q8k_view x, size_t m, size_t r0, size_t b) {
    if (m == 1) return _mm256_loadu_si256((const __m256i *)(x.bsum16 + 16 * b));
    int32_t pairs[8];
    for (int j = 0; j < 8; j++) pairs[j] = pair32(x.bsum16 + bsum16_index(m, r0, b, 2 * j));
    return _mm256_loadu_si256((const __m256i *)pairs);
}

// The four 32-bit lanes' sums of a[0..3] (exact: integers), lane j for a[j].
INLINE __m128i reduce4x8(const __m256i a[4]) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Four fp16 scalars (at p0 + off, p0 + rowBytes + off, ...) as four floats.
INLINE __m128 halves4(const uint8_t *p0, size_t rowBytes, size_t off) {
    const __m128i h = _mm_setr_epi16((short)bk_u16(p0 + off), (short)bk_u16(p0 + rowBytes + off), (short)bk_u16(p0 + 2 * rowBytes + off),
                                     (short)bk_u16(p0 + 3 * rowBytes + off), 0, 0, 0, 0);
    return _mm_cvtph_ps(h);
}

// The heads (bytes 0-15: d, dmin, the 12 packed 6-bit scales and mins) of one Q4_K/Q5_K
// super-block in four weight rows, unpacked in vector registers two rows per register, as
// bk_k4_scales does one row in scalar code (bk_k4_unpack2 in internal.h): sm01 holds row 0's
// eight scales, then its eight mins, in the low 128 bits and row 1's in the high; sm23 rows 2
// and 3; d and dmin the four rows' fp16 scales as floats.
typedef struct {
    __m256i sm01, sm23;
    __m128 d, dmin;
} k4_heads;
INLINE k4_heads k4_heads4(const uint8_t *p0, size_t rowBytes) {
    const __m256i v01 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p0)),
                                                _mm_loadu_si128((const __m128i *)(p0 + rowBytes)), 1);
    const __m256i v23 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p0 + 2 * rowBytes))),
                                                _mm_loadu_si128((const __m128i *)(p0 + 3 * rowBytes)), 1);
    const __m256i u = _mm256_unpacklo_epi32(v01, v23);  // [dd0, dd2, ., . | dd1, dd3, ., .]
    const __m256 f = _mm256_cvtph_ps(_mm_unpacklo_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)));
    const __m256 g = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));  // [d0..d3 | dmin0..dmin3]
    k4_heads h = {bk_k4_unpack2(v01), bk_k4_unpack2(v23), _mm256_castps256_ps128(g), _mm256_extractf128_ps(g, 1)};
    return h;
}
// summ = Σ_s mn_s·bsum_s of activation row r0 for the four weight rows (exact integers).
INLINE __m128i k4_mins4(const k4_heads *h, __m128i bsum) {
    const __m256i bs = _mm256_broadcastsi128_si256(bsum);
    const __m256i t01 = _mm256_madd_epi16(_mm256_unpackhi_epi8(h->sm01, _mm256_setzero_si256()), bs);
    const __m256i t23 = _mm256_madd_epi16(_mm256_unpackhi_epi8(h->sm23, _mm256_setzero_si256()), bs);
    const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(t01, t23), _mm256_setzero_si256());  // [r0, r2, 0, 0 | r1, r3, 0, 0]
    return _mm_unpacklo_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

// The float steps of super-block b for one activation row r0 and four weight rows (at p0, p0 +
// rowBytes, ...; h their Q4_K/Q5_K heads), given the four exact integer sums: lane j does weight
// row j's steps1 / steps6_1 (the same operations, so the same bits).
INLINE void steps_w4(const uint32_t type, q8k_view x, size_t m, size_t r0, size_t b, const uint8_t *p0, size_t rowBytes,
                     const k4_heads *h, __m128i sums, __m128 *acc, __m128 *macc) {
    const __m128 dx = _mm_set1_ps(x.d[b * m + r0]);
    if (type == BK_Q6_K) {  // sumi = sums - 32·Σ_s sc_s·bsum16_s per weight row
        const __m256i bs = row_bsum16(x, m, r0, b);
        __m256i t[4];
        for (int j = 0; j < 4; j++)
            t[j] = _mm256_madd_epi16(bs, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p0 + j * rowBytes + 192))));
        const __m128i sumi = _mm_sub_epi32(sums, _mm_slli_epi32(reduce4x8(t), 5));
        *acc = _mm_fmadd_ps(_mm_mul_ps(halves4(p0, rowBytes, 208), dx), _mm_cvtepi32_ps(sumi), *acc);
        return;
    }
    const __m128i summ = k4_mins4(h, row_bsum(x, m, r0, b));
    *acc = _mm_fmadd_ps(_mm_mul_ps(h->d, dx), _mm_cvtepi32_ps(sums), *acc);
    *macc = _mm_fmadd_ps(_mm_mul_ps(h->dmin, dx), _mm_cvtepi32_ps(summ), *macc);
}

// One weight row's eight Q4_K/Q5_K sub-block scales as 16-bit words in both 128-bit lanes (the
// low 128 bits of bk_k4_unpack2's lanes, widened), from the super-block's head at p.
INLINE __m256i k4_words1(const uint8_t *p) {
    const __m256i sm = bk_k4_unpack2(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p)));
    return _mm256_unpacklo_epi8(sm, _mm256_setzero_si256());
}

// The longest weight rows vnni_tile_w4 and avx2_tile_w4 take (their sums live on the stack; the
// lanes kernels' unpacked rows too).
enum { LANES_K = 16384 };

// One activation row r0 against four weight rows (decoding's shape): each weight row's exact
// integer sums per super-block as the one-row tile makes them, the four rows' reduced together
// and their float steps in four lanes (steps_w4: the one-row tile's bits). The rows are read one
// after the other, each super-block's sums kept (8 KB at most), then reduced and stepped
// super-block by super-block: one sequential stream of weights per core (see vnni_tile_w4).
INLINE void avx2_tile_w4(const uint32_t type, q8k_view x, size_t m, size_t k, size_t r0, const uint8_t *w, size_t rowBytes,
                         float *y) {
    const size_t B = k / 256, bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : type == BK_Q5_K ? BK_Q5_K_BYTES : BK_Q6_K_BYTES;
    const int8_t *xr = x.q + r0 * k;
    const size_t ahead = 8 * rowBytes < 12288 ? 8 * rowBytes : 12288;  // see prefetch_stream
    __m256i a[4][LANES_K / 256];
    for (int j = 0; j < 4; j++) {
        const uint8_t *row = w + j * rowBytes;
        for (size_t b = 0; b < B; b++) {
            const uint8_t *p = row + b * bytes;
            prefetch_stream(p, ahead, bytes);
            __m256i words, lo, hi, sum = _mm256_setzero_si256();
            if (type == BK_Q6_K) q6_scale_words((const int8_t *)(p + 192), &lo, &hi);
            else words = k4_words1(p);
            #pragma clang loop unroll(full)
            for (int s = 0; s < 8; s++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(xr + 256 * b + 32 * s));
                const __m256i u = type == BK_Q6_K ? avx2_q6_quarter(p, s / 4, s % 4) : avx2_sub_bytes(type, p, s);
                const __m256i s16 = type == BK_Q6_K ? q6_pair_words(lo, hi, s) : k4_sub_words(words, s);
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), s16));
            }
            a[j][b] = sum;
        }
    }
    __m128 acc = _mm_setzero_ps(), macc = _mm_setzero_ps();
    for (size_t b = 0; b < B; b++) {
        const uint8_t *p0 = w + b * bytes;
        k4_heads h;
        if (type != BK_Q6_K) h = k4_heads4(p0, rowBytes);
        const __m256i t[4] = {a[0][b], a[1][b], a[2][b], a[3][b]};
        steps_w4(type, x, m, r0, b, p0, rowBytes, &h, reduce4x8(t), &acc, &macc);
    }
    _mm_storeu_ps(y, _mm_sub_ps(acc, macc));
}

static void avx2_q8k(const uint32_t type, q8k_view x, size_t m, size_t k, const uint8_t *w, size_t rowBytes, size_t n0,
                     size_t n1, float *y, size_t ldy) {
#define TILE(T, r0, wr, yo, MR) avx2_tile(T, x, m, k, r0, wr, rowBytes, yo, ldy, MR)
#define TILE4(T, r0, wr, yo) (k <= LANES_K ? (avx2_tile_w4(T, x, m, k, r0, wr, rowBytes, yo), 1) : 0)
#define LANES(T, o, group) ((size_t)0)
    if (type == BK_Q4_K) Q8K_PRODUCT(TILE, BK_Q4_K, 4, 0, TILE4, LANES)
    else if (type == BK_Q5_K) Q8K_PRODUCT(TILE, BK_Q5_K, 4, 0, TILE4, LANES)
    else Q8K_PRODUCT(TILE, BK_Q6_K, 4, 0, TILE4, LANES)
#undef TILE
#undef TILE4
#undef LANES
}

#pragma clang attribute pop

// The AVX-512 VNNI level: 64 values per instruction pair (vpmaddubsw + vpdpwssd), tiles of
// eight rows (their sums reduced together, the float steps in eight lanes), four, two, then one.
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"))), \
                             apply_to = function)

// Weight bytes of sub-blocks 2g and 2g+1 ([low nibbles | high nibbles] of 32 bytes), and their
// scales as 16-bit words ([sc_2g x 16 | sc_2g+1 x 16]).
INLINE __m512i pair_bytes(const uint32_t type, const uint8_t *p, int g) {
    const __m512i qs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + (type == BK_Q4_K ? 16 : 48) + 32 * g)));
    const __m512i v = _mm512_and_si512(_mm512_mask_srli_epi16(qs, 0xFFFF0000u, qs, 4), _mm512_set1_epi8(15));  // shift the upper half only
    if (type == BK_Q4_K) return v;
    // Q5_K: bit 2g (lower half) or 2g + 1 (upper) of each qh byte to bit 4 (16-bit shifts, byte mask)
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 16)));
    const __m512i shift = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * g))), _mm256_set1_epi16((short)(2 * g + 1)), 1);
    return _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift), _mm512_set1_epi8(1)), 4));
}
// sc16: the eight scales as 16-bit words (low 128 bits); one vpermw picks the pair.
INLINE __m512i pair_scales(__m512i sc16, int g) {
    const __m512i pick = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * g))), _mm256_set1_epi16((short)(2 * g + 1)), 1);
    return _mm512_permutexvar_epi16(pick, sc16);
}

// a[r] = the 16-lane integer sums of super-block b at p against rows r0 + r, r < MR; sc16 its
// eight scales as 16-bit words (low 128 bits).
INLINE void superblock_sums16(const uint32_t type, q8k_view x, size_t k, size_t r0, size_t b, const uint8_t *p, __m512i sc16,
                              __m512i *a, const int MR) {
    for (int r = 0; r < MR; r++) a[r] = _mm512_setzero_si512();
    for (int g = 0; g < 4; g++) {
        const __m512i u = pair_bytes(type, p, g), s16 = pair_scales(sc16, g);
        for (int r = 0; r < MR; r++) {
            const __m512i xv = _mm512_loadu_si512((const void *)(x.q + (r0 + r) * k + 256 * b + 64 * g));
            a[r] = _mm512_dpwssd_epi32(a[r], _mm512_maddubs_epi16(u, xv), s16);
        }
    }
}

// The same, the scales given as the eight bytes bk_k4_scales unpacks.
INLINE void superblock_sums(const uint32_t type, q8k_view x, size_t k, size_t r0, size_t b, const uint8_t *p, const uint8_t sc[8],
                            __m512i *a, const int MR) {
    superblock_sums16(type, x, k, r0, b, p, _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc))), a, MR);
}

// The sums of the 16 lanes of a[0..7], as 8 lanes (exact: integers).
INLINE __m256i reduce8(const __m512i a[8]) {
    __m512i b01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
    __m512i b23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
    __m512i b45 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[4], a[5]), _mm512_unpackhi_epi32(a[4], a[5]));
    __m512i b67 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[6], a[7]), _mm512_unpackhi_epi32(a[6], a[7]));
    // per 128-bit lane: (0, 1, 0, 1) -> (0, 1, 2, 3)
    __m512i c0 = _mm512_add_epi32(_mm512_unpacklo_epi64(b01, b23), _mm512_unpackhi_epi64(b01, b23));
    __m512i c4 = _mm512_add_epi32(_mm512_unpacklo_epi64(b45, b67), _mm512_unpackhi_epi64(b45, b67));
    // 128-bit lanes: [c0.0 c0.2 c4.0 c4.2] + [c0.1 c0.3 c4.1 c4.3]
    __m512i e = _mm512_add_epi32(_mm512_shuffle_i32x4(c0, c4, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i32x4(c0, c4, _MM_SHUFFLE(3, 1, 3, 1)));
    // [rows 0-3 | rows 0-3 | rows 4-7 | rows 4-7] -> [rows 0-3 | rows 4-7]
    __m512i f = _mm512_shuffle_i32x4(e, e, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_add_epi32(_mm512_castsi512_si256(f), _mm512_extracti64x4_epi64(f, 1));
}

// The sums of the 16 lanes of a[0..3], as 4 lanes (exact).
INLINE __m128i reduce4(const __m512i a[4]) {
    __m512i b01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
    __m512i b23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
    __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(b01, b23), _mm512_unpackhi_epi64(b01, b23));  // (0, 1, 2, 3) per 128 bits
    __m256i d = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64(c, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(d), _mm256_extracti128_si256(d, 1));
}

// summ for rows r0..r0+7 of super-block b: Σ_s mn_s·bsum_s per row (exact), one vpmaddwd per
// pair of sub-blocks for all eight rows.
INLINE __m256i mins8(q8k_view x, size_t m, size_t r0, size_t b, const uint8_t mn[8]) {
    __m256i summ = _mm256_setzero_si256();
    for (int g = 0; g < 4; g++)
        summ = _mm256_add_epi32(summ, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x.bsum + bsum_index(m, r0, b, 2 * g))),
                                                        _mm256_set1_epi32(min_pair(mn, g))));
    return summ;
}

// Q6_K half hf as unsigned bytes (0..63): lo = values 0..63 of the half, hi = 64..127 (ql's low
// nibbles with qh bits 0-1 | 2-3, its high nibbles with bits 4-5 | 6-7, moved to bits 4-5).
INLINE void q6_halves(const uint8_t *p, int hf, __m512i *lo, __m512i *hi) {
    const __m512i nibble = _mm512_set1_epi8(15), top2 = _mm512_set1_epi8(0x30);
    const __m512i ql = _mm512_loadu_si512((const void *)(p + 64 * hf));
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 128 + 32 * hf)));
    const __m512i up = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(4)), _mm256_set1_epi16(2), 1);
    const __m512i down = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(0)), _mm256_set1_epi16(2), 1);
    *lo = _mm512_or_si512(_mm512_and_si512(ql, nibble), _mm512_and_si512(_mm512_sllv_epi16(qh, up), top2));
    *hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble), _mm512_and_si512(_mm512_srlv_epi16(qh, down), top2));
}

// a[r] = the 16-lane integer sums Σ_s sc_s·Σ q_w·q_x of super-block b against rows r0 + r.
INLINE void superblock_sums6(q8k_view x, size_t k, size_t r0, size_t b, const uint8_t *p, __m512i *a, const int MR) {
    // sub-blocks j..j+3 of 64 values are 32 words after vpmaddubsw, 8 per sub-block
    static const uint16_t picks[4][32] = {
        {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
        {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
        {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
        {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 192))));
    for (int r = 0; r < MR; r++) a[r] = _mm512_setzero_si512();
    for (int hf = 0; hf < 2; hf++) {
        __m512i u[2];
        q6_halves(p, hf, &u[0], &u[1]);
        for (int h = 0; h < 2; h++) {
            const __m512i s16 = _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)picks[2 * hf + h]), sc16);
            for (int r = 0; r < MR; r++) {
                const __m512i xv = _mm512_loadu_si512((const void *)(x.q + (r0 + r) * k + 256 * b + 128 * hf + 64 * h));
                a[r] = _mm512_dpwssd_epi32(a[r], _mm512_maddubs_epi16(u[h], xv), s16);
            }
        }
    }
}

// steps6_4's offset for four rows with the sums per 16 gathered into two vectors (lane j of
// each: sub-blocks 2j, 2j + 1 of the four rows, pairs j and j + 4) and met by their scale pairs
// in two vpmaddwd, where steps6_4 takes eight of 128 bits and a scalar pair each: the same exact
// sums. Q6_K, four rows, one thread, in L3, 2048x2048: 213.7-215.7 -> 202.6-206.3 us.
INLINE void steps6_4v(q8k_view x, size_t m, size_t r0, size_t b, const uint8_t *p, __m128i sums, __m128 *acc) {
    const int16_t *q = x.bsum16 + bsum16_index(m, r0, b, 0);
    const size_t st = 2 * m;  // int16 from one pair of sub-blocks' rows to the next pair's
#define PAIR(j) _mm_loadu_si128((const __m128i *)(q + (j) * st))
    const __m512i lo = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(PAIR(0)), PAIR(1), 1), PAIR(2), 2), PAIR(3), 3);
    const __m512i hi = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(PAIR(4)), PAIR(5), 1), PAIR(6), 2), PAIR(7), 3);
#undef PAIR
    const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 192))));  // scale pairs as dwords
    const __m512i plo = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), sc);
    const __m512i phi = _mm512_permutexvar_epi32(_mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7), sc);
    const __m512i t = _mm512_add_epi32(_mm512_madd_epi16(lo, plo), _mm512_madd_epi16(hi, phi));
    const __m256i u = _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
    steps6_rows(x, m, r0, b, p, sums, _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)), acc, 4);
}

// MR (8, 4, 2 or 1) rows r0.. of type T against one weight row: the header's steps, lane r for
// row r0 + r.
INLINE void vnni_tile(const uint32_t type, q8k_view x, size_t m, size_t k, size_t r0, const uint8_t *w, size_t rowBytes,
                      float *y, size_t ldy, const int MR) {
    const size_t B = k / 256, bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : type == BK_Q5_K ? BK_Q5_K_BYTES : BK_Q6_K_BYTES;
    __m256 acc8 = _mm256_setzero_ps(), macc8 = _mm256_setzero_ps();  // Q6_K has no mins: its maccs stay zero
    __m128 acc4 = _mm_setzero_ps(), macc4 = _mm_setzero_ps();
    float acc1 = 0, macc1 = 0;
    for (size_t b = 0; b < B; b++) {
        const uint8_t *p = w + b * bytes;
        prefetch_ahead(p, rowBytes, bytes);
        __m512i a[8];
        if (type == BK_Q6_K) {
            superblock_sums6(x, k, r0, b, p, a, MR);
            if (MR == 8) steps6_8(x, m, r0, b, p, reduce8(a), &acc8);
            else if (MR == 4) steps6_4v(x, m, r0, b, p, reduce4(a), &acc4);
            else if (MR == 2) steps6_4(x, m, r0, b, p, _mm_setr_epi32(_mm512_reduce_add_epi32(a[0]), _mm512_reduce_add_epi32(a[1]), 0, 0), &acc4, 2);
            else steps6_1(x, m, r0, b, p, _mm512_reduce_add_epi32(a[0]), &acc1);
            continue;
        }
        uint8_t sc[8], mn[8];
        bk_k4_scales(p + 4, sc, mn);
        superblock_sums(type, x, k, r0, b, p, sc, a, MR);
        if (MR == 8) {
            const __m256i summ = mins8(x, m, r0, b, mn);
            const __m256 dx = _mm256_loadu_ps(x.d + b * m + r0);
            acc8 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(bk_half_to_float(bk_u16(p))), dx), _mm256_cvtepi32_ps(reduce8(a)), acc8);
            macc8 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(bk_half_to_float(bk_u16(p + 2))), dx), _mm256_cvtepi32_ps(summ), macc8);
        } else if (MR == 4) {
            steps4(x, m, r0, b, p, mn, reduce4(a), &acc4, &macc4, 4);
        } else if (MR == 2) {
            steps4(x, m, r0, b, p, mn, _mm_setr_epi32(_mm512_reduce_add_epi32(a[0]), _mm512_reduce_add_epi32(a[1]), 0, 0), &acc4, &macc4, 2);
        } else {
            steps1(x, m, r0, b, p, mn, _mm512_reduce_add_epi32(a[0]), &acc1, &macc1);
        }
    }
    float out[8];
    if (MR == 8) _mm256_storeu_ps(out, _mm256_sub_ps(acc8, macc8));
    else if (MR == 4 || MR == 2) _mm_storeu_ps(out, _mm_sub_ps(acc4, macc4));
    else out[0] = acc1 - macc1;
    for (int r = 0; r < MR; r++) y[(r0 + r) * ldy] = out[r];
}

// One activation row r0 against four weight rows (decoding's shape), as avx2_tile_w4: each weight
// row's 16-lane sums as the one-row tile makes them, the four reduced together (reduce4) and the
// float steps in four lanes (steps_w4: the one-row tile's bits). The four rows are read one after
// the other, each super-block's sums kept (16 KB at most), and then reduced and stepped super-block
// by super-block, so a core reads one sequential stream of weights (scripts/probes/stream-order.c:
// two threads read 46-70 GB/s row after row by period, 34-57 four rows side by side). Taking the four rows
// side by side (b outer, the rows inner) left two threads no faster than one from
// DRAM: `bench kernels --modes q8k`, Zen 5, cold, Q4_K 2048x8192 one thread 240-246 us, two
// 228-231; now two 186-190; Q6_K 2048x8192 two threads 348-350 -> 284-289 (k = 8192: the same
// either way; in cache ~5% slower, the sums' store and reload). Phi-4-mini q8 decoding in a
// period when the old order read ~38 GB/s, interleaved with llama-bench: 17.5-17.6 -> 20.1-20.6
// tokens/s (llama.cpp 19.6-20.1).
INLINE void vnni_tile_w4(const uint32_t type, q8k_view x, size_t m, size_t k, size_t r0, const uint8_t *w, size_t rowBytes,
                         float *y) {
    const size_t B = k / 256, bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : type == BK_Q5_K ? BK_Q5_K_BYTES : BK_Q6_K_BYTES;
    __m512i a[4][LANES_K / 256];
    for (int j = 0; j < 4; j++) {
        const uint8_t *row = w + j * rowBytes;
        for (size_t b = 0; b < B; b++) {
            const uint8_t *p = row + b * bytes;
            prefetch_stream(p, 12288, bytes);
            if (type == BK_Q6_K) superblock_sums6(x, k, r0, b, p, &a[j][b], 1);
            else superblock_sums16(type, x, k, r0, b, p, _mm512_castsi256_si512(k4_words1(p)), &a[j][b], 1);
        }
    }
    __m128 acc = _mm_setzero_ps(), macc = _mm_setzero_ps();
    for (size_t b = 0; b < B; b++) {
        const uint8_t *p0 = w + b * bytes;
        k4_heads h;
        if (type != BK_Q6_K) h = k4_heads4(p0, rowBytes);
        const __m512i t[4] = {a[0][b], a[1][b], a[2][b], a[3][b]};
        steps_w4(type, x, m, r0, b, p0, rowBytes, &h, reduce4(t), &acc, &macc);
    }
    _mm_storeu_ps(y, _mm_sub_ps(acc, macc));
}

// Super-block b's exact sums for four unpacked weight rows wb against one block of 16 rows in
// lanes (xb: its super-block b): Σ_s sc_j[s]·Σ_(i in s) w·x over the sub-blocks of `size`
// values, eight or four vpdpbusd per sub-block and weight row: Q4_K and Q5_K (32 values, the
// unsigned scales `usc`) or Q6_K (16 values, the signed `ssc`).
INLINE void lanes_sums(const int8_t *xb, uint8_t wb[4][LANES_K], size_t b, const int size, const uint8_t *usc[4],
                       const int8_t *ssc[4], __m512i sums[4]) {
    for (int j = 0; j < 4; j++) sums[j] = _mm512_setzero_si512();
    for (int s = 0; s < 256 / size; s++) {
        __m512i t[4];
        for (int j = 0; j < 4; j++) t[j] = _mm512_setzero_si512();
        for (int i = 0; i < size / 4; i++) {
            const __m512i xv = _mm512_loadu_si512((const void *)(xb + (size / 4 * s + i) * 64));
            for (int j = 0; j < 4; j++)
                t[j] = _mm512_dpbusd_epi32(t[j], _mm512_set1_epi32((int)bk_u32(wb[j] + 256 * b + size * s + 4 * i)), xv);
        }
        for (int j = 0; j < 4; j++) sums[j] = _mm512_add_epi32(sums[j], _mm512_mullo_epi32(t[j], _mm512_set1_epi32(size == 32 ? usc[j][s] : ssc[j][s])));
    }
}

// Four weight rows' outputs for 16 activation rows in lanes: v[j] lane r to y[r·ldy + j].
INLINE void lanes_store(const __m512 v[4], float *y, size_t ldy) {
    for (int j = 0; j < 4; j++) {
        float out[16];
        _mm512_storeu_ps(out, v[j]);
        for (int r = 0; r < 16; r++) y[r * ldy + j] = out[r];
    }
}

// Q4_K and Q5_K rows in lanes (Q6_K's below): four weight rows against the first 16·⌊m/16⌋
// activation rows, 16 rows per vector (x.lanes). The four rows' super-blocks are unpacked once
// into bytes (values 0..15, Q5_K's 0..31, in order: pair_bytes) with their scales; then for
// each block of 16 activation rows, sub-block s of each weight row is eight vpdpbusd (four weight
// values broadcast against the 16 rows' four values), its exact sum times sc_s (vpmulld) added to
// sumi; per super-block the header's float steps in 16 lanes. The integer sums are the 8-row
// tile's exact sums, so the bits are its bits; ~1.7-2x its speed (C harness, Zen 5, 64 x 1024 x
// 1024: 59 against 34 multiply-adds per cycle), as no lane sums need reducing and one weight
// unpack serves all the rows. Weight rows of up to LANES_K values.
INLINE void lanes_k45(const uint32_t type, q8k_view x, size_t m, size_t k, const uint8_t *w, size_t rowBytes, float *y, size_t ldy) {
    const size_t B = k / 256, bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : BK_Q5_K_BYTES;
    uint8_t wb[4][LANES_K] __attribute__((aligned(64)));
    uint8_t sc[4][LANES_K / 256][8], mn[4][LANES_K / 256][8];
    float dw[4][LANES_K / 256], dmw[4][LANES_K / 256];
    for (int j = 0; j < 4; j++)
        for (size_t b = 0; b < B; b++) {
            const uint8_t *p = w + j * rowBytes + b * bytes;
            prefetch_ahead(p, rowBytes, bytes);
            bk_k4_scales(p + 4, sc[j][b], mn[j][b]);
            dw[j][b] = bk_half_to_float(bk_u16(p));
            dmw[j][b] = bk_half_to_float(bk_u16(p + 2));
            for (int g = 0; g < 4; g++) _mm512_store_si512((void *)(wb[j] + 256 * b + 64 * g), pair_bytes(type, p, g));  // sub-blocks 2g, 2g + 1
        }
    for (size_t R = 0; R < m / 16; R++) {
        __m512 acc[4], macc[4];
        for (int j = 0; j < 4; j++) acc[j] = macc[j] = _mm512_setzero_ps();
        for (size_t b = 0; b < B; b++) {
            const uint8_t *usc[4] = {sc[0][b], sc[1][b], sc[2][b], sc[3][b]};
            __m512i sumi[4];
            lanes_sums(x.lanes + (R * (k / 4) + 64 * b) * 64, wb, b, 32, usc, 0, sumi);
            const __m512 dx = _mm512_loadu_ps(x.d + b * m + 16 * R);
            for (int j = 0; j < 4; j++) {
                __m512i summ = _mm512_setzero_si512();
                for (int g = 0; g < 4; g++)
                    summ = _mm512_add_epi32(summ, _mm512_madd_epi16(_mm512_loadu_si512((const void *)(x.bsum + bsum_index(m, 16 * R, b, 2 * g))),
                                                                    _mm512_set1_epi32(min_pair(mn[j][b], g))));
                acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dw[j][b]), dx), _mm512_cvtepi32_ps(sumi[j]), acc[j]);
                macc[j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dmw[j][b]), dx), _mm512_cvtepi32_ps(summ), macc[j]);
            }
        }
        for (int j = 0; j < 4; j++) acc[j] = _mm512_sub_ps(acc[j], macc[j]);
        lanes_store(acc, y + 16 * R * ldy, ldy);
    }
}

// Q6_K the same way: its values unpacked as unsigned bytes (0..63, q6_halves), four vpdpbusd per
// 16-value sub-block times its signed scale, then the header's sumi = sums - 32·Σ sc_s·bsum16_s
// (vpmaddwd per pair of sub-blocks, 16 rows at once) and acc = fma(d·dx, sumi, acc).
INLINE void lanes_q6k(q8k_view x, size_t m, size_t k, const uint8_t *w, size_t rowBytes, float *y, size_t ldy) {
    const size_t B = k / 256;
    uint8_t wb[4][LANES_K] __attribute__((aligned(64)));
    float dw[4][LANES_K / 256];
    for (int j = 0; j < 4; j++)
        for (size_t b = 0; b < B; b++) {
            const uint8_t *p = w + j * rowBytes + b * BK_Q6_K_BYTES;
            prefetch_ahead(p, rowBytes, BK_Q6_K_BYTES);
            dw[j][b] = bk_half_to_float(bk_u16(p + 208));
            for (int hf = 0; hf < 2; hf++) {
                __m512i lo, hi;
                q6_halves(p, hf, &lo, &hi);
                _mm512_store_si512((void *)(wb[j] + 256 * b + 128 * hf), lo);
                _mm512_store_si512((void *)(wb[j] + 256 * b + 128 * hf + 64), hi);
            }
        }
    for (size_t R = 0; R < m / 16; R++) {
        __m512 acc[4];
        for (int j = 0; j < 4; j++) acc[j] = _mm512_setzero_ps();
        for (size_t b = 0; b < B; b++) {
            const int8_t *ssc[4];
            for (int j = 0; j < 4; j++) ssc[j] = (const int8_t *)(w + j * rowBytes + b * BK_Q6_K_BYTES + 192);
            __m512i sums[4];
            lanes_sums(x.lanes + (R * (k / 4) + 64 * b) * 64, wb, b, 16, 0, ssc, sums);
            const __m512 dx = _mm512_loadu_ps(x.d + b * m + 16 * R);
            for (int j = 0; j < 4; j++) {
                __m512i corr = _mm512_setzero_si512();
                for (int g = 0; g < 8; g++)
                    corr = _mm512_add_epi32(corr, _mm512_madd_epi16(_mm512_loadu_si512((const void *)(x.bsum16 + bsum16_index(m, 16 * R, b, 2 * g))),
                                                                    _mm512_set1_epi32(sc_pair(ssc[j], g))));
                const __m512i sumi = _mm512_sub_epi32(sums[j], _mm512_slli_epi32(corr, 5));
                acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dw[j][b]), dx), _mm512_cvtepi32_ps(sumi), acc[j]);
            }
        }
        lanes_store(acc, y + 16 * R * ldy, ldy);
    }
}

// Four weight rows of type T against the first 16·⌊m/16⌋ rows in lanes; returns that row count.
INLINE size_t lanes_rows(const uint32_t type, q8k_view x, size_t m, size_t k, const uint8_t *w, size_t rowBytes, float *y, size_t ldy) {
    if (type == BK_Q6_K) lanes_q6k(x, m, k, w, rowBytes, y, ldy);
    else lanes_k45(type, x, m, k, w, rowBytes, y, ldy);
    return m / 16 * 16;
}

static void vnni_q8k(const uint32_t type, q8k_view x, size_t m, size_t k, const uint8_t *w, size_t rowBytes, size_t n0,
                     size_t n1, float *y, size_t ldy) {
#define TILE(T, r0, wr, yo, MR) vnni_tile(T, x, m, k, r0, wr, rowBytes, yo, ldy, MR)
#define TILE4(T, r0, wr, yo) (k <= LANES_K ? (vnni_tile_w4(T, x, m, k, r0, wr, rowBytes, yo), 1) : 0)
// a whole group of four weight rows takes its first 16·⌊m/16⌋ rows in lanes
#define LANES(T, o, group) (x.lanes && k <= LANES_K && (group) == 4 ? lanes_rows(T, x, m, k, w + (o) * rowBytes, rowBytes, y + (o), ldy) : 0)
    // Q6_K takes no two-row tile: its per-row offset steps (steps6_4) made two rows cost 3.3 one-row
    // products, where two passes of the four-weight-row tile cost 2 (one thread, in L3, 2048x2048:
    // m = 2 197 -> 117 us, m = 3 253 -> 169, 6 413 -> 327, 7 466 -> 381, 10 430 -> 348; 4 and 8
    // rows, 219 and 236 us, keep theirs). Q4_K and Q5_K at two rows: 110 and 118 us against one-row
    // products of 59 and 71.
    if (type == BK_Q4_K) Q8K_PRODUCT(TILE, BK_Q4_K, 8, 1, TILE4, LANES)
    else if (type == BK_Q5_K) Q8K_PRODUCT(TILE, BK_Q5_K, 8, 1, TILE4, LANES)
    else Q8K_PRODUCT(TILE, BK_Q6_K, 8, 0, TILE4, LANES)
#undef TILE
#undef TILE4
#undef LANES
}

#pragma clang attribute pop
#undef Q8K_PRODUCT
#endif

int bk_quantize_q8k_at(int level, const float *x, size_t m, size_t k, void *xq) {
    if (!bk_level_supported(level)) return BK_ERROR_LEVEL;
    if (k == 0 || k % 256 != 0) return BK_ERROR_SHAPE;
    if (m > 0) quantize_q8k(x, m, k, xq);
    return BK_OK;
}

int bk_matmul_nt_q8k_at(int level, uint32_t type, const void *xq, size_t m, size_t k, const void *w, size_t rowBytes,
                        size_t n0, size_t n1, float *y, size_t ldy) {
    if (!bk_level_supported(level)) return BK_ERROR_LEVEL;
    if (type != BK_Q4_K && type != BK_Q5_K && type != BK_Q6_K) return BK_ERROR_TYPE;
    if (k == 0 || k % 256 != 0) return BK_ERROR_SHAPE;
    if (m == 0 || n1 <= n0) return BK_OK;
    const q8k_view x = q8k_layout(xq, m, k);
#if defined(__x86_64__)
    if (level == BK_LEVEL_AVX512_VNNI) {
        vnni_q8k(type, x, m, k, (const uint8_t *)w, rowBytes, n0, n1, y, ldy);
        return BK_OK;
    }
    if (level >= BK_LEVEL_AVX2) {
        avx2_q8k(type, x, m, k, (const uint8_t *)w, rowBytes, n0, n1, y, ldy);
        return BK_OK;
    }
#endif
    if (type == BK_Q6_K) portable_q8k6(x, m, k, (const uint8_t *)w, rowBytes, n0, n1, y, ldy);
    else portable_q8k(type, x, m, k, (const uint8_t *)w, rowBytes, n0, n1, y, ldy);
    return BK_OK;
}

int bk_quantize_q8k(const float *x, size_t m, size_t k, void *xq) { return bk_quantize_q8k_at(bk_active_level(), x, m, k, xq); }

int bk_matmul_nt_q8k(uint32_t type, const void *xq, size_t m, size_t k, const void *w, size_t rowBytes, size_t n0,
                     size_t n1, float *y, size_t ldy) {
    return bk_matmul_nt_q8k_at(bk_active_level(), type, xq, m, k, w, rowBytes, n0, n1, y, ldy);
}
