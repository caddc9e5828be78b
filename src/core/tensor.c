/*
 * tensor.c - shapes and tensor descriptors.
 *
 * Sizes come from outside data (model files, request headers), so every
 * product is checked for overflow before it is used to size memory.
 */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/common.h"

infd_status infd_shape_init(infd_shape *shape, int32_t rank, const int64_t *dims, infd_error *err)
{
    memset(shape, 0, sizeof(*shape));
    if (rank < 0 || rank > INFD_MAX_RANK)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "rank %d is outside 0..%d",
                              (int)rank, INFD_MAX_RANK);
    for (int32_t i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "dim %d is %lld, expected >= 0", (int)i, (long long)dims[i]);
        shape->dims[i] = dims[i];
    }
    shape->rank = rank;
    return INFD_STATUS_OK;
}

infd_status infd_shape_numel(const infd_shape *shape, int64_t *out, infd_error *err)
{
    int64_t n = 1;
    if (shape->rank < 0 || shape->rank > INFD_MAX_RANK)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "rank %d is outside 0..%d",
                              (int)shape->rank, INFD_MAX_RANK);
    for (int32_t i = 0; i < shape->rank; i++) {
        int64_t d = shape->dims[i];
        if (d < 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "dim %d is %lld, expected >= 0", (int)i, (long long)d);
        if (__builtin_mul_overflow(n, d, &n))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "element count of shape overflows at dim %d", (int)i);
    }
    *out = n;
    return INFD_STATUS_OK;
}

bool infd_shape_equal(const infd_shape *a, const infd_shape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int32_t i = 0; i < a->rank; i++) {
        if (a->dims[i] != b->dims[i])
            return false;
    }
    return true;
}

char *infd_shape_format(const infd_shape *shape, char *buf, size_t n)
{
    size_t off = 0;
    if (n == 0)
        return buf;
    buf[0] = '\0';
    int w = snprintf(buf, n, "[");
    for (int32_t i = 0; w >= 0 && i < shape->rank && i < INFD_MAX_RANK; i++) {
        off += (size_t)w;
        if (off >= n)
            return buf;
        w = snprintf(buf + off, n - off, i ? ",%lld" : "%lld", (long long)shape->dims[i]);
    }
    if (w >= 0) {
        off += (size_t)w;
        if (off < n)
            snprintf(buf + off, n - off, "]");
    }
    return buf;
}

infd_status infd_tensor_nbytes_for(infd_dtype dtype, const infd_shape *shape, size_t *out,
                                   infd_error *err)
{
    size_t elem = infd_dtype_size(dtype);
    int64_t numel;
    size_t bytes;
    if (elem == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "dtype %s has no fixed element size", infd_dtype_name(dtype));
    infd_status st = infd_shape_numel(shape, &numel, err);
    if (st != INFD_STATUS_OK)
        return st;
    if ((uint64_t)numel > SIZE_MAX || __builtin_mul_overflow((size_t)numel, elem, &bytes))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "byte size of %lld %s elements overflows", (long long)numel,
                              infd_dtype_name(dtype));
    *out = bytes;
    return INFD_STATUS_OK;
}

infd_status infd_tensor_init_view(infd_tensor *t, infd_dtype dtype, const infd_shape *shape,
                                  void *data, size_t nbytes, infd_error *err)
{
    memset(t, 0, sizeof(*t));
    if ((unsigned)dtype >= INFD_DTYPE_COUNT_ || dtype == INFD_DTYPE_INVALID)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "invalid dtype %d", (int)dtype);
    int64_t numel;
    infd_status st = infd_shape_numel(shape, &numel, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (dtype != INFD_DTYPE_BYTES) {
        size_t want;
        st = infd_tensor_nbytes_for(dtype, shape, &want, err);
        if (st != INFD_STATUS_OK)
            return st;
        if (want != nbytes) {
            char s[128];
            return infd_error_set(
                err, INFD_STATUS_INVALID_ARGUMENT, "%s tensor of shape %s needs %zu bytes, got %zu",
                infd_dtype_name(dtype), infd_shape_format(shape, s, sizeof(s)), want, nbytes);
        }
    }
    if (nbytes && !data)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "tensor data is NULL");
    t->dtype = dtype;
    t->shape = *shape;
    t->data = data;
    t->nbytes = nbytes;
    t->owns_data = false;
    return INFD_STATUS_OK;
}

infd_status infd_tensor_alloc(infd_tensor *t, infd_dtype dtype, const infd_shape *shape,
                              infd_error *err)
{
    size_t nbytes;
    memset(t, 0, sizeof(*t));
    infd_status st = infd_tensor_nbytes_for(dtype, shape, &nbytes, err);
    if (st != INFD_STATUS_OK)
        return st;
    /* Zero-element tensors still get a real (minimal) buffer so data is never NULL. */
    size_t cap = infd_align_up(nbytes ? nbytes : 1, INFD_ALIGNMENT);
    if (cap < nbytes)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "tensor of %zu bytes is too large",
                              nbytes);
    void *data = infd_aligned_alloc(INFD_ALIGNMENT, cap);
    if (!data)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                              "out of memory allocating a %zu-byte tensor", nbytes);
    memset(data, 0, cap);
    t->dtype = dtype;
    t->shape = *shape;
    t->data = data;
    t->nbytes = nbytes;
    t->owns_data = true;
    return INFD_STATUS_OK;
}

void infd_tensor_fini(infd_tensor *t)
{
    if (t->owns_data)
        infd_free(t->data);
    memset(t, 0, sizeof(*t));
}

int64_t infd_tensor_numel(const infd_tensor *t)
{
    int64_t n = 0;
    if (infd_shape_numel(&t->shape, &n, NULL) != INFD_STATUS_OK)
        return 0;
    return n;
}
