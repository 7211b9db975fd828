// The q8 activation mode in plain C: activation quantization and integer block dot products
// for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q3_K, Q4_K, Q5_K, Q6_K. It fixes the arithmetic the SIMD levels (q8_simd.h)
// reproduce bit for bit. The 32-value types: blocks in groups of four, each block's exact integer
// sums over its values 0..15 and 16..31 in float lanes i and 4 + i (see product32); the K-quants:
// 8 integer lanes of 4 products each per 32 values, then per lane t = lane * d_x and
// acc = fma(t, d_w, acc); both summed as hsum256 sums. Follows the structure of llama.cpp's
// ggml_vec_dot_q*_q8_* with per-32 activation scales (q8_1-like) for every type.
#include "internal.h"

#include <math.h>

#pragma STDC FP_CONTRACT OFF

// (v0+v4 + v2+v6) + (v1+v5 + v3+v7): the order of hsum256 in the SIMD files.
static float hsum8(const float v[8]) {
    float s0 = v[0] + v[4], s1 = v[1] + v[5], s2 = v[2] + v[6], s3 = v[3] + v[7];
    return (s0 + s2) + (s1 + s3);
}

void bk_portable_quantize_q8(const float *x, size_t m, size_t k, void *xq) {
    uint8_t *base = (uint8_t *)xq;
    size_t values = m * k, blocks = values / 32;
    int8_t *q = (int8_t *)base;
    float *d = (float *)(base + values), *s32 = (float *)(base + values + values / 8),
          *s16 = (float *)(base + values + values / 4);
    for (size_t b = 0; b < blocks; b++) {  // rows are contiguous, k a multiple of 32: blocks never straddle rows
        const float *p = x + 32 * b;
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(p[i]));
        float scale = amax / 127.0f, inverse = scale != 0 ? 1.0f / scale : 0.0f;
        int sums[2] = {0, 0};
        for (int i = 0; i < 32; i++) {
            int v = (int)rintf(p[i] * inverse);
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            q[32 * b + i] = (int8_t)v;
            sums[i / 16] += v;
        }
        d[b] = scale;
        s32[b] = scale * (float)(sums[0] + sums[1]);
        s16[2 * b] = scale * (float)sums[0];
        s16[2 * b + 1] = scale * (float)sums[1];
    }
}

// The unsigned (or, for Q8_0, signed) weight bytes of 32 values in value order, and for Q6_K the
// int scale of each half.
static void block_bytes(uint32_t type, const uint8_t *p, int sub, int16_t *out) {
    switch (type) {
    case BK_Q8_0:
        for (int i = 0; i < 32; i++) out[i] = (int8_t)p[2 + i];
        break;
    case BK_Q4_0:
    case BK_Q4_1: {
        const uint8_t *qs = p + (type == BK_Q4_0 ? 2 : 4);
        for (int j = 0; j < 16; j++) { out[j] = qs[j] & 15; out[j + 16] = qs[j] >> 4; }
        break;
    }
    case BK_IQ4_NL:  // signed levels, as Q8_0's bytes
        for (int j = 0; j < 16; j++) { out[j] = bk_iq4nl_values[p[2 + j] & 15]; out[j + 16] = bk_iq4nl_values[p[2 + j] >> 4]; }
        break;
    case BK_Q5_0:
    case BK_Q5_1: {
        uint32_t qh = bk_u32(p + bk_q5_qh(type));
        for (int i = 0; i < 32; i++) out[i] = (int16_t)bk_q5_value(p + bk_q5_qs(type), qh, i);
        break;
    }
    case BK_Q4_K:
    case BK_Q5_K: {  // sub-block `sub` (0..7)
        const uint8_t *qs = (type == BK_Q4_K ? p + 16 : p + 48) + 32 * (sub / 2), *qh = p + 16;
        for (int l = 0; l < 32; l++) {
            int v = sub & 1 ? qs[l] >> 4 : qs[l] & 15;
            if (type == BK_Q5_K) v |= ((qh[l] >> sub) & 1) << 4;
            out[l] = (int16_t)v;
        }
        break;
    }
    case BK_Q3_K:  // 32-value block `sub` (0..7), unsigned 0..7 (q + 4)
        for (int l = 0; l < 32; l++) out[l] = (int16_t)(bk_q3k_value(p, 32 * sub + l) + 4);
        break;
    case BK_Q6_K: {  // 32-value block `sub` (0..7): half sub / 4, quarter sub % 4, unsigned 0..63
        int hf = sub / 4, e = sub % 4;
        const uint8_t *ql = p + 64 * hf + (e & 1 ? 32 : 0), *qh = p + 128 + 32 * hf;
        for (int l = 0; l < 32; l++) {
            int lo = e < 2 ? ql[l] & 15 : ql[l] >> 4;
            out[l] = (int16_t)(lo | (((qh[l] >> (2 * e)) & 3) << 4));
        }
        break;
    }
    }
}

// The 32 values at `offset` of a weight row: from the row's unpacked values (`row_values`), or,
// without them, unpacked from block p, sub-block `sub`, into u.
static const int16_t *values_at(uint32_t type, const uint8_t *p, int sub, const int16_t *vals, size_t offset, int16_t *u) {
    if (vals) return vals + offset;
    block_bytes(type, p, sub, u);
    return u;
}

// acc[j] = fma(lane_j * dx, dw, acc[j]) for the 8 lanes of 4 products each.
static void lanes(const int16_t *u, const int8_t *x, const int *laneScale, float dx, float dw, float acc[8]) {
    for (int j = 0; j < 8; j++) {
        int ip = 0;
        for (int i = 4 * j; i < 4 * j + 4; i++) ip += u[i] * x[i];
        ip *= laneScale ? laneScale[j] : 1;
        acc[j] = fmaf((float)ip * dx, dw, acc[j]);
    }
}

// The 32-value types. Blocks go in groups of four (the last group padded with empty blocks:
// sums, scales and mins 0); block i of a group puts into float lane i its integer sum over
// values 0..15 and into lane 4 + i its sum over values 16..31 (both exact), each times d_x
// (rounded) and fused-multiply-added with d_w; then, for the types with a min term (Q4_1 and
// Q5_1's m, Q4_0's -8 d_w, Q5_0's -16 d_w), lane i adds fma(min, s_x) and lane 4 + i fma(0, s_x),
// where s_x is d_x times the block's activation sum. The 8 lanes are summed as hsum8. Per block
// and row that is two integer sums, one multiply and two or three fmas in lanes, where a lane per
// 4 products cost a conversion, a multiply and an fma each (the SIMD tile of several rows spent
// most of its time there); a 4-block group is one 8-lane vector in q8_simd.h.
static float product32(uint32_t type, bk_q8_rows x, size_t k, const uint8_t *row, const int16_t *vals) {
    const size_t blocks = k / 32, bytes = bk_bytes32(type);
    const int hasMin = !(type == BK_Q8_0 || type == BK_IQ4_NL);
    float acc[8] = {0};
    int16_t own[32];
    for (size_t g = 0; g < blocks; g += 4) {
        int sums[8] = {0};
        float dx[4] = {0}, dw[4] = {0}, mw[4] = {0}, s[4] = {0};
        for (size_t i = 0; i < 4 && g + i < blocks; i++) {
            const size_t b = g + i;
            const uint8_t *p = row + b * bytes;
            const int16_t *u = values_at(type, p, 0, vals, 32 * b, own);
            for (int v = 0; v < 32; v++) sums[i + 4 * (v / 16)] += u[v] * x.q[32 * b + v];
            dx[i] = x.d[b];
            dw[i] = bk_half_to_float(bk_u16(p));
            mw[i] = type == BK_Q4_0 ? -8.0f * dw[i] : type == BK_Q5_0 ? -16.0f * dw[i] : bk_has_min32(type) ? bk_half_to_float(bk_u16(p + 2)) : 0;
            s[i] = x.s32[b];
        }
        for (int l = 0; l < 8; l++) acc[l] = fmaf((float)sums[l] * dx[l % 4], dw[l % 4], acc[l]);
        if (hasMin)
            for (int l = 0; l < 8; l++) acc[l] = fmaf(l < 4 ? mw[l] : 0.0f, s[l % 4], acc[l]);
    }
    return hsum8(acc);
}

// One activation row times one weight row (its values from `row_values` in vals, or NULL).
static float product(uint32_t type, bk_q8_rows x, size_t k, const uint8_t *row, const int16_t *vals) {
    float acc[8] = {0}, macc[8] = {0};
    int16_t own[32];
    if (bk_is32(type)) return product32(type, x, k, row, vals);
    if (type == BK_Q4_K || type == BK_Q5_K) {
        size_t bytes = type == BK_Q4_K ? BK_Q4_K_BYTES : BK_Q5_K_BYTES;
        for (size_t b = 0; b < k / 256; b++) {
            const uint8_t *p = row + b * bytes;
            float d = bk_half_to_float(bk_u16(p)), dmin = bk_half_to_float(bk_u16(p + 2));
            uint8_t sc[8], mn[8];
            bk_k4_scales(p + 4, sc, mn);
            for (int s = 0; s < 8; s++) macc[s] = fmaf(dmin * (float)mn[s], x.s32[8 * b + s], macc[s]);
            for (int s = 0; s < 8; s++)
                lanes(values_at(type, p, s, vals, 256 * b + 32 * s, own), x.q + 256 * b + 32 * s, NULL, x.d[8 * b + s], d * (float)sc[s], acc);
        }
        return hsum8(acc) - hsum8(macc);
    }
    // Q6_K: lanes carry sc * (4 products of q in 0..63); the -32 comes back through s16. Q3_K
    // the same with q + 4 in 0..7 and its -4.
    const size_t bytes = bk_bytes256(type);
    const float bias = type == BK_Q3_K ? 4.0f : 32.0f;
    for (size_t b = 0; b < k / 256; b++) {
        const uint8_t *p = row + b * bytes;
        int8_t sc3[16];
        const int8_t *sc = (const int8_t *)(p + 192);
        if (type == BK_Q3_K) {
            bk_q3k_scales(p + 96, sc3);
            sc = sc3;
        }
        float d = bk_half_to_float(bk_u16(p + (type == BK_Q3_K ? 108 : 208)));
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 8; j++) macc[j] = fmaf(d * (float)sc[8 * h + j] * bias, x.s16[16 * b + 8 * h + j], macc[j]);
        for (int e = 0; e < 8; e++) {
            int laneScale[8];
            for (int j = 0; j < 8; j++) laneScale[j] = sc[2 * e + j / 4];
            lanes(values_at(type, p, e, vals, 256 * b + 32 * e, own), x.q + 256 * b + 32 * e, laneScale, x.d[8 * b + e], d, acc);
        }
    }
    return hsum8(acc) - hsum8(macc);
}

// A weight row's k values in value order (block_bytes of each 32), for every activation row's
// product with it: unpacked once per weight row instead of once per (weight row, activation
// row). On x86 at this level that measured small (SmolLM2's q8 verify-rows test 23.7 -> 22.7 s):
// the lanes' multiply-adds, not the unpacking, take most of the time there.
static void row_values(uint32_t type, const uint8_t *row, size_t k, int16_t *vals) {
    if (bk_is32(type)) {
        const size_t bytes = bk_bytes32(type);
        for (size_t b = 0; b < k / 32; b++) block_bytes(type, row + b * bytes, 0, vals + 32 * b);
        return;
    }
    const size_t bytes = bk_bytes256(type);
    for (size_t b = 0; b < k / 256; b++)
        for (int s = 0; s < 8; s++) block_bytes(type, row + b * bytes, s, vals + 256 * b + 32 * s);
}

void bk_portable_matmul_q8(uint32_t type, const void *xq, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                           size_t n0, size_t n1, float *y, size_t ldy) {
    bk_q8_rows all = bk_q8_layout(xq, m, k);
    // k values on the stack up to 4096, else in this thread's tile scratch. One activation row
    // (decoding), or a scratch that cannot grow: each product unpacks its own blocks as it goes
    // (the same values; for one row nothing is unpacked twice).
    int16_t small[4096];
    int16_t *vals = m < 2 ? NULL : k <= 4096 ? small : (int16_t *)bk_tile_scratch(k * sizeof(int16_t));
    if (!vals) {
        for (size_t o = n0; o < n1; o++)
            for (size_t r = 0; r < m; r++) y[r * ldy + o] = product(type, bk_q8_row(all, r, k), k, w + o * rowBytes, NULL);
        return;
    }
    for (size_t o = n0; o < n1; o++) {
        row_values(type, w + o * rowBytes, k, vals);
        for (size_t r = 0; r < m; r++) y[r * ldy + o] = product(type, bk_q8_row(all, r, k), k, w + o * rowBytes, vals);
    }
}
