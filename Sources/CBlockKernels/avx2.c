// The AVX2 + FMA + F16C level (compiled for it with a target attribute on every function of
// this file): products of m <= 16 activation rows with rows of ggml blocks (every type of
// bk_type_supported), and vectorised dequantization. Same structure as avx512.c with 8-lane vectors and 16 registers (tiles of at
// most 6 activation rows, 4 for the K-quants). Leaves out integer (q8) dot products. Block formulas follow
// ggml-quants.c `dequantize_row_*`.
#include "internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#pragma STDC FP_CONTRACT OFF
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)

#define INLINE static inline __attribute__((always_inline))

// Activation rows sharing one decoded block: up to 6 for the 32-value and float types (6
// accumulators, the block's 4 vectors and its scale in 16 registers), 4 for the K-quants (whose
// tiles carry a second accumulator per row).
enum { MAXROWS = 6, MAXROWS_K = 4 };

// A tile's accumulators between chunks of k, and a chunk (see avx512.c).
typedef struct {
    __m256 acc[MAXROWS][4];
    __m256 macc[MAXROWS][4];
    __m256 add8[4];
    __m128 add4[4];
    float add[MAXROWS][4];
} tile_state;

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

// Asks for the same block eight rows later (two groups of output rows on), into L2. Without
// it the hardware prefetchers fell behind the interleaved row streams; prefetching into L1
// (T0) four rows ahead helped compute-bound types but left byte-heavy ones starved: one core
// streamed F16 576x49152 from DRAM at 11 GB/s with T0 and 22 GB/s with T1, Q8_0 9 -> 17, while
// Q4_1 (compute-bound at ~11 GB/s) was the same either way.
INLINE void prefetch_ahead(const uint8_t *p, size_t rowBytes, size_t bytes) {
    const char *a = (const char *)p + 8 * rowBytes;
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(a + off, _MM_HINT_T1);
}

INLINE float half(const uint8_t *p) { return _cvtsh_ss(bk_u16(p)); }

// fp16 at p broadcast to 8 floats: vpbroadcastw + vcvtph2ps. A scalar conversion then a
// broadcast compiled to vpinsrw, which merges into whatever register it is given; in the
// dequantization loops that was the previous block's result, a false dependency from block to
// block that cost a third of the speed.
INLINE __m256 half8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_set1_epi16((short)bk_u16(p))); }

// 8 bytes widened to 8 int32 lanes (one vpmovzxbd / vpmovsxbd from memory).
INLINE __m256i u8x8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
INLINE __m256i i8x8(const uint8_t *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
INLINE __m256 f32(__m256i v) { return _mm256_cvtepi32_ps(v); }

// ---------------------------------------------------------------------------------------------
// Products; tiles as in avx512.c: one accumulator per (activation row, weight row), the same
// operations for it whatever the tile.

// The 32 values of a Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 block as four 8-lane float vectors, in value order
// (Q5_0's with its -16, Q4_0's with its -8).
INLINE void decode32(const uint32_t type, const uint8_t *p, __m256 q[4]) {
    const __m256i low = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
    if (type == BK_Q8_0) {
        for (int c = 0; c < 4; c++) q[c] = f32(i8x8(p + 2 + 8 * c));
        return;
    }
    if (type == BK_IQ4_NL) {  // the nibbles index the level table through pshufb
        const __m128i table = _mm_loadu_si128((const __m128i *)bk_iq4nl_values), nib = _mm_set1_epi8(15);
        const __m128i qs = _mm_loadu_si128((const __m128i *)(p + 2));
        const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(qs, nib));
        const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(qs, 4), nib));
        q[0] = f32(_mm256_cvtepi8_epi32(lo)); q[1] = f32(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
        q[2] = f32(_mm256_cvtepi8_epi32(hi)); q[3] = f32(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
        return;
    }
    if (type == BK_Q5_0 || type == BK_Q5_1) {  // piece c: values 8c..8c+7, nibbles of bytes 8(c%2)..., fifth bits 8c... of qh
        const __m256i qh = _mm256_set1_epi32((int)bk_u32(p + bk_q5_qh(type))), one = _mm256_set1_epi32(1);
        const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i offset = _mm256_set1_epi32(type == BK_Q5_0 ? 16 : 0);
        for (int c = 0; c < 4; c++) {
            __m256i v = u8x8(p + bk_q5_qs(type) + 8 * (c % 2));
            v = c < 2 ? _mm256_and_si256(v, low) : _mm256_srli_epi32(v, 4);
            __m256i bit = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_add_epi32(lanes, _mm256_set1_epi32(8 * c))), one);
            q[c] = f32(_mm256_sub_epi32(_mm256_or_si256(v, _mm256_slli_epi32(bit, 4)), offset));
        }
        return;
    }
    const uint8_t *qs = p + (type == BK_Q4_0 ? 2 : 4);
    __m256i v0 = u8x8(qs), v1 = u8x8(qs + 8);
    __m256i a0 = _mm256_and_si256(v0, low), a1 = _mm256_and_si256(v1, low);
    __m256i b0 = _mm256_srli_epi32(v0, 4), b1 = _mm256_srli_epi32(v1, 4);
    if (type == BK_Q4_0) {
        a0 = _mm256_sub_epi32(a0, eight); a1 = _mm256_sub_epi32(a1, eight);
        b0 = _mm256_sub_epi32(b0, eight); b1 = _mm256_sub_epi32(b1, eight);
    }
    q[0] = f32(a0); q[1] = f32(a1); q[2] = f32(b0); q[3] = f32(b1);
}

// Q6_K's float tiles build each weight's float from its 6-bit q with byte operations instead of
// widening to 32 bits and converting (vpmovsxbd + vcvtdq2ps per 8 values): t holds 0x80 | 2q in
// each byte, and 0x42·256 + t is the bfloat16, hence the top half of the float, of 64 + q
// exactly. Per 32 values two byte unpacks and two 32-bit shift/mask steps make the four vectors,
// in this order of the 32 (i = byte index in t): f0 = i 0,2,4,6,16,18,20,22; f1 = 1,3,...,23;
// f2 = 8,10,...,30 (8-14, 24-30); f3 = 9,11,...,31. q6_order puts the activations of every 32 in
// that order once per product, so f_c meets x[8c...] of the reordered row. The offset comes back
// through sums of the activations (tileK16). The same byte-built floats for Q4_K (32 + 2q) and
// Q5_0 (32 + q) measured no faster than widening on Zen 3 (bench kernels, 2048x8192, one row:
// Q4_K 1107 -> 1134 us, Q5_0 2080 -> 2265 us; Q6_K 2146 -> 1465 us), and subtracting the offset
// lane by lane instead of through the sums lost Q6_K's gain (2060 us): those stay as they were.
INLINE void q6_floats(__m256i t, __m256 f[4]) {
    const __m256i top = _mm256_set1_epi8(0x42), high = _mm256_set1_epi32((int)0xFFFF0000u);
    const __m256i a = _mm256_unpacklo_epi8(t, top), b = _mm256_unpackhi_epi8(t, top);
    f[0] = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
    f[1] = _mm256_castsi256_ps(_mm256_and_si256(a, high));
    f[2] = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
    f[3] = _mm256_castsi256_ps(_mm256_and_si256(b, high));
}

// m rows of k activations into out in q6_floats' order, 32 at a time, then the sums of each 16
// (in value order) into out + m·k.
static void q6_order(const float *x, size_t m, size_t k, float *out) {
    float *sums = out + m * k;
    for (size_t i = 0; i < m * k; i += 32) {
        const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        const __m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
        sums[i / 16] = hsum256(_mm256_add_ps(x0, x1));
        sums[i / 16 + 1] = hsum256(_mm256_add_ps(x2, x3));
        const __m256 a = _mm256_permute2f128_ps(x0, x2, 0x20), b = _mm256_permute2f128_ps(x0, x2, 0x31);  // [0-3|16-19], [4-7|20-23]
        const __m256 c = _mm256_permute2f128_ps(x1, x3, 0x20), d = _mm256_permute2f128_ps(x1, x3, 0x31);  // [8-11|24-27], [12-15|28-31]
        _mm256_storeu_ps(out + i, _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm256_storeu_ps(out + i + 8, _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm256_storeu_ps(out + i + 16, _mm256_shuffle_ps(c, d, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm256_storeu_ps(out + i + 24, _mm256_shuffle_ps(c, d, _MM_SHUFFLE(3, 1, 3, 1)));
    }
}

// p = q·x over 32 values in one chain (mul, fma, fma, fma).
INLINE __m256 dot32(const __m256 q[4], const float *x) {
    __m256 s = _mm256_mul_ps(q[0], _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(x + 16), s);
    return _mm256_fmadd_ps(q[3], _mm256_loadu_ps(x + 24), s);
}

// Q4_1 and Q5_1 add m·sum(x_block) to a scalar beside each accumulator, block by block; for 4 to
// 6 rows those scalars ride in the lanes of one vector per weight row (the sums block-major,
// xs[b·stride + row]), each lane doing the scalar's fused multiply-adds in the scalar's order
// (as avx512.c's tiles): the bits of a one-row pass for a quarter of the instructions. At 4 rows
// those were 4 of the 24 multiply-adds per block the FMA units ran.
INLINE void tile32(const uint32_t type, const float *x, size_t k, const float *xs, size_t stride,
                   const uint8_t *w, size_t rowBytes, float *y, size_t ldy, const int MR, const int NR, chunk c) {
    const size_t bytes = bk_bytes32(type);
    const int minimum = bk_has_min32(type), lanes = minimum && MR >= 4;
    const __m256i laneMask = _mm256_cmpgt_epi32(_mm256_set1_epi32(MR), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 acc[MAXROWS][4], add8[4];
    __m128 add4[4];
    float add[MAXROWS][4];
    for (int j = 0; j < NR; j++) {
        add8[j] = c.first ? _mm256_setzero_ps() : c.st->add8[c.j0 + j];
        add4[j] = c.first ? _mm_setzero_ps() : c.st->add4[c.j0 + j];
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) {
            acc[r][j] = c.first ? _mm256_setzero_ps() : c.st->acc[r][c.j0 + j];
            add[r][j] = c.first ? 0 : c.st->add[r][c.j0 + j];
        }
    for (size_t b = c.c0 / 32; b < c.c1 / 32; b++) {
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * bytes;
            prefetch_ahead(p, rowBytes, bytes);
            __m256 q[4];
            decode32(type, p, q);
            const __m256 d = half8(p);
            const float mn = minimum ? half(p + 2) : 0;
            for (int r = 0; r < MR; r++) {
                acc[r][j] = _mm256_fmadd_ps(d, dot32(q, x + r * k + b * 32), acc[r][j]);
                if (minimum && !lanes) add[r][j] = fmaf(mn, xs[b * stride + r], add[r][j]);
            }
            if (lanes) {
                if (MR > 4) add8[j] = _mm256_fmadd_ps(_mm256_set1_ps(mn), _mm256_maskload_ps(xs + b * stride, laneMask), add8[j]);
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
    if (lanes) {
        for (int j = 0; j < NR; j++) {
            float a[8];
            if (MR > 4) _mm256_storeu_ps(a, add8[j]);
            else _mm_storeu_ps(a, add4[j]);
            for (int r = 0; r < MR; r++) add[r][j] = a[r];
        }
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) y[r * ldy + j] = hsum256(acc[r][j]) + add[r][j];
}

// Q4_K/Q5_K sub-block s (0..7) as four float vectors (values 0..7, ..., 24..31): the low (s
// even) or high (s odd) nibbles of qs bytes 32(s/2) ..., plus for Q5_K bit s of qh[l] as bit 4.
// Q4_K widens straight from memory and masks 32-bit lanes; Q5_K builds bytes first (one pass
// of byte-wide operations for 32 values) and widens after: on 2048x8192 that took Q5_K from
// 1.71 to 1.43 ms, while the same change made Q4_K slower (1.02 -> 1.09 ms).
INLINE void k45_sub(const uint32_t type, const uint8_t *p, int s, __m256 q[4]) {
    if (type == BK_Q4_K) {
        const __m256i low = _mm256_set1_epi32(15);
        for (int c = 0; c < 4; c++) {
            __m256i v = u8x8(p + 16 + 32 * (s / 2) + 8 * c);
            q[c] = f32(s & 1 ? _mm256_srli_epi32(v, 4) : _mm256_and_si256(v, low));
        }
        return;
    }
    const __m256i nibble = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256i qs = _mm256_loadu_si256((const __m256i *)(p + 48 + 32 * (s / 2)));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 16));
    __m256i v = _mm256_and_si256(s & 1 ? _mm256_srli_epi16(qs, 4) : qs, nibble);
    __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, s), one);  // 16-bit shift; the mask keeps each byte's own bit s
    v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 4));
    for (int c = 0; c < 4; c++) {
        __m128i h = c < 2 ? _mm256_castsi256_si128(v) : _mm256_extracti128_si256(v, 1);
        if (c & 1) h = _mm_unpackhi_epi64(h, h);
        q[c] = f32(_mm256_cvtepu8_epi32(h));
    }
}

INLINE void tileK45(const uint32_t type, const float *x, size_t k, const float *xs, size_t sums,
                    const uint8_t *w, size_t rowBytes, float *y, size_t ldy, const int MR, const int NR, chunk c) {
    const size_t bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : BK_Q5_K_BYTES;
    __m256 acc[MAXROWS][4], macc[MAXROWS][4];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) {
            acc[r][j] = c.first ? _mm256_setzero_ps() : c.st->acc[r][c.j0 + j];
            macc[r][j] = c.first ? _mm256_setzero_ps() : c.st->macc[r][c.j0 + j];
        }
    for (size_t b = c.c0 / 256; b < c.c1 / 256; b++) {
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * bytes;
            prefetch_ahead(p, rowBytes, bytes);
            uint8_t sc8[8], mn8[8];
            bk_k4_scales(p + 4, sc8, mn8);
            __m256 scale = _mm256_mul_ps(half8(p), f32(u8x8(sc8)));
            __m256 mins = _mm256_mul_ps(half8(p + 2), f32(u8x8(mn8)));
            float scales[8];
            _mm256_storeu_ps(scales, scale);
            for (int r = 0; r < MR; r++)
                macc[r][j] = _mm256_fmadd_ps(mins, _mm256_loadu_ps(xs + r * sums + b * 8), macc[r][j]);
            if (type == BK_Q4_K && MR <= 4) {
                // Sub-blocks 2g and 2g+1 are the low and high nibbles of the same 32 bytes: widened
                // once for both (k45_sub widens them per sub-block). The same operations per accumulator.
                const __m256i low = _mm256_set1_epi32(15);
                for (int g = 0; g < 4; g++) {
                    __m256 lo[4], hi[4];
                    for (int c4 = 0; c4 < 4; c4++) {
                        const __m256i v = u8x8(p + 16 + 32 * g + 8 * c4);
                        lo[c4] = f32(_mm256_and_si256(v, low));
                        hi[c4] = f32(_mm256_srli_epi32(v, 4));
                    }
                    const __m256 d0 = _mm256_set1_ps(scales[2 * g]), d1 = _mm256_set1_ps(scales[2 * g + 1]);
                    for (int r = 0; r < MR; r++) {
                        const float *xr = x + r * k + b * 256 + 64 * g;
                        acc[r][j] = _mm256_fmadd_ps(d0, dot32(lo, xr), acc[r][j]);
                        acc[r][j] = _mm256_fmadd_ps(d1, dot32(hi, xr + 32), acc[r][j]);
                    }
                }
                continue;
            }
            for (int s = 0; s < 8; s++) {
                __m256 q[4];
                k45_sub(type, p, s, q);
                const __m256 ds = _mm256_set1_ps(scales[s]);
                for (int r = 0; r < MR; r++)
                    acc[r][j] = _mm256_fmadd_ps(ds, dot32(q, x + r * k + b * 256 + 32 * s), acc[r][j]);
            }
        }
    }
    if (!c.last) {
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) { c.st->acc[r][c.j0 + j] = acc[r][j]; c.st->macc[r][c.j0 + j] = macc[r][j]; }
        return;
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) y[r * ldy + j] = hsum256(acc[r][j]) - hsum256(macc[r][j]);
}

// Q6_K quarter e (0..3) of half hf as 32 unsigned bytes q (q6k_quarter: signed, q - 32; values 128hf + 32e ...), built
// with byte-wide operations: ql supplies the low nibble (low nibbles for e < 2, high for e >= 2,
// of bytes 0..31 for even e, 32..63 for odd), qh bits 2e, 2e+1 the top two bits. Widening
// after the bit work instead of before took 2048x8192 from 1.95 to 1.45 ms.
INLINE __m256i q6k_unsigned(const uint8_t *p, int hf, int e) {
    const __m256i nibble = _mm256_set1_epi8(15), top2 = _mm256_set1_epi8(0x30);
    __m256i ql = _mm256_loadu_si256((const __m256i *)(p + 64 * hf + (e & 1 ? 32 : 0)));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * hf));
    ql = _mm256_and_si256(e < 2 ? ql : _mm256_srli_epi16(ql, 4), nibble);
    switch (e) {  // bits 2e, 2e+1 to bits 4, 5 (16-bit shifts; the mask drops what crosses bytes)
    case 0: qh = _mm256_slli_epi16(qh, 4); break;
    case 1: qh = _mm256_slli_epi16(qh, 2); break;
    case 2: break;
    default: qh = _mm256_srli_epi16(qh, 2); break;
    }
    return _mm256_or_si256(ql, _mm256_and_si256(qh, top2));
}
INLINE __m256i q6k_quarter(const uint8_t *p, int hf, int e) { return _mm256_sub_epi8(q6k_unsigned(p, hf, e), _mm256_set1_epi8(32)); }

// Q3_K quarter e (0..3) of half hf as 32 signed bytes q (-4..3; values 128hf + 32e ...): bits 2e,
// 2e+1 of qs bytes 32hf..., and bit 4hf + e of the hmask bytes as bit 2, less 4.
INLINE __m256i q3k_quarter(const uint8_t *p, int hf, int e) {
    __m256i qs = _mm256_loadu_si256((const __m256i *)(p + 32 + 32 * hf));
    __m256i hm = _mm256_loadu_si256((const __m256i *)p);
    __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * e), _mm256_set1_epi8(3));  // 16-bit shifts; the masks keep each byte's own bits
    __m256i bit = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * hf + e), _mm256_set1_epi8(1));
    return _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(bit, 2)), _mm256_set1_epi8(4));
}

// d·sc for the 16 sub-blocks of a Q6_K or Q3_K super-block, rounded as the reference rounds it.
INLINE void k16_scales(const uint32_t type, const uint8_t *p, float scales[16]) {
    int8_t sc3[16];
    const uint8_t *sc = p + 192;
    __m256 d;
    if (type == BK_Q3_K) {
        bk_q3k_scales(p + 96, sc3);
        sc = (const uint8_t *)sc3;
        d = half8(p + 108);
    } else {
        d = half8(p + 208);
    }
    _mm256_storeu_ps(scales, _mm256_mul_ps(d, f32(i8x8(sc))));
    _mm256_storeu_ps(scales + 8, _mm256_mul_ps(d, f32(i8x8(sc + 8))));
}

// 8-byte piece c (0..3) of 32 signed bytes, widened to 8 floats.
INLINE __m256 piece_i8(__m256i v, int c) {
    __m128i h = c < 2 ? _mm256_castsi256_si128(v) : _mm256_extracti128_si256(v, 1);
    if (c & 1) h = _mm_unpackhi_epi64(h, h);
    return f32(_mm256_cvtepi8_epi32(h));
}

// Q6_K and Q3_K: 16-value sub-blocks with a signed scale each, acc = fma(d·sc_s, q_s·x_s, acc).
// Q6_K (x in q6_order's order, xs its sums per 16, row-major, `sums` apart): each quarter's
// unsigned q as the floats 64 + q (q6_floats of the bytes 0x80 | 2q), whose four vectors hold
// sub-block 2i in their low four lanes and 2i + 1 in their high four, so one scale vector serves
// both; w = d·sc(q - 32) = d·sc(64 + q) - 96·d·sc, the second term through the sums per 16.
INLINE void tileK16(const uint32_t type, const float *x, size_t k, const float *xs, size_t sums, const uint8_t *w,
                    size_t rowBytes, float *y, size_t ldy, const int MR, const int NR, chunk c) {
    const size_t bytes = bk_bytes256(type);
    __m256 acc[MAXROWS][4], macc[MAXROWS][4];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) {
            acc[r][j] = c.first ? _mm256_setzero_ps() : c.st->acc[r][c.j0 + j];
            macc[r][j] = c.first || type != BK_Q6_K ? _mm256_setzero_ps() : c.st->macc[r][c.j0 + j];
        }
    for (size_t b = c.c0 / 256; b < c.c1 / 256; b++) {
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * bytes;
            prefetch_ahead(p, rowBytes, bytes);
            if (type == BK_Q6_K) {
                const __m256 d = half8(p + 208), offset = _mm256_set1_ps(96);
                const __m256 s0 = _mm256_mul_ps(d, f32(i8x8(p + 192))), s1 = _mm256_mul_ps(d, f32(i8x8(p + 200)));  // d·sc_0..15
                const __m256 m0 = _mm256_mul_ps(offset, s0), m1 = _mm256_mul_ps(offset, s1);
                for (int r = 0; r < MR; r++) {
                    macc[r][j] = _mm256_fmadd_ps(m0, _mm256_loadu_ps(xs + r * sums + b * 16), macc[r][j]);
                    macc[r][j] = _mm256_fmadd_ps(m1, _mm256_loadu_ps(xs + r * sums + b * 16 + 8), macc[r][j]);
                }
                const __m256i flag = _mm256_set1_epi8((char)0x80);
                for (int hf = 0; hf < 2; hf++) {
                    for (int e = 0; e < 4; e++) {
                        __m256 q[4];
                        q6_floats(_mm256_or_si256(_mm256_slli_epi16(q6k_unsigned(p, hf, e), 1), flag), q);  // bytes <= 63: no carry
                        const int sb = 2 * e;  // sub-blocks 8hf + sb, + 1: lanes sb, sb + 1 of s0 (hf 0) or s1
                        const __m256 ds = _mm256_permutevar8x32_ps(hf ? s1 : s0, _mm256_setr_epi32(sb, sb, sb, sb, sb + 1, sb + 1, sb + 1, sb + 1));
                        for (int r = 0; r < MR; r++)
                            acc[r][j] = _mm256_fmadd_ps(ds, dot32(q, x + r * k + b * 256 + 128 * hf + 32 * e), acc[r][j]);
                    }
                }
                continue;
            }
            float scales[16];  // d · sc_0..15
            k16_scales(type, p, scales);
            for (int hf = 0; hf < 2; hf++) {
                for (int e = 0; e < 4; e++) {
                    const __m256i v = type == BK_Q3_K ? q3k_quarter(p, hf, e) : q6k_quarter(p, hf, e);
                    for (int cc = 0; cc < 2; cc++) {  // the 16-value sub-block 8hf + 2e + cc
                        const __m256 q0 = piece_i8(v, 2 * cc), q1 = piece_i8(v, 2 * cc + 1);
                        const __m256 ds = _mm256_set1_ps(scales[8 * hf + 2 * e + cc]);
                        for (int r = 0; r < MR; r++) {
                            const float *xr = x + r * k + b * 256 + 128 * hf + 32 * e + 16 * cc;
                            __m256 s = _mm256_mul_ps(q0, _mm256_loadu_ps(xr));
                            s = _mm256_fmadd_ps(q1, _mm256_loadu_ps(xr + 8), s);
                            acc[r][j] = _mm256_fmadd_ps(ds, s, acc[r][j]);
                        }
                    }
                }
            }
        }
    }
    if (!c.last) {
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) { c.st->acc[r][c.j0 + j] = acc[r][j]; c.st->macc[r][c.j0 + j] = macc[r][j]; }
        return;
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) y[r * ldy + j] = type == BK_Q6_K ? hsum256(acc[r][j]) - hsum256(macc[r][j]) : hsum256(acc[r][j]);
}

// Q2_K's 256 weights as the reference computes them (dl·q - ml with dl = d·sc, ml = dmin·m; mul
// then sub, no fma): bits 2j, 2j+1 of the half's 32 qs bytes for values 128h + 32j ...
INLINE void q2k_weights(const uint8_t *p, float *w) {
    const __m256i low = _mm256_set1_epi32(15);
    const __m256 d = half8(p + 80), dmin = half8(p + 82);
    float dl[16], ml[16];
    for (int g = 0; g < 2; g++) {
        const __m256i s = u8x8(p + 8 * g);
        _mm256_storeu_ps(dl + 8 * g, _mm256_mul_ps(d, f32(_mm256_and_si256(s, low))));
        _mm256_storeu_ps(ml + 8 * g, _mm256_mul_ps(dmin, f32(_mm256_srli_epi32(s, 4))));
    }
    for (int h = 0; h < 2; h++) {
        const __m256i qs = _mm256_loadu_si256((const __m256i *)(p + 16 + 32 * h));
        for (int j = 0; j < 4; j++) {
            const __m256i v = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), _mm256_set1_epi8(3));
            for (int c = 0; c < 4; c++) {
                const int s = 8 * h + 2 * j + c / 2;
                _mm256_storeu_ps(w + 128 * h + 32 * j + 8 * c,
                                 _mm256_sub_ps(_mm256_mul_ps(_mm256_set1_ps(dl[s]), piece_i8(v, c)), _mm256_set1_ps(ml[s])));
            }
        }
    }
}

// Q2_K: each weight row's block dequantized once (the reference's values) for the tile's rows,
// then acc = fma(w, x, acc) per 8 values.
INLINE void tileQ2K(const float *x, size_t k, const uint8_t *w, size_t rowBytes, float *y, size_t ldy,
                    const int MR, const int NR, chunk c) {
    __m256 acc[MAXROWS][4];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = c.first ? _mm256_setzero_ps() : c.st->acc[r][c.j0 + j];
    float wq[256] __attribute__((aligned(32)));
    for (size_t b = c.c0 / 256; b < c.c1 / 256; b++) {
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * BK_Q2_K_BYTES;
            prefetch_ahead(p, rowBytes, BK_Q2_K_BYTES);
            q2k_weights(p, wq);
            for (int r = 0; r < MR; r++) {
                const float *xr = x + r * k + b * 256;
                __m256 a = acc[r][j];
                for (int i = 0; i < 256; i += 8) a = _mm256_fmadd_ps(_mm256_load_ps(wq + i), _mm256_loadu_ps(xr + i), a);
                acc[r][j] = a;
            }
        }
    }
    if (!c.last) {
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) c.st->acc[r][c.j0 + j] = acc[r][j];
        return;
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) y[r * ldy + j] = hsum256(acc[r][j]);
}

INLINE __m256 wide8(const uint32_t type, const uint8_t *row, size_t i) {
    if (type == BK_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * i)));
    if (type == BK_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * i))), 16));
    return _mm256_loadu_ps((const float *)(row + 4 * i));
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
    __m256 acc[MAXROWS][4];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = c.first ? _mm256_setzero_ps() : c.st->acc[r][c.j0 + j];
    const size_t vec = k / 8 * 8, end = c.last ? vec : c.c1;  // chunks other than the last are whole vectors
    for (size_t i = c.c0; i < end; i += 8) {
        for (int j = 0; j < NR; j++) {
            const size_t size = type == BK_F32 ? 4 : 2;
            prefetch_ahead(w + j * rowBytes + i * size, rowBytes, 8 * size);
            const __m256 wv = wide8(type, w + j * rowBytes, i);
            for (int r = 0; r < MR; r++) acc[r][j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * k + i), acc[r][j]);
        }
    }
    if (!c.last) {
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) c.st->acc[r][c.j0 + j] = acc[r][j];
        return;
    }
    for (int r = 0; r < MR; r++) {
        for (int j = 0; j < NR; j++) {
            float s = hsum256(acc[r][j]);
            for (size_t i = vec; i < k; i++) s = fmaf(scalar_weight(type, w + j * rowBytes, i), x[r * k + i], s);
            y[r * ldy + j] = s;
        }
    }
}

// `stride`: floats between two blocks' activation sums of a row (Q4_1, Q5_1: m, block-major) or
// between two rows' (Q4_K, Q5_K: k/32, row-major; Q6_K's sums per 16: k/16).
INLINE void tile(const uint32_t type, const float *x, size_t k, const float *xs, size_t stride, const uint8_t *w,
                 size_t rowBytes, float *y, size_t ldy, const int MR, const int NR, chunk c) {
    switch (type) {
    case BK_Q8_0: case BK_Q4_0: case BK_Q4_1: case BK_Q5_0: case BK_Q5_1: case BK_IQ4_NL: tile32(type, x, k, xs, stride, w, rowBytes, y, ldy, MR, NR, c); break;
    case BK_Q4_K: case BK_Q5_K: tileK45(type, x, k, xs, stride, w, rowBytes, y, ldy, MR, NR, c); break;
    case BK_Q3_K: case BK_Q6_K: tileK16(type, x, k, xs, stride, w, rowBytes, y, ldy, MR, NR, c); break;
    case BK_Q2_K: tileQ2K(x, k, w, rowBytes, y, ldy, MR, NR, c); break;
    default: tileF(type, x, k, w, rowBytes, y, ldy, MR, NR, c); break;
    }
}

// Output rows in groups of four; activation rows in tiles of up to MAXROWS (MAXROWS_K), as few
// and as equal as hold them (see avx512.c); k in chunks whose rows
// fit in XBUDGET bytes when more than one row outgrows it (see avx512.c). 32 KB here: on this
// level's tiles (bench kernels --levels 1, the Intel Xeon) 16 KB made k = 2048 at 4-8 rows up to
// 5% slower, while 32 KB left it as it was and took Q4_K 8192x2048 at 8 rows from 5.1 to 4.0
// one-row products.
//
// A lone activation row meets Q6_K, and Q4_K of k <= 4096, one weight row at a time (one stream
// of weights per core, as in avx512.c). Here the tiles are bound by arithmetic more than by
// memory, and four weight rows share each load of x: with k = 8192 (32 KB of x, a Zen 3's whole
// L1) one row at a time lost. `bench kernels --levels 1 --modes float` on Zen 5, one row at a
// time against four: Q4_K 2048x8192 hot 636 us against 714-725, cold 2T 326-328 / 376-378;
// 8192x2048 694-707 / 638-643 (kept at four); Q6_K 2048x8192 826-847 / 884-887, 8192x2048 810 /
// 892-901. Float32 decoding at ADAPTER_CPU_LEVEL=avx2, interleaved rounds: Qwen3-0.6B 67.9-69.0
// -> 70.3-71.0 tokens/s, Phi-4-mini 11.8-11.9 -> 12.1-12.2, Qwen3-1.7B Q4_K_M 22.8-23.7 ->
// 23.7-24.5.
enum { XBUDGET = 32768 };

INLINE void product(const uint32_t type, const float *x, size_t m, size_t k, const float *xs, const uint8_t *w,
                    size_t rowBytes, size_t n0, size_t n1, float *y, size_t ldy) {
    const size_t sums = k / 32;
    const size_t unit = type == BK_Q2_K || type == BK_Q3_K || type == BK_Q4_K || type == BK_Q5_K || type == BK_Q6_K ? 256
                        : bk_is32(type) ? 32 : 8;
    const size_t most = unit == 256 ? MAXROWS_K : MAXROWS;  // rows per tile
    const size_t tiles = (m + most - 1) / most;
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
                    const size_t stride = bk_has_min32(type) ? m : type == BK_Q6_K ? k / 16 : sums;
                    const float *xr = x + r * k, *xsr = bk_has_min32(type) ? xs + r : xs + r * stride;
                    float *yr = y + r * ldy + o;
                    size_t left = m - r;
#define TILE(mr, nr) (c.j0 = (int)j, tile(type, xr, k, xsr, stride, wo + j * rowBytes, rowBytes, yr + j, ldy, mr, nr, c))
                    const size_t MR = (left + (left + most - 1) / most - 1) / ((left + most - 1) / most);  // rows of this tile
                    size_t j = 0;
                    switch (MR) {
#define ROWS(mr)                                                        \
    case mr:                                                            \
        for (; j < group; j++) TILE(mr, 1);                             \
        break;
                    ROWS(6) ROWS(5) ROWS(4) ROWS(3)
#undef ROWS
                    case 2:
                        for (; j + 2 <= group; j += 2) TILE(2, 2);
                        for (; j < group; j++) TILE(2, 1);
                        break;
                    default:
                        if (group == 4 && type != BK_Q6_K && !(type == BK_Q4_K && k <= 4096)) TILE(1, 4);
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
            __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)),
                                     _mm256_add_ps(_mm256_loadu_ps(p + 16), _mm256_loadu_ps(p + 24)));
            xs[blockMajor ? j * m + r : r * (k / 32) + j] = hsum256(s);
        }
    }
}

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

void bk_avx2_matmul(uint32_t type, const float *x, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                    size_t n0, size_t n1, float *y, size_t ldy, float *xsum, float *xorder) {
    if (bk_has_min32(type) || type == BK_Q4_K || type == BK_Q5_K) activation_sums(x, m, k, xsum, bk_has_min32(type));
    if (type == BK_Q6_K) {
        q6_order(x, m, k, xorder);
        x = xorder;
        xsum = xorder + m * k;
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

static void dequantize_row(uint32_t type, const uint8_t *row, size_t k, float *y) {
    switch (type) {
    case BK_F32: memcpy(y, row, k * 4); break;
    case BK_F16:
    case BK_BF16: {
        size_t i = 0;
        for (; i + 8 <= k; i += 8) _mm256_storeu_ps(y + i, wide8(type, row, i));
        for (; i < k; i++) y[i] = scalar_weight(type, row, i);
        break;
    }
    case BK_Q8_0:
    case BK_Q4_0:
    case BK_Q4_1:
    case BK_Q5_0:
    case BK_Q5_1:
    case BK_IQ4_NL: {
        const size_t bytes = bk_bytes32(type);
        for (size_t b = 0; b < k / 32; b++, y += 32) {
            const uint8_t *p = row + b * bytes;
            __m256 q[4];
            decode32(type, p, q);
            const __m256 d = half8(p), mn = bk_has_min32(type) ? half8(p + 2) : _mm256_setzero_ps();
            for (int c = 0; c < 4; c++) {
                __m256 v = _mm256_mul_ps(d, q[c]);
                if (bk_has_min32(type)) v = _mm256_add_ps(v, mn);
                _mm256_storeu_ps(y + 8 * c, v);
            }
        }
        break;
    }
    case BK_Q4_K:
    case BK_Q5_K: {
        const size_t bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : BK_Q5_K_BYTES;
        for (size_t b = 0; b < k / 256; b++, y += 256) {
            const uint8_t *p = row + b * bytes;
            float d = half(p), dmin = half(p + 2);
            uint8_t sc[8], mn[8];
            bk_k4_scales(p + 4, sc, mn);
            for (int s = 0; s < 8; s++) {
                __m256 q[4];
                k45_sub(type, p, s, q);
                const __m256 ds = _mm256_set1_ps(d * (float)sc[s]), ms = _mm256_set1_ps(dmin * (float)mn[s]);
                for (int c = 0; c < 4; c++) _mm256_storeu_ps(y + 32 * s + 8 * c, _mm256_sub_ps(_mm256_mul_ps(ds, q[c]), ms));
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
            for (int hf = 0; hf < 2; hf++)
                for (int e = 0; e < 4; e++) {
                    const __m256i v = type == BK_Q3_K ? q3k_quarter(p, hf, e) : q6k_quarter(p, hf, e);
                    for (int c = 0; c < 4; c++) {
                        const __m256 ds = _mm256_set1_ps(scales[8 * hf + 2 * e + c / 2]);
                        _mm256_storeu_ps(y + 128 * hf + 32 * e + 8 * c, _mm256_mul_ps(ds, piece_i8(v, c)));
                    }
                }
        }
        break;
    }
}

void bk_avx2_dequantize(uint32_t type, const uint8_t *w, size_t rowBytes, size_t r0, size_t r1, size_t k,
                        float *out) {
    for (size_t r = r0; r < r1; r++) dequantize_row(type, w + r * rowBytes, k, out + (r - r0) * k);
}

#pragma clang attribute pop
#endif
