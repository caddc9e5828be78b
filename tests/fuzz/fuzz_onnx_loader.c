/*
 * fuzz_onnx_loader.c - libFuzzer target for the ONNX loader.
 *
 * Every input must either load or fail with a message; ASan/UBSan catch the
 * rest. Build and run with `make fuzz` (FUZZ_SECONDS=300 for the full run);
 * seeds come from tests/fuzz/make_seeds.py.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "onnx/loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    infd_ir_graph *g = NULL;
    infd_error err = { 0 };
    if (infd_onnx_load_buffer(data, size, "fuzz.onnx", NULL, &g, &err) == INFD_STATUS_OK) {
        infd_ir_graph_destroy(g);
    } else if (err.msg[0] == '\0') {
        __builtin_trap(); /* every failure must say why */
    }
    return 0;
}
