/* fxc's oneDNN steps (docs/byoc.md): one call per external plan step of an `llvm -libs=dnnl` module.
 *
 *   void fxc_dnnl_run(void **args, const int64_t *p, void **state)
 *
 * args: the step's buffers at their planned addresses (outputs first: dst, then src, weights[, bias][, residual]),
 * p: the step's parameters as fxc/backends/external/dnnl writes them, state: the step's own pointer (a global of
 * the module, NULL until the first call), where the primitive, its memory objects and the weights reordered to the
 * primitive's format are made once and kept. Calls of one module take turns (the runtime's lock, the C entry
 * point's), so a step's state is never shared by two calls at once.
 *
 *   int fxc_dnnl_check(const int64_t *p, char *impl, int n)   (build time: can oneDNN make this primitive; its
 *                                                              implementation's name into impl)
 *
 * Routines: p[0] = 1 convolution (src NCHW or nChw{L}c, weights Oihw{L}o / Goihw{L}g as fxc packs them, dst
 * NCHW or nChw{L}c: fxc's own layouts, which are oneDNN's), post-ops bias, residual add (a binary post-op reading
 * the residual in place) and ReLU / clip; 2 matmul of rows x a weight packed in column blocks of L ([B, K, L]),
 * run as a batch of B GEMMs over the blocks, writing the columns in place (or through the state's buffer when the
 * last block is partial, the epilogue then applied on the copy). p[1] = threads (the build's), p[2] = 1 when the
 * weights are constants (reordered once, at the first call) else 0 (reordered every call: they may change).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>

enum { CONV = 1, MATMUL = 2 };
enum { ACT_NONE = 0, ACT_RELU = 1, ACT_CLIP = 2 };

typedef struct {
    dnnl_primitive_t prim, reorder;
    dnnl_memory_t src, wei, user_wei, bias, dst, res;
    void *wbuf, *obuf;          /* weights in the primitive's format (when it differs), matmul's padded output */
    int weights_ready;
    char impl[128];
} step_t;

static dnnl_engine_t engine;
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
        /* 3 R K N L B  8 bias residual act lo hi ; direct = N == B * L */
        const int64_t *q = p + 3;
        int64_t R = q[0], K = q[1], N = q[2], L = q[3], B = q[4];
        int direct = N == B * L;
        has_bias = direct && q[5]; residual = direct && q[6];
        dnnl_dims_t sd = {1, R, K}, ss = {R * K, K, 1}, wd = {B, K, L}, dd = {B, R, L};
        dnnl_dims_t ds = {L, direct ? N : B * L, 1}, bd = {B, 1, L}, bs = {L, L, 1};
        OK(dnnl_memory_desc_init_by_strides(&src, 3, sd, dnnl_f32, ss));
        OK(dnnl_memory_desc_init_by_tag(&wei, 3, wd, dnnl_f32, dnnl_abc));
        OK(dnnl_memory_desc_init_by_strides(&dst, 3, dd, dnnl_f32, ds));
        OK(dnnl_memory_desc_init_by_strides(&bias, 3, bd, dnnl_f32, bs));
        res = dst;
        dnnl_matmul_desc_t md;
        OK(dnnl_matmul_desc_init(&md, &src, &wei, has_bias ? &bias : NULL, &dst));
        if (direct && post_ops(attr, residual, &res, q[7], bits(q[8]), bits(q[9]))) return -1;
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
    if (mem(&s->src, &src) || mem(&s->user_wei, &wei) || mem(&s->dst, &dst)) return -1;
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
    if (p[0] == MATMUL && p[5] != p[6] * p[7]) {      /* a partial last block: the output goes through obuf */
        if (!(s->obuf = aligned_alloc(64, (size_t)((p[3] * p[6] * p[7] * 4 + 63) / 64 * 64)))) return -1;
    }
    return 0;
}

int fxc_dnnl_check(const int64_t *p, char *impl, int n) {
    dnnl_primitive_desc_t pd;
    if (make(p, NULL, &pd)) return -1;
    const char *name = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    snprintf(impl, n, "%s", name ? name : "?");
    dnnl_primitive_desc_destroy(pd);
    return 0;
}

static void epilogue(const int64_t *p, void **args, const float *full) {
    /* matmul through obuf: columns [0, N) of the B x R x L blocks into dst, + bias, + residual, activation */
    const int64_t *q = p + 3;
    int64_t R = q[0], N = q[2], L = q[3], bias = q[5], residual = q[6], act = q[7];
    float lo = bits(q[8]), hi = bits(q[9]);
    float *dst = args[0];
    const float *b = bias ? args[3] : NULL, *res = residual ? args[3 + bias] : NULL;
    for (int64_t r = 0; r < R; r++)
        for (int64_t n = 0; n < N; n++) {
            float v = full[(n / L) * R * L + r * L + n % L];
            if (b) v += b[n];
            if (res) v += res[r * N + n];
            if (act == ACT_RELU) v = v > 0.f ? v : 0.f;
            if (act == ACT_CLIP) v = fminf(fmaxf(v, lo), hi);
            dst[r * N + n] = v;
        }
}

void fxc_dnnl_run(void **args, const int64_t *p, void **state) {
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
    int bias = p[0] == CONV ? (int)p[3 + 21] : (int)p[3 + 5], residual = p[0] == CONV ? (int)p[3 + 22] : (int)p[3 + 6];
    dnnl_memory_set_data_handle(s->dst, s->obuf ? s->obuf : args[0]);
    dnnl_memory_set_data_handle(s->src, args[1]);
    dnnl_memory_set_data_handle(s->user_wei, args[2]);
    if (s->reorder && !(p[2] && s->weights_ready)) {
        dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, s->user_wei}, {DNNL_ARG_TO, s->wei}};
        dnnl_primitive_execute(s->reorder, stream, 2, r);
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
    if (s->obuf) epilogue(p, args, s->obuf);
    (void)residual;
    omp_set_num_threads(old);
}
