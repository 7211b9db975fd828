// The portable level: every type's product and dequantization in plain C with 8-wide compiler
// vector extensions (SSE2 pairs on baseline x86-64, NEON on arm64). The fallback where AVX2 is
// missing, and the plainest statement of what the SIMD levels compute. Block decoding follows
// ggml-quants.c `dequantize_row_*`; the dequantization matches ModelAssets' `Dequantize.run`.
#include "internal.h"

// Every multiply and add rounds on its own, as in the Swift reference: no silent fusing.
#pragma STDC FP_CONTRACT OFF

typedef float v8f __attribute__((vector_size(32)));
// The same vector at float alignment: dereferencing it is an unaligned load. Vectors are not
// passed to or returned from functions (without AVX that would change the calling convention).
typedef float v8f_unaligned __attribute__((vector_size(32), aligned(4)));
#define LD8(p) (*(const v8f_unaligned *)(p))

static inline float hsum8(const v8f *v) {
    float s0 = (*v)[0] + (*v)[4], s1 = (*v)[1] + (*v)[5], s2 = (*v)[2] + (*v)[6], s3 = (*v)[3] + (*v)[7];
    return (s0 + s2) + (s1 + s3);
}

enum { ROWS = 8 };  // activation rows per pass over a weight row

// One block decoded into exact small-integer floats q[] and per-sub-block factors: the block's
// dot with x is sum_s scale[s] * dot(q_s, x_s) + add[s] * sum(x_s).
typedef struct {
    float q[256];
    float scale[16];
    float add[16];  // zero for types without a min
    int subs, subLength, hasAdd;
} Decoded;

// Q2_K's 256 weights as the reference computes them: dl·q - ml, dl = d·sc, ml = dmin·m.
static void bk_portable_q2k_weights(const uint8_t *p, float *y) {
    float d = bk_half_to_float(bk_u16(p + 80)), dmin = bk_half_to_float(bk_u16(p + 82));
    for (int i = 0; i < 256; i++) {
        float dl = d * (float)(p[i / 16] & 15), ml = dmin * (float)(p[i / 16] >> 4);
        y[i] = dl * (float)bk_q2k_value(p, i) - ml;
    }
}

static void decode(uint32_t type, const uint8_t *p, Decoded *o) {
    switch (type) {
    case BK_Q8_0: {
        o->subs = 1; o->subLength = 32; o->hasAdd = 0;
        o->scale[0] = bk_half_to_float(bk_u16(p));
        for (int i = 0; i < 32; i++) o->q[i] = (float)(int8_t)p[2 + i];
        break;
    }
    case BK_Q4_0: {
        o->subs = 1; o->subLength = 32; o->hasAdd = 0;
        o->scale[0] = bk_half_to_float(bk_u16(p));
        for (int j = 0; j < 16; j++) {
            o->q[j] = (float)((p[2 + j] & 15) - 8);
            o->q[j + 16] = (float)((p[2 + j] >> 4) - 8);
        }
        break;
    }
    case BK_Q4_1: {
        o->subs = 1; o->subLength = 32; o->hasAdd = 1;
        o->scale[0] = bk_half_to_float(bk_u16(p));
        o->add[0] = bk_half_to_float(bk_u16(p + 2));
        for (int j = 0; j < 16; j++) {
            o->q[j] = (float)(p[4 + j] & 15);
            o->q[j + 16] = (float)(p[4 + j] >> 4);
        }
        break;
    }
    case BK_IQ4_NL: {
        o->subs = 1; o->subLength = 32; o->hasAdd = 0;
        o->scale[0] = bk_half_to_float(bk_u16(p));
        for (int j = 0; j < 16; j++) {
            o->q[j] = (float)bk_iq4nl_values[p[2 + j] & 15];
            o->q[j + 16] = (float)bk_iq4nl_values[p[2 + j] >> 4];
        }
        break;
    }
    case BK_Q5_0:
    case BK_Q5_1: {
        const int offset = type == BK_Q5_0 ? 16 : 0;
        o->subs = 1; o->subLength = 32; o->hasAdd = type == BK_Q5_1;
        o->scale[0] = bk_half_to_float(bk_u16(p));
        if (type == BK_Q5_1) o->add[0] = bk_half_to_float(bk_u16(p + 2));
        uint32_t qh = bk_u32(p + bk_q5_qh(type));
        for (int i = 0; i < 32; i++) o->q[i] = (float)(bk_q5_value(p + bk_q5_qs(type), qh, i) - offset);
        break;
    }
    case BK_Q4_K:
    case BK_Q5_K: {
        o->subs = 8; o->subLength = 32; o->hasAdd = 1;
        float d = bk_half_to_float(bk_u16(p)), dmin = bk_half_to_float(bk_u16(p + 2));
        uint8_t sc[8], mn[8];
        bk_k4_scales(p + 4, sc, mn);
        for (int s = 0; s < 8; s++) {
            o->scale[s] = d * (float)sc[s];
            o->add[s] = -(dmin * (float)mn[s]);
        }
        const uint8_t *qh = p + 16, *qs = type == BK_Q4_K ? p + 16 : p + 48;
        for (int g = 0; g < 4; g++) {
            for (int l = 0; l < 32; l++) {
                int lo = qs[32 * g + l] & 15, hi = qs[32 * g + l] >> 4;
                if (type == BK_Q5_K) {
                    lo |= ((qh[l] >> (2 * g)) & 1) << 4;
                    hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
                }
                o->q[64 * g + l] = (float)lo;
                o->q[64 * g + 32 + l] = (float)hi;
            }
        }
        break;
    }
    case BK_Q2_K: {  // the reference's weights themselves (d·sc·q - dmin·m), one sub-block of scale 1
        o->subs = 1; o->subLength = 256; o->hasAdd = 0;
        o->scale[0] = 1.0f;
        bk_portable_q2k_weights(p, o->q);
        break;
    }
    case BK_Q3_K: {
        o->subs = 16; o->subLength = 16; o->hasAdd = 0;
        float d = bk_half_to_float(bk_u16(p + 108));
        int8_t sc[16];
        bk_q3k_scales(p + 96, sc);
        for (int s = 0; s < 16; s++) o->scale[s] = d * (float)sc[s];
        for (int i = 0; i < 256; i++) o->q[i] = (float)bk_q3k_value(p, i);
        break;
    }
    case BK_Q6_K: {
        o->subs = 16; o->subLength = 16; o->hasAdd = 0;
        float d = bk_half_to_float(bk_u16(p + 208));
        for (int s = 0; s < 16; s++) o->scale[s] = d * (float)(int8_t)p[192 + s];
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = p + 64 * half, *qh = p + 128 + 32 * half;
            float *q = o->q + 128 * half;
            for (int l = 0; l < 32; l++) {
                q[l] = (float)(((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32);
                q[l + 32] = (float)(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
                q[l + 64] = (float)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                q[l + 96] = (float)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        break;
    }
    }
}

static void block_product(uint32_t type, const float *x, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                          size_t n0, size_t n1, float *y, size_t ldy, const float *xsum) {
    size_t values = bk_is32(type) ? 32 : 256;
    size_t bytes = bk_is32(type) ? bk_bytes32(type) : bk_bytes256(type);
    size_t blocks = k / values, sums = k / 32;
    Decoded dec;
    for (size_t o = n0; o < n1; o++) {
        const uint8_t *row = w + o * rowBytes;
        for (size_t r0 = 0; r0 < m; r0 += ROWS) {
            size_t rows = m - r0 < ROWS ? m - r0 : ROWS;
            v8f acc[ROWS];
            float add[ROWS];
            for (size_t r = 0; r < rows; r++) { acc[r] = (v8f){0}; add[r] = 0; }
            for (size_t b = 0; b < blocks; b++) {
                decode(type, row + b * bytes, &dec);
                for (int s = 0; s < dec.subs; s++) {
                    const float *q = dec.q + s * dec.subLength;
                    size_t first = b * values + (size_t)s * (size_t)dec.subLength;
                    for (size_t r = 0; r < rows; r++) {
                        const float *xr = x + (r0 + r) * k + first;
                        v8f p = LD8(q) * LD8(xr);
                        for (int c = 8; c < dec.subLength; c += 8) p = p + LD8(q + c) * LD8(xr + c);
                        acc[r] = acc[r] + dec.scale[s] * p;
                        if (dec.hasAdd) add[r] = add[r] + dec.add[s] * xsum[(r0 + r) * sums + first / 32];
                    }
                }
            }
            for (size_t r = 0; r < rows; r++) y[(r0 + r) * ldy + o] = hsum8(&acc[r]) + add[r];
        }
    }
}

static inline float float_value(uint32_t type, const uint8_t *row, size_t i) {
    if (type == BK_F16) return bk_half_to_float(bk_u16(row + 2 * i));
    if (type == BK_BF16) return bk_bf16_to_float(bk_u16(row + 2 * i));
    float v;
    memcpy(&v, row + 4 * i, 4);
    return v;
}

typedef uint32_t v8u __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16), aligned(2)));

// Values i ... i+7 of a float-type row as floats, converted lane-wise (exactly as
// bk_half_to_float / bk_bf16_to_float) so the compiler can keep them in vector registers.
#define WIDE8(out, type, row, i)                                                                        \
    do {                                                                                                \
        if ((type) == BK_F32) {                                                                         \
            (out) = LD8((const float *)(row) + (i));                                                    \
        } else {                                                                                        \
            v8u h = __builtin_convertvector(*(const v8h *)((row) + 2 * (i)), v8u);                      \
            v8u bits;                                                                                   \
            if ((type) == BK_BF16) {                                                                    \
                bits = h << 16;                                                                         \
            } else {                                                                                    \
                v8u sign = (h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;                \
                v8u normal = sign | ((exp + 112) << 23) | (mant << 13);                                 \
                v8u special = sign | 0x7f800000u | (mant << 13) | ((v8u)(mant != 0) & 0x00400000u);    \
                v8f tiny = __builtin_convertvector((v8i)mant, v8f) * 0x1p-24f;                          \
                v8u subnormal = sign | (v8u)tiny;                                                       \
                v8u isZeroExp = (v8u)(exp == 0), isMaxExp = (v8u)(exp == 0x1f);                         \
                bits = (subnormal & isZeroExp) | (special & isMaxExp) | (normal & ~(isZeroExp | isMaxExp)); \
            }                                                                                           \
            (out) = (v8f)bits;                                                                          \
        }                                                                                               \
    } while (0)

static void float_product(uint32_t type, const float *x, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                          size_t n0, size_t n1, float *y, size_t ldy) {
    size_t vec = k / 8 * 8;
    for (size_t o = n0; o < n1; o++) {
        const uint8_t *row = w + o * rowBytes;
        for (size_t r0 = 0; r0 < m; r0 += ROWS) {
            size_t rows = m - r0 < ROWS ? m - r0 : ROWS;
            v8f acc[ROWS];
            for (size_t r = 0; r < rows; r++) acc[r] = (v8f){0};
            for (size_t i = 0; i < vec; i += 8) {
                v8f wv;
                WIDE8(wv, type, row, i);
                for (size_t r = 0; r < rows; r++) acc[r] = acc[r] + wv * LD8(x + (r0 + r) * k + i);
            }
            for (size_t r = 0; r < rows; r++) {
                float s = hsum8(&acc[r]);
                for (size_t i = vec; i < k; i++) s = s + float_value(type, row, i) * x[(r0 + r) * k + i];
                y[(r0 + r) * ldy + o] = s;
            }
        }
    }
}

void bk_portable_matmul(uint32_t type, const float *x, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                        size_t n0, size_t n1, float *y, size_t ldy, float *xsum) {
    if (type == BK_F32 || type == BK_F16 || type == BK_BF16) {
        float_product(type, x, m, k, w, rowBytes, n0, n1, y, ldy);
        return;
    }
    if (bk_has_min32(type) || type == BK_Q4_K || type == BK_Q5_K) {
        size_t sums = k / 32;
        for (size_t r = 0; r < m; r++) {
            for (size_t j = 0; j < sums; j++) {
                const float *p = x + r * k + 32 * j;
                v8f s = LD8(p) + LD8(p + 8);
                s = s + LD8(p + 16);
                s = s + LD8(p + 24);
                xsum[r * sums + j] = hsum8(&s);
            }
        }
    }
    block_product(type, x, m, k, w, rowBytes, n0, n1, y, ldy, xsum);
}

// Dequantization, value for value as the Swift reference (same operations in the same order).
void bk_portable_dequantize(uint32_t type, const uint8_t *w, size_t rowBytes, size_t r0, size_t r1, size_t k,
                            float *out) {
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *row = w + r * rowBytes;
        float *y = out + (r - r0) * k;
        switch (type) {
        case BK_F32: memcpy(y, row, k * 4); break;
        case BK_F16:
        case BK_BF16: {
            size_t i = 0;
            for (; i + 8 <= k; i += 8) {
                v8f v;
                WIDE8(v, type, row, i);
                memcpy(y + i, &v, sizeof v);
            }
            for (; i < k; i++) y[i] = float_value(type, row, i);
            break;
        }
        case BK_Q8_0:
            for (size_t b = 0; b < k / 32; b++, y += 32) {
                const uint8_t *p = row + b * BK_Q8_0_BYTES;
                float d = bk_half_to_float(bk_u16(p));
                for (int i = 0; i < 32; i++) y[i] = d * (float)(int8_t)p[2 + i];
            }
            break;
        case BK_Q4_0:
            for (size_t b = 0; b < k / 32; b++, y += 32) {
                const uint8_t *p = row + b * BK_Q4_0_BYTES;
                float d = bk_half_to_float(bk_u16(p));
                for (int j = 0; j < 16; j++) {
                    y[j] = d * (float)((p[2 + j] & 15) - 8);
                    y[j + 16] = d * (float)((p[2 + j] >> 4) - 8);
                }
            }
            break;
        case BK_Q4_1:
            for (size_t b = 0; b < k / 32; b++, y += 32) {
                const uint8_t *p = row + b * BK_Q4_1_BYTES;
                float d = bk_half_to_float(bk_u16(p)), mn = bk_half_to_float(bk_u16(p + 2));
                for (int j = 0; j < 16; j++) {
                    y[j] = d * (float)(p[4 + j] & 15) + mn;
                    y[j + 16] = d * (float)(p[4 + j] >> 4) + mn;
                }
            }
            break;
        case BK_IQ4_NL:
            for (size_t b = 0; b < k / 32; b++, y += 32) {
                const uint8_t *p = row + b * BK_IQ4_NL_BYTES;
                float d = bk_half_to_float(bk_u16(p));
                for (int j = 0; j < 16; j++) {
                    y[j] = d * (float)bk_iq4nl_values[p[2 + j] & 15];
                    y[j + 16] = d * (float)bk_iq4nl_values[p[2 + j] >> 4];
                }
            }
            break;
        case BK_Q5_0:
            for (size_t b = 0; b < k / 32; b++, y += 32) {
                const uint8_t *p = row + b * BK_Q5_0_BYTES;
                float d = bk_half_to_float(bk_u16(p));
                uint32_t qh = bk_u32(p + 2);
                for (int i = 0; i < 32; i++) y[i] = d * (float)(bk_q5_value(p + 6, qh, i) - 16);
            }
            break;
        case BK_Q5_1:
            for (size_t b = 0; b < k / 32; b++, y += 32) {
                const uint8_t *p = row + b * BK_Q5_1_BYTES;
                float d = bk_half_to_float(bk_u16(p)), mn = bk_half_to_float(bk_u16(p + 2));
                uint32_t qh = bk_u32(p + 4);
                for (int i = 0; i < 32; i++) y[i] = d * (float)bk_q5_value(p + 8, qh, i) + mn;
            }
            break;
        case BK_Q4_K:
        case BK_Q5_K: {
            size_t bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : BK_Q5_K_BYTES;
            for (size_t b = 0; b < k / 256; b++, y += 256) {
                const uint8_t *p = row + b * bytes;
                float d = bk_half_to_float(bk_u16(p)), dmin = bk_half_to_float(bk_u16(p + 2));
                uint8_t sc[8], mn[8];
                bk_k4_scales(p + 4, sc, mn);
                const uint8_t *qh = p + 16, *qs = type == BK_Q4_K ? p + 16 : p + 48;
                for (int g = 0; g < 4; g++) {
                    float d1 = d * (float)sc[2 * g], m1 = dmin * (float)mn[2 * g];
                    float d2 = d * (float)sc[2 * g + 1], m2 = dmin * (float)mn[2 * g + 1];
                    for (int l = 0; l < 32; l++) {
                        int lo = qs[32 * g + l] & 15, hi = qs[32 * g + l] >> 4;
                        if (type == BK_Q5_K) {
                            lo |= ((qh[l] >> (2 * g)) & 1) << 4;
                            hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
                        }
                        y[64 * g + l] = d1 * (float)lo - m1;
                        y[64 * g + 32 + l] = d2 * (float)hi - m2;
                    }
                }
            }
            break;
        }
        case BK_Q2_K:
            for (size_t b = 0; b < k / 256; b++, y += 256) bk_portable_q2k_weights(row + b * BK_Q2_K_BYTES, y);
            break;
        case BK_Q3_K:
            for (size_t b = 0; b < k / 256; b++, y += 256) {
                const uint8_t *p = row + b * BK_Q3_K_BYTES;
                float d = bk_half_to_float(bk_u16(p + 108));
                int8_t sc[16];
                bk_q3k_scales(p + 96, sc);
                for (int i = 0; i < 256; i++) y[i] = d * (float)sc[i / 16] * (float)bk_q3k_value(p, i);
            }
            break;
        case BK_Q6_K:
            for (size_t b = 0; b < k / 256; b++, y += 256) {
                const uint8_t *p = row + b * BK_Q6_K_BYTES;
                float d = bk_half_to_float(bk_u16(p + 208));
                for (int half = 0; half < 2; half++) {
                    const uint8_t *ql = p + 64 * half, *qh = p + 128 + 32 * half;
                    const int8_t *sc = (const int8_t *)(p + 192 + 8 * half);
                    float *q = y + 128 * half;
                    for (int l = 0; l < 32; l++) {
                        int s = l / 16;
                        q[l] = d * (float)sc[s] * (float)(((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32);
                        q[l + 32] = d * (float)sc[s + 2] * (float)(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
                        q[l + 64] = d * (float)sc[s + 4] * (float)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                        q[l + 96] = d * (float)sc[s + 6] * (float)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
                    }
                }
            }
            break;
        }
    }
}
