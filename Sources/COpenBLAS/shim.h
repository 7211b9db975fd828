// The one place OpenBLAS enters the package: cblas for sgemm/dgemm (no LAPACK: nothing solves), and
// the kernel choice fixed up where OpenBLAS's own detection fails (below).
#include <cblas.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/// The OpenBLAS core type this CPU can run at its best: "SkylakeX" with AVX-512 (F, CD, DQ, BW,
/// VL, and the OS saving the zmm state), "Haswell" with AVX2 and FMA, else NULL.
static inline const char *adapter_blas_preferred_core(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return NULL;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return NULL;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const int ymm = (lo & 0x6) == 0x6, zmm = (lo & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return NULL;
    const int avx2 = (b >> 5) & 1;
    const int avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 28) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);
    if (zmm && avx512 && avx2 && fma) return "SkylakeX";
    if (ymm && avx2 && fma) return "Haswell";
#endif
    return NULL;
}

/// A DYNAMIC_ARCH OpenBLAS picks its kernels by CPU model when loaded, and an OpenBLAS older
/// than the CPU does not know the model: Debian 12's 0.3.21 on an Intel family 6 model 207 falls
/// back to its Prescott (SSE3) kernels, whose sgemm ran 83 GFLOPS where SkylakeX's ran 398 on the
/// same 2 cores. When that happened (the core is "Prescott" on a CPU with AVX2), and
/// OPENBLAS_CORETYPE does not say otherwise, this selects the preferred core through
/// OpenBLAS's own exported re-initialization (gotoblas_dynamic_quit/init, which read
/// OPENBLAS_CORETYPE; the variable is set for that call only). Call it before the first BLAS
/// call. Returns the core in use.
static inline const char *adapter_blas_select_core(void) {
    const char *name = openblas_get_corename();
    const char *want = adapter_blas_preferred_core();
    if (getenv("OPENBLAS_CORETYPE") != NULL || name == NULL || want == NULL || strcmp(name, "Prescott") != 0) return name;
    void *self = dlopen(NULL, RTLD_NOW);
    void (*quit)(void) = self ? (void (*)(void))dlsym(self, "gotoblas_dynamic_quit") : NULL;
    void (*init)(void) = self ? (void (*)(void))dlsym(self, "gotoblas_dynamic_init") : NULL;
    if (quit == NULL || init == NULL) return name;  // not a DYNAMIC_ARCH build: nothing to choose
    setenv("OPENBLAS_CORETYPE", want, 1);
    quit();
    init();
    unsetenv("OPENBLAS_CORETYPE");
    return openblas_get_corename();
}
