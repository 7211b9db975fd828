// The one place OpenBLAS enters the package: cblas for sgemm/dgemm, lapacke for solvers.
#include <cblas.h>
#include <lapacke.h>
