// How fast two threads read weight rows from memory in the orders the decoding kernels could take
// them: row after row (one stream per thread) or four rows side by side (four streams, 144 bytes
// of each in turn, a K-quant super-block), with and without software prefetch. The figures in
// the block kernels' comments (avx512.c product, q8k.c vnni_tile_w4) come from it.
//
//   cc -O2 -march=native -pthread -o /tmp/stream-order scripts/probes/stream-order.c
//   /tmp/stream-order [rounds] [prefetch distance in rows, default 8]
//
// Prints per round the best of three passes over ~2 GB, in GB/s, for each order:
//   rows        row after row
//   rows+T1     row after row, prefetch (T1) the same place eight rows on
//   side        four rows side by side, no software prefetch
//   side+T1     four rows side by side, prefetch (T1) each row's block eight rows on
//   side+NTA    the same with non-temporal prefetch
//   side+lin    four rows side by side, prefetch (T0) in address order eight rows on
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROW = 1728, BLOCK = 144 };  // Phi-4-mini's Q4_K rows (k = 3072): 12 blocks of 144 bytes
static uint8_t *buf;
static size_t total, ahead = 8;
static int order;
static volatile long long sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct { size_t a, b; } span;

static void *work(void *arg) {
    const span *s = arg;
    __m256i acc = _mm256_setzero_si256();
    if (order <= 1) {
        for (size_t i = s->a; i < s->b; i += 64) {
            if (order == 1 && i % 128 == 0) {
                _mm_prefetch((const char *)buf + i + ahead * ROW, _MM_HINT_T1);
                _mm_prefetch((const char *)buf + i + 64 + ahead * ROW, _MM_HINT_T1);
            }
            acc = _mm256_add_epi64(acc, _mm256_load_si256((const __m256i *)(buf + i)));
            acc = _mm256_add_epi64(acc, _mm256_load_si256((const __m256i *)(buf + i + 32)));
        }
    } else {
        for (size_t g = s->a; g + 4 * ROW <= s->b; g += 4 * ROW)
            for (size_t b = 0; b < ROW; b += BLOCK)
                for (int j = 0; j < 4; j++) {
                    const uint8_t *p = buf + g + j * ROW + b;
                    const char *lin = (const char *)buf + g + ahead * ROW + (b / BLOCK * 4 + j) * BLOCK;
                    for (int o = 0; o < BLOCK; o += 64) {
                        if (order == 3) _mm_prefetch((const char *)p + ahead * ROW + o, _MM_HINT_T1);
                        if (order == 4) _mm_prefetch((const char *)p + ahead * ROW + o, _MM_HINT_NTA);
                        if (order == 5) _mm_prefetch(lin + o, _MM_HINT_T0);
                    }
                    for (int o = 0; o < BLOCK; o += 16) acc = _mm256_add_epi64(acc, _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + o))));
                }
    }
    long long out[4];
    _mm256_storeu_si256((__m256i *)out, acc);
    sink += out[0] + out[1] + out[2] + out[3];
    return 0;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 3;
    if (argc > 2) ahead = (size_t)atoi(argv[2]);
    total = (size_t)2000 * 1024 * 1024 / (4 * ROW) * (4 * ROW);
    const size_t spare = 64 * ROW;
    buf = aligned_alloc(64, total + spare);
    if (!buf) return 1;
    memset(buf, 1, total + spare);
    const char *names[] = {"rows", "rows+T1", "side", "side+T1", "side+NTA", "side+lin"};
    for (int r = 0; r < rounds; r++) {
        for (order = 0; order < 6; order++) {
            double best = 0;
            for (int pass = 0; pass < 3; pass++) {
                const size_t half = total / 2 / (4 * ROW) * (4 * ROW);
                span a = {0, half}, b = {half, total};
                pthread_t t;
                const double t0 = now();
                pthread_create(&t, 0, work, &b);
                work(&a);
                pthread_join(t, 0);
                const double gbs = total / (now() - t0) / 1e9;
                if (gbs > best) best = gbs;
            }
            printf("%s %.1f  ", names[order], best);
            fflush(stdout);
        }
        printf("\n");
    }
    return 0;
}
