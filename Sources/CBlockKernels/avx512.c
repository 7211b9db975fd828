// The AVX-512 level (F/BW/VL/DQ, compiled for it with a target attribute on every function of
// this file): products of m <= 16 activation rows with rows of ggml blocks (every type of
// bk_type_supported), and vectorised dequantization. Runs only where dispatch.c found the features. Leaves out integer (q8) dot
// products. The per-block formulas follow ggml-quants.c `dequantize_row_*`.
#include "internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#pragma STDC FP_CONTRACT OFF
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), apply_to = function)

#define INLINE static inline __attribute__((always_inline))

enum { MAXROWS = 8 };  // activation rows sharing one decoded block (8 accumulators + block in 32 zmm)

// A tile's accumulators between two chunks of k (see product): every lane keeps its partial
// sum in memory and resumes it, so the operations and their order are those of one pass over k.
typedef struct {
    __m512 acc[MAXROWS][4];
    __m256 macc[MAXROWS][4];
    __m256 add8[4];
    __m128 add4[4];
    float add[MAXROWS][4];
} tile_state;

// A chunk of k: values [c0, c1); `st` holds the tile's accumulators (weight rows j0...) when the
// tile does not cover the whole of k: zeroed when `first`, kept when not `last`.
typedef struct {
    size_t c0, c1;
    tile_state *st;
    int j0, first, last;
} chunk;

INLINE float hsum256(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

INLINE float hsum512(__m512 v) {
    return hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// Asks for the same block eight rows later (two groups of output rows on). Without it the
// hardware prefetchers fell behind the interleaved row streams; prefetching into L1 (T0) four
// rows ahead helped compute-bound types but left byte-heavy ones starved: one core streamed F16
// 576x49152 from DRAM at 11 GB/s with T0 and 22 GB/s with T1, Q8_0 9 -> 17, while Q4_1
// (compute-bound at ~11 GB/s) was the same either way. Non-temporal (NTA) rather than T1: the
// weights are read once per step, and marked so they stop evicting what the step reuses; alone
// in `bench kernels` the two read the same (cold, one and two threads), but in the model float32
// decoding went 3-5% faster (Zen 5, interleaved: Qwen3-0.6B six rounds all ahead, 84.2-99.2 ->
// 95.0-101.4 tokens/s; Phi-4-mini 17.3-17.7 -> 18.1-18.5; Qwen3-1.7B 31.9 -> 32.8-33.4; Gemma-3-1B
// level). The q8k kernels keep T1: NTA there was +6-11% on Qwen3-0.6B but -3-5% on Qwen3-1.7B,
// whose q8 decoding streams near the memory's limit.
INLINE void prefetch_ahead(const uint8_t *p, size_t rowBytes, size_t bytes) {
    const char *a = (const char *)p + 8 * rowBytes;
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(a + off, _MM_HINT_NTA);
}

INLINE float half(const uint8_t *p) { return _cvtsh_ss(bk_u16(p)); }

// fp16 at p broadcast to 16 floats (see half8 in avx2.c for why not a scalar and a broadcast).
INLINE __m512 half16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_set1_epi16((short)bk_u16(p))); }

// 0, 1, ..., 15: times a block's scale, the table of its 4-bit weights.
INLINE __m512 iota16f(void) { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

// 16 bytes widened to 16 int32 lanes.
INLINE __m512i u8x16(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }
INLINE __m512i i8x16(const uint8_t *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)); }
INLINE __m512 f32(__m512i v) { return _mm512_cvtepi32_ps(v); }

// 16-byte lane L (0..3) of 64 bytes, widened to 16 floats.
INLINE __m128i lane(__m512i v, int L) {
    switch (L) {
    case 0: return _mm512_castsi512_si128(v);
    case 1: return _mm512_extracti32x4_epi32(v, 1);
    case 2: return _mm512_extracti32x4_epi32(v, 2);
    default: return _mm512_extracti32x4_epi32(v, 3);
    }
}
INLINE __m512 lane_i8(__m512i v, int L) { return f32(_mm512_cvtepi8_epi32(lane(v, L))); }


// 16-bit shift counts: `a` in the low 32 bytes' words, `b` in the high 32 bytes'.
INLINE __m512i counts(short a, short b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(a)), _mm256_set1_epi16(b), 1);
}

// Q4_K/Q5_K sub-blocks 2g (q[0], q[1]: values 0..15, 16..31) and 2g+1 (q[2], q[3]) as floats.
// Here the bit work on widened 32-bit lanes beat doing it on bytes and widening afterwards
// (Q5_K 2048x8192: 1.18 ms against 1.25 ms): the byte version needs three lane extractions
// per 64 values and the shuffle unit was the bottleneck.
// `nibbles` false leaves Q4_K's low sub-block unmasked (bits above 3 set): for a 16-entry
// permute, which reads only the index's low four bits.
INLINE void k45_ints(const uint32_t type, const uint8_t *p, int g, __m512i q[4], int nibbles) {
    const __m512i low = _mm512_set1_epi32(15), bit4 = _mm512_set1_epi32(16);
    const uint8_t *qs = (type == BK_Q4_K ? p + 16 : p + 48) + 32 * g;
    __m512i v0 = u8x16(qs), v1 = u8x16(qs + 16);
    const int mask = nibbles || type == BK_Q5_K;
    __m512i a0 = mask ? _mm512_and_si512(v0, low) : v0, a1 = mask ? _mm512_and_si512(v1, low) : v1;
    __m512i b0 = _mm512_srli_epi32(v0, 4), b1 = _mm512_srli_epi32(v1, 4);
    if (type == BK_Q5_K) {  // bit 2g of qh[l] is bit 4 of sub-block 2g's value l; bit 2g+1 of 2g+1's
        __m512i h0 = u8x16(p + 16), h1 = u8x16(p + 32);
        a0 = _mm512_or_si512(a0, _mm512_and_si512(_mm512_slli_epi32(_mm512_srli_epi32(h0, 2 * g), 4), bit4));
        a1 = _mm512_or_si512(a1, _mm512_and_si512(_mm512_slli_epi32(_mm512_srli_epi32(h1, 2 * g), 4), bit4));
        b0 = _mm512_or_si512(b0, _mm512_and_si512(_mm512_slli_epi32(_mm512_srli_epi32(h0, 2 * g + 1), 4), bit4));
        b1 = _mm512_or_si512(b1, _mm512_and_si512(_mm512_slli_epi32(_mm512_srli_epi32(h1, 2 * g + 1), 4), bit4));
    }
    q[0] = a0; q[1] = a1; q[2] = b0; q[3] = b1;
}

INLINE void k45_pair(const uint32_t type, const uint8_t *p, int g, __m512 q[4]) {
    __m512i v[4];
    k45_ints(type, p, g, v, 1);
    for (int i = 0; i < 4; i++) q[i] = f32(v[i]);
}

// Q6_K half hf (128 values) as signed bytes q - 32: lo = [values 0..31 | 32..63], hi = [64..95 | 96..127],
// so 16-value sub-block c of the half (0..7) is lane c % 4 of (c < 4 ? lo : hi). Byte-wide bit
// work (64 values per instruction) instead of on widened lanes: 2048x8192 went 1.56 -> 1.46 ms.
INLINE void q6k_half(const uint8_t *p, int hf, __m512i *lo, __m512i *hi) {
    const __m512i nibble = _mm512_set1_epi8(15), top2 = _mm512_set1_epi8(0x30), bias = _mm512_set1_epi8(32);
    __m512i ql = _mm512_loadu_si512((const void *)(p + 64 * hf));
    __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 128 + 32 * hf)));
    __m512i hA = _mm512_and_si512(_mm512_sllv_epi16(qh, counts(4, 2)), top2);  // qh bits 0-1 | 2-3 -> bits 4-5
    __m512i hB = _mm512_and_si512(_mm512_srlv_epi16(qh, counts(0, 2)), top2);  // qh bits 4-5 | 6-7 -> bits 4-5
    *lo = _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(ql, nibble), hA), bias);
    *hi = _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibble), hB), bias);
}

// The 5-bit values of a Q5_0/Q5_1 block as int32 lanes: i0 values 0..15 (low nibbles of qs), i1
// values 16..31 (high nibbles), bit 4 set from qh through a mask register (bit i for value i).
INLINE void q5_indexes(const uint8_t *qs, uint32_t qh, __m512i *i0, __m512i *i1) {
    const __m512i low = _mm512_set1_epi32(15), bit4 = _mm512_set1_epi32(16);
    const __m512i v = u8x16(qs), a = _mm512_and_si512(v, low), b = _mm512_srli_epi32(v, 4);
    *i0 = _mm512_mask_or_epi32(a, (__mmask16)(qh & 0xFFFF), a, bit4);
    *i1 = _mm512_mask_or_epi32(b, (__mmask16)(qh >> 16), b, bit4);
}

// Q6_K half hf as q6k_half arranges it, but each byte t = 0x80 | 2q (q the stored 6-bit value,
// 0..63): 0x42·256 + t is the bfloat16, so the top half of the float, of 64 + q exactly (see
// q6_floats in avx2.c). The same number of operations as q6k_half: the bits land one place
// higher and the bias is an or, not a subtraction.
INLINE void q6k_half_t(const uint8_t *p, int hf, __m512i *lo, __m512i *hi) {
    const __m512i nibble2 = _mm512_set1_epi8(0x1E), top2 = _mm512_set1_epi8(0x60), bit7 = _mm512_set1_epi8((char)0x80);
    __m512i ql = _mm512_loadu_si512((const void *)(p + 64 * hf));
    __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 128 + 32 * hf)));
    __m512i hA = _mm512_and_si512(_mm512_sllv_epi16(qh, counts(5, 3)), top2);  // qh bits 0-1 | 2-3 -> bits 5-6
    __m512i hB = _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(qh, counts(0, 2)), 1), top2);  // 4-5 | 6-7 -> 5-6
    // (a | b | c): 0xFE
    *lo = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_slli_epi16(ql, 1), nibble2), hA, bit7, 0xFE);
    *hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 3), nibble2), hB, bit7, 0xFE);
}

// Q3_K half hf (128 values) as signed bytes q (-4..3), arranged as q6k_half's: lo = [values 0..31 |
// 32..63], hi = [64..95 | 96..127]. Quarter e takes bits 2e, 2e+1 of the half's 32 qs bytes and
// bit 4hf + e of the 32 hmask bytes (as bit 2), less 4.
INLINE void q3k_half(const uint8_t *p, int hf, __m512i *lo, __m512i *hi) {
    const __m512i two = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1), four = _mm512_set1_epi8(4);
    __m512i qs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 32 + 32 * hf)));
    __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
    const short h = (short)(4 * hf);
    __m512i l0 = _mm512_and_si512(_mm512_srlv_epi16(qs, counts(0, 2)), two), l1 = _mm512_and_si512(_mm512_srlv_epi16(qs, counts(4, 6)), two);
    __m512i b0 = _mm512_and_si512(_mm512_srlv_epi16(hm, counts(h, (short)(h + 1))), one);
    __m512i b1 = _mm512_and_si512(_mm512_srlv_epi16(hm, counts((short)(h + 2), (short)(h + 3))), one);
    *lo = _mm512_sub_epi8(_mm512_or_si512(l0, _mm512_slli_epi16(b0, 2)), four);
    *hi = _mm512_sub_epi8(_mm512_or_si512(l1, _mm512_slli_epi16(b1, 2)), four);
}

// Q2_K's 256 weights as the reference computes them (dl·q - ml with dl = d·sc, ml = dmin·m; mul
// then sub, no fma): bits 2j, 2j+1 of the half's qs bytes for values 128h + 32j ...
INLINE void q2k_weights(const uint8_t *p, float *w) {
    const __m512i s = u8x16(p);
    float dl[16], ml[16];
    _mm512_storeu_ps(dl, _mm512_mul_ps(half16(p + 80), f32(_mm512_and_si512(s, _mm512_set1_epi32(15)))));
    _mm512_storeu_ps(ml, _mm512_mul_ps(half16(p + 82), f32(_mm512_srli_epi32(s, 4))));
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 2; g++) {  // values 128h + 32j + 16g ...: sub-block 8h + 2j + g
            const __m512i v = u8x16(p + 16 + 32 * h + 16 * g);
            for (int j = 0; j < 4; j++) {
                const int sb = 8 * h + 2 * j + g;
                const __m512 q = f32(_mm512_and_si512(_mm512_srli_epi32(v, 2 * j), _mm512_set1_epi32(3)));
                _mm512_storeu_ps(w + 128 * h + 32 * j + 16 * g,
                                 _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(dl[sb]), q), _mm512_set1_ps(ml[sb])));
            }
        }
}

// d·sc for the 16 sub-blocks of a Q6_K or Q3_K super-block, rounded as the reference rounds it.
INLINE void k16_scales(const uint32_t type, const uint8_t *p, float scales[16]) {
    if (type == BK_Q3_K) {
        int8_t sc[16];
        bk_q3k_scales(p + 96, sc);
        _mm512_storeu_ps(scales, _mm512_mul_ps(half16(p + 108), f32(i8x16((const uint8_t *)sc))));
    } else {
        _mm512_storeu_ps(scales, _mm512_mul_ps(half16(p + 208), f32(i8x16(p + 192))));
    }
}

// ---------------------------------------------------------------------------------------------
// Products. A tile is MR activation rows x NR weight rows (compile-time constants once inlined);
// every (row, output) pair owns one accumulator and sees the same operations in the same order
// whatever the tile, so results do not depend on m or on how [n0, n1) is split.

// The weights each activation row meets are the block's dequantized values d·q (K-quants:
// d·sc·q), formed once per weight row and shared by the tile's rows, so a row costs one fused
// multiply-add per 16 values (the mul of p = q·x and the fma of acc += d·p made it 1.5). Every
// such product is exact in float32 (d has 11 significant bits, sc at most 7, q at most 6, 24 in
// all), so these are the reference dequantization's values, not a rounding of them. The 4-bit
// types look theirs up in a 16-entry table d·(0..15) (vpermps on the nibble, which reads only
// an index's low four bits) instead of converting and multiplying: one instruction for two.
// bench kernels, hot, one thread, 8 rows over 1 (old -> new): Q4_1 576x1536 3.3 -> 2.8, Q8_0
// 3.4 -> 2.8, Q4_K 2048x8192 4.4 -> 3.7 with one row 19% faster, Q6_K 3.1 -> 2.7; one row of
// Q8_0 costs ~6% more (its conversion is not a table), Q4_1's and Q4_0's the same or less.
// Q6_K (tileQ6K) left this for one row's sake: floats built from bytes, a partial sum per four
// sub-blocks times their scales, and the offset through the activation sums.
//
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: per 32-value block, acc = fma(d·q[0:16], x[0:16], acc), then the
// same for [16:32] (the 5-bit types' d·q from a 32-entry table, exact as well: 11 + 5 bits);
// Q4_1 and Q5_1 add m·sum(x_block) to a scalar beside it: add = fma(m, xs, add), block by
// block. For 4 or 8 rows those scalars ride in the lanes of one vector per weight row (the sums
// laid out block-major, xs[b·stride + row], so a block's sums for the tile's rows are adjacent):
// each lane does the scalar's fused multiply-adds in the scalar's order, so the bits are those
// of a one-row pass, for a quarter or an eighth of the instructions.
INLINE void tile32(const uint32_t type, const float *x, size_t k, const float *xs, size_t stride,
                   const uint8_t *w, size_t rowBytes, float *y, size_t ldy, const int MR, const int NR, chunk c) {
    const size_t bytes = bk_bytes32(type);
    const __m512 iota = iota16f(), minus8 = _mm512_sub_ps(iota, _mm512_set1_ps(8));
    const __m512 minus16 = _mm512_sub_ps(iota, _mm512_set1_ps(16)), iota16 = _mm512_add_ps(iota, _mm512_set1_ps(16));
    const int minimum = bk_has_min32(type), lanes = minimum && MR >= 4;  // min terms in vector lanes (4, or up to 8 masked)
    __m512 acc[MAXROWS][4];
    float add[MAXROWS][4];
    __m256 add8[4];
    __m128 add4[4];
    if (c.first) {
        for (int j = 0; j < NR; j++) { add8[j] = _mm256_setzero_ps(); add4[j] = _mm_setzero_ps(); }
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) { acc[r][j] = _mm512_setzero_ps(); add[r][j] = 0; }
    } else {
        for (int j = 0; j < NR; j++) { add8[j] = c.st->add8[c.j0 + j]; add4[j] = c.st->add4[c.j0 + j]; }
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) { acc[r][j] = c.st->acc[r][c.j0 + j]; add[r][j] = c.st->add[r][c.j0 + j]; }
    }
    for (size_t b = c.c0 / 32; b < c.c1 / 32; b++) {
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * bytes;
            prefetch_ahead(p, rowBytes, bytes);
            __m512 q0, q1;
            float mn = 0;
            if (type == BK_Q8_0) {
                const __m512 d = half16(p);
                q0 = _mm512_mul_ps(d, f32(i8x16(p + 2)));
                q1 = _mm512_mul_ps(d, f32(i8x16(p + 18)));
            } else if (type == BK_IQ4_NL) {  // the table d·levels, exact (11 + 7 bits), looked up as Q4_0's
                const __m512 table = _mm512_mul_ps(half16(p), f32(i8x16((const uint8_t *)bk_iq4nl_values)));
                __m512i v = u8x16(p + 2);
                q0 = _mm512_permutexvar_ps(v, table);
                q1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
            } else if (type == BK_Q5_0 || type == BK_Q5_1) {
                // 32-entry table d·(-16..15) (Q5_0) or d·(0..31) (Q5_1) through vpermt2ps: an
                // index's bit 4 (the fifth bit) picks the second half
                const __m512 d = half16(p);
                const __m512 lowT = _mm512_mul_ps(d, type == BK_Q5_0 ? minus16 : iota);
                const __m512 highT = _mm512_mul_ps(d, type == BK_Q5_0 ? iota : iota16);
                __m512i i0, i1;
                q5_indexes(p + bk_q5_qs(type), bk_u32(p + bk_q5_qh(type)), &i0, &i1);
                q0 = _mm512_permutex2var_ps(lowT, i0, highT);
                q1 = _mm512_permutex2var_ps(lowT, i1, highT);
                if (type == BK_Q5_1) mn = half(p + 2);
            } else {
                const __m512 table = _mm512_mul_ps(half16(p), type == BK_Q4_0 ? minus8 : iota);
                __m512i v = u8x16(p + (type == BK_Q4_0 ? 2 : 4));
                q0 = _mm512_permutexvar_ps(v, table);
                q1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
                if (type == BK_Q4_1) mn = half(p + 2);
            }
            for (int r = 0; r < MR; r++) {
                const float *xr = x + r * k + b * 32;
                acc[r][j] = _mm512_fmadd_ps(q0, _mm512_loadu_ps(xr), acc[r][j]);
                acc[r][j] = _mm512_fmadd_ps(q1, _mm512_loadu_ps(xr + 16), acc[r][j]);
                if (minimum && !lanes) add[r][j] = fmaf(mn, xs[b * stride + r], add[r][j]);
            }
            if (minimum && lanes) {
                if (MR > 4) add8[j] = _mm256_fmadd_ps(_mm256_set1_ps(mn), _mm256_maskz_loadu_ps((__mmask8)((1u << MR) - 1), xs + b * stride), add8[j]);
                else add4[j] = _mm_fmadd_ps(_mm_set1_ps(mn), _mm_loadu_ps(xs + b * stride), add4[j]);
            }
        }
    }
    if (!c.last) {
        for (int j = 0; j < NR; j++) { c.st->add8[c.j0 + j] = add8[j]; c.st->add4[c.j0 + j] = add4[j]; }
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) { c.st->acc[r][c.j0 + j] = acc[r][j]; c.st->add[r][c.j0 + j] = add[r][j]; }
        return;
    }
    if (minimum && lanes) {
        for (int j = 0; j < NR; j++) {
            float a[8];
            if (MR > 4) _mm256_storeu_ps(a, add8[j]);
            else _mm_storeu_ps(a, add4[j]);
            for (int r = 0; r < MR; r++) add[r][j] = a[r];
        }
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) y[r * ldy + j] = hsum512(acc[r][j]) + add[r][j];
}

// A tile with an accumulator and a min accumulator per (row, output) (the K-quants with mins):
// zeroed, or resumed from the tile_state, at a chunk's start; kept there, or y = sum(acc) -
// sum(macc), at its end.
INLINE void tile_start_mins(__m512 acc[MAXROWS][4], __m256 macc[MAXROWS][4], const int MR, const int NR, chunk c) {
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) {
            acc[r][j] = c.first ? _mm512_setzero_ps() : c.st->acc[r][c.j0 + j];
            macc[r][j] = c.first ? _mm256_setzero_ps() : c.st->macc[r][c.j0 + j];
        }
}

INLINE void tile_finish_mins(__m512 acc[MAXROWS][4], __m256 macc[MAXROWS][4], const int MR, const int NR, chunk c, float *y,
                             size_t ldy) {
    if (!c.last) {
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) { c.st->acc[r][c.j0 + j] = acc[r][j]; c.st->macc[r][c.j0 + j] = macc[r][j]; }
        return;
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) y[r * ldy + j] = hsum512(acc[r][j]) - hsum256(macc[r][j]);
}

// The head of the Q4_K/Q5_K super-block b at p (weight row j of a tile): returns d·sc_0..7, and
// adds its min terms (dmin·m_0..7)·sums(x_0..7) to macc[r][j] for the tile's rows. The scales and
// mins unpacked in vector registers (bk_k4_unpack1) and multiplied by [d x 8, dmin x 8] at once,
// the products those of bk_k4_scales' bytes (the same bits). Against bk_k4_scales (~20 scalar
// operations, then the bytes reloaded as a vector; 15% of the one-row product's time): `bench
// kernels --types q4_K --modes float --levels 3`, Zen 5, hot, one thread, 2048x8192 375 -> 322-332
// us (docs/benchmarks.md, 2026-11-30 06:10). The AVX2 tile keeps bk_k4_scales (3-6% faster there).
INLINE __m256 k4_head(const uint8_t *p, const float *xs, size_t sums, size_t b, __m256 macc[MAXROWS][4], int j, const int MR) {
    const __m512 dd = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                            _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)bk_u32(p)))));
    const __m512 all = _mm512_mul_ps(dd, f32(_mm512_cvtepu8_epi32(bk_k4_unpack1(p))));  // d·sc_0..7, dmin·m_0..7
    const __m256 mins = _mm512_extractf32x8_ps(all, 1);
    for (int r = 0; r < MR; r++)
        macc[r][j] = _mm256_fmadd_ps(mins, _mm256_loadu_ps(xs + r * sums + b * 8), macc[r][j]);
    return _mm512_castps512_ps256(all);
}

// Q5_K (Q4_K took it too before tileQ4K): per 32-value sub-block s, acc = fma(d·sc_s·q_s, x_s,
// acc) over two halves of 16 (a 32-entry table through vpermt2ps); the mins go to a second
// accumulator, macc += (dmin·m_0..7)·sums(x_0..7) per super-block, and y = sum(acc) - sum(macc).
INLINE void tileK5(const float *x, size_t k, const float *xs, size_t sums, const uint8_t *w, size_t rowBytes,
                   float *y, size_t ldy, const int MR, const int NR, chunk c) {
    const uint32_t type = BK_Q5_K;
    const size_t bytes = BK_Q5_K_BYTES;
    const __m512 iota = iota16f(), iota16 = _mm512_add_ps(iota, _mm512_set1_ps(16));
    __m512 acc[MAXROWS][4];
    __m256 macc[MAXROWS][4];
    tile_start_mins(acc, macc, MR, NR, c);
    for (size_t b = c.c0 / 256; b < c.c1 / 256; b++) {
        float scales[4][8];  // d · sc_0..7 of each weight row's super-block
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * bytes;
            prefetch_ahead(p, rowBytes, bytes);
            _mm256_storeu_ps(scales[j], k4_head(p, xs, sums, b, macc, j, MR));
        }
        // 64 values at a time across the weight rows, so that one activation row's 64 values
        // serve all NR weight rows from registers and the rows' work overlaps. Against each
        // weight row's whole super-block in turn (`bench kernels --types q4_K`, Zen 5, one
        // activation row, 3072x1024): 100.6 -> 83.2 µs on one thread, 50.6 -> 36.0 on two; the
        // same operations per output in the same order.
        for (int g = 0; g < 4; g++) {
            for (int j = 0; j < NR; j++) {
                const uint8_t *p = w + j * rowBytes + b * bytes;
                __m512i v[4];
                __m512 q[4];
                k45_ints(type, p, g, v, 0);
                for (int h = 0; h < 2; h++) {  // sub-block 2g + h: its 32 weights d·sc·q, exact
                    const __m512 ds = _mm512_set1_ps(scales[j][2 * g + h]), t = _mm512_mul_ps(ds, iota), t2 = _mm512_mul_ps(ds, iota16);
                    q[2 * h] = _mm512_permutex2var_ps(t, v[2 * h], t2);
                    q[2 * h + 1] = _mm512_permutex2var_ps(t, v[2 * h + 1], t2);
                }
                for (int r = 0; r < MR; r++) {
                    const float *xr = x + r * k + b * 256 + 64 * g;
                    for (int i = 0; i < 4; i++) acc[r][j] = _mm512_fmadd_ps(q[i], _mm512_loadu_ps(xr + 16 * i), acc[r][j]);
                }
            }
        }
    }
    tile_finish_mins(acc, macc, MR, NR, c, y, ldy);
}

// Q4_K, with the activations in q4k_order's order. A 32-bit lane of 64 nibble bytes holds four
// bytes of one 32-byte pair of sub-blocks (2g low nibbles, 2g + 1 high): shifting the whole
// vector right by 8t (+ 4 for the high nibbles) puts byte t's nibble in every lane's low four
// bits, and a 16-entry permute of 0..15, which reads only those, makes it a float. Lanes 0-7
// then hold values of sub-block 4h + s, lanes 8-15 of 4h + 2 + s (h the 64-byte half, s = 0 low
// nibbles, 1 high), and the activations were put in the same order once per product. Each
// sub-block pair's four products go into one partial sum per activation row, which meets the
// two sub-blocks' scales d·sc (lanes 0-7 / 8-15) in one fma, and the min terms go as in tileK5.
// No per-lane widening (vpmovzxbd) and no per-sub-block table: against tileK5's way (16-entry tables
// of d·sc·q, which Q4_K took before) the shuffle and multiply units carry fewer operations (Zen
// 5, `bench kernels --types q4_K --modes float`, hot, one thread: 3072x1024 70 -> 63 us; 4 and
// 8 activation rows 3.9 and 7.4 one-row times -> 2.7 and 5.4). Every tile size computes each
// output with the same operations in the same order. A lone activation row takes it one weight
// row at a time (see product), which its short chains of dependent operations allow.
INLINE void tileQ4K(const float *x, size_t k, const float *xs, size_t sums, const uint8_t *w, size_t rowBytes,
                    float *y, size_t ldy, const int MR, const int NR, chunk c) {
    const __m512 iota = iota16f();
    __m512 acc[MAXROWS][4];
    __m256 macc[MAXROWS][4];
    tile_start_mins(acc, macc, MR, NR, c);
    for (size_t b = c.c0 / 256; b < c.c1 / 256; b++) {
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * BK_Q4_K_BYTES;
            prefetch_ahead(p, rowBytes, BK_Q4_K_BYTES);
            const __m512 scales = _mm512_castps256_ps512(k4_head(p, xs, sums, b, macc, j, MR));  // d · sc_0..7 in lanes 0-7
            p += 16;
            for (int h = 0; h < 2; h++) {
                const __m512i z = _mm512_loadu_si512((const void *)(p + 64 * h));
                __m512 part[2][MAXROWS];
                for (int t = 0; t < 4; t++)
                    for (int s = 0; s < 2; s++) {
                        const int shift = 8 * t + 4 * s;
                        const __m512 q = _mm512_permutexvar_ps(shift ? _mm512_srli_epi32(z, (unsigned)shift) : z, iota);
                        for (int r = 0; r < MR; r++) {
                            const __m512 xv = _mm512_loadu_ps(x + r * k + b * 256 + 16 * (8 * h + 4 * s + t));
                            part[s][r] = t ? _mm512_fmadd_ps(q, xv, part[s][r]) : _mm512_mul_ps(q, xv);
                        }
                    }
                for (int s = 0; s < 2; s++) {
                    // d·sc of sub-blocks 4h + s (lanes 0-7) and 4h + 2 + s (lanes 8-15)
                    const __m512i pick = _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                                                          _mm512_set1_epi32(4 * h + s));
                    const __m512 ds = _mm512_permutexvar_ps(pick, scales);
                    for (int r = 0; r < MR; r++) acc[r][j] = _mm512_fmadd_ps(part[s][r], ds, acc[r][j]);
                }
            }
        }
    }
    tile_finish_mins(acc, macc, MR, NR, c, y, ldy);
}

// m rows of k activations in tileQ4K's order: per 256, vector (h, s, t) lane L takes value
// 64·(2h + L/8) + 32s + 4·(L%8) + t.
static void q4k_order(const float *x, size_t m, size_t k, float *out) {
    // lanes 0-7 from the first 32 values (two vectors), 8-15 from the second 32, element 4L + t
    const __m512i lo = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    for (size_t i = 0; i < m * k; i += 256) {
        const float *v = x + i;
        float *o = out + i;
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 2; s++) {
                const float *a = v + 64 * (2 * h) + 32 * s, *bb = v + 64 * (2 * h + 1) + 32 * s;
                const __m512 a0 = _mm512_loadu_ps(a), a1 = _mm512_loadu_ps(a + 16);
                const __m512 b0 = _mm512_loadu_ps(bb), b1 = _mm512_loadu_ps(bb + 16);
                for (int t = 0; t < 4; t++) {
                    const __m512i idx = _mm512_add_epi32(lo, _mm512_set1_epi32(t));
                    const __m512 fa = _mm512_permutex2var_ps(a0, idx, a1), fb = _mm512_permutex2var_ps(b0, idx, b1);
                    _mm512_storeu_ps(o + 16 * (8 * h + 4 * s + t), _mm512_mask_blend_ps(0xFF00, fa, fb));
                }
            }
    }
}

// A tile with one accumulator per (row, output): zeroed, or resumed from the tile_state, at a
// chunk's start; kept there, or summed into y, at its end.
INLINE void tile_start(__m512 acc[MAXROWS][4], const int MR, const int NR, chunk c) {
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = c.first ? _mm512_setzero_ps() : c.st->acc[r][c.j0 + j];
}

INLINE void tile_finish(__m512 acc[MAXROWS][4], const int MR, const int NR, chunk c, float *y, size_t ldy) {
    if (!c.last) {
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) c.st->acc[r][c.j0 + j] = acc[r][j];
        return;
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) y[r * ldy + j] = hsum512(acc[r][j]);
}

// Q6_K, with the activations in q6k_order's order: 64 bytes of q6k_half_t unpacked against
// 0x42 (in-lane, vpunpck[lh]bw) are 32 bfloat16s, and shifting or masking 32-bit lanes makes 16
// floats 64 + q each, for four sub-blocks at once (lane 4l + i: sub-block l). The four vectors of
// 64 values go into one partial sum per activation row (the activations were put in the same
// order once per product), which meets the four sub-blocks' d·sc in one fma; the 64 goes back
// into the same accumulator as d·sc_s times -96·Σx_s (w = d·sc·(q - 32)), from the sums per 16
// values after the reordered rows.
// Against tileK16 (each sub-block widened byte by byte, vpmovsxbd + vcvtdq2ps, then d·sc·q) the
// shuffle unit carries half the operations: Zen 5, one thread, Q6_K 2048x4096 in L3, ns per 16
// weights: one row 0.63 -> 0.43, 2-7 rows 2-25% less; 8 and 16 rows 7% and 11% more (there the
// multiply-adds bound it, and the partial sums cost one more per 64 values and row); Qwen3-1.7B
// Q4_K_M's float32 decoding (Q6_K head and half the down projections) 34.8-35.2 -> 38.0-38.5
// tokens/s. The offset costs accuracy: (64 + q)·x summed and 96 times the sums taken off, a few
// bits below tileK16's exact products (within BlockKernelTests' bound, as the AVX2 tile).
INLINE void tileQ6K(const float *x, size_t k, const float *xs, size_t sums, const uint8_t *w, size_t rowBytes,
                    float *y, size_t ldy, const int MR, const int NR, chunk c) {
    const __m512i bf = _mm512_set1_epi8(0x42), high = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 acc[MAXROWS][4];
    tile_start(acc, MR, NR, c);
    for (size_t b = c.c0 / 256; b < c.c1 / 256; b++) {
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * BK_Q6_K_BYTES;
            prefetch_ahead(p, rowBytes, BK_Q6_K_BYTES);
            const __m512 scales = _mm512_mul_ps(half16(p + 208), f32(i8x16(p + 192)));  // d · sc_0..15
            for (int r = 0; r < MR; r++) acc[r][j] = _mm512_fmadd_ps(scales, _mm512_loadu_ps(xs + r * sums + b * 16), acc[r][j]);
            for (int hf = 0; hf < 2; hf++) {
                __m512i v[2];
                q6k_half_t(p, hf, &v[0], &v[1]);
                for (int c4 = 0; c4 < 2; c4++) {  // values 128hf + 64c4 ...: sub-blocks 8hf + 4c4 + l
                    const __m512i a = _mm512_unpacklo_epi8(v[c4], bf), bb = _mm512_unpackhi_epi8(v[c4], bf);
                    const __m512 f[4] = {_mm512_castsi512_ps(_mm512_slli_epi32(a, 16)), _mm512_castsi512_ps(_mm512_and_si512(a, high)),
                                         _mm512_castsi512_ps(_mm512_slli_epi32(bb, 16)), _mm512_castsi512_ps(_mm512_and_si512(bb, high))};
                    const float *xv = x + b * 256 + 128 * hf + 64 * c4;
                    __m512 part[MAXROWS];
                    for (int i = 0; i < 4; i++)
                        for (int r = 0; r < MR; r++) {
                            const __m512 xi = _mm512_loadu_ps(xv + r * k + 16 * i);
                            part[r] = i ? _mm512_fmadd_ps(f[i], xi, part[r]) : _mm512_mul_ps(f[i], xi);
                        }
                    const __m512i pick = _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                                          _mm512_set1_epi32(8 * hf + 4 * c4));
                    const __m512 ds = _mm512_permutexvar_ps(pick, scales);
                    for (int r = 0; r < MR; r++) acc[r][j] = _mm512_fmadd_ps(part[r], ds, acc[r][j]);
                }
            }
        }
    }
    tile_finish(acc, MR, NR, c, y, ldy);
}

// m rows of k activations in tileQ6K's order, then -96 times the sums of each 16 (in value
// order) after them (out + m·k). Per 64 values (four sub-blocks of 16, l = 0..3), vector i lane
// 4l + e takes value 16l + (0, 1, 8, 9)[i] + 2e: the bytes vpunpck[lh]bw and the 32-bit shift or
// mask pick.
static void q6k_order(const float *x, size_t m, size_t k, float *out) {
    float *sums = out + m * k;
    for (size_t g = 0; g < m * k; g += 64) {
        const __m512 v0 = _mm512_loadu_ps(x + g), v1 = _mm512_loadu_ps(x + g + 16);
        const __m512 v2 = _mm512_loadu_ps(x + g + 32), v3 = _mm512_loadu_ps(x + g + 48);
        sums[g / 16] = -96 * hsum512(v0);
        sums[g / 16 + 1] = -96 * hsum512(v1);
        sums[g / 16 + 2] = -96 * hsum512(v2);
        sums[g / 16 + 3] = -96 * hsum512(v3);
        static const int first[4] = {0, 1, 8, 9};
        for (int i = 0; i < 4; i++) {
            const int f = first[i];
            // lanes 0-3 from v0, 4-7 from v1 (index bit 4), 8-11 from v2, 12-15 from v3
            const __m512i idx = _mm512_setr_epi32(f, f + 2, f + 4, f + 6, 16 + f, 18 + f, 20 + f, 22 + f,
                                                  f, f + 2, f + 4, f + 6, 16 + f, 18 + f, 20 + f, 22 + f);
            const __m512 lo = _mm512_permutex2var_ps(v0, idx, v1), hi = _mm512_permutex2var_ps(v2, idx, v3);
            _mm512_storeu_ps(out + g + 16 * i, _mm512_mask_blend_ps(0xFF00, lo, hi));
        }
    }
}

// Q3_K (and Q6_K before tileQ6K): per 16-value sub-block s, acc = fma(d·sc_s·q_s, x_s, acc)
// (Q3_K's q -4..3, Q6_K's q less 32).
INLINE void tileK16(const uint32_t type, const float *x, size_t k, const uint8_t *w, size_t rowBytes, float *y,
                    size_t ldy, const int MR, const int NR, chunk c) {
    const size_t bytes = bk_bytes256(type);
    __m512 acc[MAXROWS][4];
    tile_start(acc, MR, NR, c);
    for (size_t b = c.c0 / 256; b < c.c1 / 256; b++) {
        float scales[4][16];  // d · sc_0..15 of each weight row's super-block
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * bytes;
            prefetch_ahead(p, rowBytes, bytes);
            k16_scales(type, p, scales[j]);
        }
        for (int hf = 0; hf < 2; hf++) {  // each half across the weight rows (see tileK5)
            for (int j = 0; j < NR; j++) {
                const uint8_t *p = w + j * rowBytes + b * bytes;
                __m512i v[2];
                if (type == BK_Q3_K) q3k_half(p, hf, &v[0], &v[1]);
                else q6k_half(p, hf, &v[0], &v[1]);
                for (int c = 0; c < 8; c++) {  // sub-block 8hf + c: values 128hf + 16c ...
                    // d·sc·(q - 32), exact: 11 + 7 + 6 significant bits (Q3_K: 11 + 6 + 3)
                    const __m512 q = _mm512_mul_ps(_mm512_set1_ps(scales[j][8 * hf + c]), lane_i8(v[c / 4], c % 4));
                    for (int r = 0; r < MR; r++)
                        acc[r][j] = _mm512_fmadd_ps(q, _mm512_loadu_ps(x + r * k + b * 256 + 128 * hf + 16 * c), acc[r][j]);
                }
            }
        }
    }
    tile_finish(acc, MR, NR, c, y, ldy);
}

// Q2_K: each weight row's block dequantized once (the reference's values) for the tile's rows,
// then acc = fma(w, x, acc) per 16 values.
INLINE void tileQ2K(const float *x, size_t k, const uint8_t *w, size_t rowBytes, float *y, size_t ldy,
                    const int MR, const int NR, chunk c) {
    __m512 acc[MAXROWS][4];
    tile_start(acc, MR, NR, c);
    float wq[256] __attribute__((aligned(64)));
    for (size_t b = c.c0 / 256; b < c.c1 / 256; b++) {
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * BK_Q2_K_BYTES;
            prefetch_ahead(p, rowBytes, BK_Q2_K_BYTES);
            q2k_weights(p, wq);
            for (int r = 0; r < MR; r++) {
                const float *xr = x + r * k + b * 256;
                __m512 a = acc[r][j];
                for (int i = 0; i < 256; i += 16) a = _mm512_fmadd_ps(_mm512_load_ps(wq + i), _mm512_loadu_ps(xr + i), a);
                acc[r][j] = a;
            }
        }
    }
    tile_finish(acc, MR, NR, c, y, ldy);
}

// F32, F16, BF16: acc += w[i:i+16]·x[i:i+16]; a scalar tail for k % 16.
INLINE __m512 wide16(const uint32_t type, const uint8_t *row, size_t i) {
    if (type == BK_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * i)));
    if (type == BK_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * i))), 16));
    return _mm512_loadu_ps((const float *)(row + 4 * i));
}

INLINE float scalar_weight(const uint32_t type, const uint8_t *row, size_t i) {
    if (type == BK_F16) return half(row + 2 * i);
    if (type == BK_BF16) return bk_bf16_to_float(bk_u16(row + 2 * i));
    float v;
    memcpy(&v, row + 4 * i, 4);
    return v;
}

INLINE void tileF(const uint32_t type, const float *x, size_t k, const uint8_t *w, size_t rowBytes, float *y,
                  size_t ldy, const int MR, const int NR, chunk c) {
    __m512 acc[MAXROWS][4];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = c.first ? _mm512_setzero_ps() : c.st->acc[r][c.j0 + j];
    const size_t vec = k / 16 * 16, end = c.last ? vec : c.c1;  // chunks other than the last are whole vectors
    for (size_t i = c.c0; i < end; i += 16) {
        for (int j = 0; j < NR; j++) {
            const size_t size = type == BK_F32 ? 4 : 2;
            prefetch_ahead(w + j * rowBytes + i * size, rowBytes, 16 * size);
            const __m512 wv = wide16(type, w + j * rowBytes, i);
            for (int r = 0; r < MR; r++) acc[r][j] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + r * k + i), acc[r][j]);
        }
    }
    if (!c.last) {
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) c.st->acc[r][c.j0 + j] = acc[r][j];
        return;
    }
    for (int r = 0; r < MR; r++) {
        for (int j = 0; j < NR; j++) {
            float s = hsum512(acc[r][j]);
            for (size_t i = vec; i < k; i++) s = fmaf(scalar_weight(type, w + j * rowBytes, i), x[r * k + i], s);
            y[r * ldy + j] = s;
        }
    }
}

INLINE void tile(const uint32_t type, const float *x, size_t k, const float *xs, size_t sums, const uint8_t *w,
                 size_t rowBytes, float *y, size_t ldy, const int MR, const int NR, chunk c) {
    switch (type) {
    case BK_Q8_0: case BK_Q4_0: case BK_Q4_1: case BK_Q5_0: case BK_Q5_1: case BK_IQ4_NL: tile32(type, x, k, xs, sums, w, rowBytes, y, ldy, MR, NR, c); break;
    case BK_Q4_K: tileQ4K(x, k, xs, sums, w, rowBytes, y, ldy, MR, NR, c); break;
    case BK_Q5_K: tileK5(x, k, xs, sums, w, rowBytes, y, ldy, MR, NR, c); break;
    case BK_Q3_K: tileK16(type, x, k, w, rowBytes, y, ldy, MR, NR, c); break;
    case BK_Q6_K: tileQ6K(x, k, xs, sums, w, rowBytes, y, ldy, MR, NR, c); break;
    case BK_Q2_K: tileQ2K(x, k, w, rowBytes, y, ldy, MR, NR, c); break;
    default: tileF(type, x, k, w, rowBytes, y, ldy, MR, NR, c); break;
    }
}

// Output rows go in groups of four; within a group the activation rows go in tiles of up to 8
// (as few tiles as hold them, of equal size: 5 rows one tile, 12 two of 6), and each tile covers
// the group with NR = 4 (one row), 2 or 1 weight rows at a time, so the group's weight rows stay
// in L1 while every tile passes over them. A tile decodes each weight block once for its rows:
// speculative decoding verifies γ + 1 rows, and 5 rows went as tiles of 4 and 1 (3.1 one-row
// products of Q4_1 576x1536 where one tile of 4 took 2.1). Tiles of 3 or more rows take two
// weight rows at once where the tile keeps one accumulator per pair (F32, F16, BF16, Q8_0,
// Q4_0): each activation load then serves both (Q8_0 576x1536 at 8 rows 10% faster, F16 and
// F32 up to 2x); Q4_1 and the K-quants carry a second accumulator per pair, and two weight rows'
// worth spills registers (Q4_K 2048x8192 at 8 rows 1.1x slower), so they take one.
//
// Every tile reads all m rows' activations once per weight row: when they outgrow L1 (8 rows of
// 2,048 floats are 64 KB) each weight row streamed them from L2 again, and 8 rows of Q4_K
// 2048x8192 cost 5.5 one-row products instead of ~3. So k is cut into chunks whose m rows fit
// in XBUDGET bytes, and a block of 16 output rows goes over k chunk by chunk, each tile's
// accumulators kept in a tile_state between chunks: the same operations in the same order.
// One row is left whole: it reads its activations once per weight row either way (8192x2048 at
// one row measured the same chunked or not, hot and from DRAM).
//
// A lone activation row (decoding) meets Q4_K and Q6_K one weight row at a time, so each core
// reads one sequential stream of weights rather than four rows side by side: two threads summing
// 2 GB of 1,728-byte rows on this VM (Zen 5; scripts/probes/stream-order.c) drew 46-50 GB/s row
// after row and 34-41 GB/s four rows side by side in one period, 66-70 and 40-57 in a faster one,
// whatever the software prefetch. From DRAM on two threads (`bench kernels
// --modes float`, cold 2T, Zen 5) one row at a time against four: Q4_K 2048x8192 205-208 us
// against 217-219, 8192x2048 210-212 / 219-220, Q6_K 282-284 / 288-290 and 295-300 / 305-309
// (hot in L3 four were faster: Q4_K 350 against 386-397 us). Their tiles' dependency chains
// are short enough for one weight row (a partial sum per 64 values); the other types keep four
// (one accumulator each, whose chain of fused multiply-adds would bound one row).
enum { XBUDGET = 16384 };

INLINE void product(const uint32_t type, const float *x, size_t m, size_t k, const float *xs, const uint8_t *w,
                    size_t rowBytes, size_t n0, size_t n1, float *y, size_t ldy) {
    const size_t sums = type == BK_Q6_K ? k / 16 : k / 32;  // activation sums per row (Q6_K: per 16)
    const int pairs = type != BK_Q2_K && type != BK_Q3_K && type != BK_Q4_K && type != BK_Q5_K && type != BK_Q6_K;
    const size_t unit = !pairs ? 256
                        : bk_is32(type) ? 32 : 16;
    const size_t tiles = (m + MAXROWS - 1) / MAXROWS;  // row tiles
    size_t kc = bk_chunk_values(m, k, unit, XBUDGET), groups = (n1 - n0 + 3) / 4;  // values per chunk, output groups per block
    tile_state *st = kc < k ? bk_tile_scratch(4 * tiles * sizeof(tile_state)) : NULL;
    if (st) groups = 4;
    else kc = k;
    for (size_t ob = n0; ob < n1; ob += 4 * groups) {
        const size_t oe = n1 - ob < 4 * groups ? n1 : ob + 4 * groups;
        for (size_t c0 = 0; c0 < k; c0 += kc) {
            chunk c = {c0, k - c0 <= kc ? k : c0 + kc, NULL, 0, c0 == 0, k - c0 <= kc};
            for (size_t o = ob; o < oe; o += 4) {
                const size_t group = n1 - o < 4 ? n1 - o : 4;
                const uint8_t *wo = w + o * rowBytes;
                for (size_t r = 0, t = 0; r < m; t++) {
                    if (st) c.st = st + ((o - ob) / 4) * tiles + t;
                    // Q4_1's and Q5_1's sums are block-major (stride m between blocks), the K-quants' row-major
                    const float *xr = x + r * k, *xsr = bk_has_min32(type) ? xs + r : xs + r * sums;
                    const size_t stride = bk_has_min32(type) ? m : sums;
                    float *yr = y + r * ldy + o;
                    size_t left = m - r;
#define TILE(mr, nr) (c.j0 = (int)j, tile(type, xr, k, xsr, stride, wo + j * rowBytes, rowBytes, yr + j, ldy, mr, nr, c))
                    const size_t MR = (left + (left + MAXROWS - 1) / MAXROWS - 1) / ((left + MAXROWS - 1) / MAXROWS);  // rows of this tile
                    size_t j = 0;
                    switch (MR) {
#define ROWS(mr)                                                        \
    case mr:                                                            \
        if (pairs)                                                      \
            for (; j + 2 <= group; j += 2) TILE(mr, 2);                 \
        for (; j < group; j++) TILE(mr, 1);                             \
        break;
                    ROWS(8) ROWS(7) ROWS(6) ROWS(5) ROWS(4) ROWS(3)
#undef ROWS
                    case 2:
                        if ((type == BK_Q4_K || type == BK_Q6_K) && group == 4) {  // their partial sums leave registers for four weight rows
                            TILE(2, 4);
                            j = 4;
                        }
                        for (; j + 2 <= group; j += 2) TILE(2, 2);
                        for (; j < group; j++) TILE(2, 1);
                        break;
                    default:
                        if (group == 4 && type != BK_Q4_K && type != BK_Q6_K) TILE(1, 4);
                        else for (; j < group; j++) TILE(1, 1);
                        break;
                    }
                    r += MR;
#undef TILE
                }
            }
        }
    }
}

// Sums of each 32 activations (the Q4_1/Q5_1 and K-quant min terms): row-major [m, k/32], or
// block-major [k/32, m] when `blockMajor` (Q4_1's and Q5_1's tiles read one block's sums for all rows).
static void activation_sums(const float *x, size_t m, size_t k, float *xs, int blockMajor) {
    for (size_t r = 0; r < m; r++) {
        for (size_t j = 0; j < k / 32; j++) {
            const float *p = x + r * k + 32 * j;
            xs[blockMajor ? j * m + r : r * (k / 32) + j] = hsum512(_mm512_add_ps(_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)));
        }
    }
}

// One copy of the driver per type, so each instantiates only its own tiles.
#define PRODUCT(name, type)                                                                              \
    __attribute__((noinline)) static void name(const float *x, size_t m, size_t k, const float *xs, const uint8_t *w, size_t rowBytes, \
                     size_t n0, size_t n1, float *y, size_t ldy) {                                          \
        product(type, x, m, k, xs, w, rowBytes, n0, n1, y, ldy);                                           \
    }
PRODUCT(product_f32, BK_F32)
PRODUCT(product_f16, BK_F16)
PRODUCT(product_bf16, BK_BF16)
PRODUCT(product_q8_0, BK_Q8_0)
PRODUCT(product_q4_0, BK_Q4_0)
PRODUCT(product_q4_1, BK_Q4_1)
PRODUCT(product_q5_0, BK_Q5_0)
PRODUCT(product_q5_1, BK_Q5_1)
PRODUCT(product_iq4_nl, BK_IQ4_NL)
PRODUCT(product_q2_k, BK_Q2_K)
PRODUCT(product_q3_k, BK_Q3_K)
PRODUCT(product_q4_k, BK_Q4_K)
PRODUCT(product_q5_k, BK_Q5_K)
PRODUCT(product_q6_k, BK_Q6_K)

void bk_avx512_matmul(uint32_t type, const float *x, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                      size_t n0, size_t n1, float *y, size_t ldy, float *xsum, float *xorder) {
    if (bk_has_min32(type) || type == BK_Q4_K || type == BK_Q5_K) activation_sums(x, m, k, xsum, bk_has_min32(type));
    if (type == BK_Q6_K) {  // the tiles read the rows reordered, and their sums per 16 after them
        q6k_order(x, m, k, xorder);
        product_q6_k(xorder, m, k, xorder + m * k, w, rowBytes, n0, n1, y, ldy);
        return;
    }
    if (type == BK_Q4_K) {  // the tiles read the rows reordered (the sums per 32 stay in value order)
        q4k_order(x, m, k, xorder);
        product_q4_k(xorder, m, k, xsum, w, rowBytes, n0, n1, y, ldy);
        return;
    }
    switch (type) {
    case BK_F32: product_f32(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_F16: product_f16(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_BF16: product_bf16(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q8_0: product_q8_0(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q4_0: product_q4_0(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q4_1: product_q4_1(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q5_0: product_q5_0(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q5_1: product_q5_1(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_IQ4_NL: product_iq4_nl(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q2_K: product_q2_k(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q3_K: product_q3_k(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q4_K: product_q4_k(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q5_K: product_q5_k(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q6_K: product_q6_k(x, m, k, xsum, w, rowBytes, n0, n1, y, ldy); break;
    }
}

// ---------------------------------------------------------------------------------------------
// Dequantization: the reference's operations lane by lane (mul, then add or sub; no fma).

INLINE void store2(float *y, __m512 a, __m512 b) { _mm512_storeu_ps(y, a); _mm512_storeu_ps(y + 16, b); }

static void dequantize_row(uint32_t type, const uint8_t *row, size_t k, float *y) {
    const __m512i low = _mm512_set1_epi32(15), eight = _mm512_set1_epi32(8);
    switch (type) {
    case BK_F32: memcpy(y, row, k * 4); break;
    case BK_F16:
    case BK_BF16: {
        size_t i = 0;
        for (; i + 16 <= k; i += 16) _mm512_storeu_ps(y + i, wide16(type, row, i));
        for (; i < k; i++) y[i] = scalar_weight(type, row, i);
        break;
    }
    case BK_Q8_0:
        for (size_t b = 0; b < k / 32; b++, y += 32) {
            const uint8_t *p = row + b * BK_Q8_0_BYTES;
            __m512 d = half16(p);
            store2(y, _mm512_mul_ps(d, f32(i8x16(p + 2))), _mm512_mul_ps(d, f32(i8x16(p + 18))));
        }
        break;
    case BK_Q4_0:
        for (size_t b = 0; b < k / 32; b++, y += 32) {
            const uint8_t *p = row + b * BK_Q4_0_BYTES;
            __m512 d = half16(p);
            __m512i v = u8x16(p + 2);
            store2(y, _mm512_mul_ps(d, f32(_mm512_sub_epi32(_mm512_and_si512(v, low), eight))),
                   _mm512_mul_ps(d, f32(_mm512_sub_epi32(_mm512_srli_epi32(v, 4), eight))));
        }
        break;
    case BK_Q4_1:
        for (size_t b = 0; b < k / 32; b++, y += 32) {
            const uint8_t *p = row + b * BK_Q4_1_BYTES;
            __m512 d = half16(p), mn = half16(p + 2);
            __m512i v = u8x16(p + 4);
            store2(y, _mm512_add_ps(_mm512_mul_ps(d, f32(_mm512_and_si512(v, low))), mn),
                   _mm512_add_ps(_mm512_mul_ps(d, f32(_mm512_srli_epi32(v, 4))), mn));
        }
        break;
    case BK_Q5_0:
        for (size_t b = 0; b < k / 32; b++, y += 32) {
            const uint8_t *p = row + b * BK_Q5_0_BYTES;
            const __m512 d = half16(p);
            const __m512i sixteen = _mm512_set1_epi32(16);
            __m512i i0, i1;
            q5_indexes(p + 6, bk_u32(p + 2), &i0, &i1);
            store2(y, _mm512_mul_ps(d, f32(_mm512_sub_epi32(i0, sixteen))), _mm512_mul_ps(d, f32(_mm512_sub_epi32(i1, sixteen))));
        }
        break;
    case BK_IQ4_NL: {
        const __m512 levels = f32(i8x16((const uint8_t *)bk_iq4nl_values));
        for (size_t b = 0; b < k / 32; b++, y += 32) {
            const uint8_t *p = row + b * BK_IQ4_NL_BYTES;
            const __m512 d = half16(p);
            const __m512i v = u8x16(p + 2);  // vpermps reads an index's low four bits: the low nibble
            store2(y, _mm512_mul_ps(d, _mm512_permutexvar_ps(v, levels)), _mm512_mul_ps(d, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), levels)));
        }
        break;
    }
    case BK_Q5_1:
        for (size_t b = 0; b < k / 32; b++, y += 32) {
            const uint8_t *p = row + b * BK_Q5_1_BYTES;
            const __m512 d = half16(p), mn = half16(p + 2);
            __m512i i0, i1;
            q5_indexes(p + 8, bk_u32(p + 4), &i0, &i1);
            store2(y, _mm512_add_ps(_mm512_mul_ps(d, f32(i0)), mn), _mm512_add_ps(_mm512_mul_ps(d, f32(i1)), mn));
        }
        break;
    case BK_Q4_K:
    case BK_Q5_K: {
        const size_t bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : BK_Q5_K_BYTES;
        for (size_t b = 0; b < k / 256; b++, y += 256) {
            const uint8_t *p = row + b * bytes;
            float d = half(p), dmin = half(p + 2);
            uint8_t sc[8], mn[8];
            bk_k4_scales(p + 4, sc, mn);
            for (int g = 0; g < 4; g++) {
                __m512 d1 = _mm512_set1_ps(d * (float)sc[2 * g]), m1 = _mm512_set1_ps(dmin * (float)mn[2 * g]);
                __m512 d2 = _mm512_set1_ps(d * (float)sc[2 * g + 1]), m2 = _mm512_set1_ps(dmin * (float)mn[2 * g + 1]);
                __m512 q[4];
                k45_pair(type, p, g, q);
                store2(y + 64 * g, _mm512_sub_ps(_mm512_mul_ps(d1, q[0]), m1), _mm512_sub_ps(_mm512_mul_ps(d1, q[1]), m1));
                store2(y + 64 * g + 32, _mm512_sub_ps(_mm512_mul_ps(d2, q[2]), m2), _mm512_sub_ps(_mm512_mul_ps(d2, q[3]), m2));
            }
        }
        break;
    }
    case BK_Q2_K:
        for (size_t b = 0; b < k / 256; b++, y += 256) q2k_weights(row + b * BK_Q2_K_BYTES, y);
        break;
    case BK_Q3_K:
    case BK_Q6_K:
        for (size_t b = 0; b < k / 256; b++, y += 256) {
            const uint8_t *p = row + b * bk_bytes256(type);
            float scales[16];  // d · sc, rounded as the reference rounds it
            k16_scales(type, p, scales);
            for (int hf = 0; hf < 2; hf++) {
                __m512i v[2];
                if (type == BK_Q3_K) q3k_half(p, hf, &v[0], &v[1]);
                else q6k_half(p, hf, &v[0], &v[1]);
                for (int c = 0; c < 8; c++)
                    _mm512_storeu_ps(y + 128 * hf + 16 * c, _mm512_mul_ps(_mm512_set1_ps(scales[8 * hf + c]), lane_i8(v[c / 4], c % 4)));
            }
        }
        break;
    }
}

void bk_avx512_dequantize(uint32_t type, const uint8_t *w, size_t rowBytes, size_t r0, size_t r1, size_t k,
                          float *out) {
    for (size_t r = r0; r < r1; r++) dequantize_row(type, w + r * rowBytes, k, out + (r - r0) * k);
}

#pragma clang attribute pop
#endif
