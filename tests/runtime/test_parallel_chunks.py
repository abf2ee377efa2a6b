"""The CPU runtime's parallel-for (fxc/runtime/cpu/cpu_parallel.c), driven by a small C program linked with it: every
index of a range runs exactly once, whatever the range's extent against the threads (1, 2, 3, odd, past the chunk
count); the calling thread claims chunks from the front of the range and the workers from its back, so the caller's
indices are a prefix of the range and the workers' the rest (the order that keeps each core on the same part of
consecutive kernels' ranges); the same on OpenMP's team. Chunk bodies of uneven lengths, many jobs in a row. Checks
which thread ran what, never how fast."""
import subprocess

import pytest

from fxc.backends.llvm.compile import RUNTIME_C
from fxc.backends.llvm.toolchain import toolchain
from fxc.target import host_triple

HARNESS = r"""
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*fxc_body)(int64_t start, int64_t end, void **args);
void fxc_set_num_threads(int n);
void fxc_parallel_for(fxc_body fn, void **args, int64_t n);
void fxc_use_openmp(int on);
int fxc_last_loop_on_team(void);

static _Atomic int *hits;
static _Atomic int64_t caller_end, worker_start;
static pthread_t caller;

static void body(int64_t start, int64_t end, void **args) {
    (void)args;
    volatile uint64_t spin = 0;
    for (int64_t i = start; i < end; i++) {
        atomic_fetch_add(&hits[i], 1);
        for (int64_t k = 0; k < (i * 7919) % 97; k++) spin += (uint64_t)k;     /* uneven chunk lengths */
    }
    if (pthread_equal(pthread_self(), caller)) {
        int64_t e = atomic_load(&caller_end);
        while (end > e && !atomic_compare_exchange_weak(&caller_end, &e, end)) {}
    } else {
        int64_t s = atomic_load(&worker_start);
        while (start < s && !atomic_compare_exchange_weak(&worker_start, &s, start)) {}
    }
}

int main(int argc, char **argv) {
    fxc_set_num_threads(atoi(argv[1]));
    int repeats = atoi(argv[2]), team = atoi(argv[3]);
    fxc_use_openmp(team);
    caller = pthread_self();
    for (int a = 4; a < argc; a++) {
        int64_t n = atoll(argv[a]);
        hits = calloc((size_t)n, sizeof *hits);
        for (int r = 0; r < repeats; r++) {
            for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
            atomic_store(&caller_end, 0);
            atomic_store(&worker_start, n);
            fxc_parallel_for(body, NULL, n);
            if (fxc_last_loop_on_team() != (team && n > 1 && atoi(argv[1]) > 1)) {
                printf("n=%lld: ran on %s\n", (long long)n, team ? "the pool" : "the team");
                return 1;
            }
            for (int64_t i = 0; i < n; i++)
                if (atomic_load(&hits[i]) != 1) { printf("n=%lld: index %lld ran %d times\n", (long long)n,
                                                        (long long)i, atomic_load(&hits[i])); return 1; }
            if (atomic_load(&caller_end) > atomic_load(&worker_start)) {
                printf("n=%lld: the caller ran up to %lld, a worker from %lld\n", (long long)n,
                       (long long)atomic_load(&caller_end), (long long)atomic_load(&worker_start));
                return 1;
            }
        }
        free(hits);
    }
    printf("ok\n");
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    d = tmp_path_factory.mktemp("parallel")
    (d / "harness.c").write_text(HARNESS)
    exe = d / "harness"
    # libgomp linked whatever the linker's --as-needed (the runtime's GOMP_parallel is a weak reference)
    subprocess.run([toolchain(host_triple()).cc, "-O2", "-pthread", "-fopenmp", str(d / "harness.c"), str(RUNTIME_C),
                    "-o", str(exe), "-Wl,--no-as-needed", "-lgomp"], check=True, capture_output=True)
    return exe


@pytest.mark.parametrize("team", [0, 1], ids=["pool", "openmp"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_index_once_caller_from_the_front(harness, threads, team):
    """On fxc's pool and on OpenMP's team (fxc_use_openmp(1): the modules beside PyTorch's busy team)."""
    extents = ["1", "2", "3", "5", "7", "15", "16", "17", "24", "25", "100", "1001", "70001"]
    p = subprocess.run([str(harness), str(threads), "60", str(team), *extents], capture_output=True, text=True,
                       timeout=300, env={"OMP_WAIT_POLICY": "passive"})
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
