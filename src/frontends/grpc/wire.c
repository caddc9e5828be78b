/*
 * wire.c - a ModelInferRequest's raw_input_contents found in the received
 * slices (see wire.h).
 *
 * Two passes over the message with a cursor that steps across the pieces:
 * the first checks the framing, counts the raw entries and the pieces each
 * spans, and sizes the rest; the second lists the pieces and copies every
 * other field (tag bytes included, in order) into the rest.
 */
#include "frontends/grpc/wire.h"

#include <string.h>

/* A position in the message. */
typedef struct cursor {
    const infd_data_segment *s;
    int n;
    int i;      /* the piece */
    size_t off; /* in piece i */
    size_t pos; /* in the message */
} cursor;

/* Field 7, length-delimited: raw_input_contents. */
#define RAW_TAG ((7u << 3) | 2u)

static void settle(cursor *c)
{
    while (c->i < c->n && c->off == c->s[c->i].nbytes) {
        c->i++;
        c->off = 0;
    }
}

static bool get_byte(cursor *c, uint8_t *b)
{
    settle(c);
    if (c->i == c->n)
        return false;
    *b = ((const uint8_t *)c->s[c->i].data)[c->off++];
    c->pos++;
    return true;
}

static bool get_varint(cursor *c, uint64_t *v)
{
    uint64_t r = 0;
    uint8_t b;
    for (int shift = 0; shift < 64 && get_byte(c, &b); shift += 7) {
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* Walks `n` bytes (the caller checked they are there): counts the non-empty
 * pieces they span and, when `pieces` is set, lists them; when `dst` is set,
 * copies them there. */
static int walk(cursor *c, size_t n, infd_data_segment *pieces, uint8_t *dst)
{
    int k = 0;
    while (n > 0) {
        settle(c);
        size_t take = c->s[c->i].nbytes - c->off;
        take = take < n ? take : n;
        const uint8_t *p = (const uint8_t *)c->s[c->i].data + c->off;
        if (pieces)
            pieces[k] = (infd_data_segment){ p, take };
        if (dst) {
            memcpy(dst, p, take);
            dst += take;
        }
        k++;
        c->off += take;
        c->pos += take;
        n -= take;
    }
    return k;
}

/* Steps over one field: its tag, and for a length-delimited one its payload
 * length (*len; the payload itself is not stepped over). False when
 * malformed: `total` is the message size. */
static bool field_head(cursor *c, size_t total, uint64_t *tag, uint64_t *len)
{
    *len = 0;
    if (!get_varint(c, tag))
        return false;
    switch (*tag & 7) {
    case 0: {
        uint64_t v;
        return get_varint(c, &v);
    }
    case 1:
        *len = 8;
        return total - c->pos >= 8;
    case 2:
        return get_varint(c, len) && *len <= total - c->pos;
    case 5:
        *len = 4;
        return total - c->pos >= 4;
    default:
        return false;
    }
}

infd_status grpc_wire_split(infd_arena *a, const infd_data_segment *in, int n_in,
                            const uint8_t **rest, size_t *rest_n, grpc_wire_raw *raw, int max_raw,
                            int *n_raw, infd_error *err)
{
    size_t total = 0;
    for (int i = 0; i < n_in; i++)
        total += in[i].nbytes;
    *n_raw = 0;
    *rest = (const uint8_t *)"";
    *rest_n = 0;

    /* Pass 1: check the framing, count. */
    cursor c = { in, n_in, 0, 0, 0 };
    size_t raw_bytes = 0;
    while (c.pos < total) {
        size_t at = c.pos;
        uint64_t tag, len;
        if (!field_head(&c, total, &tag, &len))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "malformed ModelInferRequest at byte %zu of %zu", at, total);
        if (tag == RAW_TAG) {
            if (*n_raw == max_raw)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "more than %d raw_input_contents", max_raw);
            raw[*n_raw].nbytes = (size_t)len;
            raw[*n_raw].n_pieces = walk(&c, (size_t)len, NULL, NULL);
            raw[*n_raw].pieces = NULL;
            (*n_raw)++;
            raw_bytes += c.pos - at;
        } else if ((tag & 7) != 0) {
            walk(&c, (size_t)len, NULL, NULL);
        }
    }
    if (*n_raw == 0 && n_in == 1) {
        *rest = in[0].data ? in[0].data : (const uint8_t *)"";
        *rest_n = total;
        return INFD_STATUS_OK;
    }

    /* Pass 2: list the pieces, copy the rest. */
    uint8_t *w = infd_arena_alloc(a, total - raw_bytes + 1, 0);
    if (!w)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory decoding the request");
    *rest = w;
    for (int k = 0; k < *n_raw; k++) {
        raw[k].pieces = infd_arena_alloc(
            a, (size_t)(raw[k].n_pieces ? raw[k].n_pieces : 1) * sizeof(infd_data_segment), 0);
        if (!raw[k].pieces)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                                  "out of memory decoding the request");
    }
    c = (cursor){ in, n_in, 0, 0, 0 };
    int k = 0;
    while (c.pos < total) {
        cursor start = c;
        uint64_t tag, len;
        field_head(&c, total, &tag, &len); /* checked in pass 1 */
        if (tag == RAW_TAG) {
            walk(&c, (size_t)len, raw[k++].pieces, NULL);
            continue;
        }
        if ((tag & 7) != 0)
            walk(&c, (size_t)len, NULL, NULL);
        size_t field_n = c.pos - start.pos;
        walk(&start, field_n, NULL, w);
        w += field_n;
    }
    *rest_n = (size_t)(w - *rest);
    return INFD_STATUS_OK;
}
