/* fxc CPU runtime: the parallel-for used by generated kernels. Linked into every CPU module.

   A small persistent pool (one per loaded module). The range is cut into chunks that threads claim
   with a compare-and-swap on (job generation, first unclaimed chunk, end of the unclaimed chunks); the
   caller works too and waits only for chunks another thread has actually claimed. So a worker the OS has
   not scheduled (a busy machine, PyTorch's own threads) never stalls a kernel: the caller simply runs the
   remaining chunks itself. The caller claims from the front of the range, the workers from its back: a
   thread keeps working on the same part of every kernel's range, so a kernel mostly reads what the same
   core wrote before it (the previous kernel's output, split the same way) from its own cache. Claimed in
   one order by all (the caller and the worker alternating over the chunks), half of every kernel's
   input came from the other core: PT2E MobileNetV2 int8 at 2 threads, its 17 word packs (serial: below
   PARALLEL_MIN_WORK) took twice their 1-thread time, 9 -> 4 us each at 14 x 14 this way.
   Workers spin between jobs for at most SPIN_NS (kernels follow each other closely; a bounded spin leaves
   the cores to PyTorch's own threads soon after a compiled graph returns), then sleep on a condvar; the
   caller wakes them (a futex syscall) only when one is actually asleep.
   A woken worker can land on the caller's own CPU (Linux places a wakee near its waker, and an idle CPU of
   a virtual machine may not pull it back for milliseconds): the two then share one core and every kernel
   runs at half speed. A worker that finds itself on the caller's CPU when it takes a job therefore moves
   off it (its affinity becomes the CPUs it was allowed minus that one).
   Concurrent callers (several Python or C threads) do not share the pool: a second one runs serially.
   The modules of a training step's graphs (and all with FXC_OPENMP=1) run their loops on OpenMP's team instead
   (fxc_use_openmp, runtime/cpu.py): beside PyTorch its own libgomp.so.1 is the one loaded, and its threads spin
   for a few ms after each of PyTorch's ops, so this pool would share the cores with them; on its team they take
   fxc's chunks instead. Other modules beside PyTorch take the team only while it is awake (fxc_use_openmp(2)). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef void (*fxc_body)(int64_t start, int64_t end, void **args);

#define MAX_THREADS 64
#define SPIN_NS 200000                     /* 0.2 ms */
#define WAKE_SPIN_NS 2000000               /* 2 ms: from fxc_wake to the call's first kernel */

static int fxc_threads = 0;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int started = 0;                      /* workers created (guarded by mu) */
static int sleepers = 0;                     /* workers waiting on `wake` (guarded by mu) */
static uint32_t wakes = 0;                   /* fxc_wake calls that found sleepers (guarded by mu) */
static atomic_flag busy = ATOMIC_FLAG_INIT;  /* a caller owns the pool */

static struct { fxc_body fn; void **args; int64_t n, nchunks; uint32_t gen; int cpu; } job;   /* guarded by mu */
static cpu_set_t allowed;                    /* the CPUs the first caller could run on */
static _Atomic uint64_t next_chunk;          /* gen << 32 | first unclaimed chunk << 16 | end of the unclaimed */
static _Atomic int64_t done_chunks;
static _Atomic uint32_t published_gen;
static int use_openmp = 0;                  /* 0: this pool, 1: OpenMP's team, 2: whichever is awake (below) */
static int on_team(int nt);

void fxc_set_num_threads(int n) { fxc_threads = n; }

/* Monotonic nanoseconds: the per-kernel profile (modules built with profile=True) reads it around each call. */
int64_t fxc_profile_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* A sample of the weights the prepack step read: the 32-bit words at offsets[k] bytes into inputs[index[k]], mixed
   into one 64-bit value. A write that bypasses the framework's version counter (PyTorch's `p.data.copy_(w)`) and
   changes a sampled word changes it, so the cached packing is redone (fxc/runtime/module.py). */
uint64_t fxc_fingerprint(void **inputs, const int64_t *index, const int64_t *offsets, int64_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int64_t k = 0; k < n; k++) {
        uint32_t w;
        __builtin_memcpy(&w, (const char *)inputs[index[k]] + offsets[k], 4);
        h = (h ^ w) * 0x100000001B3ull;
        h ^= h >> 29;
    }
    return h;
}

int fxc_get_num_threads(void) {
    if (fxc_threads > 0) return fxc_threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause");
#endif
}

/* One chunk claimed from the range in *word (gen << 32 | first unclaimed chunk << 16 | end of the unclaimed): the
   first of those left (from_back 0: the caller) or the last (a worker); -1 when none is left or the word holds another
   job's range. */
static int64_t claim(_Atomic uint64_t *word, uint32_t gen, int from_back) {
    for (;;) {
        uint64_t v = atomic_load(word);
        if ((uint32_t)(v >> 32) != gen) return -1;
        int64_t first = (int64_t)((v >> 16) & 0xffffu), end = (int64_t)(v & 0xffffu);
        if (first >= end) return -1;
        if (atomic_compare_exchange_weak(word, &v, from_back ? v - 1 : v + (1u << 16)))
            return from_back ? end - 1 : first;
    }
}

static void run_chunks(fxc_body fn, void **args, int64_t n, int64_t nchunks, uint32_t gen, int from_back) {
    for (int64_t c; (c = claim(&next_chunk, gen, from_back)) >= 0;) {
        fn(n * c / nchunks, n * (c + 1) / nchunks, args);
        atomic_fetch_add(&done_chunks, 1);
    }
}

static void move_off(int cpu) {               /* leave `cpu` (the caller's) if another CPU is allowed */
    cpu_set_t set = allowed;
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set)) return;
    CPU_CLR(cpu, &set);
    if (CPU_COUNT(&set) > 0) sched_setaffinity(0, sizeof set, &set);
}

static void *worker(void *unused) {
    (void)unused;
    uint32_t seen = 0;
    int64_t spin = SPIN_NS;
    for (;;) {
        int64_t t0 = fxc_profile_now();
        for (int i = 1; atomic_load(&published_gen) == seen; i++) {
            cpu_relax();
            if (!(i & 255) && fxc_profile_now() - t0 > spin) break;
        }
        pthread_mutex_lock(&mu);
        if (job.gen == seen) {
            uint32_t w = wakes;
            sleepers++;
            while (job.gen == seen && wakes == w) pthread_cond_wait(&wake, &mu);
            sleepers--;
            if (job.gen == seen) {           /* woken ahead of a call (fxc_wake): spin for its first job */
                pthread_mutex_unlock(&mu);
                spin = WAKE_SPIN_NS;
                continue;
            }
        }
        spin = SPIN_NS;
        fxc_body fn = job.fn;
        void **args = job.args;
        int64_t n = job.n, nchunks = job.nchunks;
        seen = job.gen;
        int caller_cpu = job.cpu;
        pthread_mutex_unlock(&mu);
        if (sched_getcpu() == caller_cpu) move_off(caller_cpu);
        run_chunks(fn, args, n, nchunks, seen, 1);
    }
    return NULL;
}

static void reset_after_fork(void) {          /* the child has no workers */
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    mu = m;
    wake = c;
    started = 0;
    sleepers = 0;
    atomic_flag_clear(&busy);
}

static int start_workers(int nt) {            /* called with mu held; returns workers running */
    if (!started) {
        pthread_atfork(NULL, NULL, reset_after_fork);
        started = 1;
        if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) CPU_ZERO(&allowed);
        for (int i = 1; i < nt && i < MAX_THREADS; i++) {
            pthread_t t;
            pthread_attr_t a;
            pthread_attr_init(&a);
            pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &a, worker, NULL) == 0) started++;
            pthread_attr_destroy(&a);
        }
    }
    return started - 1;
}

/* A call is about to run kernels (the caller still has its own preparations to make): sleeping workers wake now
   and spin for its first job, so the wake-up (a futex syscall, on a virtual machine often an idle vCPU's exit)
   overlaps those preparations instead of delaying the first kernel. Cheap when they are already awake. */
void fxc_wake(void) {
    if (use_openmp && on_team(fxc_get_num_threads())) return;    /* the call runs on OpenMP's team */
    pthread_mutex_lock(&mu);
    if (sleepers > 0) {
        wakes++;
        pthread_cond_broadcast(&wake);
    }
    pthread_mutex_unlock(&mu);
}
/* OpenMP's team (libgomp.so.1: PyTorch's own copy once torch is loaded, the soname being the same) instead of
   this pool: fxc_use_openmp(1). Its threads claim the same chunks; the call returns at the team's barrier.
   fxc_use_openmp(2), the default beside PyTorch, picks per call: the team while its threads are awake (they spin
   for 6-10 ms after each of PyTorch's parallel ops; beside them this pool's workers got half a core, and a
   MobileNetV2 call right after one took 6-8 ms instead of 3.7), this pool after idle (it wakes faster, and its
   workers step off the caller's CPU). Awake is read from the team threads' state in /proc (R: running), at most
   once every OMP_CHECK_NS. */
extern void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) __attribute__((weak));
#define OMP_CHECK_NS 500000                 /* 0.5 ms */
static int team_fds[MAX_THREADS], team_n = -1;   /* /proc/self/task/<tid>/stat of the team's other threads */
static pthread_t team_caller;
static int64_t team_checked = 0;
static int team_awake = 0;

static void forget_team(void) {             /* close the recorded stat files: the team is recorded again */
    for (int i = 0; i < team_n && i < MAX_THREADS; i++) close(team_fds[i]);
    team_n = -1;
}

static void openmp_off(void) {              /* a forked child: libgomp's team is the parent's (it hangs) */
    use_openmp = 0;
    forget_team();
}
void fxc_use_openmp(int on) {
    static int hooked = 0;
    if (on && !hooked && pthread_atfork(NULL, NULL, openmp_off) == 0) hooked = 1;
    use_openmp = hooked && GOMP_parallel != 0 ? on : 0;
}
int fxc_uses_openmp(void) { return use_openmp; }
static int last_on_team = 0;
int fxc_last_loop_on_team(void) { return last_on_team; }   /* where the last parallel loop ran (1: OpenMP's team) */

static void record_tid(void *p) {           /* a team thread opens its own /proc stat file */
    pthread_t *caller = p;
    if (pthread_equal(pthread_self(), *caller)) return;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", (long)syscall(SYS_gettid));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    int k = __atomic_fetch_add(&team_n, 1, __ATOMIC_RELAXED);
    if (k < MAX_THREADS) team_fds[k] = fd; else close(fd);
}

static int team_is_awake(int nt) {          /* is a thread of the caller's OpenMP team running? */
    pthread_t self = pthread_self();
    if (team_n < 0) {                         /* the first caller's team (another caller's runs on this pool) */
        team_n = 0;
        team_caller = self;
        GOMP_parallel(record_tid, &self, (unsigned)nt, 0);
        return 1;                             /* it has just run */
    }
    if (!pthread_equal(self, team_caller)) return 0;
    char buf[512];
    for (int i = 0; i < team_n && i < MAX_THREADS; i++) {
        ssize_t got = pread(team_fds[i], buf, sizeof buf - 1, 0);
        if (got <= 0) {                       /* the thread is gone: the team is recorded again next time */
            forget_team();
            return 0;
        }
        buf[got] = 0;
        char *close_paren = strrchr(buf, ')');
        if (close_paren && close_paren[1] == ' ' && close_paren[2] == 'R') return 1;
    }
    return 0;
}

static int on_team(int nt) {                /* does this parallel loop run on OpenMP's team? */
    static atomic_flag checking = ATOMIC_FLAG_INIT;
    if (use_openmp != 2) return use_openmp;
    int64_t now = fxc_profile_now();
    if (now - team_checked > OMP_CHECK_NS && !atomic_flag_test_and_set(&checking)) {
        team_awake = team_is_awake(nt);
        team_checked = now;
        atomic_flag_clear(&checking);
    }
    return team_awake;
}

struct omp_job { fxc_body fn; void **args; int64_t n, nchunks; _Atomic uint64_t next; pthread_t caller; };

static void omp_body(void *p) {             /* the team's threads claim as the pool's: the caller from the front */
    struct omp_job *j = p;
    int from_back = !pthread_equal(pthread_self(), j->caller);
    for (int64_t c; (c = claim(&j->next, 0, from_back)) >= 0;)
        j->fn(j->n * c / j->nchunks, j->n * (c + 1) / j->nchunks, j->args);
}

void fxc_parallel_for(fxc_body fn, void **args, int64_t n) {
    int nt = fxc_get_num_threads();
    if (nt > n) nt = (int)n;
    int64_t nchunks = n < 8 * (int64_t)nt ? n : 8 * (int64_t)nt;
    if (nchunks > 0xffff) nchunks = 0xffff;       /* (next_chunk's 16-bit fields) */
    last_on_team = nt > 1 && use_openmp && on_team(nt);
    if (last_on_team) {
        struct omp_job j = {fn, args, n, nchunks, (uint64_t)nchunks, pthread_self()};
        GOMP_parallel(omp_body, &j, (unsigned)nt, 0);
        return;
    }
    if (nt <= 1 || atomic_flag_test_and_set(&busy)) { if (n > 0) fn(0, n, args); return; }
    pthread_mutex_lock(&mu);
    if (start_workers(nt) <= 0) {
        pthread_mutex_unlock(&mu);
        atomic_flag_clear(&busy);
        fn(0, n, args);
        return;
    }
    uint32_t gen = job.gen + 1;
    if (gen == 0) gen = 1;
    job.fn = fn; job.args = args; job.n = n; job.nchunks = nchunks; job.cpu = sched_getcpu();
    atomic_store(&done_chunks, 0);
    atomic_store(&next_chunk, (uint64_t)gen << 32 | (uint64_t)nchunks);
    job.gen = gen;
    atomic_store(&published_gen, gen);
    if (sleepers > 0) pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&mu);
    run_chunks(fn, args, n, nchunks, gen, 0);
    while (atomic_load(&done_chunks) < nchunks) sched_yield();
    atomic_flag_clear(&busy);
}
