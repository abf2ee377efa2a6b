/* fxc's oneDNN steps (docs/byoc.md): one call per external plan step of an `llvm -libs=dnnl` module.
 *
 *   void fxc_dnnl_run(void **args, const int64_t *p, void **state)
 *
 * args: the step's buffers at their planned addresses (outputs first: dst, then src, weights[, bias][, residual]),
 * p: the step's parameters as fxc/backends/external/dnnl writes them, state: the step's own pointer (a global of
 * the module, NULL until the first call), where the primitive, its memory objects and the weights reordered to the
 * primitive's format are made once and kept (the weights made again when stale: see stale()). Calls of one module take turns (the runtime's lock, the C entry
 * point's), so a step's state is never shared by two calls at once.
 *
 *   int fxc_dnnl_check(const int64_t *p, char *impl, int n)   (build time: can oneDNN make this primitive; its
 *                                                              implementation's name into impl)
 *
 * Routines: p[0] = 1 convolution (src NCHW or nChw{L}c, weights Oihw{L}o / Goihw{L}g as fxc packs them, dst
 * NCHW or nChw{L}c: fxc's own layouts, which are oneDNN's), post-ops bias, residual add (a binary post-op reading
 * the residual in place) and ReLU / clip; 2 matmul of rows x a weight fxc packed in column blocks of L
 * ([B, K, L]), which the step unpacks into its own K x N copy (then oneDNN's format), the same post-ops. p[1] = threads (the build's), p[2] how the
 * weights are made (stale()).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>

enum { CONV = 1, MATMUL = 2, RNN = 3 };

/* The module's parallel runtime (cpu_parallel.c, linked beside this file; absent from the build-time check's
   library): a module with oneDNN steps runs its own parallel loops on OpenMP's team too, oneDNN's, so one team of
   threads serves both (fxc's pool spinning for its next loop beside oneDNN's team took cores from it: calls of a
   few ms took seconds on the shared 2-core host). */
extern void fxc_use_openmp(int on) __attribute__((weak));
extern int fxc_uses_openmp(void) __attribute__((weak));

static void one_team(void) {
    if (fxc_use_openmp && fxc_uses_openmp && fxc_uses_openmp() != 1) fxc_use_openmp(1);
}
enum { ACT_NONE = 0, ACT_RELU = 1, ACT_CLIP = 2 };

typedef struct {
    dnnl_primitive_t prim, reorder;
    dnnl_memory_t src, wei, user_wei, bias, dst, res;
    void *wbuf;                 /* the weights in the primitive's format (when it differs from the user's) */
    float *wplain;              /* matmul: the weight unpacked from fxc's column blocks */
    int weights_ready;
    int64_t gen;
    const void *from;
    char impl[128];
} step_t;

static dnnl_engine_t engine;
static int64_t generation = 1;       /* bumped at the end of every prepack: weights made there may have changed */

/* The end of the module's prepack step (a plan step of its own, with an unused params and state). */
void fxc_dnnl_prepacked(void **args, const int64_t *p, void **state) {
    (void)args; (void)p; (void)state;
    __atomic_add_fetch(&generation, 1, __ATOMIC_RELAXED);
}

/* Whether a step's copy of its weights (made from src at generation gen) is stale: p[2] 1 constants (made once),
   2 made by the prepack (again after a prepack or from another address), 0 made every call. */
static int stale(const int64_t *p, int ready, int64_t *gen, const void **from, const void *src) {
    int64_t now = __atomic_load_n(&generation, __ATOMIC_RELAXED);
    int s = !ready || p[2] == 0 || (p[2] == 2 && (*gen != now || *from != src));
    *gen = now;
    *from = src;
    return s;
}
static dnnl_stream_t stream;

static float bits(int64_t v) { float f; int32_t i = (int32_t)v; memcpy(&f, &i, 4); return f; }

#define OK(x) do { if ((x) != dnnl_success) return -1; } while (0)

static int ensure_engine(void) {
    if (!engine) {
        OK(dnnl_engine_create(&engine, dnnl_cpu, 0));
        OK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
    }
    return 0;
}

static dnnl_format_tag_t act_tag(int64_t lanes) {
    return lanes == 16 ? dnnl_nChw16c : lanes == 8 ? dnnl_nChw8c : lanes == 4 ? dnnl_nChw4c : dnnl_nchw;
}

static int post_ops(dnnl_primitive_attr_t attr, int residual, const dnnl_memory_desc_t *res_md, int64_t act,
                    float lo, float hi) {
    dnnl_post_ops_t po;
    OK(dnnl_post_ops_create(&po));
    if (residual) OK(dnnl_post_ops_append_binary(po, dnnl_binary_add, res_md));
    if (act == ACT_RELU) OK(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, 0.f, 0.f));
    if (act == ACT_CLIP) OK(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_clip, lo, hi));
    OK(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_post_ops_destroy(po);
    return 0;
}

static int mem(dnnl_memory_t *m, const dnnl_memory_desc_t *md) {
    return dnnl_memory_create(m, md, engine, DNNL_MEMORY_NONE) == dnnl_success ? 0 : -1;
}

/* The primitive of p (and, with s, its memory objects and weights' reorder). */
static int make(const int64_t *p, step_t *s, dnnl_primitive_desc_t *out_pd) {
    dnnl_memory_desc_t src, wei, bias, dst, res;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    int has_bias, residual;
    if (ensure_engine()) return -1;
    OK(dnnl_primitive_attr_create(&attr));
    if (p[0] == CONV) {
        /* 3 N C H W  7 O KH KW OH OW  12 sh sw dh dw  16 pt pl pb pr  20 src_lanes dst_lanes w_lanes depthwise
           24 bias residual act lo hi */
        const int64_t *q = p + 3;
        int64_t N = q[0], C = q[1], H = q[2], W = q[3], O = q[4], KH = q[5], KW = q[6], OH = q[7], OW = q[8];
        int64_t wl = q[19], dw = q[20];
        has_bias = (int)q[21]; residual = (int)q[22];
        dnnl_dims_t sd = {N, C, H, W}, dd = {N, O, OH, OW}, bd = {O};
        dnnl_dims_t strides = {q[9], q[10]}, dil = {q[11] - 1, q[12] - 1}, pl = {q[13], q[14]}, pr = {q[15], q[16]};
        OK(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, act_tag(q[17])));
        OK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, act_tag(q[18])));
        if (dw) {
            dnnl_dims_t wd = {O, 1, 1, KH, KW};
            OK(dnnl_memory_desc_init_by_tag(&wei, 5, wd, dnnl_f32, wl == 16 ? dnnl_Goihw16g : wl == 8 ? dnnl_Goihw8g
                                                                   : dnnl_goihw));
        } else {
            dnnl_dims_t wd = {O, C, KH, KW};
            OK(dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, wl == 16 ? dnnl_Abcd16a : wl == 8 ? dnnl_Abcd8a
                                                                   : wl == 4 ? dnnl_Abcd4a : dnnl_oihw));
        }
        OK(dnnl_memory_desc_init_by_tag(&bias, 1, bd, dnnl_f32, dnnl_a));
        res = dst;
        dnnl_memory_desc_t any_w;
        if (dw) {
            dnnl_dims_t wd = {O, 1, 1, KH, KW};
            OK(dnnl_memory_desc_init_by_tag(&any_w, 5, wd, dnnl_f32, dnnl_format_tag_any));
        } else {
            dnnl_dims_t wd = {O, C, KH, KW};
            OK(dnnl_memory_desc_init_by_tag(&any_w, 4, wd, dnnl_f32, dnnl_format_tag_any));
        }
        dnnl_convolution_desc_t cd;
        OK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &src,
                                                      &any_w, has_bias ? &bias : NULL, &dst, strides, dil, pl, pr));
        if (post_ops(attr, residual, &res, q[23], bits(q[24]), bits(q[25]))) return -1;
        OK(dnnl_primitive_desc_create(&pd, &cd, attr, engine, NULL));
    } else {
        /* 3 R K N L B  8 bias residual act lo hi: rows x the weight, which the step unpacks from fxc's column
           blocks ([B, K, L]) into its own K x N buffer (then oneDNN's format) when stale */
        const int64_t *q = p + 3;
        int64_t R = q[0], K = q[1], N = q[2];
        has_bias = (int)q[5]; residual = (int)q[6];
        dnnl_dims_t sd = {R, K}, wd = {K, N}, dd = {R, N}, bd = {1, N};
        OK(dnnl_memory_desc_init_by_tag(&src, 2, sd, dnnl_f32, dnnl_ab));
        OK(dnnl_memory_desc_init_by_tag(&wei, 2, wd, dnnl_f32, dnnl_ab));
        OK(dnnl_memory_desc_init_by_tag(&dst, 2, dd, dnnl_f32, dnnl_ab));
        OK(dnnl_memory_desc_init_by_tag(&bias, 2, bd, dnnl_f32, dnnl_ab));
        res = dst;
        dnnl_memory_desc_t any_w;
        OK(dnnl_memory_desc_init_by_tag(&any_w, 2, wd, dnnl_f32, dnnl_format_tag_any));
        dnnl_matmul_desc_t md;
        OK(dnnl_matmul_desc_init(&md, &src, &any_w, has_bias ? &bias : NULL, &dst));
        if (post_ops(attr, residual, &res, q[7], bits(q[8]), bits(q[9]))) return -1;
        OK(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL));
    }
    dnnl_primitive_attr_destroy(attr);
    *out_pd = pd;
    if (!s) return 0;
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(s->impl, sizeof s->impl, "%s", impl ? impl : "?");
    OK(dnnl_primitive_create(&s->prim, pd));
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (p[0] == MATMUL) {
        if (!(s->wplain = aligned_alloc(64, (size_t)((p[4] * p[5] * 4 + 63) / 64 * 64)))) return -1;
        OK(dnnl_memory_create(&s->user_wei, &wei, engine, s->wplain));
    } else if (mem(&s->user_wei, &wei)) {
        return -1;
    }
    if (mem(&s->src, &src) || mem(&s->dst, &dst)) return -1;
    if (has_bias && mem(&s->bias, &bias)) return -1;
    if (residual && mem(&s->res, &res)) return -1;
    if (!dnnl_memory_desc_equal(want, &wei)) {       /* the primitive's own weights format: reordered into wbuf */
        dnnl_primitive_desc_t rpd;
        OK(dnnl_reorder_primitive_desc_create(&rpd, &wei, engine, want, engine, NULL));
        OK(dnnl_primitive_create(&s->reorder, rpd));
        dnnl_primitive_desc_destroy(rpd);
        if (!(s->wbuf = aligned_alloc(64, (dnnl_memory_desc_get_size(want) + 63) / 64 * 64))) return -1;
        OK(dnnl_memory_create(&s->wei, want, engine, s->wbuf));
    } else {
        s->wei = s->user_wei;
    }
    return 0;
}


/* -- LSTM / GRU layers (routine 3) ------------------------------------------------------------------------------
 * p: 3 mode (1 lstm, 2 gru) T B I H L batch_first reverse has_ih_bias has_hh_bias
 * args: outputs out, h_T[, c_T (lstm)], then x rows, W_ih packed in column blocks of L ([GH/L, I, L]), [the input
 * projection's bias], W_hh^T [H, GH], h0, [c0 (lstm)], [b_hh (gru)]. fxc's rnn_layer takes the projected rows
 * (fxc/ops/rnn.py); oneDNN's layer computes the projection itself, so the match is matmul + add + rnn_layer and
 * oneDNN reads x. Weights are made oneDNN's (ldigo, PyTorch's GRU gates r z n as oneDNN's u r o, the
 * linear-before-reset GRU's four biases) in the state's buffers, then reordered to the primitive's format. */
typedef struct {
    dnnl_primitive_t prim, reorder_l, reorder_i;
    dnnl_memory_t m[10];          /* src_layer src_iter src_iter_c w_layer w_iter bias dst_layer dst_iter dst_iter_c */
    dnnl_memory_t user_l, user_i;
    float *wl, *wi, *bias, *spare;
    void *pl, *pi;
    int ready;
    int64_t gen;
    const void *from;
} rnn_t;

enum { R_SRC, R_SRC_ITER, R_SRC_ITER_C, R_WL, R_WI, R_BIAS, R_DST, R_DST_ITER, R_DST_ITER_C };

static int rnn_make(const int64_t *p, rnn_t *s, dnnl_primitive_desc_t *out_pd) {
    const int64_t *q = p + 3;
    int lstm = q[0] == 1;
    int64_t T = q[1], B = q[2], I = q[3], H = q[4], G = lstm ? 4 : 3;
    dnnl_format_tag_t seq = q[6] ? dnnl_ntc : dnnl_tnc;
    dnnl_memory_desc_t src, iter, wl_any, wi_any, wl, wi, bias, dst;
    dnnl_dims_t sd = {T, B, I}, id = {1, 1, B, H}, wld = {1, 1, I, G, H}, wid = {1, 1, H, G, H}, bd = {1, 1, 4, H};
    dnnl_dims_t dd = {T, B, H};
    if (ensure_engine()) return -1;
    OK(dnnl_memory_desc_init_by_tag(&src, 3, sd, dnnl_f32, seq));
    OK(dnnl_memory_desc_init_by_tag(&dst, 3, dd, dnnl_f32, seq));
    OK(dnnl_memory_desc_init_by_tag(&iter, 4, id, dnnl_f32, dnnl_ldnc));
    OK(dnnl_memory_desc_init_by_tag(&wl, 5, wld, dnnl_f32, dnnl_ldigo));
    OK(dnnl_memory_desc_init_by_tag(&wi, 5, wid, dnnl_f32, dnnl_ldigo));
    OK(dnnl_memory_desc_init_by_tag(&wl_any, 5, wld, dnnl_f32, dnnl_format_tag_any));
    OK(dnnl_memory_desc_init_by_tag(&wi_any, 5, wid, dnnl_f32, dnnl_format_tag_any));
    OK(dnnl_memory_desc_init_by_tag(&bias, 4, bd, dnnl_f32, dnnl_ldgo));
    dnnl_rnn_direction_t dir = q[7] ? dnnl_unidirectional_right2left : dnnl_unidirectional_left2right;
    dnnl_rnn_desc_t rd;
    if (lstm)
        OK(dnnl_lstm_forward_desc_init(&rd, dnnl_forward_inference, dir, &src, &iter, &iter, &wl_any, &wi_any, &bias,
                                       &dst, &iter, &iter, 0));
    else
        OK(dnnl_lbr_gru_forward_desc_init(&rd, dnnl_forward_inference, dir, &src, &iter, &wl_any, &wi_any, &bias,
                                          &dst, &iter, 0));
    dnnl_primitive_desc_t pd;
    OK(dnnl_primitive_desc_create(&pd, &rd, NULL, engine, NULL));
    *out_pd = pd;
    if (!s) return 0;
    OK(dnnl_primitive_create(&s->prim, pd));
    const dnnl_memory_desc_t *want_l = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, DNNL_ARG_WEIGHTS_LAYER);
    const dnnl_memory_desc_t *want_i = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, DNNL_ARG_WEIGHTS_ITER);
    s->wl = aligned_alloc(64, (I * G * H * 4 + 63) / 64 * 64);
    s->wi = aligned_alloc(64, (H * G * H * 4 + 63) / 64 * 64);
    s->bias = aligned_alloc(64, (4 * H * 4 + 63) / 64 * 64);
    s->spare = aligned_alloc(64, (2 * B * H * 4 + 63) / 64 * 64);
    s->pl = aligned_alloc(64, (dnnl_memory_desc_get_size(want_l) + 63) / 64 * 64);
    s->pi = aligned_alloc(64, (dnnl_memory_desc_get_size(want_i) + 63) / 64 * 64);
    if (!s->wl || !s->wi || !s->bias || !s->spare || !s->pl || !s->pi) return -1;
    OK(dnnl_memory_create(&s->user_l, &wl, engine, s->wl));
    OK(dnnl_memory_create(&s->user_i, &wi, engine, s->wi));
    OK(dnnl_memory_create(&s->m[R_WL], want_l, engine, s->pl));
    OK(dnnl_memory_create(&s->m[R_WI], want_i, engine, s->pi));
    OK(dnnl_memory_create(&s->m[R_BIAS], &bias, engine, s->bias));
    dnnl_primitive_desc_t rpd;
    OK(dnnl_reorder_primitive_desc_create(&rpd, &wl, engine, want_l, engine, NULL));
    OK(dnnl_primitive_create(&s->reorder_l, rpd));
    dnnl_primitive_desc_destroy(rpd);
    OK(dnnl_reorder_primitive_desc_create(&rpd, &wi, engine, want_i, engine, NULL));
    OK(dnnl_primitive_create(&s->reorder_i, rpd));
    dnnl_primitive_desc_destroy(rpd);
    if (mem(&s->m[R_SRC], &src) || mem(&s->m[R_SRC_ITER], &iter) || mem(&s->m[R_DST], &dst)
        || mem(&s->m[R_DST_ITER], &iter)) return -1;
    if (lstm && (mem(&s->m[R_SRC_ITER_C], &iter) || mem(&s->m[R_DST_ITER_C], &iter))) return -1;
    return 0;
}

static void rnn_weights(const int64_t *p, rnn_t *s, const float *wp, const float *bih, const float *whh,
                        const float *bhh) {
    const int64_t *q = p + 3;
    int lstm = q[0] == 1;
    int64_t I = q[3], H = q[4], L = q[5], G = lstm ? 4 : 3, GH = G * H;
    static const int gru_gate[3] = {1, 0, 2};        /* oneDNN's u r o <- PyTorch's z r n */
    for (int64_t g = 0; g < G; g++) {
        int64_t from = lstm ? g : gru_gate[g];
        for (int64_t i = 0; i < I; i++)
            for (int64_t h = 0; h < H; h++) {
                int64_t n = from * H + h;
                s->wl[i * GH + g * H + h] = wp[(n / L) * I * L + i * L + n % L];
            }
        for (int64_t i = 0; i < H; i++)
            for (int64_t h = 0; h < H; h++) s->wi[i * GH + g * H + h] = whh[i * GH + from * H + h];
        for (int64_t h = 0; h < H; h++) {
            float b = bih ? bih[from * H + h] : 0.f;
            if (!lstm && g < 2 && bhh) b += bhh[from * H + h];
            s->bias[g * H + h] = b;
        }
    }
    for (int64_t h = 0; h < H; h++) s->bias[3 * H + h] = lstm ? s->bias[3 * H + h] : (bhh ? bhh[2 * H + h] : 0.f);
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, s->user_l}, {DNNL_ARG_TO, s->m[R_WL]}};
    dnnl_primitive_execute(s->reorder_l, stream, 2, a);
    dnnl_exec_arg_t b[2] = {{DNNL_ARG_FROM, s->user_i}, {DNNL_ARG_TO, s->m[R_WI]}};
    dnnl_primitive_execute(s->reorder_i, stream, 2, b);
}

static void rnn_run(void **args, const int64_t *p, rnn_t *s) {
    const int64_t *q = p + 3;
    int lstm = q[0] == 1, nout = lstm ? 3 : 2, k = nout + 2;
    int64_t B = q[2], H = q[4];
    const float *bih = q[8] ? args[k++] : NULL, *whh = args[k++];
    void *h0 = args[k++], *c0 = lstm ? args[k++] : NULL;
    const float *bhh = !lstm && q[9] ? args[k++] : NULL;
    if (stale(p, s->ready, &s->gen, &s->from, args[nout + 1])) {
        rnn_weights(p, s, args[nout + 1], bih, whh, bhh);
        s->ready = 1;
    }
    dnnl_memory_set_data_handle(s->m[R_SRC], args[nout]);
    dnnl_memory_set_data_handle(s->m[R_SRC_ITER], h0);
    dnnl_memory_set_data_handle(s->m[R_DST], args[0]);
    dnnl_memory_set_data_handle(s->m[R_DST_ITER], args[1] ? args[1] : (void *)s->spare);
    dnnl_exec_arg_t a[9] = {{DNNL_ARG_SRC_LAYER, s->m[R_SRC]}, {DNNL_ARG_SRC_ITER, s->m[R_SRC_ITER]},
                            {DNNL_ARG_WEIGHTS_LAYER, s->m[R_WL]}, {DNNL_ARG_WEIGHTS_ITER, s->m[R_WI]},
                            {DNNL_ARG_BIAS, s->m[R_BIAS]}, {DNNL_ARG_DST_LAYER, s->m[R_DST]},
                            {DNNL_ARG_DST_ITER, s->m[R_DST_ITER]}};
    int n = 7;
    if (lstm) {
        dnnl_memory_set_data_handle(s->m[R_SRC_ITER_C], c0);
        dnnl_memory_set_data_handle(s->m[R_DST_ITER_C], args[2] ? args[2] : (void *)(s->spare + B * H));
        a[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC_ITER_C, s->m[R_SRC_ITER_C]};
        a[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST_ITER_C, s->m[R_DST_ITER_C]};
    }
    dnnl_primitive_execute(s->prim, stream, n, a);
    dnnl_stream_wait(stream);
}

int fxc_dnnl_check(const int64_t *p, char *impl, int n) {
    dnnl_primitive_desc_t pd;
    if ((p[0] == RNN ? rnn_make(p, NULL, &pd) : make(p, NULL, &pd))) return -1;
    const char *name = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    snprintf(impl, n, "%s", name ? name : "?");
    dnnl_primitive_desc_destroy(pd);
    return 0;
}

static void unpack(const int64_t *p, const float *wp, float *w) {
    /* fxc's column blocks [B, K, L] of a K x N weight -> K x N */
    int64_t K = p[4], N = p[5], L = p[6];
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) w[k * N + n] = wp[(n / L) * K * L + k * L + n % L];
}

void fxc_dnnl_run(void **args, const int64_t *p, void **state) {
    one_team();
    if (p[0] == RNN) {
        rnn_t *r = *state;
        if (!r) {
            dnnl_primitive_desc_t pd;
            r = calloc(1, sizeof *r);
            if (!r || rnn_make(p, r, &pd)) {
                fprintf(stderr, "fxc: oneDNN could not make the primitive of an RNN plan step; rebuild without "
                        "-libs=dnnl\n");
                abort();
            }
            dnnl_primitive_desc_destroy(pd);
            *state = r;
        }
        int old = omp_get_max_threads();
        omp_set_num_threads((int)p[1]);
        rnn_run(args, p, r);
        omp_set_num_threads(old);
        return;
    }
    step_t *s = *state;
    if (!s) {
        dnnl_primitive_desc_t pd;
        s = calloc(1, sizeof *s);
        if (!s || make(p, s, &pd)) {
            fprintf(stderr, "fxc: oneDNN could not make the primitive of a plan step (routine %d); rebuild "
                    "without -libs=dnnl\n", (int)p[0]);
            abort();
        }
        dnnl_primitive_desc_destroy(pd);
        *state = s;
    }
    int old = omp_get_max_threads();
    omp_set_num_threads((int)p[1]);
    int bias = p[0] == CONV ? (int)p[3 + 21] : (int)p[3 + 5];
    dnnl_memory_set_data_handle(s->dst, args[0]);
    dnnl_memory_set_data_handle(s->src, args[1]);
    if (p[0] == CONV) dnnl_memory_set_data_handle(s->user_wei, args[2]);
    if (stale(p, s->weights_ready, &s->gen, &s->from, args[2])) {
        if (p[0] == MATMUL) unpack(p, args[2], s->wplain);
        if (s->reorder) {
            dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, s->user_wei}, {DNNL_ARG_TO, s->wei}};
            dnnl_primitive_execute(s->reorder, stream, 2, r);
        }
        s->weights_ready = 1;
    }
    dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, s->src}, {DNNL_ARG_WEIGHTS, s->wei}, {DNNL_ARG_DST, s->dst}};
    int n = 3;
    if (s->bias) { dnnl_memory_set_data_handle(s->bias, args[3]); a[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, s->bias}; }
    if (s->res) {
        dnnl_memory_set_data_handle(s->res, args[3 + bias]);
        a[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, s->res};
    }
    dnnl_primitive_execute(s->prim, stream, n, a);
    dnnl_stream_wait(stream);
    omp_set_num_threads(old);
}
