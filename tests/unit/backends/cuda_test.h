/*
 * cuda_test.h - one node on the CUDA backend, for the kernel tests
 * (test_cuda.c, test_cuda_ops.c): the node of a kernel_test.h case is
 * compiled with infd_cuda_backend and run once on device copies of the
 * inputs, through the backend's own memory and stream slots, and its
 * outputs come back to the host. Header-only; include after kernel_test.h
 * in a file built with INFD_HAVE_CUDA.
 */
#ifndef INFD_TESTS_UNIT_BACKENDS_CUDA_TEST_H
#define INFD_TESTS_UNIT_BACKENDS_CUDA_TEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_nhwc.h"
#include "kernel_test.h"

/* When set, ct_run lets the kernel write output 0 in its opaque layout (as
 * a plan does when every reader takes it: FP16/BF16 NHWC) and converts it
 * back to FP32 NCHW on the host. */
static bool ct_opaque_output = false;

/* Bit i: ct_run hands input i (4-D) to the kernel in the case's 16-bit
 * NHWC layout (FP16; BF16 in a BF16 case), as a plan does when the
 * producer wrote it so, converting it on the host first. */
static uint32_t ct_opaque_inputs = 0;

/* The 16-bit NHWC tensor at `out` = in (FP32 [n, c, h, w]). */
static inline void ct_to_nhwc(const float *in, bool bf16, const int64_t *dims, uint16_t *out)
{
    int64_t n = dims[0], c = dims[1], h = dims[2], w = dims[3];
    for (int64_t i = 0; i < n; i++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                for (int64_t k = 0; k < c; k++) {
                    float v = in[((i * c + k) * h + y) * w + x];
                    out[((i * h + y) * w + x) * c + k] =
                        bf16 ? infd_bf16_from_fp32(v) : infd_fp16_from_fp32(v);
                }
}

/* out (FP32 [n, c, h, w]) = the 16-bit NHWC tensor at `in`. */
static inline void ct_from_nhwc(const uint16_t *in, bool bf16, const int64_t *dims, float *out)
{
    int64_t n = dims[0], c = dims[1], h = dims[2], w = dims[3];
    for (int64_t i = 0; i < n; i++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                for (int64_t k = 0; k < c; k++)
                    out[((i * c + k) * h + y) * w + x] =
                        bf16 ? infd_bf16_to_fp32(in[((i * h + y) * w + x) * c + k])
                             : infd_fp16_to_fp32(in[((i * h + y) * w + x) * c + k]);
}

/* Bytes of value v of the case's graph. */
static inline size_t ct_value_bytes(kt *t, int32_t v)
{
    const infd_ir_value *val = &t->g->values[v];
    size_t n = infd_dtype_size(val->dtype);
    for (int32_t d = 0; d < val->shape.rank; d++)
        n *= (size_t)val->shape.dims[d].value;
    return n;
}

/* Compiles the node for CUDA at `precision` and runs it once on device
 * copies of `inputs`; outputs[i] (NULL: not copied) receives output i.
 * poison: output 0 on the device is filled with 0x7f bytes first, so an
 * element the kernel forgets shows. The kernel's name goes to `kernel`
 * (kernel_n bytes). */
static inline infd_status ct_run(kt *t, infd_precision precision, bool poison,
                                 const void *const *inputs, void *const *outputs, char *kernel,
                                 size_t kernel_n, infd_error *err)
{
    const infd_backend_ops *cuda = &infd_cuda_backend;
    const infd_ir_value *ins[KT_MAX_IO], *outs[KT_MAX_IO];
    void *din[KT_MAX_IO] = { 0 }, *dout[KT_MAX_IO] = { 0 };
    void *ws = NULL, *stream = NULL;
    infd_kernel *k = NULL;
    infd_kernel_args a;
    kt_args(t, &a, ins, outs);
    a.n_slots = 1;
    a.precision = precision;
    a.output_opaque_ok = ct_opaque_output;
    bool bf16 = precision == INFD_PRECISION_BF16;
    const void *layouts[KT_MAX_IO] = { 0 };
    for (int32_t i = 0; i < t->node.n_inputs && i < 32; i++) {
        if (ct_opaque_inputs >> i & 1u)
            layouts[i] = bf16 ? &infd_cuda_layout_bf16_nhwc : &infd_cuda_layout_f16_nhwc;
    }
    if (ct_opaque_inputs)
        a.input_layouts = layouts;
    infd_status st = infd_backend_compile(cuda, &a, &k, err);
    if (st != INFD_STATUS_OK)
        return st;
    snprintf(kernel, kernel_n, "%s", k->name ? k->name : "");
    st = cuda->stream_create(&stream, err);
    for (int32_t i = 0; i < t->node.n_inputs && st == INFD_STATUS_OK; i++) {
        if (t->ins[i] < 0)
            continue;
        size_t nb = ct_value_bytes(t, t->ins[i]);
        din[i] = cuda->alloc(INFD_BACKEND_MEM_DEVICE, nb ? nb : 1, err);
        if (!din[i])
            st = INFD_STATUS_OUT_OF_MEMORY;
        else if (nb && layouts[i]) {
            const infd_ir_value *v = &t->g->values[t->ins[i]];
            int64_t dims[4];
            for (int d = 0; d < 4; d++)
                dims[d] = v->shape.dims[d].value;
            uint16_t *h16 = malloc(nb / 2);
            ct_to_nhwc(inputs[i], bf16, dims, h16);
            cuda->copy(din[i], h16, nb / 2, INFD_BACKEND_COPY_H2D, NULL);
            st = cuda->sync(NULL, err);
            free(h16);
        } else if (nb)
            cuda->copy(din[i], inputs[i], nb, INFD_BACKEND_COPY_H2D, NULL);
    }
    for (int32_t i = 0; i < t->node.n_outputs && st == INFD_STATUS_OK; i++) {
        size_t nb = ct_value_bytes(t, t->outs[i]);
        dout[i] = cuda->alloc(INFD_BACKEND_MEM_DEVICE, nb ? nb : 1, err);
        if (!dout[i])
            st = INFD_STATUS_OUT_OF_MEMORY;
    }
    size_t out_nb = ct_value_bytes(t, t->outs[0]);
    if (st == INFD_STATUS_OK && poison && out_nb) {
        void *bad = malloc(out_nb);
        memset(bad, 0x7f, out_nb);
        cuda->copy(dout[0], bad, out_nb, INFD_BACKEND_COPY_H2D, NULL);
        free(bad);
    }
    if (st == INFD_STATUS_OK && k->workspace_bytes) {
        ws = cuda->alloc(INFD_BACKEND_MEM_DEVICE, k->workspace_bytes, err);
        if (!ws)
            st = INFD_STATUS_OUT_OF_MEMORY;
    }
    if (st == INFD_STATUS_OK) {
        infd_kernel_io io = {
            .inputs = (const void *const *)din, .outputs = dout, .workspace = ws, .stream = stream
        };
        infd_kernel_run(k, &io);
        st = cuda->sync(stream, err);
    }
    for (int32_t i = 0; i < t->node.n_outputs && st == INFD_STATUS_OK; i++) {
        size_t nb = ct_value_bytes(t, t->outs[i]);
        const infd_ir_value *y = &t->g->values[t->outs[i]];
        if (i == 0 && k->output_layout && nb && outputs[0] && y->shape.rank == 4) {
            const infd_cuda_layout *l = k->output_layout;
            uint16_t *h16 = malloc(nb / 2);
            int64_t dims[4];
            for (int d = 0; d < 4; d++)
                dims[d] = y->shape.dims[d].value;
            cuda->copy(h16, dout[0], nb / 2, INFD_BACKEND_COPY_D2H, NULL);
            st = cuda->sync(NULL, err);
            ct_from_nhwc(h16, l->fmt == INFD_CUDA_FMT_BF16_NHWC, dims, outputs[0]);
            free(h16);
        } else if (nb && outputs[i]) {
            cuda->copy(outputs[i], dout[i], nb, INFD_BACKEND_COPY_D2H, NULL);
        }
    }
    if (st == INFD_STATUS_OK)
        st = cuda->sync(NULL, err);
    for (int32_t i = 0; i < KT_MAX_IO; i++) {
        cuda->free(INFD_BACKEND_MEM_DEVICE, din[i]);
        cuda->free(INFD_BACKEND_MEM_DEVICE, dout[i]);
    }
    cuda->free(INFD_BACKEND_MEM_DEVICE, ws);
    cuda->stream_destroy(stream);
    infd_kernel_destroy(k);
    return st;
}

/* n floats in [lo, hi) from a seeded LCG. */
static inline void ct_fill(float *p, size_t n, uint32_t seed, float lo, float hi)
{
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
    }
}

#endif /* INFD_TESTS_UNIT_BACKENDS_CUDA_TEST_H */
