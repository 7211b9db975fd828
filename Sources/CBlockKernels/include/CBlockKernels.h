// Matrix products and dequantization computed straight from ggml's block formats (F32, F16,
// BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), with float or q8 activations, compiled per x86-64
// feature level in this one target and chosen at run time. Threads, the GGUF file and every
// other ggml type are left to the caller. Block layouts follow ggml-common.h; the reference
// values are ModelAssets' `Dequantize.run` (ggml-quants.c `dequantize_row_*`).
#ifndef CBLOCKKERNELS_H
#define CBLOCKKERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Feature levels, lowest first. Each level's code is compiled into every build with
/// function-level target attributes; a level runs only where the CPU has its features.
enum {
    /// Plain C with compiler vector extensions: any CPU, any architecture.
    BK_LEVEL_PORTABLE = 0,
    /// AVX2 + FMA + F16C (Haswell, Zen 1 and later).
    BK_LEVEL_AVX2 = 1,
    /// AVX-512 F/BW/VL/DQ (Skylake-X, Zen 4 and later).
    BK_LEVEL_AVX512 = 2,
    /// AVX-512 as above plus VNNI: only the q8-activation products differ from BK_LEVEL_AVX512.
    BK_LEVEL_AVX512_VNNI = 3,
    BK_LEVEL_COUNT = 4
};

/// Return codes of the products and conversions.
enum {
    BK_OK = 0,
    /// The ggml type id is not one of the fourteen this target computes with (see bk_type_supported).
    BK_ERROR_TYPE = -1,
    /// k is not a whole number of the type's blocks.
    BK_ERROR_SHAPE = -2,
    /// The level asked for is above bk_best_level() (the *_at functions).
    BK_ERROR_LEVEL = -3,
    /// Scratch for the activation sums (m * k / 32 floats beyond 16 KiB) could not be allocated.
    BK_ERROR_MEMORY = -4
};

/// Level requests that name no level (bk_level_request).
enum {
    /// ADAPTER_CPU_LEVEL is not set (or empty).
    BK_LEVEL_UNSET = -1,
    /// ADAPTER_CPU_LEVEL is set to something other than a level's name (bk_level_name).
    BK_LEVEL_UNKNOWN = -2
};

/// The highest level this CPU runs (checked once with __builtin_cpu_supports).
int bk_cpu_level(void);

/// The level the environment variable ADAPTER_CPU_LEVEL names ("portable", "avx2", "avx512",
/// "avx512vnni"), read once: a level (maybe above bk_cpu_level), BK_LEVEL_UNSET or
/// BK_LEVEL_UNKNOWN. Lets a test or benchmark run a lower level's code on a higher CPU.
int bk_level_request(void);

/// The highest level this process runs: bk_cpu_level(), lowered to the level ADAPTER_CPU_LEVEL
/// names when that is lower (a higher or unknown request changes nothing). Every function here
/// behaves as on a CPU whose best level this is.
int bk_best_level(void);

/// 1 when this process runs `level` (level <= bk_best_level()), else 0.
int bk_level_supported(int level);

/// The level bk_matmul_nt, bk_dequantize_rows, the q8 and q8k functions and the float-vector
/// kernels use: bk_best_level() unless bk_set_level chose another.
int bk_active_level(void);

/// Makes every later call use `level` (process-wide; for benchmarks and tools that compare
/// levels). Returns 1 when bk_level_supported(level); otherwise returns 0 and changes nothing.
int bk_set_level(int level);

/// "portable", "avx2", "avx512", "avx512vnni"; "?" for other values.
const char *bk_level_name(int level);

/// 1 when bk_matmul_nt and bk_dequantize_rows accept this ggml type id (GGMLType raw value).
int bk_type_supported(uint32_t type);

/// y[r*ldy + o] = sum over i < k of x[r*k + i] * W[o, i], for r < m and n0 <= o < n1.
///
/// W is a matrix of ggml blocks of `type`: row o starts at (const char *)w + o*rowBytes and
/// holds k values (k a multiple of the block size: 1 for F32/F16/BF16, 32 for Q8_0/Q4_0/Q4_1/
/// Q5_0/Q5_1/IQ4_NL, 256 for Q2_K/Q3_K/Q4_K/Q5_K/Q6_K). x is m rows of k floats; accumulation is in float32. Only outputs
/// in [n0, n1) are written, so threads may share y by splitting [0, n) into ranges.
///
/// Made for small m (decoding m = 1, batched decoding and speculative verification up to
/// about 16): each weight block is read once per group of rows. Every output's operations
/// are the same whatever m, n0, n1 and the thread split, so a pass over m rows gives exactly
/// the bits of m one-row passes. Levels differ from each other in summation order.
/// Single-threaded. Returns BK_OK, or BK_ERROR_TYPE, BK_ERROR_SHAPE, BK_ERROR_MEMORY with
/// nothing written.
int bk_matmul_nt(uint32_t type, const float *x, size_t m, size_t k, const void *w, size_t rowBytes,
                 size_t n0, size_t n1, float *y, size_t ldy);

/// out[(r - r0)*k + i] = W[r, i] as float32 for rows r0 <= r < r1 (layout as in bk_matmul_nt),
/// bit for bit the values of the reference dequantization. For panels that sgemm multiplies
/// when m is large (prefill, training). Single-threaded. Returns as bk_matmul_nt.
int bk_dequantize_rows(uint32_t type, const void *w, size_t rowBytes, size_t r0, size_t r1, size_t k,
                       float *out);

/// As bk_matmul_nt and bk_dequantize_rows at an explicit level (tests compare levels without
/// changing the process-wide one). A level above bk_best_level() returns BK_ERROR_LEVEL.
int bk_matmul_nt_at(int level, uint32_t type, const float *x, size_t m, size_t k, const void *w,
                    size_t rowBytes, size_t n0, size_t n1, float *y, size_t ldy);
int bk_dequantize_rows_at(int level, uint32_t type, const void *w, size_t rowBytes, size_t r0, size_t r1,
                          size_t k, float *out);

// ---------------------------------------------------------------------------------------------
// Float32 products of many activation rows (a prompt's) with float32 weight rows, such as rows
// bk_dequantize_rows unpacked: C[m, n] = X[m, k] · W[n, k]ᵀ, W's element (j, i) at
// w[j·ldw + i·wstep] (wstep = 1: rows of a matrix, W·; ldw = 1: its columns, a product with
// the matrix itself, as attention's P·V). The activations are packed once (bk_gemm_pack), then
// any number of bk_gemm calls (pieces of the weight rows, on any threads) read them. Every
// output is one fused multiply-add chain, acc = fmaf(x[r, i], W[j, i], acc) for i = 0 ..< k from
// acc = 0: the same bits at every level and whatever m, n, the strides, the pieces and the other
// rows (gemm.c has the blocking and its speed against OpenBLAS's sgemm).

/// Floats of the packed form of m rows of k activations.
size_t bk_gemm_packed_floats(size_t m, size_t k);

/// Floats of scratch one bk_gemm call of m activation rows and n weight rows needs.
size_t bk_gemm_scratch_floats(size_t m, size_t n);

/// Packs x (m rows of k floats, row r at x + r·ldx) into `packed` (bk_gemm_packed_floats(m, k)
/// floats): the share `part` of `parts` (part < parts), so that threads can split the work;
/// parts = 1 packs it all, and more than bk_gemm_pack_parts(k) leaves some shares empty.
/// Single-threaded. Returns BK_OK.
int bk_gemm_pack(const float *x, size_t ldx, size_t m, size_t k, size_t part, size_t parts, float *packed);

/// Shares of the packing that hold work (blocks of k).
size_t bk_gemm_pack_parts(size_t k);

/// c[r·ldc + j] = Σ_i x[r, i]·W[j, i] (the chain above) for r < m and j < n, from the
/// activations bk_gemm_pack packed with the same m and k. `scratch`: bk_gemm_scratch_floats(m, n)
/// floats. Single-threaded. Returns BK_OK.
int bk_gemm(const float *packed, size_t m, size_t k, const float *w, size_t ldw, size_t wstep, size_t n, float *c,
            size_t ldc, float *scratch);

/// As bk_gemm_pack and bk_gemm at an explicit level (BK_ERROR_LEVEL above bk_best_level()).
int bk_gemm_pack_at(int level, const float *x, size_t ldx, size_t m, size_t k, size_t part, size_t parts,
                    float *packed);
int bk_gemm_at(int level, const float *packed, size_t m, size_t k, const float *w, size_t ldw, size_t wstep, size_t n,
               float *c, size_t ldc, float *scratch);

// ---------------------------------------------------------------------------------------------
// q8 activations: llama.cpp's way of multiplying with quantized weights. Each activation row is
// quantized to int8 per 32 values (scale d_b = max|x| / 127, q = x / d_b rounded to nearest
// even) once per product; then every weight block meets it in integer dot products (VNNI where
// the CPU has it), scaled in float. Faster than bk_matmul_nt, and different from it: each x_i
// moves by at most d_b / 2 before it is multiplied. Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q3_K, Q4_K,
// Q5_K and Q6_K; not Q2_K (its callers multiply it with float activations).
// Integer lanes are exact and the float steps are the same on every level, so all levels give
// the same bits (and, as with bk_matmul_nt, m rows give the bits of m one-row passes).

/// Bytes of the q8 form of m rows of k activations (k a multiple of 32): 1.5 bytes per value.
size_t bk_q8_bytes(size_t m, size_t k);

/// Writes the q8 form of x (m rows of k floats, k a multiple of 32) into xq (bk_q8_bytes(m, k)
/// bytes, 4-byte aligned). Single-threaded; quantize once, then split output rows over threads.
/// Returns BK_OK or BK_ERROR_SHAPE.
int bk_quantize_q8(const float *x, size_t m, size_t k, void *xq);

/// As bk_matmul_nt with x given in q8 form (from bk_quantize_q8 with the same m and k).
/// Returns BK_OK, BK_ERROR_TYPE (also for F32/F16/BF16) or BK_ERROR_SHAPE.
int bk_matmul_nt_q8(uint32_t type, const void *xq, size_t m, size_t k, const void *w, size_t rowBytes,
                    size_t n0, size_t n1, float *y, size_t ldy);

/// The q8 functions at an explicit level (BK_ERROR_LEVEL where the process does not run it).
int bk_quantize_q8_at(int level, const float *x, size_t m, size_t k, void *xq);
int bk_matmul_nt_q8_at(int level, uint32_t type, const void *xq, size_t m, size_t k, const void *w,
                       size_t rowBytes, size_t n0, size_t n1, float *y, size_t ldy);

// ---------------------------------------------------------------------------------------------
// q8k activations, for Q4_K, Q5_K and Q6_K weights: llama.cpp's q8_K. Each activation row is quantized
// per 256 values (scale d = max|x| / 127, q = x / d rounded to nearest even, and the sums of each
// 16 and each 32 q);
// a super-block's products stay integer (its sub-block scales and mins applied to exact sums) and
// meet floats once per 256 values and row, where the q8 form converts every 32. Each x_i moves by
// at most d / 2, d being its 256 values' step (coarser than q8's per 32). The same bits on every
// level and for every row count; fast on AVX-512 VNNI and AVX2, plain C elsewhere.

/// Bytes of the q8k form of m rows of k activations (k a multiple of 256).
size_t bk_q8k_bytes(size_t m, size_t k);

/// Writes the q8k form of x (m rows of k floats) into xq (bk_q8k_bytes(m, k) bytes, 4-byte
/// aligned). Returns BK_OK or BK_ERROR_SHAPE.
int bk_quantize_q8k(const float *x, size_t m, size_t k, void *xq);

/// As bk_matmul_nt for Q4_K, Q5_K or Q6_K weights with x in q8k form (from bk_quantize_q8k with the
/// same m and k). Returns BK_OK, BK_ERROR_TYPE (any other type) or BK_ERROR_SHAPE.
int bk_matmul_nt_q8k(uint32_t type, const void *xq, size_t m, size_t k, const void *w, size_t rowBytes,
                     size_t n0, size_t n1, float *y, size_t ldy);

int bk_quantize_q8k_at(int level, const float *x, size_t m, size_t k, void *xq);
int bk_matmul_nt_q8k_at(int level, uint32_t type, const void *xq, size_t m, size_t k, const void *w,
                        size_t rowBytes, size_t n0, size_t n1, float *y, size_t ldy);

// ---------------------------------------------------------------------------------------------
// Float-vector kernels of the decoding path (16 lanes; fused multiply-adds on the AVX2 and
// AVX-512 levels, so levels differ in the last bits; within a level a result depends only on
// its inputs). Single-threaded. The _at forms run a level above bk_best_level() as the portable one.

/// Σ a[i]·b[i] over n values: 16 lane sums, added pairwise, then the tail in order.
float bk_dot(const float *a, const float *b, size_t n);

/// y[i] += alpha·x[i] for i < n.
void bk_axpy(float alpha, const float *x, float *y, size_t n);

/// One query head's causal attention over `len` cached positions (len >= 1): s_j =
/// (q·k_j)·scale, p = softmax(s), out[0..<hd] = Σ_j p_j·v_j, where k_j = keys + j·stride and
/// v_j = values + j·stride (hd values each; float32, or IEEE half when `half` is nonzero: a
/// float16 KV cache, each value widened exactly before the same operations). `scores` is
/// scratch for len floats. e^x is a polynomial with about 2e-7 relative error.
void bk_attend(const float *q, const void *keys, const void *values, int half, size_t stride, size_t len, size_t hd,
               float scale, float *scores, float *out);

/// bk_attend for several queries over one KV head's cache: query (r, g), for rows r < `rows` and
/// heads g < `heads`, is q + r·ldq + g·hd, sees the first len[r] >= 1 positions and writes its hd
/// outputs at out + r·ldo + g·hd, each the bits bk_attend gives it alone. The queries share every
/// key and value read (a KV head's query heads; a verify pass's rows, which see one cache).
/// `scores` is scratch for rows·heads·max(len) floats.
void bk_attend_rows(const float *q, size_t ldq, size_t rows, size_t heads, const size_t *len, const void *keys,
                    const void *values, int half, size_t stride, size_t hd, float scale, float *scores, float *out,
                    size_t ldo);

/// y[i] = x[i] rounded to IEEE half (to nearest, ties to even; beyond the half range: ±inf),
/// i < n: the same bits on every level.
void bk_to_half(const float *x, uint16_t *y, size_t n);

/// x[0..<n] = softmax(scale·x[0..<n]) in place: scaled, less its maximum, e^ through the
/// polynomial bk_attend uses (about 2e-7 relative error), times 1 / the sum. A prompt's attention
/// rows. n = 0 does nothing.
void bk_softmax(float *x, size_t n, float scale);

/// out[i] = g·σ(g)·up[i] for g = gate[i], σ(g) = 1 / (1 + e^-g) (SwiGLU; out may alias gate or
/// up): each value's bits depend only on its own inputs, not on n or its position.
void bk_swiglu(const float *gate, const float *up, float *out, size_t n);

/// An adapter's up-projection added to y: y[row·ldy + o] += Σ_{j<r} u[row·r + j]·bt[j·out + o]
/// for row < m and o0 <= o < o1, with B stored transposed (bt [r, out]: float32, or IEEE half
/// when `half` is nonzero). Every output starts from zero and adds j = 0 ..< r in order, then
/// goes into y, whatever m, o0 and o1 (so rows and output ranges can be split freely).
void bk_lowrank_up(const float *u, size_t m, size_t r, const void *bt, int half, size_t out, size_t o0, size_t o1,
                   float *y, size_t ldy);

float bk_dot_at(int level, const float *a, const float *b, size_t n);
void bk_lowrank_up_at(int level, const float *u, size_t m, size_t r, const void *bt, int half, size_t out, size_t o0,
                      size_t o1, float *y, size_t ldy);
void bk_axpy_at(int level, float alpha, const float *x, float *y, size_t n);
void bk_attend_at(int level, const float *q, const void *keys, const void *values, int half, size_t stride, size_t len,
                  size_t hd, float scale, float *scores, float *out);
void bk_attend_rows_at(int level, const float *q, size_t ldq, size_t rows, size_t heads, const size_t *len, const void *keys,
                       const void *values, int half, size_t stride, size_t hd, float scale, float *scores, float *out,
                       size_t ldo);
void bk_to_half_at(int level, const float *x, uint16_t *y, size_t n);
void bk_softmax_at(int level, float *x, size_t n, float scale);
void bk_swiglu_at(int level, const float *gate, const float *up, float *out, size_t n);

#ifdef __cplusplus
}
#endif

#endif
