// The body of the q8-activation products with 256-bit vectors, included by q8.c once per
// instruction set: Q8_FN(name) names the copy and Q8_DOT(u, x) gives 8 int32 lanes of 4 products
// u (unsigned bytes) * x (signed bytes) each. Leaves out the activation quantization (q8.c).
// The arithmetic is q8_portable.c's, lane for lane.

// 0x10 in byte i where bit i of qh is set: byte i takes qh's byte i / 8 (a shuffle within each
// 128-bit half), then the byte's own bit is tested.
static inline __attribute__((always_inline)) __m256i Q8_FN(fifth_bits)(uint32_t qh) {
    const __m256i which = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                           2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), which), bits);
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, bits), _mm256_set1_epi8(0x10));
}

// The 32 weight bytes of block `sub` in value order (see block_bytes in q8_portable.c), and for
// Q8_0 the signs moved onto the activations: |w| * sign(x, w) = w * x.
static inline __attribute__((always_inline)) __m256i Q8_FN(weight_bytes)(const uint32_t type, const uint8_t *p, int sub) {
    const __m256i nibble = _mm256_set1_epi8(15);
    switch (type) {
    case BK_Q8_0:
        return _mm256_loadu_si256((const __m256i *)(p + 2));
    case BK_Q4_0:
    case BK_Q4_1: {
        __m128i qs = _mm_loadu_si128((const __m128i *)(p + (type == BK_Q4_0 ? 2 : 4)));
        __m256i both = _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs);  // [values 0..15 | 16..31] before masking
        return _mm256_and_si256(both, nibble);
    }
    case BK_IQ4_NL: {  // the signed levels (pshufb on the nibbles), then treated as Q8_0's bytes
        const __m128i table = _mm_loadu_si128((const __m128i *)bk_iq4nl_values);
        __m128i qs = _mm_loadu_si128((const __m128i *)(p + 2));
        __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), nibble);
        return _mm256_shuffle_epi8(_mm256_set_m128i(table, table), v);
    }
    case BK_Q5_0:
    case BK_Q5_1: {  // as Q4_0, then bit i of qh into bit 4 of byte i
        __m128i qs = _mm_loadu_si128((const __m128i *)(p + bk_q5_qs(type)));
        __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), nibble);
        return _mm256_or_si256(v, Q8_FN(fifth_bits)(bk_u32(p + bk_q5_qh(type))));
    }
    case BK_Q4_K:
    case BK_Q5_K: {
        __m256i qs = _mm256_loadu_si256((const __m256i *)((type == BK_Q4_K ? p + 16 : p + 48) + 32 * (sub / 2)));
        __m256i v = _mm256_and_si256(sub & 1 ? _mm256_srli_epi16(qs, 4) : qs, nibble);
        if (type == BK_Q5_K) {
            __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 16));
            __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, sub), _mm256_set1_epi8(1));
            v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 4));
        }
        return v;
    }
    case BK_Q3_K: {  // unsigned 0..7 (q + 4; the -4 comes back through the activation sums), as q3k_quarter in avx2.c
        const int hf = sub / 4, e = sub % 4;
        __m256i qs = _mm256_loadu_si256((const __m256i *)(p + 32 + 32 * hf));
        __m256i hm = _mm256_loadu_si256((const __m256i *)p);
        __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * e), _mm256_set1_epi8(3));
        __m256i bit = _mm256_and_si256(_mm256_srli_epi16(hm, sub), _mm256_set1_epi8(1));
        return _mm256_or_si256(low, _mm256_slli_epi16(bit, 2));
    }
    default: {  // Q6_K, unsigned 0..63 (the -32 comes back through the activation sums)
        int hf = sub / 4, e = sub % 4;
        __m256i ql = _mm256_loadu_si256((const __m256i *)(p + 64 * hf + (e & 1 ? 32 : 0)));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * hf));
        ql = _mm256_and_si256(e < 2 ? ql : _mm256_srli_epi16(ql, 4), nibble);
        switch (e) {
        case 0: qh = _mm256_slli_epi16(qh, 4); break;
        case 1: qh = _mm256_slli_epi16(qh, 2); break;
        case 2: break;
        default: qh = _mm256_srli_epi16(qh, 2); break;
        }
        return _mm256_or_si256(ql, _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
    }
    }
}

static inline __attribute__((always_inline)) float Q8_FN(half)(const uint8_t *p) { return _cvtsh_ss(bk_u16(p)); }

// fp16 at p broadcast to 8 floats (see half8 in avx2.c for why not a scalar and a broadcast).
static inline __attribute__((always_inline)) __m256 Q8_FN(half8)(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_set1_epi16((short)bk_u16(p)));
}

static inline __attribute__((always_inline)) float Q8_FN(hsum)(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

// acc = fma(cvt(lanes) * dx, dw, acc)
static inline __attribute__((always_inline)) __m256 Q8_FN(scaled)(__m256i lanes, const float *dx, __m256 dw, __m256 acc) {
    return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(lanes), _mm256_broadcast_ss(dx)), dw, acc);
}

// Blocks b0 .. b0 + nb - 1 (nb <= 4: a group of q8_portable.c's product32) of NR weight rows
// against MR activation rows. The four blocks' 8 integer lanes each are summed into one vector,
// lane i block i's values 0..15 and lane 4 + i its values 16..31, then converted and scaled once
// per group: [d_x | d_x] (the four blocks' scales in both halves), [d_w | d_w] and
// [min | 0]. The weight scales and mins come in one 4-byte load per block (d, then m or the first
// data bytes), the fp16 halves gathered by one shuffle.
static inline __attribute__((always_inline)) void Q8_FN(group32)(const uint32_t type, bk_q8_rows x, size_t k, const uint8_t *w,
                                                                 size_t rowBytes, size_t b0, const int nb,
                                                                 __m256 acc[Q8_MAXROWS][4], const int MR, const int NR) {
    const size_t blocks = k / 32, bytes = bk_bytes32(type);
    const int signedBytes = type == BK_Q8_0 || type == BK_IQ4_NL;
    // bytes 0-1 of each dword (d) to the low 8 bytes, bytes 2-3 (m) to the high 8
    const __m128i halves = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    _Pragma("clang loop unroll(full)") for (int j = 0; j < NR; j++) {
        const uint8_t *p = w + j * rowBytes + b0 * bytes;
        _Pragma("clang loop unroll(full)") for (int i = 0; i < nb; i++) _mm_prefetch((const char *)p + i * bytes + 8 * rowBytes, _MM_HINT_T1);  // as prefetch_ahead in avx2.c
        const __m128i dm = _mm_setr_epi32((int)bk_u32(p), nb > 1 ? (int)bk_u32(p + bytes) : 0,
                                          nb > 2 ? (int)bk_u32(p + 2 * bytes) : 0, nb > 3 ? (int)bk_u32(p + 3 * bytes) : 0);
        const __m256 dmf = _mm256_cvtph_ps(_mm_shuffle_epi8(dm, halves));  // [d_0..d_3, m_0..m_3]
        const __m256 dw = _mm256_permute2f128_ps(dmf, dmf, 0x00);
        __m256 mw = _mm256_setzero_ps();
        if (bk_has_min32(type)) mw = _mm256_permute2f128_ps(dmf, dmf, 0x81);  // [m | 0]
        if (type == BK_Q4_0 || type == BK_Q5_0) {
            const __m256 scaled = _mm256_mul_ps(dmf, _mm256_set1_ps(type == BK_Q4_0 ? -8.0f : -16.0f));
            mw = _mm256_permute2f128_ps(scaled, scaled, 0x80);  // [-8 d | 0] (-16 for Q5_0)
        }
        __m256i u[4];
        _Pragma("clang loop unroll(full)") for (int i = 0; i < 4; i++) {
            u[i] = i < nb ? Q8_FN(weight_bytes)(type, p + i * bytes, 0) : _mm256_setzero_si256();
        }
        _Pragma("clang loop unroll(full)") for (int r = 0; r < MR; r++) {
            const int8_t *xq = x.q + r * k + 32 * b0;
            __m256i v[4];
            _Pragma("clang loop unroll(full)") for (int i = 0; i < 4; i++) {
                if (i >= nb) { v[i] = _mm256_setzero_si256(); continue; }
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + 32 * i));
                if (signedBytes) v[i] = Q8_DOT(_mm256_abs_epi8(u[i]), _mm256_sign_epi8(xv, u[i]));  // |w| * sign(x, w) = w * x
                else v[i] = Q8_DOT(u[i], xv);
            }
            // the block sums: pairs of lanes (0+2, 1+3 within each half) interleaved across two
            // blocks, then across the two pairs of blocks (unpacks and adds: single-uop where
            // three hadds were not, 7% fewer cycles for the 4-row tile)
            const __m256i a = _mm256_add_epi32(_mm256_unpacklo_epi32(v[0], v[1]), _mm256_unpackhi_epi32(v[0], v[1]));
            const __m256i c = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2], v[3]), _mm256_unpackhi_epi32(v[2], v[3]));
            const __m256i sums = _mm256_add_epi32(_mm256_unpacklo_epi64(a, c), _mm256_unpackhi_epi64(a, c));
            // [d_x | d_x] and [s_x | s_x] of the four blocks (zeros beyond a short group)
            const float *d = x.d + r * blocks + b0, *s = x.s32 + r * blocks + b0;
            __m256 dx, sx = _mm256_setzero_ps();
            if (nb == 4) {
                dx = _mm256_broadcast_ps((const __m128 *)d);
                if (!signedBytes) sx = _mm256_broadcast_ps((const __m128 *)s);
            } else {
                float dt[4] = {0, 0, 0, 0}, st[4] = {0, 0, 0, 0};
                _Pragma("clang loop unroll(full)") for (int i = 0; i < nb; i++) { dt[i] = d[i]; st[i] = s[i]; }
                dx = _mm256_broadcast_ps((const __m128 *)dt);
                sx = _mm256_broadcast_ps((const __m128 *)st);
            }
            acc[r][j] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), dx), dw, acc[r][j]);
            if (!signedBytes) acc[r][j] = _mm256_fmadd_ps(mw, sx, acc[r][j]);
        }
    }
}

// MR activation rows x NR weight rows, one accumulator per pair (and for the K-quants a min accumulator).
static inline __attribute__((always_inline)) void Q8_FN(tile)(const uint32_t type, bk_q8_rows x, size_t k, const uint8_t *w,
                                                              size_t rowBytes, float *y, size_t ldy, const int MR, const int NR) {
    const size_t blocks = k / 32;
    __m256 acc[Q8_MAXROWS][4], macc[Q8_MAXROWS][4];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) { acc[r][j] = _mm256_setzero_ps(); macc[r][j] = _mm256_setzero_ps(); }
    if (bk_is32(type)) {
        size_t b = 0;
        for (; b + 4 <= blocks; b += 4) Q8_FN(group32)(type, x, k, w, rowBytes, b, 4, acc, MR, NR);
        switch (blocks - b) {  // a short last group, its block count a constant in each copy
        case 1: Q8_FN(group32)(type, x, k, w, rowBytes, b, 1, acc, MR, NR); break;
        case 2: Q8_FN(group32)(type, x, k, w, rowBytes, b, 2, acc, MR, NR); break;
        case 3: Q8_FN(group32)(type, x, k, w, rowBytes, b, 3, acc, MR, NR); break;
        }
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) y[r * ldy + j] = Q8_FN(hsum)(acc[r][j]);
        return;
    }
    const size_t bytes = bk_bytes256(type);
    for (size_t b = 0; b < k / 256; b++) {
        for (int j = 0; j < NR; j++) {
            const uint8_t *p = w + j * rowBytes + b * bytes;
            for (size_t off = 0; off < bytes; off += 64) _mm_prefetch((const char *)p + 8 * rowBytes + off, _MM_HINT_T1);
            if (type == BK_Q6_K || type == BK_Q3_K) {  // Q3_K as Q6_K with its bias 4
                int8_t sc3[16];
                const int8_t *scp = (const int8_t *)(p + 192);
                if (type == BK_Q3_K) {
                    bk_q3k_scales(p + 96, sc3);
                    scp = sc3;
                }
                const __m256 bias = _mm256_set1_ps(type == BK_Q3_K ? 4.0f : 32.0f);
                const __m256 d = Q8_FN(half8)(p + (type == BK_Q3_K ? 108 : 208));
                const __m128i sc = _mm_loadu_si128((const __m128i *)scp);
                const __m256 c0 = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))), bias);
                const __m256 c1 = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))), bias);
                for (int r = 0; r < MR; r++) {
                    const float *s16 = x.s16 + r * (k / 16) + 16 * b;
                    macc[r][j] = _mm256_fmadd_ps(c0, _mm256_loadu_ps(s16), macc[r][j]);
                    macc[r][j] = _mm256_fmadd_ps(c1, _mm256_loadu_ps(s16 + 8), macc[r][j]);
                }
                for (int e = 0; e < 8; e++) {
                    const __m256i u = Q8_FN(weight_bytes)(type, p, e);
                    // int16 words [sc_2e x 8 | sc_2e+1 x 8]: lanes 0-3 hold values 0..15, lanes 4-7 values 16..31
                    const __m256i lo = _mm256_set1_epi16((short)scp[2 * e]);
                    const __m256i hi = _mm256_set1_epi16((short)scp[2 * e + 1]);
                    const __m256i scw = _mm256_blend_epi32(lo, hi, 0xF0);
                    for (int r = 0; r < MR; r++) {
                        const __m256i xv = _mm256_loadu_si256((const __m256i *)(x.q + r * k + 256 * b + 32 * e));
                        const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), scw);
                        acc[r][j] = Q8_FN(scaled)(lanes, x.d + r * blocks + 8 * b + e, d, acc[r][j]);
                    }
                }
                continue;
            }
            const float d = Q8_FN(half)(p), dmin = Q8_FN(half)(p + 2);
            uint8_t sc8[8], mn8[8];
            bk_k4_scales(p + 4, sc8, mn8);
            const __m256 mins = _mm256_mul_ps(_mm256_set1_ps(dmin),
                                              _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)mn8))));
            float dsc[8];
            _mm256_storeu_ps(dsc, _mm256_mul_ps(_mm256_set1_ps(d),
                                                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc8)))));
            for (int r = 0; r < MR; r++)
                macc[r][j] = _mm256_fmadd_ps(mins, _mm256_loadu_ps(x.s32 + r * blocks + 8 * b), macc[r][j]);
            for (int s = 0; s < 8; s++) {
                const __m256i u = Q8_FN(weight_bytes)(type, p, s);
                const __m256 ds = _mm256_set1_ps(dsc[s]);
                for (int r = 0; r < MR; r++) {
                    const __m256i xv = _mm256_loadu_si256((const __m256i *)(x.q + r * k + 256 * b + 32 * s));
                    acc[r][j] = Q8_FN(scaled)(Q8_DOT(u, xv), x.d + r * blocks + 8 * b + s, ds, acc[r][j]);
                }
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) y[r * ldy + j] = Q8_FN(hsum)(acc[r][j]) - Q8_FN(hsum)(macc[r][j]);
}

// Output rows in groups of four, activation rows in tiles of up to Q8_MAXROWS (4 with AVX2's 16
// registers, 8 with AVX-512's 32), as few tiles as hold them and of equal size (see avx512.c: a
// tile decodes each weight block once for its rows; 5 rows went as 4 and 1).
static inline __attribute__((always_inline)) void Q8_FN(product)(const uint32_t type, bk_q8_rows x, size_t m, size_t k,
                                                                 const uint8_t *w, size_t rowBytes, size_t n0, size_t n1,
                                                                 float *y, size_t ldy) {
    for (size_t o = n0; o < n1; o += 4) {
        const size_t group = n1 - o < 4 ? n1 - o : 4;
        const uint8_t *wo = w + o * rowBytes;
        for (size_t r = 0; r < m;) {
            const bk_q8_rows xr = bk_q8_row(x, r, k);
            float *yr = y + r * ldy + o;
            const size_t left = m - r, tiles = (left + Q8_MAXROWS - 1) / Q8_MAXROWS, MR = (left + tiles - 1) / tiles;
            size_t j = 0;
            switch (MR) {
#define Q8_ROWS(mr)                                                                                   \
    case mr:                                                                                          \
        for (; j < group; j++) Q8_FN(tile)(type, xr, k, wo + j * rowBytes, rowBytes, yr + j, ldy, mr, 1); \
        break;
#if Q8_MAXROWS > 4
            Q8_ROWS(8) Q8_ROWS(7) Q8_ROWS(6) Q8_ROWS(5)
#endif
            Q8_ROWS(4) Q8_ROWS(3)
#undef Q8_ROWS
            case 2:
                for (; j + 2 <= group; j += 2) Q8_FN(tile)(type, xr, k, wo + j * rowBytes, rowBytes, yr + j, ldy, 2, 2);
                for (; j < group; j++) Q8_FN(tile)(type, xr, k, wo + j * rowBytes, rowBytes, yr + j, ldy, 2, 1);
                break;
            default:
                if (group == 4) Q8_FN(tile)(type, xr, k, wo, rowBytes, yr, ldy, 1, 4);
                else for (; j < group; j++) Q8_FN(tile)(type, xr, k, wo + j * rowBytes, rowBytes, yr + j, ldy, 1, 1);
                break;
            }
            r += MR;
        }
    }
}

#define Q8_PRODUCT(name, type)                                                                            \
    __attribute__((noinline)) static void Q8_FN(name)(bk_q8_rows x, size_t m, size_t k, const uint8_t *w,  \
                                                      size_t rowBytes, size_t n0, size_t n1, float *y, size_t ldy) { \
        Q8_FN(product)(type, x, m, k, w, rowBytes, n0, n1, y, ldy);                                         \
    }
Q8_PRODUCT(q8_0, BK_Q8_0)
Q8_PRODUCT(q4_0, BK_Q4_0)
Q8_PRODUCT(q4_1, BK_Q4_1)
Q8_PRODUCT(q5_0, BK_Q5_0)
Q8_PRODUCT(q5_1, BK_Q5_1)
Q8_PRODUCT(iq4_nl, BK_IQ4_NL)
Q8_PRODUCT(q3_k, BK_Q3_K)
Q8_PRODUCT(q4_k, BK_Q4_K)
Q8_PRODUCT(q5_k, BK_Q5_K)
Q8_PRODUCT(q6_k, BK_Q6_K)
#undef Q8_PRODUCT

static void Q8_FN(matmul)(uint32_t type, const void *xq, size_t m, size_t k, const uint8_t *w, size_t rowBytes,
                          size_t n0, size_t n1, float *y, size_t ldy) {
    bk_q8_rows x = bk_q8_layout(xq, m, k);
    switch (type) {
    case BK_Q8_0: Q8_FN(q8_0)(x, m, k, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q4_0: Q8_FN(q4_0)(x, m, k, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q4_1: Q8_FN(q4_1)(x, m, k, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q5_0: Q8_FN(q5_0)(x, m, k, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q5_1: Q8_FN(q5_1)(x, m, k, w, rowBytes, n0, n1, y, ldy); break;
    case BK_IQ4_NL: Q8_FN(iq4_nl)(x, m, k, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q3_K: Q8_FN(q3_k)(x, m, k, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q4_K: Q8_FN(q4_k)(x, m, k, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q5_K: Q8_FN(q5_k)(x, m, k, w, rowBytes, n0, n1, y, ldy); break;
    case BK_Q6_K: Q8_FN(q6_k)(x, m, k, w, rowBytes, n0, n1, y, ldy); break;
    }
}
