/*
 * fuzz_grpc_wire.c - libFuzzer target for the gRPC frontend's reading of a
 * ModelInferRequest as gRPC core hands it over (src/frontends/grpc/wire.c):
 * the raw_input_contents found across the received slices, the rest
 * unpacked by protobuf-c as the frontend does it.
 *
 * Input: byte 0 how many pieces (1..8), then that many cut points (one byte
 * each, a share of the rest), then the message. Each piece is a copy of its
 * own, so reading past one is caught. The split must agree with the split
 * of the same message in one piece: the same status, the same rest, the
 * same raw bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontends/grpc/wire.h"
#include "grpc_service.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RAW 8

/* The raw entry's bytes joined (malloc'd). */
static uint8_t *join(const grpc_wire_raw *r)
{
    uint8_t *p = malloc(r->nbytes ? r->nbytes : 1);
    size_t at = 0;
    for (int k = 0; k < r->n_pieces; k++) {
        if (r->pieces[k].nbytes == 0)
            abort(); /* no empty piece is listed */
        memcpy(p + at, r->pieces[k].data, r->pieces[k].nbytes);
        at += r->pieces[k].nbytes;
    }
    if (at != r->nbytes)
        abort();
    return p;
}

static void *pb_alloc(void *a, size_t n)
{
    return infd_arena_alloc(a, n ? n : 1, 0);
}

static void pb_free(void *a, void *p)
{
    (void)a;
    (void)p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int n_pieces = 1 + data[0] % 8;
    if (size < 1 + (size_t)n_pieces)
        return 0;
    const uint8_t *cuts = data + 1;
    const uint8_t *msg = data + 1 + n_pieces;
    size_t n = size - 1 - (size_t)n_pieces;
    infd_data_segment segs[8], whole;
    uint8_t *own[8] = { NULL };
    size_t at = 0;
    for (int k = 0; k < n_pieces; k++) {
        size_t len = k == n_pieces - 1 ? n - at : (n - at) * cuts[k] / 255;
        own[k] = malloc(len ? len : 1);
        if (len)
            memcpy(own[k], msg + at, len);
        segs[k] = (infd_data_segment){ own[k], len };
        at += len;
    }
    uint8_t *one = malloc(n ? n : 1);
    if (n)
        memcpy(one, msg, n);
    whole = (infd_data_segment){ one, n };

    infd_arena a, b;
    infd_arena_init(&a, 0);
    infd_arena_init(&b, 0);
    grpc_wire_raw ra[MAX_RAW], rb[MAX_RAW];
    const uint8_t *rest_a, *rest_b;
    size_t rest_an, rest_bn;
    int na, nb;
    infd_error ea = { 0 }, eb = { 0 };
    infd_status sa = grpc_wire_split(&a, segs, n_pieces, &rest_a, &rest_an, ra, MAX_RAW, &na, &ea);
    infd_status sb = grpc_wire_split(&b, &whole, 1, &rest_b, &rest_bn, rb, MAX_RAW, &nb, &eb);
    if (sa != sb || (sa != INFD_STATUS_OK && strcmp(ea.msg, eb.msg) != 0))
        abort();
    if (sa == INFD_STATUS_OK) {
        if (na != nb || rest_an != rest_bn || (rest_an && memcmp(rest_a, rest_b, rest_an) != 0))
            abort();
        for (int k = 0; k < na; k++) {
            uint8_t *x = join(&ra[k]), *y = join(&rb[k]);
            if (ra[k].nbytes != rb[k].nbytes || (ra[k].nbytes && memcmp(x, y, ra[k].nbytes) != 0))
                abort();
            free(x);
            free(y);
        }
        /* The rest, as the frontend unpacks it (into its arena). */
        ProtobufCAllocator al = { pb_alloc, pb_free, &a };
        Inference__ModelInferRequest *r =
            inference__model_infer_request__unpack(&al, rest_an, rest_a);
        if (r) {
            for (size_t i = 0; i < r->n_inputs; i++)
                for (size_t d = 0; d < r->inputs[i]->n_shape; d++)
                    (void)r->inputs[i]->shape[d];
        }
    }
    infd_arena_fini(&a);
    infd_arena_fini(&b);
    free(one);
    for (int k = 0; k < n_pieces; k++)
        free(own[k]);
    return 0;
}
