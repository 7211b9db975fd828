// The q8-activation mode on x86-64: activation quantization (AVX2) and the integer block
// products compiled twice from q8_simd.h, with AVX2's maddubs/madd pair (levels avx2, avx512)
// and with AVX-512 VNNI's vpdpbusd (level avx512vnni). Both give q8_portable.c's bits.
// Follows llama.cpp's quantize_row_q8_1 and ggml_vec_dot_q*_q8_* structure.
#include "internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#pragma STDC FP_CONTRACT OFF

#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)

// 32 values per block: amax, scale = amax / 127, q = rint(x * (1 / scale)) as in the portable
// version (vector multiply and cvtps2dq round exactly as the scalar rintf in the default mode).
void bk_avx2_quantize_q8(const float *x, size_t m, size_t k, void *xq) {
    uint8_t *base = (uint8_t *)xq;
    size_t values = m * k, blocks = values / 32;
    int8_t *q = (int8_t *)base;
    float *d = (float *)(base + values), *s32 = (float *)(base + values + values / 8),
          *s16 = (float *)(base + values + values / 4);
    const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i limit = _mm256_set1_epi32(127), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (size_t b = 0; b < blocks; b++) {
        const float *p = x + 32 * b;
        __m256 v[4];
        for (int c = 0; c < 4; c++) v[c] = _mm256_loadu_ps(p + 8 * c);
        __m256 a = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absMask), _mm256_and_ps(v[1], absMask)),
                                 _mm256_max_ps(_mm256_and_ps(v[2], absMask), _mm256_and_ps(v[3], absMask)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h), scale = amax / 127.0f, inverse = scale != 0 ? 1.0f / scale : 0.0f;
        const __m256 iv = _mm256_set1_ps(inverse);
        __m256i qi[4];
        for (int c = 0; c < 4; c++) {
            __m256i t = _mm256_cvtps_epi32(_mm256_mul_ps(v[c], iv));
            qi[c] = _mm256_max_epi32(_mm256_min_epi32(t, limit), _mm256_sub_epi32(_mm256_setzero_si256(), limit));
        }
        __m256i lo = _mm256_add_epi32(qi[0], qi[1]), hi = _mm256_add_epi32(qi[2], qi[3]);
        __m128i l4 = _mm_add_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
        __m128i h4 = _mm_add_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
        __m128i both = _mm_hadd_epi32(_mm_hadd_epi32(l4, h4), _mm_setzero_si128());  // [sum lo, sum hi, 0, 0]
        const int sumLo = _mm_cvtsi128_si32(both), sumHi = _mm_extract_epi32(both, 1);
        // int32 -> int8 in value order: the packs interleave 128-bit lanes, the permute undoes it
        __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
        _mm256_storeu_si256((__m256i *)(q + 32 * b), _mm256_permutevar8x32_epi32(packed, order));
        d[b] = scale;
        s32[b] = scale * (float)(sumLo + sumHi);
        s16[2 * b] = scale * (float)sumLo;
        s16[2 * b + 1] = scale * (float)sumHi;
    }
}

#define Q8_FN(name) avx2_q8_##name
#define Q8_MAXROWS 4
#define Q8_DOT(u, x) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (x)), _mm256_set1_epi16(1))
#include "q8_simd.h"
#undef Q8_FN
#undef Q8_MAXROWS
#undef Q8_DOT

void bk_avx2_matmul_q8(uint32_t type, const void *xq, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                       size_t n0, size_t n1, float *y, size_t ldy) {
    avx2_q8_matmul(type, xq, m, k, w, rowBytes, n0, n1, y, ldy);
}

#pragma clang attribute pop

#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"))), \
                             apply_to = function)

#define Q8_FN(name) vnni_q8_##name
#define Q8_MAXROWS 8
#define Q8_DOT(u, x) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (x))
#include "q8_simd.h"
#undef Q8_FN
#undef Q8_MAXROWS
#undef Q8_DOT

void bk_vnni_matmul_q8(uint32_t type, const void *xq, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                       size_t n0, size_t n1, float *y, size_t ldy) {
    vnni_q8_matmul(type, xq, m, k, w, rowBytes, n0, n1, y, ldy);
}

#pragma clang attribute pop
#endif
