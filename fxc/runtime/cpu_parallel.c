/* fxc CPU runtime: the parallel-for used by generated kernels. Linked into every CPU module. */
#include <stdint.h>
#include <omp.h>

typedef void (*fxc_body)(int64_t start, int64_t end, void **args);
static int fxc_threads = 0;

void fxc_set_num_threads(int n) { fxc_threads = n; }
int fxc_get_num_threads(void) { return fxc_threads > 0 ? fxc_threads : omp_get_num_procs(); }

void fxc_parallel_for(fxc_body fn, void **args, int64_t n) {
    int nt = fxc_get_num_threads();
    if (nt > n) nt = (int)n;
    if (nt <= 1) { if (n > 0) fn(0, n, args); return; }
    #pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), k = omp_get_num_threads();
        int64_t s = n * t / k, e = n * (t + 1) / k;
        if (s < e) fn(s, e, args);
    }
}
