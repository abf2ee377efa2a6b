/* fxc's CLML shim: a region graph's tensors and ops created through Qualcomm's Adreno OpenCL ML SDK, run on
 * fxc's own OpenCL context, queue and buffers. fxc's own code: it calls the SDK's documented API (the names as
 * Apache TVM's CLML runtime calls them) and includes the SDK's header from the user's install; nothing of that
 * header is copied here. fxc/runtime/opencl/clml.py compiles it on the user's machine:
 *     cc -shared -fPIC -O2 -I$FXC_CLML_SDK/include clml_shim.c -o shim.so -lOpenCL
 * NOT COMPILED OR RUN IN FXC'S CI: the build host has no Adreno device and no SDK (docs/byoc.md).
 *
 * Protocol (clml.py _compile / run): fxc_clml_new; fxc_clml_tensor per tensor (the step's operands first, in
 * order: tensor k is operand k); fxc_clml_op per op; fxc_clml_finish (memory of the region's own tensors);
 * then per call fxc_clml_bind per operand (fxc's buffer and byte offset) and fxc_clml_run. Operands move between
 * fxc's NCHW buffers and CLML's tensors (layout CL_TENSOR_LAYOUT_OPTIMAL_QCOM) by the SDK's tensor copies. */
#include <stdlib.h>
#include <string.h>
#include <CL/cl.h>
#include <CL/cl_qcom_ml_ops.h>

#define MAX_TENSORS 4096
#define MAX_OPS 2048

typedef struct {
    cl_ml_tensor_qcom t, nchw;          /* the op's tensor (optimal layout); an operand's NCHW view of fxc's buffer */
    cl_mem mem, view;                   /* CLML's memory of t; the sub-buffer of fxc's buffer bound to nchw */
    size_t bytes;
    int dims[4], operand;               /* operand: 1 an input of the step, 2 an output, 0 the region's own */
    float fill;                         /* a constant tensor the shim makes (a batch norm's mean 0, variance 1) */
    int filled;
} Tensor;

typedef struct {
    CLMLInterfaceV3QCOM *api;
    cl_context ctx;
    cl_device_id dev;
    cl_ml_tensor_mem_desc_set_qcom descs;
    cl_ml_tuningcache_qcom tuning;
    Tensor tensors[MAX_TENSORS];
    int n_tensors, n_ops, dtype;
    cl_ml_op_qcom ops[MAX_OPS];
} Graph;

void *fxc_clml_new(cl_context ctx, cl_device_id dev, int *status) {
    cl_uint n = 0, majors[16], minors[16];
    *status = clQueryMLInterfaceVersionsQCOM(NULL, NULL, 0, &n);
    if (*status != CL_SUCCESS || n == 0 || n > 16) return NULL;
    clQueryMLInterfaceVersionsQCOM(majors, minors, n, NULL);
    Graph *g = calloc(1, sizeof(Graph));
    for (cl_uint i = 0; i < n && !g->api; i++)
        if (majors[i] == 3) g->api = clGetMLInterfaceV3QCOM(minors[i]);
    if (!g->api) { free(g); *status = -1; return NULL; }
    g->ctx = ctx;
    g->dev = dev;
    g->api->clCreateMLTuningCacheQCOM(&g->tuning);
    return g;
}

static cl_ml_tensor_qcom make_tensor(Graph *g, int dtype, const int *d, cl_ml_tensor_layout_qcom layout) {
    cl_ml_tensor_desc_qcom desc = {0};
    cl_ml_tensor_qcom t = NULL;
    desc.num_dimensions = CL_TENSOR_UNUSED_QCOM;
    desc.layout = layout;
    desc.dtype = dtype ? CL_HALF_FLOAT : CL_FLOAT;
    desc.n = d[0]; desc.c = d[1]; desc.h = d[2]; desc.w = d[3];
    g->api->clCreateMLTensorQCOM(g->ctx, NULL, &desc, &t);
    return t;
}

int fxc_clml_tensor(void *gv, int dtype, const int *dims, int operand) {
    Graph *g = gv;
    Tensor *x = &g->tensors[g->n_tensors];
    g->dtype = dtype;
    x->t = make_tensor(g, dtype, dims, CL_TENSOR_LAYOUT_OPTIMAL_QCOM);
    x->bytes = (size_t)dims[0] * dims[1] * dims[2] * dims[3] * (dtype ? 2 : 4);
    x->operand = operand;
    memcpy(x->dims, dims, sizeof x->dims);
    if (operand) x->nchw = make_tensor(g, dtype, dims, CL_TENSOR_LAYOUT_NCHW_QCOM);
    return g->n_tensors++;
}

#define T(i) ((i) < 0 ? NULL : g->tensors[i].t)

static int filled(Graph *g, int like, float value) {    /* a (1, C, 1, 1) tensor of one value, C of tensor like */
    int d[4] = {1, g->tensors[like].dims[1], 1, 1};
    int k = fxc_clml_tensor(g, g->dtype, d, 0);
    g->tensors[k].fill = value;
    g->tensors[k].filled = 1;
    return k;
}

int fxc_clml_op(void *gv, int kind, const int *v, int n, const float *f) {
    Graph *g = gv;
    cl_ml_op_qcom op = NULL;
    int out = v[0], nin = v[1];
    const int *in = v + 2, *a = v + 2 + nin;   /* a: mode, activation, groups, axis, block, transpose, pad[4],
                                                  stride[2], dilation[2], window[2], widths... */
    cl_arithmetic_mode_qcom prec = g->dtype ? CL_ARITHMETIC_MODE_FP16_QCOM : CL_ARITHMETIC_MODE_FP32_QCOM;
    cl_int rc = CL_INVALID_OPERATION;
    cl_ml_op_activation_desc_qcom act = {a[1] == 2 ? CL_ACTIVATION_RELU6 : CL_ACTIVATION_RELU, CL_PROPAGATE_NAN, prec};
    (void)n;
    switch (kind) {
    case 0: case 1: {            /* convolution (normal or depthwise), transposed convolution; bn folded by fxc */
        cl_ml_op_convolution_desc_qcom d = {a[0] == 1 ? CL_CONVOLUTION_MODE_DEPTHWISE_QCOM
                                                      : CL_CONVOLUTION_MODE_CONVOLUTION_QCOM,
                                            (cl_uint)a[2], 4, {(cl_uint)a[6], (cl_uint)a[7]},
                                            {(cl_uint)a[8], (cl_uint)a[9]}, {(cl_uint)a[10], (cl_uint)a[11]},
                                            {(cl_uint)a[12], (cl_uint)a[13]}, 0, prec};
        if (in[3] >= 0 || in[4] >= 0) {     /* scale and shift after the conv: CLML's fused conv + batch norm
                                               over mean 0, variance 1 */
            cl_ml_op_batchnorm_desc_qcom bn = {CL_BATCHNORM_MODE_SPATIAL_QCOM, prec};
            int scale = in[3] >= 0 ? in[3] : filled(g, out, 1.0f), shift = in[4] >= 0 ? in[4] : filled(g, out, 0.0f);
            rc = g->api->clCreateMLOpFusedConvolutionBatchNormForwardQCOM(
                g->ctx, NULL, &d, &bn, T(in[0]), T(in[1]), T(in[2]), T(out), T(filled(g, out, 0.0f)),
                T(filled(g, out, 1.0f)), T(scale), T(shift), &op, g->tuning);
        } else if (a[1]) {
            rc = g->api->clCreateMLOpFusedConvolutionActivationForwardQCOM(
                g->ctx, NULL, &d, &act, T(in[0]), T(in[1]), T(in[2]), NULL, T(out), &op, g->tuning);
        } else if (kind == 0) {
            rc = g->api->clCreateMLOpConvolutionForwardQCOM(g->ctx, NULL, &d, T(in[0]), T(in[1]), T(in[2]),
                                                            T(out), &op, g->tuning);
        } else {
            rc = g->api->clCreateMLOpTransposeConvolutionForwardQCOM(g->ctx, NULL, &d, T(in[0]), T(in[1]),
                                                                     T(in[2]), T(out), &op, g->tuning);
        }
        break;
    }
    case 2: {                    /* fully connected */
        cl_ml_op_fully_connected_desc_qcom d = {a[5] ? CL_FC_WEIGHT_TRANSFORM_TRANSPOSE_QCOM
                                                     : CL_FC_WEIGHT_TRANSFORM_NONE_QCOM, prec};
        rc = g->api->clCreateMLOpFullyConnectedQCOM(g->ctx, NULL, &d, T(in[0]), T(in[1]), T(in[2]), T(out), &op,
                                                    g->tuning);
        break;
    }
    case 3: {                    /* batch matmul */
        cl_ml_op_gemm_desc_qcom d = {0};
        d.b_transform = a[5] ? CL_GEMM_TRANSFORM_TRANSPOSE_QCOM : CL_GEMM_TRANSFORM_NONE_QCOM;
        d.arithmetic_mode = prec;
        rc = g->api->clCreateMLOpGemmQCOM(g->ctx, NULL, &d, T(in[0]), T(in[1]), T(out), &op, g->tuning);
        break;
    }
    case 4: {                    /* a per-channel scale and shift: CLML's batch norm over mean 0, variance 1 */
        cl_ml_op_batchnorm_desc_qcom d = {CL_BATCHNORM_MODE_SPATIAL_QCOM, prec};
        rc = g->api->clCreateMLOpBatchNormForwardQCOM(g->ctx, NULL, &d, T(in[0]), T(filled(g, out, 0.0f)),
                                                      T(filled(g, out, 1.0f)), T(in[1]), T(in[2]), T(out), &op,
                                                      g->tuning);
        break;
    }
    case 5: {                    /* binary: add sub mul div max min */
        static const cl_binary_op_qcom modes[] = {CL_TENSOR_OP_ADD_QCOM, CL_TENSOR_OP_SUB_QCOM,
                                                  CL_TENSOR_OP_MUL_QCOM, CL_TENSOR_OP_DIV_QCOM,
                                                  CL_TENSOR_OP_MAX_QCOM, CL_TENSOR_OP_MIN_QCOM};
        cl_ml_op_binary_desc_qcom d = {modes[a[0]], {{1.0}}, {{1.0}}, {{0.0}}, prec};
        rc = g->api->clCreateMLOpBinaryQCOM(g->ctx, NULL, &d, T(in[0]), T(in[1]), T(out), &op, g->tuning);
        break;
    }
    case 6: {                    /* activation: relu, relu6; clip */
        if (a[0] == 3) {
            cl_ml_op_clip_desc_qcom d = {CL_CLIP_BY_VALUE_QCOM, CL_PROPAGATE_NAN, {{f[0]}}, {{f[1]}}, prec};
            rc = g->api->clCreateMLOpClipQCOM(g->ctx, NULL, &d, T(in[0]), T(out), &op, g->tuning);
        } else {
            act.activation_mode = a[0] == 2 ? CL_ACTIVATION_RELU6 : CL_ACTIVATION_RELU;
            rc = g->api->clCreateMLOpActivationForwardQCOM(g->ctx, NULL, &act, T(in[0]), T(out), &op, g->tuning);
        }
        break;
    }
    case 7: {                    /* pad: widths per dim (before, after), NCHW */
        cl_ml_op_pad_desc_qcom d = {CL_PAD_MODE_CONSTANT_QCOM, {{f[2]}}, {0}, prec};
        for (int k = 0; k < 8; k++) d.pad_per_axis[k] = (cl_uint)a[16 + k];
        rc = g->api->clCreateMLOpPadQCOM(g->ctx, NULL, &d, T(in[0]), T(out), &op, g->tuning);
        break;
    }
    case 8: {                    /* concat along the channels */
        cl_ml_tensor_qcom ts[64];
        cl_ml_op_concat_desc_qcom d = {(cl_uint)a[3], prec};
        for (int k = 0; k < nin && k < 64; k++) ts[k] = T(in[k]);
        rc = g->api->clCreateMLOpConcatQCOM(g->ctx, NULL, &d, ts, T(out), &op, g->tuning);
        break;
    }
    case 9: {                    /* softmax over the channels */
        cl_ml_op_softmax_desc_qcom d = {CL_SOFTMAX_ALGORITHM_ACCURATE_QCOM, CL_SOFTMAX_MODE_CHANNEL_QCOM, prec};
        rc = g->api->clCreateMLOpSoftmaxQCOM(g->ctx, NULL, &d, T(in[0]), T(out), &op, g->tuning);
        break;
    }
    case 10:                     /* reshape */
        rc = g->api->clCreateMLOpReshapeQCOM(g->ctx, NULL, T(in[0]), T(out), &op, g->tuning);
        break;
    case 11: case 12: {          /* pool (max, average excluding padding), global pool (window = the map) */
        cl_ml_op_pooling_desc_qcom d = {a[0] == 1 ? CL_POOLING_MODE_AVERAGE_EXCLUDE_PADDING_QCOM
                                                  : CL_POOLING_MODE_MAX_QCOM, 4,
                                        {(cl_uint)a[6], (cl_uint)a[7]}, {(cl_uint)a[8], (cl_uint)a[9]},
                                        {(cl_uint)a[10], (cl_uint)a[11]}, {(cl_uint)a[14], (cl_uint)a[15]},
                                        CL_PROPAGATE_NAN, prec};
        if (kind == 12) {        /* the window is the whole map */
            d.window[0] = (cl_uint)g->tensors[in[0]].dims[2];
            d.window[1] = (cl_uint)g->tensors[in[0]].dims[3];
            d.stride[0] = d.stride[1] = 1;
        }
        rc = g->api->clCreateMLOpPoolingForwardQCOM(g->ctx, NULL, &d, T(in[0]), T(out), &op, g->tuning);
        break;
    }
    case 13: {                   /* depth to space */
        cl_ml_op_depthtospace_desc_qcom d = {(cl_uint)a[4], prec};
        rc = g->api->clCreateMLOpDepthToSpaceQCOM(g->ctx, NULL, &d, T(in[0]), T(out), &op, g->tuning);
        break;
    }
    case 14: {                   /* bilinear resize: mode 0 align corners, 1 half-pixel centres */
        cl_ml_op_resize_bilinear_desc_qcom d = {a[0] == 0 ? CL_TRUE : CL_FALSE, a[0] == 1 ? CL_TRUE : CL_FALSE,
                                                prec};
        rc = g->api->clCreateMLOpResizeBilinearQCOM(g->ctx, NULL, &d, T(in[0]), T(out), &op, g->tuning);
        break;
    }
    }
    if (rc == CL_SUCCESS) g->ops[g->n_ops++] = op;
    return rc;
}

int fxc_clml_finish(void *gv, cl_command_queue q) {
    Graph *g = gv;
    cl_int rc = g->api->clCreateMLTensorMemoryDescriptorSetQCOM(&g->descs);
    for (int i = 0; i < g->n_tensors && rc == CL_SUCCESS; i++) {
        Tensor *x = &g->tensors[i];
        size_t size = 0;
        g->api->clGetMLTensorMemorySizeQCOM(g->ctx, x->t, &size);
        x->mem = clCreateBuffer(g->ctx, CL_MEM_READ_WRITE, size, NULL, &rc);
        cl_ml_tensor_memory_desc_qcom m = {x->t, x->mem};
        if (rc == CL_SUCCESS) rc = g->api->clUpdateMLTensorMemoryDescriptorSetQCOM(g->descs, 1, &m);
        if (rc == CL_SUCCESS && x->filled) {
            size_t count = x->bytes / (g->dtype ? 2 : 4);
            float *host = malloc(x->bytes);
            for (size_t j = 0; j < count; j++) {
                if (g->dtype) ((cl_half *)host)[j] = x->fill == 0.0f ? 0 : 0x3c00;      /* 0 or 1 in half */
                else host[j] = x->fill;
            }
            rc = g->api->clEnqueueWriteMLTensorDataQCOM(q, host, CL_TENSOR_LAYOUT_NCHW_QCOM, x->t, x->mem, 0, NULL,
                                                        NULL);
            clFinish(q);
            free(host);
        }
    }
    for (int i = 0; i < g->n_ops && rc == CL_SUCCESS; i++)      /* CLML's tuning, kept in its cache */
        rc = g->api->clTuneMLOpQCOM(q, g->ops[i], g->descs, g->tuning, NULL);
    return rc;
}

int fxc_clml_bind(void *gv, int k, cl_mem buf, size_t offset, int unused) {
    Graph *g = gv;
    Tensor *x = &g->tensors[k];
    cl_buffer_region r = {offset, x->bytes};
    cl_int rc = CL_SUCCESS;
    (void)unused;
    if (x->view) clReleaseMemObject(x->view);
    x->view = clCreateSubBuffer(buf, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &rc);
    return rc;
}

int fxc_clml_run(void *gv, cl_command_queue q) {
    Graph *g = gv;
    cl_int rc = CL_SUCCESS;
    for (int i = 0; i < g->n_tensors && rc == CL_SUCCESS; i++)     /* the inputs (tensor names "in<k>") */
        if (g->tensors[i].operand == 1 && g->tensors[i].view)
            rc = g->api->clEnqueueCopyMLTensorDataQCOM(q, g->tensors[i].nchw, g->tensors[i].view, g->tensors[i].t,
                                                       g->tensors[i].mem, 0, NULL, NULL);
    for (int i = 0; i < g->n_ops && rc == CL_SUCCESS; i++)
        rc = g->api->clEnqueueMLOpQCOM(q, g->ops[i], g->descs, 0, NULL, NULL);
    for (int i = 0; i < g->n_tensors && rc == CL_SUCCESS; i++)     /* the outputs */
        if (g->tensors[i].operand == 2 && g->tensors[i].view)
            rc = g->api->clEnqueueCopyMLTensorDataQCOM(q, g->tensors[i].t, g->tensors[i].mem, g->tensors[i].nchw,
                                                       g->tensors[i].view, 0, NULL, NULL);
    return rc;
}
