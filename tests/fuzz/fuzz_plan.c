/*
 * fuzz_plan.c - libFuzzer target for the whole build of a plan: loading,
 * shape inference, constant folding (which runs kernels), fusion, kernel
 * compilation and the memory plan, plus one run on zeroed inputs when the
 * plan builds. Every input must build or fail with a message.
 *
 * Slower per input than fuzz_onnx_loader (kernels are compiled), so it
 * finds its way to the shape functions and kernels of small graphs; seeds
 * are the same generated models.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "infd/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Inputs larger than this are skipped: a run would take too long. */
#define MAX_TENSOR_BYTES (1u << 20)

static void run_once(infd_plan *plan)
{
    infd_context *ctx = NULL;
    infd_tensor in[16], out[16];
    int n_in = infd_plan_n_inputs(plan), n_out = infd_plan_n_outputs(plan);
    int ok = n_in <= 16 && n_out <= 16;
    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    for (int i = 0; ok && i < n_in; i++) {
        infd_tensor_info info;
        infd_plan_input(plan, i, &info);
        ok = info.nbytes <= MAX_TENSOR_BYTES &&
             infd_tensor_alloc(&in[i], info.dtype, &info.shape, NULL) == INFD_STATUS_OK;
    }
    for (int i = 0; ok && i < n_out; i++) {
        infd_tensor_info info;
        infd_plan_output(plan, i, &info);
        ok = info.nbytes <= MAX_TENSOR_BYTES &&
             infd_tensor_alloc(&out[i], info.dtype, &info.shape, NULL) == INFD_STATUS_OK;
    }
    if (ok && infd_context_create(plan, &ctx, NULL) == INFD_STATUS_OK) {
        infd_error err = { 0 };
        if (infd_plan_run(plan, ctx, in, n_in, out, n_out, &err) != INFD_STATUS_OK &&
            err.msg[0] == '\0')
            __builtin_trap();
        infd_context_destroy(ctx);
    }
    for (int i = 0; i < 16; i++) {
        infd_tensor_fini(&in[i]);
        infd_tensor_fini(&out[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    infd_plan *plan = NULL;
    infd_error err = { 0 };
    infd_plan_options o;
    infd_plan_options_init(&o);
    o.n_threads = 1;
    o.max_contexts = 1;
    if (infd_plan_create_from_memory(data, size, "fuzz.onnx", &o, &plan, &err) == INFD_STATUS_OK) {
        run_once(plan);
        infd_plan_destroy(plan);
    } else if (err.msg[0] == '\0') {
        __builtin_trap(); /* every failure must say why */
    }
    return 0;
}
