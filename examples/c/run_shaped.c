/* Run an fxc deploy artifact of any input size from plain C (C ABI 2: fxc_main_shaped, fxc_output_dims).
 *
 *   fxc extract model.fxc model_dir          # verify the artifact and unpack it
 *   gcc run_shaped.c -I model_dir -L model_dir -lfxc_model '-Wl,-rpath,$ORIGIN/model_dir' -o run_shaped
 *   ./run_shaped model_dir 5x16 x.bin y.bin   # per input its dims and its file, then one file per output
 *
 * A model exported from a dynamic build (fxc.from_torch with dynamic_shapes, fxc.from_onnx with a named dim)
 * takes any size in its symbols' range (fxc_model.h lists them); a static one takes its exported dims. Each
 * file holds one tensor as contiguous row-major bytes of its dtype (numpy: x.tofile("x.bin")); the output's
 * dims are printed, one line per output: "output I NAME DTYPE D0xD1x... NBYTES".
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fxc_model.h"

static size_t itemsize(const char *dtype) {
    if (!strcmp(dtype, "bool") || strstr(dtype, "int8")) return 1;
    if (strstr(dtype, "16")) return 2;
    if (strstr(dtype, "32")) return 4;
    return 8;
}

/* "5x16" -> dims (exactly ndim of them); 0 on success */
static int parse_dims(const char *text, int ndim, int64_t *dims) {
    char *end;
    for (int d = 0; d < ndim; d++) {
        dims[d] = strtoll(text, &end, 10);
        if (end == text || (d + 1 < ndim ? *end != 'x' : *end != '\0')) return 1;
        text = end + 1;
    }
    return ndim == 0 && *text ? 1 : 0;
}

static void *read_tensor(const char *path, size_t nbytes) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); return NULL; }
    void *buf = aligned_alloc(64, (nbytes + 63) / 64 * 64 + 64);
    size_t got = buf ? fread(buf, 1, nbytes, f) : 0;
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (!buf || got != nbytes || extra) {
        fprintf(stderr, "%s: expected %zu bytes\n", path, nbytes);
        free(buf);
        return NULL;
    }
    return buf;
}

int main(int argc, char **argv) {
    int n_in = fxc_num_inputs(), n_out = fxc_num_outputs();
    if (argc != 2 + 2 * n_in + n_out) {
        fprintf(stderr, "usage: %s ARTIFACT_DIR (%d x: DIMS FILE) (%d output files)\n", argv[0], n_in, n_out);
        return 2;
    }
    if (fxc_init(argv[1]) != FXC_OK) { fprintf(stderr, "%s\n", fxc_last_error()); return 1; }
    static int64_t dims[FXC_NUM_INPUTS + 1][16], out_dims[16];
    const int64_t *input_dims[FXC_NUM_INPUTS + 1];
    const void *inputs[FXC_NUM_INPUTS + 1];
    void *outputs[FXC_NUM_OUTPUTS + 1];
    for (int i = 0; i < n_in; i++) {
        const fxc_tensor_info *t = fxc_input_info(i);
        if (t->ndim > 16 || parse_dims(argv[2 + 2 * i], t->ndim, dims[i])) {
            fprintf(stderr, "input %s: %s is not %d dims like 5x16\n", t->name, argv[2 + 2 * i], t->ndim);
            return 2;
        }
        input_dims[i] = dims[i];
    }
    size_t nbytes[FXC_NUM_OUTPUTS + 1];
    for (int i = 0; i < n_out; i++) {      /* checks the dims: outside the model's sizes is an error, here */
        if (fxc_output_info(i)->ndim > 16) return 2;
        if (fxc_output_dims(input_dims, i, out_dims, &nbytes[i]) != FXC_OK) {
            fprintf(stderr, "%s\n", fxc_last_error());
            return 1;
        }
        if (!(outputs[i] = aligned_alloc(64, (nbytes[i] + 63) / 64 * 64 + 64))) return 1;
        const fxc_tensor_info *t = fxc_output_info(i);
        printf("output %d %s %s ", i, t->name, t->dtype);
        for (int d = 0; d < t->ndim; d++) printf(d ? "x%lld" : "%lld", (long long)out_dims[d]);
        printf(" %zu\n", nbytes[i]);
    }
    for (int i = 0; i < n_in; i++) {       /* the file sizes follow the dims (fxc_output_dims checked them) */
        size_t n = itemsize(fxc_input_info(i)->dtype);
        int over = 0;                      /* and never wrap: 2^56 x 64 floats is not 0 bytes */
        for (int d = 0; d < fxc_input_info(i)->ndim; d++)
            over |= dims[i][d] < 0 || __builtin_mul_overflow(n, (size_t)dims[i][d], &n);
        if (over || n > PTRDIFF_MAX) {
            fprintf(stderr, "input %s: %s is more bytes than memory holds\n", fxc_input_info(i)->name,
                    argv[2 + 2 * i]);
            return 2;
        }
        if (!(inputs[i] = read_tensor(argv[3 + 2 * i], n))) return 1;
    }
    if (fxc_main_shaped(input_dims, inputs, outputs) != FXC_OK) { fprintf(stderr, "%s\n", fxc_last_error()); return 1; }
    for (int i = 0; i < n_out; i++) {
        FILE *f = fopen(argv[2 + 2 * n_in + i], "wb");
        if (!f || fwrite(outputs[i], 1, nbytes[i], f) != nbytes[i] || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", argv[2 + 2 * n_in + i]);
            return 1;
        }
    }
    for (int i = 0; i < n_in; i++) free((void *)inputs[i]);
    for (int i = 0; i < n_out; i++) free(outputs[i]);
    fxc_free();
    return 0;
}
