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

/// The OpenBLAS core that stands for the level ADAPTER_CPU_LEVEL names (CBlockKernels' level
/// names, read there too: bk_level_request) when that level is below what this CPU runs:
/// "Haswell" for avx2 (AVX2 + FMA, as a Zen 3's "Zen" kernels), "Sandybridge" for portable (AVX
/// without FMA: a CPU without AVX2 rounds every product before adding it); NULL otherwise
/// (unset, unknown, or a level the CPU's own best kernels already are: avx512 and avx512vnni
/// both take SkylakeX's).
static inline const char *adapter_blas_level_core(void) {
    const char *v = getenv("ADAPTER_CPU_LEVEL");
    if (v == NULL) return NULL;
    const char *best = adapter_blas_preferred_core();
    const int cpu = best == NULL ? 0 : strcmp(best, "Haswell") == 0 ? 1 : 2;
    const int want = strcmp(v, "portable") == 0 ? 0 : strcmp(v, "avx2") == 0 ? 1
                   : strcmp(v, "avx512") == 0 || strcmp(v, "avx512vnni") == 0 ? 2 : -1;
    if (want < 0 || want >= cpu) return NULL;
    return want == 0 ? "Sandybridge" : "Haswell";
}

/// A DYNAMIC_ARCH OpenBLAS picks its kernels by CPU model when loaded, and an OpenBLAS older
/// than the CPU does not know the model: Debian 12's 0.3.21 on an Intel family 6 model 207 falls
/// back to its Prescott (SSE3) kernels, whose sgemm ran 83 GFLOPS where SkylakeX's ran 398 on the
/// same 2 cores. When that happened (the core is "Prescott" on a CPU with AVX2), and
/// OPENBLAS_CORETYPE does not say otherwise, this selects the preferred core through
/// OpenBLAS's own exported re-initialization (gotoblas_dynamic_quit/init, which read
/// OPENBLAS_CORETYPE; the variable is set for that call only). ADAPTER_CPU_LEVEL below the
/// CPU's best selects that level's core the same way (adapter_blas_level_core), so a test run
/// at a lower level multiplies as such a CPU would. Call it before the first BLAS call.
/// Returns the core in use.
static inline const char *adapter_blas_select_core(void) {
    const char *name = openblas_get_corename();
    if (getenv("OPENBLAS_CORETYPE") != NULL || name == NULL) return name;
    const char *want = adapter_blas_level_core();
    if (want == NULL) {
        want = adapter_blas_preferred_core();
        if (want == NULL || strcmp(name, "Prescott") != 0) return name;
    }
    if (strcmp(name, want) == 0) return name;
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
