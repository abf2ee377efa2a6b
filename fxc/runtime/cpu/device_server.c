/* fxc device server: runs fxc artifacts' libraries sent over TCP and returns their timings (and outputs), so a
 * machine without Python (a Raspberry Pi, a board under qemu-user) can measure for a tuner on another machine.
 * The client is fxc/runtime/remote.py (measure_remote / run_remote); `fxc serve-device` builds and starts this.
 *
 *   device_server [--host 127.0.0.1] [--port 9190] [--once]     (port 0: any free port, printed on stdout)
 *
 * One request per connection, one connection at a time (measurements never overlap). Little-endian throughout;
 * a blob is a u64 byte count and the bytes:
 *   request   "FXCQ" u32 version(1) u32 number u32 repeat u32 threads(0: all cores) u32 n_inputs u32 want_outputs
 *             blob library (libfxc_model.so)  blob params (params.bin)  n_inputs x blob input
 *             (n_inputs 0: zero-filled inputs of the model's sizes, else exactly the model's inputs)
 *   response  "FXCR" i32 status(0: ok) blob message  u32 repeat  repeat x f64 seconds per run (the mean over
 *             `number` runs, after one warm-up run)  u32 n_outputs  n_outputs x blob output (of the warm-up run)
 * The library runs with this process's rights: serve only a network you trust (the default host is 127.0.0.1).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define VERSION 1
#define MAX_BLOB ((uint64_t)2 << 30)     /* 2 GiB: larger is refused before allocating */
#define MAX_TENSORS 4096

static unsigned run_limit = 600;     /* seconds a model's run may take before its process is killed (--run-limit) */

typedef struct { const char *name, *dtype; int ndim; const int64_t *shape; size_t nbytes; } tensor_info;

static int read_all(int fd, void *p, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t r = recv(fd, (char *)p + got, n - got, 0);
        if (r <= 0) { if (r < 0 && errno == EINTR) continue; return -1; }
        got += (size_t)r;
    }
    return 0;
}

static int write_all(int fd, const void *p, size_t n) {
    for (size_t sent = 0; sent < n;) {
        ssize_t r = send(fd, (const char *)p + sent, n - sent, MSG_NOSIGNAL);
        if (r <= 0) { if (r < 0 && errno == EINTR) continue; return -1; }
        sent += (size_t)r;
    }
    return 0;
}

static int read_u32(int fd, uint32_t *v) {
    unsigned char b[4];
    if (read_all(fd, b, 4)) return -1;
    *v = b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}

static int write_u32(int fd, uint32_t v) {
    unsigned char b[4] = { v, v >> 8, v >> 16, v >> 24 };
    return write_all(fd, b, 4);
}

static int write_u64(int fd, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    return write_all(fd, b, 8);
}

/* a blob into malloc'd memory (64-byte aligned; *n its size); -1 on a broken connection or an oversized blob */
static int read_blob(int fd, void **p, uint64_t *n) {
    unsigned char b[8];
    *p = NULL;
    if (read_all(fd, b, 8)) return -1;
    *n = 0;
    for (int i = 0; i < 8; i++) *n |= (uint64_t)b[i] << (8 * i);
    if (*n > MAX_BLOB) return -1;
    if (!(*p = aligned_alloc(64, (*n + 63) / 64 * 64 + 64))) return -1;
    return read_all(fd, *p, (size_t)*n);
}

static int write_blob(int fd, const void *p, uint64_t n) { return write_u64(fd, n) || write_all(fd, p, (size_t)n); }

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef struct {
    char message[1024];
    uint32_t repeat, n_out;
    double *costs;
    void **outputs;
    size_t *out_bytes;
} result;

/* load the library from dir, run it, fill r; 0 on success, else a message in r->message */
static int run_model(const char *dir, uint32_t number, uint32_t repeat, uint32_t threads, uint32_t n_in,
                     void **in_blobs, const uint64_t *in_sizes, result *r) {
    char path[4200];
    snprintf(path, sizeof path, "%s/libfxc_model.so", dir);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) { snprintf(r->message, sizeof r->message, "cannot load the library: %s", dlerror()); return 1; }
    int (*init)(const char *) = (int (*)(const char *))dlsym(lib, "fxc_init");
    int (*run)(const void **, void **) = (int (*)(const void **, void **))dlsym(lib, "fxc_main");
    int (*num_in)(void) = (int (*)(void))dlsym(lib, "fxc_num_inputs");
    int (*num_out)(void) = (int (*)(void))dlsym(lib, "fxc_num_outputs");
    int (*num_sym)(void) = (int (*)(void))dlsym(lib, "fxc_num_symbols");
    const tensor_info *(*in_info)(int) = (const tensor_info *(*)(int))dlsym(lib, "fxc_input_info");
    const tensor_info *(*out_info)(int) = (const tensor_info *(*)(int))dlsym(lib, "fxc_output_info");
    const char *(*last_error)(void) = (const char *(*)(void))dlsym(lib, "fxc_last_error");
    void (*set_threads)(int) = (void (*)(int))dlsym(lib, "fxc_set_num_threads");
    void (*release)(void) = (void (*)(void))dlsym(lib, "fxc_free");
    int rc = 1, ni = 0, no = 0;
    void **inputs = NULL;
    if (!init || !run || !num_in || !num_out || !in_info || !out_info || !last_error || !release) {
        snprintf(r->message, sizeof r->message, "the library lacks the fxc C entry points (not an fxc artifact's "
                 "libfxc_model.so?)");
        goto done;
    }
    if (num_sym && num_sym() > 0) {
        snprintf(r->message, sizeof r->message, "the model has size symbols: the device server measures static "
                 "builds (export one at the sizes to measure)");
        goto done;
    }
    ni = num_in(), no = num_out();
    if (ni < 0 || no < 0 || ni > MAX_TENSORS || no > MAX_TENSORS || (n_in && (int)n_in != ni)) {
        snprintf(r->message, sizeof r->message, "the model takes %d inputs; the request sent %u", ni, n_in);
        goto done;
    }
    if (init(dir) != 0) { snprintf(r->message, sizeof r->message, "fxc_init: %s", last_error()); goto done; }
    if (set_threads) set_threads((int)threads);
    inputs = calloc((size_t)ni + 1, sizeof *inputs);
    r->outputs = calloc((size_t)no + 1, sizeof *r->outputs);
    r->out_bytes = calloc((size_t)no + 1, sizeof *r->out_bytes);
    r->costs = calloc((size_t)repeat + 1, sizeof *r->costs);
    if (!inputs || !r->outputs || !r->out_bytes || !r->costs) { snprintf(r->message, sizeof r->message,
                                                                          "out of memory"); goto released; }
    for (int i = 0; i < ni; i++) {
        size_t n = in_info(i)->nbytes;
        if (n_in && in_sizes[i] != n) {
            snprintf(r->message, sizeof r->message, "input %d (%s) has %llu bytes; the model takes %zu", i,
                     in_info(i)->name, (unsigned long long)in_sizes[i], n);
            goto released;
        }
        if (!n_in && !(in_blobs[i] = calloc(1, n + 64))) {
            snprintf(r->message, sizeof r->message, "out of memory");
            goto released;
        }
        inputs[i] = in_blobs[i];
    }
    r->n_out = (uint32_t)no;            /* (serve_one frees the outputs allocated so far) */
    for (int i = 0; i < no; i++) {
        r->out_bytes[i] = out_info(i)->nbytes;
        if (!(r->outputs[i] = aligned_alloc(64, (r->out_bytes[i] + 63) / 64 * 64 + 64))) {
            snprintf(r->message, sizeof r->message, "out of memory");
            goto released;
        }
    }
    if (run((const void **)inputs, r->outputs) != 0) {        /* the warm-up run, whose outputs are returned */
        snprintf(r->message, sizeof r->message, "fxc_main: %s", last_error());
        goto released;
    }
    for (uint32_t k = 0; k < repeat; k++) {
        double t0 = now();
        for (uint32_t j = 0; j < number; j++)
            if (run((const void **)inputs, r->outputs) != 0) {
                snprintf(r->message, sizeof r->message, "fxc_main: %s", last_error());
                goto released;
            }
        r->costs[k] = (now() - t0) / number;
    }
    r->repeat = repeat;
    rc = 0;
released:
    release();
done:
    free(inputs);
    return rc;      /* the library stays loaded: its thread pool's threads sleep in it until the child exits */
}

/* the response (see the top); a broken connection only ends it early */
static void reply(int fd, int status, const result *r, int want_outputs) {
    if (write_all(fd, "FXCR", 4) || write_u32(fd, (uint32_t)status) || write_blob(fd, r->message, strlen(r->message))
        || write_u32(fd, status ? 0 : r->repeat))
        return;
    for (uint32_t k = 0; !status && k < r->repeat; k++) {
        uint64_t bits;
        memcpy(&bits, &r->costs[k], 8);
        if (write_u64(fd, bits)) return;
    }
    uint32_t n_out = status || !want_outputs ? 0 : r->n_out;
    if (write_u32(fd, n_out)) return;
    for (uint32_t i = 0; i < n_out; i++)
        if (write_blob(fd, r->outputs[i], r->out_bytes[i])) return;
}

static void serve_one(int fd) {
    result r = { .message = "" };
    uint32_t head[7];
    void *lib = NULL, *params = NULL, *in_blobs[MAX_TENSORS + 1] = { 0 };
    uint64_t lib_n = 0, params_n = 0, in_sizes[MAX_TENSORS + 1] = { 0 };
    char dir[] = "/tmp/fxc-device-XXXXXX", path[64];
    int status = 1, made = 0;
    for (int i = 0; i < 7; i++)
        if (read_u32(fd, &head[i])) goto out;
    if (memcmp(head, "FXCQ", 4) || head[1] != VERSION) {
        snprintf(r.message, sizeof r.message, "not an fxc device request (or another protocol version: this "
                 "server speaks %d)", VERSION);
        goto reply;
    }
    uint32_t number = head[2], repeat = head[3], threads = head[4], n_in = head[5];
    if (number < 1 || repeat < 1 || repeat > 100000 || n_in > MAX_TENSORS) {
        snprintf(r.message, sizeof r.message, "number and repeat must be at least 1 (repeat at most 100000)");
        goto reply;
    }
    if (read_blob(fd, &lib, &lib_n) || read_blob(fd, &params, &params_n)) goto out;
    for (uint32_t i = 0; i < n_in; i++)
        if (read_blob(fd, &in_blobs[i], &in_sizes[i])) goto out;
    if (!mkdtemp(dir)) { snprintf(r.message, sizeof r.message, "cannot make a temporary folder"); goto reply; }
    made = 1;
    snprintf(path, sizeof path, "%s/libfxc_model.so", dir);
    int wrote = write_file(path, lib, (size_t)lib_n);
    snprintf(path, sizeof path, "%s/params.bin", dir);
    if (wrote || write_file(path, params, (size_t)params_n)) {
        snprintf(r.message, sizeof r.message, "cannot write the model to %s", dir);
        goto reply;
    }
    /* the model runs in a child: its library (and its thread pool's threads) go with it, and a crash in it is an
       answer, not the server's end */
    pid_t child = fork();
    if (child == 0) {
        alarm(run_limit);               /* a model that hangs is killed: the server stays free for the next request */
        status = run_model(dir, number, repeat, threads, n_in, in_blobs, in_sizes, &r);
        printf("fxc device server: %s (%u x %u runs)%s%s\n", status ? "failed" : "measured", repeat, number,
               status ? ": " : "", r.message);
        fflush(stdout);
        reply(fd, status, &r, head[6]);
        _exit(0);
    }
    int how = 0;
    if (child < 0) snprintf(r.message, sizeof r.message, "cannot start a process for the model: %s", strerror(errno));
    else if (waitpid(child, &how, 0) < 0)
        snprintf(r.message, sizeof r.message, "lost the model's process: %s", strerror(errno));
    else if (WIFSIGNALED(how) && WTERMSIG(how) == SIGALRM)
        snprintf(r.message, sizeof r.message, "the model's run took longer than %u s and was stopped (the server's "
                 "--run-limit)", run_limit);
    else if (!WIFEXITED(how))
        snprintf(r.message, sizeof r.message, "the model's run crashed (signal %d)", WIFSIGNALED(how) ? WTERMSIG(how)
                 : 0);
    else goto out;                      /* the child answered */
reply:
    reply(fd, status, &r, 0);
out:
    if (made) {
        snprintf(path, sizeof path, "%s/libfxc_model.so", dir);
        unlink(path);
        snprintf(path, sizeof path, "%s/params.bin", dir);
        unlink(path);
        rmdir(dir);
    }
    for (uint32_t i = 0; i < r.n_out; i++) free(r.outputs[i]);
    for (int i = 0; i <= MAX_TENSORS; i++) free(in_blobs[i]);
    free(r.outputs);
    free(r.out_bytes);
    free(r.costs);
    free(lib);
    free(params);
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1", *port = "9190";
    int once = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--host") && i + 1 < argc) host = argv[++i];
        else if (!strcmp(argv[i], "--port") && i + 1 < argc) port = argv[++i];
        else if (!strcmp(argv[i], "--once")) once = 1;
        else if (!strcmp(argv[i], "--run-limit") && i + 1 < argc && atoi(argv[i + 1]) > 0) run_limit = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--host 127.0.0.1] [--port 9190] [--run-limit 600] [--once]\n", argv[0]);
            return 2;
        }
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
    int e = getaddrinfo(host, port, &hints, &ai);
    if (e) { fprintf(stderr, "fxc device server: %s:%s: %s\n", host, port, gai_strerror(e)); return 1; }
    int srv = socket(ai->ai_family, SOCK_STREAM, 0), one = 1;
    setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (srv < 0 || bind(srv, ai->ai_addr, ai->ai_addrlen) || listen(srv, 8)) {
        fprintf(stderr, "fxc device server: cannot listen on %s:%s: %s\n", host, port, strerror(errno));
        return 1;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage at;
    socklen_t len = sizeof at;
    char name[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
    getsockname(srv, (struct sockaddr *)&at, &len);
    getnameinfo((struct sockaddr *)&at, len, name, sizeof name, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
    printf("fxc device server listening on %s:%s\n", name, serv);
    fflush(stdout);
    for (;;) {
        int fd = accept(srv, NULL, NULL);
        if (fd < 0) { if (errno == EINTR) continue; perror("accept"); return 1; }
        struct timeval tv = { .tv_sec = 120 };      /* a stalled client is dropped, never holds the server */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        serve_one(fd);
        close(fd);
        if (once) return 0;
    }
}
