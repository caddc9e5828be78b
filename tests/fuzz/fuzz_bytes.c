/*
 * fuzz_bytes.c - libFuzzer target for the reader of BYTES tensors a
 * request carries (src/runtime/scheduler.c, rt_bytes_layout_ok): elements
 * of a 4-byte little-endian length and that many bytes, in pieces as an
 * HTTP body lies in its buffers.
 *
 * Input: byte 0 the number of elements (0..255), byte 1 how many pieces
 * (1..8), then that many cut points (one byte each, a share of the rest),
 * then the tensor's bytes. Every input must be accepted or refused, and an
 * accepted layout must walk to exactly its end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int64_t numel = data[0];
    int n_pieces = 1 + data[1] % 8;
    if (size < 2 + (size_t)n_pieces)
        return 0;
    const uint8_t *cuts = data + 2;
    const uint8_t *body = data + 2 + n_pieces;
    size_t n = size - 2 - (size_t)n_pieces;
    /* Each piece is a copy of its own (so reading past one is caught). */
    infd_data_segment segs[8];
    uint8_t *own[8] = { NULL };
    size_t at = 0;
    for (int k = 0; k < n_pieces; k++) {
        size_t len = k == n_pieces - 1 ? n - at : (n - at) * cuts[k] / 255;
        own[k] = malloc(len ? len : 1);
        if (len)
            memcpy(own[k], body + at, len);
        segs[k] = (infd_data_segment){ own[k], len };
        at += len;
    }
    if (rt_bytes_layout_ok(segs, n, numel)) {
        size_t off = 0;
        for (int64_t e = 0; e < numel; e++) {
            uint32_t len = (uint32_t)body[off] | (uint32_t)body[off + 1] << 8 |
                           (uint32_t)body[off + 2] << 16 | (uint32_t)body[off + 3] << 24;
            off += 4 + (size_t)len;
            if (off > n)
                abort();
        }
        if (off != n)
            abort();
    }
    for (int k = 0; k < n_pieces; k++)
        free(own[k]);
    return 0;
}
