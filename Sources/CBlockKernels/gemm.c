// Float32 products of many activation rows with float32 weight rows (bk_gemm, CBlockKernels.h):
// what a prompt's products use on AVX-512 CPUs once its weight rows are unpacked from their
// blocks. The activations are packed once per product (bk_gemm_pack: blocks of KC values of up
// to 64 rows, value-major, so one load gives 16 rows' value i); a tile keeps 4 x 16 rows by 6
// weight rows of accumulators in registers and, per value i, multiplies the rows' values by each
// weight row's value i broadcast. Weight rows are read where they lie (no copy); the outputs of a
// KC block go to a scratch buffer, output-major, and are transposed into C at the end. Every
// output is fmaf(x[r, i], w[j, i], acc) for i = 0, 1, ..., k - 1 from acc = 0, whatever m, n
// and the tiles: its bits are those of that one chain, which the portable code computes one
// output at a time (the reference the AVX-512 code is held to, bit for bit).
//
// Against OpenBLAS's sgemm on the same float32 rows (Zen 5, one thread, 256 x 1024 x 1024 in
// pieces of 256 weight rows, packing included): 220-225 GFLOP/s for sgemm (its SkylakeX-class
// kernels), 236-238 for this; in Qwen3-0.6B's float32 prefill (pieces on 2 cores) 16-18% more
// tokens/s, since OpenBLAS packs the activations again for every piece and each piece's weights
// too. An AVX2 version of the same tile (2 x 8 rows by 6 weight rows, BLIS's Haswell shape) ran
// 117-121 GFLOP/s against OpenBLAS's Haswell kernels' 121-127 on the same CPU at that level and
// made that prefill 4% slower, so AVX2 CPUs keep OpenBLAS (FrozenMatrix.multiplyInPieces) and
// bk_gemm below AVX-512 runs the portable code.
#include "CBlockKernels.h"
#include "internal.h"

#include <math.h>
#include <string.h>

#pragma STDC FP_CONTRACT OFF

enum { RB = 64, KC = 256, NW = 6 };

static size_t round16(size_t m) { return (m + 15) / 16 * 16; }

size_t bk_gemm_packed_floats(size_t m, size_t k) { return round16(m) * k; }

size_t bk_gemm_scratch_floats(size_t m, size_t n) { return round16(m) * (n + NW); }

// Where rows r0 ... of the block of values k0 ... start in the packed activations, and its row width.
static size_t block_offset(size_t mp, size_t k0, size_t kc, size_t r0) { return k0 * mp + r0 * kc; }
static size_t block_width(size_t mp, size_t r0) { return mp - r0 < RB ? mp - r0 : RB; }

// The portable packing and product: the same layout and the same chains, one output at a time.
// A block: activation rows r0 ..< r0 + wb (zero from m on) of values k0 ..< k0 + kc, value-major.
static void pack_block_portable(const float *x, size_t ldx, size_t m, size_t r0, size_t wb, size_t k0, size_t kc,
                                float *dst) {
    for (size_t r = 0; r < wb; r++)
        for (size_t c = 0; c < kc; c++) dst[c * wb + r] = r0 + r < m ? x[(r0 + r) * ldx + k0 + c] : 0;
}

static void gemm_portable(const float *packed, size_t m, size_t k, const float *w, size_t ldw, size_t wstep, size_t n,
                          float *c, size_t ldc) {
    const size_t mp = round16(m);
    for (size_t r = 0; r < m; r++) {
        const size_t r0 = r / RB * RB, wb = block_width(mp, r0);
        for (size_t j = 0; j < n; j++) {
            float acc = 0;
            for (size_t k0 = 0; k0 < k; k0 += KC) {
                const size_t kc = k - k0 < KC ? k - k0 : KC;
                const float *xb = packed + block_offset(mp, k0, kc, r0) + (r - r0);
                for (size_t i = 0; i < kc; i++) acc = fmaf(xb[i * wb], w[j * ldw + (k0 + i) * wstep], acc);
            }
            c[r * ldc + j] = acc;
        }
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

// 16 x 16 floats: v[j] (16 values each) becomes v[p] = (v[0][p], ..., v[15][p]).
AVX512 INLINE void transpose16(__m512 v[16]) {
    __m512 t[16];
    for (int j = 0; j < 16; j += 2) {
        t[j] = _mm512_unpacklo_ps(v[j], v[j + 1]);
        t[j + 1] = _mm512_unpackhi_ps(v[j], v[j + 1]);
    }
    for (int j = 0; j < 16; j += 4) {
        const __m512d a = _mm512_castps_pd(t[j]), b = _mm512_castps_pd(t[j + 1]);
        const __m512d c = _mm512_castps_pd(t[j + 2]), d = _mm512_castps_pd(t[j + 3]);
        v[j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        v[j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        v[j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        v[j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int j = 0; j < 16; j += 8)
        for (int q = 0; q < 4; q++) {
            t[j + q] = _mm512_shuffle_f32x4(v[j + q], v[j + 4 + q], 0x88);
            t[j + 4 + q] = _mm512_shuffle_f32x4(v[j + q], v[j + 4 + q], 0xDD);
        }
    for (int q = 0; q < 8; q++) {
        v[q] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0x88);
        v[q + 8] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0xDD);
    }
}

// rows x cols floats at src (row stride ls; up to 16 x 16) to cols x rows at dst (stride ld).
AVX512 INLINE void transpose_block16(const float *src, size_t ls, size_t rows, size_t cols, float *dst, size_t ld) {
    const __mmask16 in = (__mmask16)((1u << cols) - 1), out = (__mmask16)((1u << rows) - 1);
    __m512 v[16];
    for (size_t j = 0; j < 16; j++) v[j] = j < rows ? _mm512_maskz_loadu_ps(in, src + j * ls) : _mm512_setzero_ps();
    transpose16(v);
    for (size_t p = 0; p < cols; p++) _mm512_mask_storeu_ps(dst + p * ld, out, v[p]);
}

AVX512 static void pack_block_avx512(const float *x, size_t ldx, size_t m, size_t r0, size_t wb, size_t k0, size_t kc,
                                     float *dst) {
    for (size_t g = 0; g < wb; g += 16) {
        const size_t rows = r0 + g >= m ? 0 : m - r0 - g < 16 ? m - r0 - g : 16;
        for (size_t c = 0; c < kc; c += 16) {
            const size_t cols = kc - c < 16 ? kc - c : 16;
            if (rows == 0) {
                for (size_t p = 0; p < cols; p++) _mm512_storeu_ps(dst + (c + p) * wb + g, _mm512_setzero_ps());
            } else {
                // 16 activation rows' values c ... as 16 value-major vectors (padding rows zero)
                transpose_block16(x + (r0 + g) * ldx + k0 + c, ldx, rows, cols, dst + c * wb + g, wb);
                if (rows < 16)
                    for (size_t p = 0; p < cols; p++)
                        _mm512_mask_storeu_ps(dst + (c + p) * wb + g, (__mmask16)~((1u << rows) - 1), _mm512_setzero_ps());
            }
        }
    }
}

// One tile: MV x 16 rows (block rows g0 ...) by nw <= NW weight rows, values k0 ... k0 + kc.
AVX512 INLINE void tile512(const float *xb, size_t wb, size_t kc, const float *w, size_t ldw, size_t ws, size_t nw,
                           float *ct, size_t ldct, int first, const int MV) {
    __m512 acc[4][NW];
    for (int j = 0; j < NW; j++)
        for (int i = 0; i < MV; i++)
            acc[i][j] = first || (size_t)j >= nw ? _mm512_setzero_ps() : _mm512_loadu_ps(ct + j * ldct + 16 * i);
    const float *wr[NW];
    for (int j = 0; j < NW; j++) wr[j] = w + ((size_t)j < nw ? (size_t)j : 0) * ldw;  // past nw: row 0 again, not stored
    for (size_t i = 0; i < kc; i++) {
        __m512 xv[4];
        for (int v = 0; v < MV; v++) xv[v] = _mm512_loadu_ps(xb + i * wb + 16 * v);
        for (int j = 0; j < NW; j++) {
            const __m512 b = _mm512_set1_ps(wr[j][i * ws]);
            for (int v = 0; v < MV; v++) acc[v][j] = _mm512_fmadd_ps(xv[v], b, acc[v][j]);
        }
    }
    for (size_t j = 0; j < nw; j++)
        for (int v = 0; v < MV; v++) _mm512_storeu_ps(ct + j * ldct + 16 * v, acc[v][j]);
}

AVX512 static void gemm_avx512(const float *packed, size_t m, size_t k, const float *w, size_t ldw, size_t wstep,
                               size_t n, float *c, size_t ldc, float *ct) {
    const size_t mp = round16(m);
    for (size_t k0 = 0; k0 < k; k0 += KC) {
        const size_t kc = k - k0 < KC ? k - k0 : KC;
        for (size_t r0 = 0; r0 < mp; r0 += RB) {
            const size_t wb = block_width(mp, r0);
            const float *xb = packed + block_offset(mp, k0, kc, r0);
            for (size_t j0 = 0; j0 < n; j0 += NW) {
                const size_t nw = n - j0 < NW ? n - j0 : NW;
                float *t = ct + j0 * mp + r0;
                const float *wj = w + j0 * ldw + k0 * wstep;
                const int first = k0 == 0;
                if (wstep == 1) {  // weight rows (w[j, i] at j·ldw + i): the stride a constant
                    switch (wb / 16) {
                    case 4: tile512(xb, wb, kc, wj, ldw, 1, nw, t, mp, first, 4); break;
                    case 3: tile512(xb, wb, kc, wj, ldw, 1, nw, t, mp, first, 3); break;
                    case 2: tile512(xb, wb, kc, wj, ldw, 1, nw, t, mp, first, 2); break;
                    default: tile512(xb, wb, kc, wj, ldw, 1, nw, t, mp, first, 1); break;
                    }
                } else {
                    switch (wb / 16) {
                    case 4: tile512(xb, wb, kc, wj, ldw, wstep, nw, t, mp, first, 4); break;
                    case 3: tile512(xb, wb, kc, wj, ldw, wstep, nw, t, mp, first, 3); break;
                    case 2: tile512(xb, wb, kc, wj, ldw, wstep, nw, t, mp, first, 2); break;
                    default: tile512(xb, wb, kc, wj, ldw, wstep, nw, t, mp, first, 1); break;
                    }
                }
            }
        }
    }
    for (size_t j = 0; j < n; j += 16)
        for (size_t r = 0; r < m; r += 16)
            transpose_block16(ct + j * mp + r, mp, n - j < 16 ? n - j : 16, m - r < 16 ? m - r : 16, c + r * ldc + j, ldc);
}

#endif

int bk_gemm_pack_at(int level, const float *x, size_t ldx, size_t m, size_t k, size_t part, size_t parts,
                    float *packed) {
    if (!bk_level_supported(level)) return BK_ERROR_LEVEL;
    if (m == 0 || k == 0 || part >= parts) return BK_OK;
    const size_t mp = round16(m);
    for (size_t k0 = part * KC; k0 < k; k0 += parts * KC) {
        const size_t kc = k - k0 < KC ? k - k0 : KC;
        for (size_t r0 = 0; r0 < mp; r0 += RB) {
            float *dst = packed + block_offset(mp, k0, kc, r0);
            const size_t wb = block_width(mp, r0);
#if defined(__x86_64__)
            if (level >= BK_LEVEL_AVX512) {
                pack_block_avx512(x, ldx, m, r0, wb, k0, kc, dst);
                continue;
            }
#endif
            pack_block_portable(x, ldx, m, r0, wb, k0, kc, dst);
        }
    }
    return BK_OK;
}

size_t bk_gemm_pack_parts(size_t k) { return (k + KC - 1) / KC; }

int bk_gemm_at(int level, const float *packed, size_t m, size_t k, const float *w, size_t ldw, size_t wstep, size_t n,
               float *c, size_t ldc, float *scratch) {
    if (!bk_level_supported(level)) return BK_ERROR_LEVEL;
    if (m == 0 || n == 0) return BK_OK;
    if (k == 0) {
        for (size_t r = 0; r < m; r++) memset(c + r * ldc, 0, n * sizeof(float));
        return BK_OK;
    }
    switch (level) {
#if defined(__x86_64__)
    case BK_LEVEL_AVX512:
    case BK_LEVEL_AVX512_VNNI: gemm_avx512(packed, m, k, w, ldw, wstep, n, c, ldc, scratch); break;
#endif
    default: gemm_portable(packed, m, k, w, ldw, wstep, n, c, ldc); break;
    }
    return BK_OK;
}

int bk_gemm_pack(const float *x, size_t ldx, size_t m, size_t k, size_t part, size_t parts, float *packed) {
    return bk_gemm_pack_at(bk_active_level(), x, ldx, m, k, part, parts, packed);
}

int bk_gemm(const float *packed, size_t m, size_t k, const float *w, size_t ldw, size_t wstep, size_t n, float *c,
            size_t ldc, float *scratch) {
    return bk_gemm_at(bk_active_level(), packed, m, k, w, ldw, wstep, n, c, ldc, scratch);
}
