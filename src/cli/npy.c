/*
 * npy.c - the .npy format: magic "\x93NUMPY", version, header length, a
 * Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (..), }
 * padded to 64 bytes, then the raw data. The dict is parsed only as far as
 * those three keys in the layout NumPy writes.
 */
#include "cli/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

static const struct {
    const char *descr;
    infd_dtype dtype;
} descrs[] = {
    { "<f4", INFD_DTYPE_FP32 },   { "<f2", INFD_DTYPE_FP16 },   { "<f8", INFD_DTYPE_FP64 },
    { "<i8", INFD_DTYPE_INT64 },  { "<i4", INFD_DTYPE_INT32 },  { "<i2", INFD_DTYPE_INT16 },
    { "|i1", INFD_DTYPE_INT8 },   { "|u1", INFD_DTYPE_UINT8 },  { "<u2", INFD_DTYPE_UINT16 },
    { "<u4", INFD_DTYPE_UINT32 }, { "<u8", INFD_DTYPE_UINT64 }, { "|b1", INFD_DTYPE_BOOL },
};

static infd_status bad(infd_error *err, const char *path, const char *what)
{
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: not a supported .npy file: %s",
                          path, what);
}

/* Reads an .npy from `f` (closed here); `path` names it in messages. The
 * fuzz target (tests/fuzz/fuzz_npy.c) reads memory through fmemopen. */
static infd_status npy_read_stream(FILE *f, const char *path, infd_tensor *t, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    char *header = NULL;
    memset(t, 0, sizeof(*t));
    unsigned char pre[12];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        st = bad(err, path, "no NUMPY magic");
        goto out;
    }
    uint32_t hlen;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2) {
            st = bad(err, path, "truncated header");
            goto out;
        }
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 8, 1, 4, f) != 4) {
            st = bad(err, path, "truncated header");
            goto out;
        }
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 |
               (uint32_t)pre[11] << 24;
    } else {
        st = bad(err, path, "unknown format version");
        goto out;
    }
    if (hlen > (1u << 20)) {
        st = bad(err, path, "header too long");
        goto out;
    }
    header = infd_malloc(hlen + 1);
    if (!header || fread(header, 1, hlen, f) != hlen) {
        st = bad(err, path, "truncated header");
        goto out;
    }
    header[hlen] = '\0';
    const char *d = strstr(header, "'descr':");
    const char *fo = strstr(header, "'fortran_order':");
    const char *sh = strstr(header, "'shape':");
    if (!d || !fo || !sh) {
        st = bad(err, path, "header lacks descr, fortran_order or shape");
        goto out;
    }
    infd_dtype dtype = INFD_DTYPE_INVALID;
    d = strchr(d + 8, '\'');
    for (size_t i = 0; d && i < sizeof(descrs) / sizeof(descrs[0]); i++) {
        if (strncmp(d + 1, descrs[i].descr, 3) == 0 && d[4] == '\'')
            dtype = descrs[i].dtype;
    }
    if (dtype == INFD_DTYPE_INVALID) {
        st = bad(err, path, "unsupported dtype (little-endian numeric types only)");
        goto out;
    }
    if (strncmp(fo + 16, " False", 6) != 0) {
        st = bad(err, path, "Fortran-ordered arrays are not supported");
        goto out;
    }
    const char *p = strchr(sh, '(');
    int64_t dims[INFD_MAX_RANK];
    int32_t rank = 0;
    if (!p) {
        st = bad(err, path, "malformed shape");
        goto out;
    }
    p++;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || rank >= INFD_MAX_RANK) {
            st = bad(err, path, "malformed shape");
            goto out;
        }
        dims[rank++] = v;
        p = end;
        if (*p == 'L')
            p++;
    }
    infd_shape shape;
    size_t nbytes;
    st = infd_shape_init(&shape, rank, dims, err);
    if (st == INFD_STATUS_OK)
        st = infd_tensor_nbytes_for(dtype, &shape, &nbytes, err);
    if (st != INFD_STATUS_OK)
        goto out;
    /* A header may promise more than the file holds: check before the
     * allocation (a stream that cannot seek is read and found short). */
    long here = ftell(f);
    if (here >= 0 && fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        if (end < here || fseek(f, here, SEEK_SET) != 0) {
            st = bad(err, path, "cannot seek");
            goto out;
        }
        if ((uint64_t)(end - here) < (uint64_t)nbytes) {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s: data is shorter than the %zu bytes its header promises", path,
                                nbytes);
            goto out;
        }
    }
    st = infd_tensor_alloc(t, dtype, &shape, err);
    if (st != INFD_STATUS_OK)
        goto out;
    if (nbytes && fread(t->data, 1, nbytes, f) != nbytes) {
        infd_tensor_fini(t);
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: data is shorter than the %zu bytes its header promises", path,
                            nbytes);
    }
out:
    infd_free(header);
    fclose(f);
    return st;
}

infd_status infd_npy_read(const char *path, infd_tensor *t, infd_error *err)
{
    memset(t, 0, sizeof(*t));
    FILE *f = fopen(path, "rb");
    if (!f)
        return infd_error_set(err, INFD_STATUS_NOT_FOUND, "%s: cannot open", path);
    return npy_read_stream(f, path, t, err);
}

infd_status infd_npy_write(const char *path, const infd_tensor *t, infd_error *err)
{
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof(descrs) / sizeof(descrs[0]); i++) {
        if (descrs[i].dtype == t->dtype)
            descr = descrs[i].descr;
    }
    if (t->dtype == INFD_DTYPE_BF16)
        descr = "<u2";
    if (!descr)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: cannot write %s as .npy",
                              path, infd_dtype_name(t->dtype));
    char dict[512];
    int n =
        snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int32_t i = 0; i < t->shape.rank; i++)
        n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%lld,%s", (long long)t->shape.dims[i],
                      i + 1 < t->shape.rank ? " " : "");
    if (t->shape.rank > 1)
        n--; /* NumPy writes (1, 3) but (5,) */
    n += snprintf(dict + n, sizeof(dict) - (size_t)n, "), }");
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f)
        return infd_error_set(err, INFD_STATUS_IO, "%s: cannot create", path);
    uint16_t hlen = (uint16_t)((size_t)n + pad + 1);
    unsigned char pre[10] = { 0x93,
                              'N',
                              'U',
                              'M',
                              'P',
                              'Y',
                              1,
                              0,
                              (unsigned char)(hlen & 0xff),
                              (unsigned char)(hlen >> 8) };
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 0; i < pad && ok; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && (t->nbytes == 0 || fwrite(t->data, 1, t->nbytes, f) == t->nbytes);
    ok = (fclose(f) == 0) && ok;
    if (!ok)
        return infd_error_set(err, INFD_STATUS_IO, "%s: write failed", path);
    return INFD_STATUS_OK;
}
