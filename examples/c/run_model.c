/* Run an fxc deploy artifact from plain C: raw input files in, raw output files out.
 *
 *   fxc extract model.fxc model_dir          # verify the artifact and unpack it
 *   gcc run_model.c -I model_dir -L model_dir -lfxc_model '-Wl,-rpath,$ORIGIN/model_dir' -o run_model
 *   ./run_model model_dir x.bin y.bin         # one file per input, then one per output
 *
 * Each file holds one tensor as contiguous row-major bytes of the dtype/shape in fxc_model.h
 * (numpy: x.astype(np.float32).tofile("x.bin"); np.fromfile("y.bin", np.float32).reshape(...)).
 */
#include <stdio.h>
#include <stdlib.h>
#include "fxc_model.h"

static void *read_tensor(const char *path, const fxc_tensor_info *t) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); return NULL; }
    void *buf = aligned_alloc(64, (t->nbytes + 63) / 64 * 64 + 64);
    size_t got = buf ? fread(buf, 1, t->nbytes, f) : 0;
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (!buf || got != t->nbytes || extra) {
        fprintf(stderr, "%s: expected %zu bytes for input %s (%s)\n", path, t->nbytes, t->name, t->dtype);
        free(buf);
        return NULL;
    }
    return buf;
}

int main(int argc, char **argv) {
    int n_in = fxc_num_inputs(), n_out = fxc_num_outputs();
    if (argc != 2 + n_in + n_out) {
        fprintf(stderr, "usage: %s ARTIFACT_DIR (%d input files) (%d output files)\n", argv[0], n_in, n_out);
        return 2;
    }
    if (fxc_init(argv[1]) != FXC_OK) { fprintf(stderr, "%s\n", fxc_last_error()); return 1; }
    const void *inputs[FXC_NUM_INPUTS + 1];
    void *outputs[FXC_NUM_OUTPUTS + 1];
    for (int i = 0; i < n_in; i++)
        if (!(inputs[i] = read_tensor(argv[2 + i], fxc_input_info(i)))) return 1;
    for (int i = 0; i < n_out; i++)
        if (!(outputs[i] = aligned_alloc(64, (fxc_output_info(i)->nbytes + 63) / 64 * 64 + 64))) return 1;
    if (fxc_main(inputs, outputs) != FXC_OK) { fprintf(stderr, "%s\n", fxc_last_error()); return 1; }
    for (int i = 0; i < n_out; i++) {
        const fxc_tensor_info *t = fxc_output_info(i);
        FILE *f = fopen(argv[2 + n_in + i], "wb");
        if (!f || fwrite(outputs[i], 1, t->nbytes, f) != t->nbytes || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", argv[2 + n_in + i]);
            return 1;
        }
        printf("output %d %s: %s, %zu bytes -> %s\n", i, t->name, t->dtype, t->nbytes, argv[2 + n_in + i]);
    }
    for (int i = 0; i < n_in; i++) free((void *)inputs[i]);
    for (int i = 0; i < n_out; i++) free(outputs[i]);
    fxc_free();
    return 0;
}
