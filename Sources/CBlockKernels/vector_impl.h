// The float-vector kernels of the decoding path that are not weight products: a dot product,
// y += a·x, and one query head's attention over a KV cache (scores, softmax, weighted values).
// Written once with clang vector extensions (16 lanes) and included by vector_portable.c,
// vector_avx2.c and vector_avx512.c, each of which compiles it for its level (a target
// attribute on every function) and names the functions with BK_VEC. Levels differ only in
// whether a·b + c is fused; within a level every result's operations are fixed by its inputs.
// Included only by those files: no include guard, on purpose.
#include <math.h>
#include <string.h>

typedef float bk_v16 __attribute__((vector_size(64), aligned(4)));
typedef int32_t bk_i16 __attribute__((vector_size(64), aligned(4)));

#define BK_INLINE static inline __attribute__((always_inline))
// The helpers below pass 16-lane vectors by value; they are always inlined, so the calling
// convention clang warns about (-Wpsabi) never applies.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpsabi"

BK_INLINE bk_v16 BK_VEC(load)(const float *p) { bk_v16 v; memcpy(&v, p, sizeof v); return v; }
BK_INLINE void BK_VEC(store)(float *p, bk_v16 v) { memcpy(p, &v, sizeof v); }
BK_INLINE bk_v16 BK_VEC(splat)(float f) { return (bk_v16){0} + f; }

// Pairwise halves in a fixed order (the order Inference's Swift code used).
BK_INLINE float BK_VEC(hsum)(bk_v16 v) {
    typedef float v8 __attribute__((vector_size(32)));
    typedef float v4 __attribute__((vector_size(16)));
    typedef float v2 __attribute__((vector_size(8)));
    v8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    v2 c = __builtin_shufflevector(b, b, 0, 1) + __builtin_shufflevector(b, b, 2, 3);
    return c[0] + c[1];
}

// e^x over 16 lanes: the Cephes expf polynomial on [-ln2/2, ln2/2] scaled by 2^n (Autograd's
// Kernels.exp). Relative error about 2e-7; x > 88.7 is clamped; x < -87.3 gives exactly 0.
BK_INLINE bk_v16 BK_VEC(exp16)(bk_v16 input) {
    bk_v16 x = __builtin_elementwise_min(__builtin_elementwise_max(input, BK_VEC(splat)(-87.3f)), BK_VEC(splat)(88.7f));
    const bk_v16 magic = BK_VEC(splat)(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    bk_v16 shifted = x * 1.44269504f + magic;
    bk_v16 n = shifted - magic;
    bk_v16 r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    bk_v16 z = r * r;
    bk_v16 y = BK_VEC(splat)(1.9875691500e-4f);
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    bk_i16 ni = (bk_i16)shifted - (bk_i16)magic;
    bk_v16 scale = (bk_v16)((ni + 127) << 23);
    bk_i16 under = input < -87.3f;  // all ones where e^x underflows (masked scores: -inf)
    return (bk_v16)((bk_i16)(y * scale) & ~under);
}

float BK_VEC(dot)(const float *a, const float *b, size_t n) {
    bk_v16 acc = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) acc += BK_VEC(load)(a + i) * BK_VEC(load)(b + i);
    float s = BK_VEC(hsum)(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

// 16 values of row j of Bᵀ from output o: float32, or IEEE half widened (exactly) when `half`.
typedef _Float16 bk_h16 __attribute__((vector_size(32), aligned(2)));
BK_INLINE bk_v16 BK_VEC(loadbt)(const void *bt, size_t i, const int half) {
    if (!half) return BK_VEC(load)((const float *)bt + i);
    bk_h16 h;
    memcpy(&h, (const _Float16 *)bt + i, sizeof h);
    return __builtin_convertvector(h, bk_v16);
}

// Outputs [o0, o1) (a multiple of 16·U) of NR rows from `row`: each output starts from zero and
// adds u[row, j]·bt[j, o] for j = 0, 1, ... in order, then goes into y. Each piece of Bᵀ is
// loaded once for the NR rows (a verify pass's rows share one adapter).
BK_INLINE void BK_VEC(lowrank_rows)(const int NR, const int U, const float *u, size_t row, size_t r, const void *bt,
                                    size_t out, size_t o0, size_t o1, float *y, size_t ldy, const int half) {
    for (size_t o = o0; o < o1; o += 16 * (size_t)U) {
        bk_v16 a[4][4];
        for (int i = 0; i < NR; i++)
            for (int c = 0; c < U; c++) a[i][c] = (bk_v16){0};
        for (size_t j = 0; j < r; j++) {
            bk_v16 b[4];
            for (int c = 0; c < U; c++) b[c] = BK_VEC(loadbt)(bt, j * out + o + 16 * (size_t)c, half);
            for (int i = 0; i < NR; i++) {
                const bk_v16 uj = BK_VEC(splat)(u[(row + (size_t)i) * r + j]);
                for (int c = 0; c < U; c++) a[i][c] += uj * b[c];
            }
        }
        for (int i = 0; i < NR; i++) {
            float *yr = y + (row + (size_t)i) * ldy + o;
            for (int c = 0; c < U; c++) BK_VEC(store)(yr + 16 * c, BK_VEC(load)(yr + 16 * c) + a[i][c]);
        }
    }
}

// NR rows from `row`: 16·BK_VEC_LOWRANK_UNITS outputs at a time, then 16, then one by one.
BK_INLINE void BK_VEC(lowrank_group)(const int NR, const float *u, size_t row, size_t r, const void *bt, size_t out,
                                     size_t o0, size_t o1, float *y, size_t ldy, const int half) {
    const size_t wide = o0 + (o1 - o0) / (16 * BK_VEC_LOWRANK_UNITS) * (16 * BK_VEC_LOWRANK_UNITS);
    const size_t vec = o0 + (o1 - o0) / 16 * 16;
    BK_VEC(lowrank_rows)(NR, BK_VEC_LOWRANK_UNITS, u, row, r, bt, out, o0, wide, y, ldy, half);
    BK_VEC(lowrank_rows)(NR, 1, u, row, r, bt, out, wide, vec, y, ldy, half);
    for (int i = 0; i < NR; i++) {
        const float *ur = u + (row + (size_t)i) * r;
        float *yr = y + (row + (size_t)i) * ldy;
        for (size_t o = vec; o < o1; o++) {
            float a = 0;
            for (size_t j = 0; j < r; j++) a += ur[j] * (half ? (float)((const _Float16 *)bt)[j * out + o] : ((const float *)bt)[j * out + o]);
            yr[o] += a;
        }
    }
}

// y[row, o] += sum over j < r of u[row, j]·bt[j, o] for rows < m and o in [o0, o1): an adapter's
// up-projection with its factor B stored transposed ([r, out], float32, or float16 when `half`),
// so 16 outputs take one multiply-add per j and no horizontal sum. Each output starts from zero,
// adds j = 0, 1, ... in order, then goes into y: the same operations whatever m, o0 and o1 (and
// however many rows share a load of Bᵀ: BK_VEC_LOWRANK_ROWS at a time).
void BK_VEC(lowrank_up)(const float *u, size_t m, size_t r, const void *bt, int half, size_t out, size_t o0, size_t o1,
                        float *y, size_t ldy) {
    for (size_t row = 0; row < m;) {
        const size_t left = m - row, nr = left < BK_VEC_LOWRANK_ROWS ? left : BK_VEC_LOWRANK_ROWS;
        switch (nr) {
#if BK_VEC_LOWRANK_ROWS > 1
        case 4: if (half) BK_VEC(lowrank_group)(4, u, row, r, bt, out, o0, o1, y, ldy, 1); else BK_VEC(lowrank_group)(4, u, row, r, bt, out, o0, o1, y, ldy, 0); break;
        case 3: if (half) BK_VEC(lowrank_group)(3, u, row, r, bt, out, o0, o1, y, ldy, 1); else BK_VEC(lowrank_group)(3, u, row, r, bt, out, o0, o1, y, ldy, 0); break;
        case 2: if (half) BK_VEC(lowrank_group)(2, u, row, r, bt, out, o0, o1, y, ldy, 1); else BK_VEC(lowrank_group)(2, u, row, r, bt, out, o0, o1, y, ldy, 0); break;
#endif
        default: if (half) BK_VEC(lowrank_group)(1, u, row, r, bt, out, o0, o1, y, ldy, 1); else BK_VEC(lowrank_group)(1, u, row, r, bt, out, o0, o1, y, ldy, 0); break;
        }
        row += nr;
    }
}

void BK_VEC(axpy)(float alpha, const float *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) BK_VEC(store)(y + i, BK_VEC(load)(y + i) + alpha * BK_VEC(load)(x + i));
    for (; i < n; i++) y[i] += alpha * x[i];
}

// 16 values from element i of a KV row: float32, or IEEE half widened (exactly) when `half`.
typedef _Float16 bk_kv_h16 __attribute__((vector_size(32), aligned(2)));
BK_INLINE bk_v16 BK_VEC(loadkv)(const void *p, size_t i, const int half) {
    if (!half) return BK_VEC(load)((const float *)p + i);
    bk_kv_h16 h;
    memcpy(&h, (const _Float16 *)p + i, sizeof h);
    return __builtin_convertvector(h, bk_v16);
}
BK_INLINE float BK_VEC(kv1)(const void *p, size_t i, const int half) {
    return half ? (float)((const _Float16 *)p)[i] : ((const float *)p)[i];
}

// Σ q·k_t over hd values for the n <= 4 keys k_t = k + t·stride (elements), into s[0..<n]: the
// keys' 16-lane sums reduced together (pairs of halves, one shuffle step for all four), then the
// hd % 16 tail in order. Each key's result depends only on its own lanes, so it is the same in a
// group of four or in the last, shorter one.
BK_INLINE void BK_VEC(dot4)(const float *q, const void *k, size_t stride, size_t n, size_t hd, float *s, const int half) {
    typedef float v8 __attribute__((vector_size(32)));
    typedef float v4 __attribute__((vector_size(16)));
    bk_v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    size_t d = 0;
    if (n == 4) {
        for (; d + 16 <= hd; d += 16) {
            const bk_v16 qv = BK_VEC(load)(q + d);
            a0 += qv * BK_VEC(loadkv)(k, d, half);
            a1 += qv * BK_VEC(loadkv)(k, stride + d, half);
            a2 += qv * BK_VEC(loadkv)(k, 2 * stride + d, half);
            a3 += qv * BK_VEC(loadkv)(k, 3 * stride + d, half);
        }
    } else {
        for (; d + 16 <= hd; d += 16) {
            const bk_v16 qv = BK_VEC(load)(q + d);
            a0 += qv * BK_VEC(loadkv)(k, d, half);
            if (n > 1) a1 += qv * BK_VEC(loadkv)(k, stride + d, half);
            if (n > 2) a2 += qv * BK_VEC(loadkv)(k, 2 * stride + d, half);
        }
    }
    const bk_v16 b01 = __builtin_shufflevector(a0, a1, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
                     + __builtin_shufflevector(a0, a1, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    const bk_v16 b23 = __builtin_shufflevector(a2, a3, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
                     + __builtin_shufflevector(a2, a3, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    const bk_v16 c = __builtin_shufflevector(b01, b23, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)
                   + __builtin_shufflevector(b01, b23, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    const v8 e = __builtin_shufflevector(c, c, 0, 1, 4, 5, 8, 9, 12, 13) + __builtin_shufflevector(c, c, 2, 3, 6, 7, 10, 11, 14, 15);
    const v4 f = __builtin_shufflevector(e, e, 0, 2, 4, 6) + __builtin_shufflevector(e, e, 1, 3, 5, 7);
    for (size_t t = 0; t < n; t++) {
        float v = f[t];
        for (size_t i = d; i < hd; i++) v += q[i] * BK_VEC(kv1)(k, t * stride + i, half);
        s[t] = v;
    }
}

// e^(s - mx) over scores[0..<len] in place, 16 at a time and the tail through the same
// polynomial (padded lanes); returns 1 / their sum.
BK_INLINE float BK_VEC(softmax_inv)(float *scores, size_t len, float mx) {
    bk_v16 sums = {0};
    size_t j = 0;
    for (; j + 16 <= len; j += 16) {
        bk_v16 e = BK_VEC(exp16)(BK_VEC(load)(scores + j) - mx);
        BK_VEC(store)(scores + j, e);
        sums += e;
    }
    float total = BK_VEC(hsum)(sums);
    if (j < len) {
        float tail[16];
        for (size_t t = 0; t < 16; t++) tail[t] = j + t < len ? scores[j + t] - mx : -INFINITY;
        bk_v16 e = BK_VEC(exp16)(BK_VEC(load)(tail));
        BK_VEC(store)(tail, e);
        for (size_t t = 0; j + t < len; t++) {
            scores[j + t] = tail[t];
            total += tail[t];
        }
    }
    return 1.0f / total;
}

// Scores of keys j ..< j + n (n <= 4) for one query, scaled, into scores[j...]; returns the
// running maximum after them.
BK_INLINE float BK_VEC(score4)(const float *q, const void *keys, size_t stride, size_t j, size_t n, size_t hd, float scale,
                               float *scores, float mx, const int half) {
    const size_t size = half ? 2 : 4;
    float dots[4];
    BK_VEC(dot4)(q, (const char *)keys + j * stride * size, stride, n, hd, dots, half);
    for (size_t t = 0; t < n; t++) {
        const float s = dots[t] * scale;
        scores[j + t] = s;
        mx = s > mx ? s : mx;
    }
    return mx;
}

BK_INLINE void BK_VEC(attend_kv)(const float *q, const void *keys, const void *values, size_t stride, size_t len,
                                 size_t hd, float scale, float *scores, float *out, const int half) {
    float mx = -INFINITY;
    for (size_t j = 0; j < len; j += 4) mx = BK_VEC(score4)(q, keys, stride, j, len - j < 4 ? len - j : 4, hd, scale, scores, mx, half);
    float inv = BK_VEC(softmax_inv)(scores, len, mx);
    // out = Σ_p (scores[p]·inv)·v_p in order of p, 64 values at a time held in registers (the
    // operations of an axpy per position into a zeroed out, without its loads and stores)
    size_t d = 0;
    for (; d + 64 <= hd; d += 64) {
        bk_v16 o0 = {0}, o1 = {0}, o2 = {0}, o3 = {0};
        for (size_t p = 0; p < len; p++) {
            const size_t v = p * stride + d;
            const float w = scores[p] * inv;
            o0 += w * BK_VEC(loadkv)(values, v, half);
            o1 += w * BK_VEC(loadkv)(values, v + 16, half);
            o2 += w * BK_VEC(loadkv)(values, v + 32, half);
            o3 += w * BK_VEC(loadkv)(values, v + 48, half);
        }
        BK_VEC(store)(out + d, o0);
        BK_VEC(store)(out + d + 16, o1);
        BK_VEC(store)(out + d + 32, o2);
        BK_VEC(store)(out + d + 48, o3);
    }
    if (d < hd) {
        memset(out + d, 0, (hd - d) * sizeof(float));
        for (size_t p = 0; p < len; p++) {
            const float w = scores[p] * inv;
            if (!half) {
                BK_VEC(axpy)(w, (const float *)values + p * stride + d, out + d, hd - d);
                continue;
            }
            size_t i = 0;  // axpy's operations on the widened values
            for (; i + 16 <= hd - d; i += 16)
                BK_VEC(store)(out + d + i, BK_VEC(load)(out + d + i) + w * BK_VEC(loadkv)(values, p * stride + d + i, 1));
            for (; d + i < hd; i++) out[d + i] += w * BK_VEC(kv1)(values, p * stride + d + i, 1);
        }
    }
}

void BK_VEC(attend)(const float *q, const void *keys, const void *values, int half, size_t stride, size_t len, size_t hd,
                    float scale, float *scores, float *out) {
    if (half) BK_VEC(attend_kv)(q, keys, values, stride, len, hd, scale, scores, out, 1);
    else BK_VEC(attend_kv)(q, keys, values, stride, len, hd, scale, scores, out, 0);
}

// Queries whose weighted values take one pass over the value rows together: BK_VEC_WEIGH_QUERIES
// (up to 4, set by the including file to what its registers hold at 64 lanes per query).
enum { BK_VEC(batch) = BK_VEC_WEIGH_QUERIES };

// Lanes [d0, d1) (a multiple of 16·U) of the weighted values of NB (1 ... batch) queries: query b
// sees positions p < lb[b] with weights sb[b][p]·ib[b] and writes ob[b]. NB·U accumulators of 16
// lanes, each its lanes' multiply-adds in the order of p; each value row is read once for the
// batch, U·16 lanes of it at a time (64: a row's four cache lines requested together, as
// bk_attend does).
BK_INLINE void BK_VEC(weigh_lanes)(const int NB, const int U, size_t d0, size_t d1, const void *values, size_t stride,
                                   const size_t *lb, float *const *sb, const float *ib, float *const *ob, const int half) {
    size_t shortest = lb[0], reach = lb[0];
    for (int b = 1; b < NB; b++) {
        shortest = lb[b] < shortest ? lb[b] : shortest;
        reach = lb[b] > reach ? lb[b] : reach;
    }
    for (size_t d = d0; d < d1; d += 16 * (size_t)U) {
        bk_v16 o[BK_VEC(batch)][4];
        for (int b = 0; b < NB; b++)
            for (int u = 0; u < U; u++) o[b][u] = (bk_v16){0};
        size_t p = 0;
        for (; p < shortest; p++) {
            if (d == d0)  // the row eight on, from memory (as the keys)
                for (int u = 0; u < U; u++) __builtin_prefetch((const char *)values + ((p + 8) * stride + d + 16 * (size_t)u) * (half ? 2 : 4));
            bk_v16 v[4];
            for (int u = 0; u < U; u++) v[u] = BK_VEC(loadkv)(values, p * stride + d + 16 * (size_t)u, half);
            for (int b = 0; b < NB; b++) {
                const float w = sb[b][p] * ib[b];
                for (int u = 0; u < U; u++) o[b][u] += w * v[u];
            }
        }
        for (; p < reach; p++) {
            bk_v16 v[4];
            for (int u = 0; u < U; u++) v[u] = BK_VEC(loadkv)(values, p * stride + d + 16 * (size_t)u, half);
            for (int b = 0; b < NB; b++) {
                if (p >= lb[b]) continue;
                const float w = sb[b][p] * ib[b];
                for (int u = 0; u < U; u++) o[b][u] += w * v[u];
            }
        }
        for (int b = 0; b < NB; b++)
            for (int u = 0; u < U; u++) BK_VEC(store)(ob[b] + d + 16 * (size_t)u, o[b][u]);
    }
}

// The weighted values of NB queries over hd lanes: 64 lanes at a time, then 16, then the last
// hd % 16 lanes as bk_attend's scalar tail.
BK_INLINE void BK_VEC(weigh)(const int NB, const void *values, size_t stride, size_t hd, const size_t *lb,
                             float *const *sb, const float *ib, float *const *ob, const int half) {
    const size_t wide = hd / 64 * 64, vec = hd / 16 * 16;
    BK_VEC(weigh_lanes)(NB, 4, 0, wide, values, stride, lb, sb, ib, ob, half);
    BK_VEC(weigh_lanes)(NB, 1, wide, vec, values, stride, lb, sb, ib, ob, half);
    if (vec == hd) return;
    for (int b = 0; b < NB; b++) {
        float *ot = ob[b];
        for (size_t i = vec; i < hd; i++) ot[i] = 0;
        for (size_t p = 0; p < lb[b]; p++) {
            const float w = sb[b][p] * ib[b];
            for (size_t i = vec; i < hd; i++) ot[i] += w * BK_VEC(kv1)(values, p * stride + i, half);
        }
    }
}

// bk_attend for every query (r, g) of `rows` rows and `heads` heads over one KV head's cache,
// the queries taking turns on each group of four keys and each value row, so a key or value is
// fetched from memory once for all of them and then found in L1. Each query's operations are
// bk_attend's in bk_attend's order: the same score4 calls and softmax; the weighted values lane
// by lane the same multiply-adds in the order of p, whatever lanes share a register (here 16
// per query, up to four queries at a time where the registers hold them).
BK_INLINE void BK_VEC(attend_rows_kv)(const float *q, size_t ldq, size_t rows, size_t heads, const size_t *len,
                                      const void *keys, const void *values, size_t stride, size_t hd, float scale,
                                      float *scores, float *out, size_t ldo, const int half) {
    if (rows == 1) {  // one row's heads alone: SmolLM2's one-token steps measured ~20% faster so than together
        for (size_t g = 0; g < heads; g++)
            BK_VEC(attend_kv)(q + g * hd, keys, values, stride, len[0], hd, scale, scores, out + g * hd, half);
        return;
    }
    const size_t nq = rows * heads;
    size_t longest = 0;
    for (size_t r = 0; r < rows; r++) longest = len[r] > longest ? len[r] : longest;
    // query t = r·heads + g: its vector, positions, scores, output, running maximum and 1 / sum
    const float *qt[nq];
    size_t lt[nq];
    float *st[nq], *ot[nq], mx[nq], inv[nq];
    for (size_t r = 0, t = 0; r < rows; r++)
        for (size_t g = 0; g < heads; g++, t++) {
            qt[t] = q + r * ldq + g * hd;
            lt[t] = len[r];
            st[t] = scores + t * longest;
            ot[t] = out + r * ldo + g * hd;
            mx[t] = -INFINITY;
        }
    const size_t size = half ? 2 : 4, lines = (hd * size + 63) / 64;
    for (size_t j = 0; j < longest; j += 4) {
        for (size_t a = j + 8; a < j + 12 && a < longest; a++)  // the group two on, from memory: a pass's cache is evicted by its weights
            for (size_t l = 0; l < lines; l++) __builtin_prefetch((const char *)keys + (a * stride) * size + 64 * l);
        for (size_t t = 0; t < nq; t++) {
            if (lt[t] <= j) continue;
            mx[t] = BK_VEC(score4)(qt[t], keys, stride, j, lt[t] - j < 4 ? lt[t] - j : 4, hd, scale, st[t], mx[t], half);
        }
    }
    for (size_t t = 0; t < nq; t++) inv[t] = BK_VEC(softmax_inv)(st[t], lt[t], mx[t]);
    for (size_t t0 = 0; t0 < nq; t0 += BK_VEC(batch)) {
        const size_t nb = nq - t0 < BK_VEC(batch) ? nq - t0 : BK_VEC(batch);
#if BK_VEC_WEIGH_QUERIES > 1
        switch (nb) {
        case 1: BK_VEC(weigh)(1, values, stride, hd, lt + t0, st + t0, inv + t0, ot + t0, half); break;
        case 2: BK_VEC(weigh)(2, values, stride, hd, lt + t0, st + t0, inv + t0, ot + t0, half); break;
        case 3: BK_VEC(weigh)(3, values, stride, hd, lt + t0, st + t0, inv + t0, ot + t0, half); break;
        default: BK_VEC(weigh)(4, values, stride, hd, lt + t0, st + t0, inv + t0, ot + t0, half); break;
        }
#else
        (void)nb;
        BK_VEC(weigh)(1, values, stride, hd, lt + t0, st + t0, inv + t0, ot + t0, half);
#endif
    }
}

void BK_VEC(attend_rows)(const float *q, size_t ldq, size_t rows, size_t heads, const size_t *len, const void *keys,
                         const void *values, int half, size_t stride, size_t hd, float scale, float *scores, float *out,
                         size_t ldo) {
    if (half) BK_VEC(attend_rows_kv)(q, ldq, rows, heads, len, keys, values, stride, hd, scale, scores, out, ldo, 1);
    else BK_VEC(attend_rows_kv)(q, ldq, rows, heads, len, keys, values, stride, hd, scale, scores, out, ldo, 0);
}

void BK_VEC(to_half)(const float *x, uint16_t *y, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const bk_kv_h16 h = __builtin_convertvector(BK_VEC(load)(x + i), bk_kv_h16);
        memcpy(y + i, &h, sizeof h);
    }
    for (; i < n; i++) {
        const _Float16 h = (_Float16)x[i];
        memcpy(y + i, &h, sizeof h);
    }
}

// x[0..<n] = softmax(scale·x) in place (n >= 1): one pass scales and finds the maximum, one
// takes e^(s - max) through exp16 (softmax_inv, as bk_attend), one multiplies by 1 / the sum.
void BK_VEC(softmax)(float *x, size_t n, float scale) {
    bk_v16 mv = BK_VEC(splat)(-INFINITY);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const bk_v16 s = BK_VEC(load)(x + i) * scale;
        BK_VEC(store)(x + i, s);
        mv = __builtin_elementwise_max(mv, s);
    }
    float mx = __builtin_reduce_max(mv);
    for (; i < n; i++) {
        x[i] *= scale;
        mx = x[i] > mx ? x[i] : mx;
    }
    const float inv = BK_VEC(softmax_inv)(x, n, mx);
    for (i = 0; i + 16 <= n; i += 16) BK_VEC(store)(x + i, BK_VEC(load)(x + i) * inv);
    for (; i < n; i++) x[i] *= inv;
}

// out[i] = g·σ(g)·up[i] with g = gate[i], σ(g) = 1 / (1 + e^-g) through exp16: 16 at a time,
// the tail through the same vector code on padded lanes, so each value's bits depend only on
// its own inputs.
BK_INLINE bk_v16 BK_VEC(swiglu16)(bk_v16 g, bk_v16 u) { return g / (1.0f + BK_VEC(exp16)(-g)) * u; }

void BK_VEC(swiglu)(const float *gate, const float *up, float *out, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) BK_VEC(store)(out + i, BK_VEC(swiglu16)(BK_VEC(load)(gate + i), BK_VEC(load)(up + i)));
    if (i < n) {
        float g[16] = {0}, u[16] = {0}, o[16];
        memcpy(g, gate + i, (n - i) * sizeof(float));
        memcpy(u, up + i, (n - i) * sizeof(float));
        BK_VEC(store)(o, BK_VEC(swiglu16)(BK_VEC(load)(g), BK_VEC(load)(u)));
        memcpy(out + i, o, (n - i) * sizeof(float));
    }
}

#pragma clang diagnostic pop
#undef BK_INLINE
