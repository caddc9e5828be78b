/*
 * planfile.c - plan files: `infd build`'s output, loaded by infd_plan_create.
 *
 * A plan file is the model plus what tuning chose, so loading it compiles
 * the model again (loading, folding, fusing and compiling are fast and
 * deterministic) but hands every kernel the record it wrote last time
 * (backend.h, infd_kernel_args.tuning), which is where the time goes on a
 * GPU: each cuDNN convolution times its candidate algorithms. A record is
 * whatever its backend needs to skip that work: an algorithm id, cuBLASLt's
 * algorithm, or, for a cuDNN engine that compiles at run time, cuDNN's
 * serialized execution plan (compiled code, about 60 KB: restoring it takes
 * 1 ms, compiling it again 20-65). The fingerprint below pins the file to
 * the GPU and library versions such records are valid for. One file holds
 * every batch size a server compiles, so it is one self-contained artifact,
 * like TensorRT's model.plan, and like it is trusted: load plan files you
 * built.
 *
 * Format 2, little-endian; "str" is a u32 length, the bytes, then a NUL:
 *
 *   0   "INFDPLAN"         magic
 *   8   u32 format         INFD_PLANFILE_FORMAT; another is refused by name
 *   12  u32 flags          0
 *   16  u64 file_bytes     the whole file, checksum included (truncation)
 *   24  str infd_version   read even from other formats, for the message
 *       str infd_git, str backend, str device, str libs   the fingerprint
 *       u32 device_kind, u32 precision
 *       u32 n_shapes   { str name, u32 rank, i64 dims[rank] }
 *       u32 n_values   { str name, u32 dtype, u32 rank, i64 dims[rank],
 *                        u64 nbytes, bytes, zeros to a multiple of 8 }
 *       str model_name, u64 model_hash, u64 model_bytes, u64 model_offset
 *       zeros up to model_offset (64-aligned), the ONNX model
 *       u32 n_batches  { i64 batch, u32 n_records
 *                        { str node, str op_type, u32 n_bytes, bytes } }
 *                      (n_bytes <= INFD_KERNEL_TUNING_MAX, 1 MiB)
 *   file_bytes - 8: u64 checksum of every byte before it
 *
 * Reading trusts nothing: every count is checked against the bytes left
 * before anything is allocated for it (so a hostile count cannot ask for
 * more memory than the file's size), every string must end with its NUL,
 * and a failure names the file, the field and its byte offset. The
 * fingerprint is compared before the checksum, so a plan from another infd
 * version says so rather than "corrupt".
 *
 * The fingerprint's libs are the versions of the libraries whose choices
 * the records hold (infd_devices_libs: for CUDA "cuDNN 9.13.0, cuBLASLt
 * 13.1.0, CUDA runtime 13.0"): a cuDNN algorithm id or a cuBLASLt
 * heuristic candidate means something else, or nothing, under another
 * release, so a plan holding records is refused, naming the library, when
 * they differ from this process's, as it is for another GPU.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/common.h"
#include "graph/backend.h"
#include "graph/planfile.h"
#include "infd/engine.h"

/* ------------------------------------------------------------------------- */
/* Hash                                                                      */
/* ------------------------------------------------------------------------- */

static uint64_t load_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

/* Four independent multiply-xorshift lanes over 8-byte words: a checksum
 * against damage, not an authenticator; several GB/s, so checking a
 * 100 MB ResNet-50 plan costs tens of milliseconds, not a byte-wise FNV's
 * few hundred. */
uint64_t infd_planfile_hash(const void *data, size_t n)
{
    const uint8_t *p = data;
    const uint64_t m = 0x9fb21c651e98df25ull;
    uint64_t h[4] = { 0x9e3779b97f4a7c15ull ^ n, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull,
                      0x27d4eb2f165667c5ull };
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; k++) {
            h[k] = (h[k] ^ load_u64le(p + i + 8 * k)) * m;
            h[k] ^= h[k] >> 29;
        }
    }
    uint8_t tail[32] = { 0 };
    if (n > i)
        memcpy(tail, p + i, n - i);
    for (int k = 0; k < 4; k++) {
        h[k] = (h[k] ^ load_u64le(tail + 8 * k)) * m;
        h[k] ^= h[k] >> 29;
    }
    uint64_t x = h[0];
    for (int k = 1; k < 4; k++)
        x = fmix64(x ^ h[k]) * m;
    return fmix64(x ^ n);
}

/* ------------------------------------------------------------------------- */
/* Writing                                                                   */
/* ------------------------------------------------------------------------- */

static void put_u32(infd_strbuf *b, uint32_t v)
{
    uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    infd_strbuf_put(b, x, sizeof(x));
}

static void put_u64(infd_strbuf *b, uint64_t v)
{
    uint8_t x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    infd_strbuf_put(b, x, sizeof(x));
}

static void put_str(infd_strbuf *b, const char *s)
{
    size_t n = s ? strnlen(s, INFD_PLANFILE_MAX_STR) : 0;
    put_u32(b, (uint32_t)n);
    infd_strbuf_put(b, s ? s : "", n);
    infd_strbuf_putc(b, '\0');
}

static void put_zeros(infd_strbuf *b, size_t n)
{
    static const uint8_t zeros[64];
    while (n > 0) {
        size_t k = INFD_MIN(n, sizeof(zeros));
        infd_strbuf_put(b, zeros, k);
        n -= k;
    }
}

static void put_shape(infd_strbuf *b, const infd_shape *s)
{
    put_u32(b, (uint32_t)s->rank);
    for (int32_t d = 0; d < s->rank; d++)
        put_u64(b, (uint64_t)s->dims[d]);
}

void infd_planfile_encode(const infd_planfile *pf, infd_strbuf *b)
{
    size_t start = b->len;
    infd_strbuf_put(b, INFD_PLANFILE_MAGIC, 8);
    put_u32(b, INFD_PLANFILE_FORMAT);
    put_u32(b, 0);
    put_u64(b, 0); /* file_bytes, patched below */
    put_str(b, pf->infd_version);
    put_str(b, pf->infd_git);
    put_str(b, pf->backend);
    put_str(b, pf->device);
    put_str(b, pf->libs);
    put_u32(b, pf->device_kind);
    put_u32(b, pf->precision);
    put_u32(b, (uint32_t)pf->n_shapes);
    for (int32_t i = 0; i < pf->n_shapes; i++) {
        put_str(b, pf->shapes[i].name);
        put_shape(b, &pf->shapes[i].shape);
    }
    put_u32(b, (uint32_t)pf->n_values);
    for (int32_t i = 0; i < pf->n_values; i++) {
        const infd_tensor *t = &pf->values[i].value;
        put_str(b, pf->values[i].name);
        put_u32(b, (uint32_t)t->dtype);
        put_shape(b, &t->shape);
        put_u64(b, t->nbytes);
        infd_strbuf_put(b, t->data, t->nbytes);
        put_zeros(b, infd_align_up(t->nbytes, 8) - t->nbytes);
    }
    put_str(b, pf->model_name);
    put_u64(b, pf->model_hash);
    put_u64(b, pf->model_bytes);
    size_t model_offset = infd_align_up(b->len - start + 8, 64);
    put_u64(b, model_offset);
    put_zeros(b, model_offset - (b->len - start));
    infd_strbuf_put(b, pf->model, pf->model_bytes);
    put_u32(b, (uint32_t)pf->n_batches);
    for (int32_t k = 0; k < pf->n_batches; k++) {
        const infd_planfile_batch *bt = &pf->batches[k];
        put_u64(b, (uint64_t)bt->batch);
        put_u32(b, (uint32_t)bt->n_records);
        for (int32_t r = 0; r < bt->n_records; r++) {
            const infd_plan_record *rec = &bt->records[r];
            put_str(b, rec->node);
            put_str(b, rec->op_type);
            put_u32(b, rec->n_bytes);
            infd_strbuf_put(b, rec->bytes, rec->n_bytes);
        }
    }
    if (b->oom)
        return;
    uint64_t file_bytes = b->len - start + 8;
    for (int i = 0; i < 8; i++)
        ((uint8_t *)b->data)[start + 16 + (size_t)i] = (uint8_t)(file_bytes >> (8 * i));
    put_u64(b, infd_planfile_hash(b->data + start, b->len - start));
}

/* ------------------------------------------------------------------------- */
/* Reading                                                                   */
/* ------------------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *d;
    size_t n;      /* bytes readable: the file's, then those before the checksum */
    size_t file_n; /* the file's bytes */
    size_t pos;    /* next byte */
    const char *path;
    infd_error *err;
} reader;

static infd_status bad(reader *r, size_t at, const char *fmt, ...) INFD_PRINTF(3, 4);

static infd_status bad(reader *r, size_t at, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return infd_error_set(r->err, INFD_STATUS_INVALID_ARGUMENT,
                          "%s: corrupt or truncated plan file: %s at byte offset %zu (the file "
                          "has %zu bytes)",
                          r->path, msg, at, r->file_n);
}

/* Fails unless `k` more bytes are there for `what`. */
static infd_status need(reader *r, size_t k, const char *what)
{
    if (k > r->n - r->pos)
        return bad(r, r->pos, "%s runs past the end", what);
    return INFD_STATUS_OK;
}

static infd_status rd_u32(reader *r, const char *what, uint32_t *v)
{
    infd_status st = need(r, 4, what);
    if (st == INFD_STATUS_OK) {
        *v = load_u32le(r->d + r->pos);
        r->pos += 4;
    }
    return st;
}

static infd_status rd_u64(reader *r, const char *what, uint64_t *v)
{
    infd_status st = need(r, 8, what);
    if (st == INFD_STATUS_OK) {
        *v = load_u64le(r->d + r->pos);
        r->pos += 8;
    }
    return st;
}

static infd_status rd_str(reader *r, const char *what, const char **s)
{
    size_t at = r->pos;
    uint32_t len;
    infd_status st = rd_u32(r, what, &len);
    if (st != INFD_STATUS_OK)
        return st;
    if (len > INFD_PLANFILE_MAX_STR)
        return bad(r, at, "%s is longer than 4096 bytes", what);
    st = need(r, (size_t)len + 1, what);
    if (st != INFD_STATUS_OK)
        return st;
    const char *p = (const char *)r->d + r->pos;
    if (p[len] != '\0' || memchr(p, '\0', len) != NULL)
        return bad(r, at, "%s is not a NUL-terminated string", what);
    *s = p;
    r->pos += (size_t)len + 1;
    return INFD_STATUS_OK;
}

/* A count of items of at least `min_bytes` each, bounded by the bytes left
 * (so no count can make us allocate more than the file's size) and `max`. */
static infd_status rd_count(reader *r, const char *what, size_t min_bytes, uint32_t max, int32_t *n)
{
    size_t at = r->pos;
    uint32_t v;
    infd_status st = rd_u32(r, what, &v);
    if (st != INFD_STATUS_OK)
        return st;
    if (v > max || v > (r->n - r->pos) / min_bytes)
        return bad(r, at, "%s is larger than the file allows", what);
    *n = (int32_t)v;
    return INFD_STATUS_OK;
}

static infd_status rd_shape(reader *r, const char *what, infd_shape *s)
{
    size_t at = r->pos;
    uint32_t rank;
    int64_t dims[INFD_MAX_RANK];
    infd_status st = rd_u32(r, what, &rank);
    if (st != INFD_STATUS_OK)
        return st;
    if (rank > INFD_MAX_RANK)
        return bad(r, at, "%s has a rank above 8", what);
    for (uint32_t d = 0; d < rank && st == INFD_STATUS_OK; d++) {
        uint64_t v;
        st = rd_u64(r, what, &v);
        dims[d] = (int64_t)v;
        if (st == INFD_STATUS_OK && dims[d] < 0)
            return bad(r, r->pos - 8, "%s has a negative dim", what);
    }
    if (st == INFD_STATUS_OK && infd_shape_init(s, (int32_t)rank, dims, NULL) != INFD_STATUS_OK)
        return bad(r, at, "%s is not a valid shape", what);
    return st;
}

static infd_status rd_values(reader *r, infd_planfile *pf)
{
    infd_status st = rd_count(r, "the bound values' count", 26, 4096, &pf->n_values);
    if (st != INFD_STATUS_OK)
        return st;
    pf->values = infd_calloc((size_t)pf->n_values + 1, sizeof(*pf->values));
    if (!pf->values)
        return infd_error_set(r->err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", r->path);
    for (int32_t i = 0; i < pf->n_values; i++) {
        infd_input_value *v = &pf->values[i];
        uint32_t dtype = 0;
        uint64_t nbytes = 0;
        size_t at = r->pos;
        st = rd_str(r, "a bound value's name", &v->name);
        if (st == INFD_STATUS_OK) {
            at = r->pos;
            st = rd_u32(r, "a bound value's dtype", &dtype);
        }
        if (st == INFD_STATUS_OK &&
            (dtype >= INFD_DTYPE_COUNT_ || infd_dtype_size((infd_dtype)dtype) == 0))
            return bad(r, at, "%s has an unknown dtype", "a bound value");
        if (st == INFD_STATUS_OK)
            st = rd_shape(r, "a bound value's shape", &v->value.shape);
        if (st == INFD_STATUS_OK) {
            at = r->pos;
            st = rd_u64(r, "a bound value's size", &nbytes);
        }
        if (st != INFD_STATUS_OK)
            return st;
        /* numel * size, overflow-checked: dims are bounded by the bytes. */
        uint64_t want = infd_dtype_size((infd_dtype)dtype);
        for (int32_t d = 0; d < v->value.shape.rank; d++) {
            uint64_t dim = (uint64_t)v->value.shape.dims[d];
            want = dim && want > UINT64_MAX / dim ? UINT64_MAX : want * dim;
        }
        if (nbytes != want || nbytes > r->n - r->pos ||
            infd_align_up((size_t)nbytes, 8) > r->n - r->pos)
            return bad(r, at, "%s's size does not match its shape or the file", "a bound value");
        v->value.dtype = (infd_dtype)dtype;
        v->value.nbytes = (size_t)nbytes;
        v->value.data = (void *)(r->d + r->pos);
        v->value.owns_data = false;
        r->pos += infd_align_up((size_t)nbytes, 8);
    }
    return INFD_STATUS_OK;
}

static infd_status rd_batches(reader *r, infd_planfile *pf)
{
    infd_status st = rd_count(r, "the batch count", 12, INFD_PLAN_FILE_MAX_BATCHES, &pf->n_batches);
    if (st != INFD_STATUS_OK)
        return st;
    if (pf->n_batches == 0)
        return bad(r, r->pos - 4, "%s is 0", "the batch count");
    pf->batches = infd_calloc((size_t)pf->n_batches, sizeof(*pf->batches));
    if (!pf->batches)
        return infd_error_set(r->err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", r->path);
    for (int32_t k = 0; k < pf->n_batches; k++) {
        infd_planfile_batch *b = &pf->batches[k];
        size_t at = r->pos;
        uint64_t batch;
        st = rd_u64(r, "a batch size", &batch);
        if (st != INFD_STATUS_OK)
            return st;
        b->batch = (int64_t)batch;
        if (b->batch < 1 || b->batch > (1 << 20) || (k > 0 && b->batch <= pf->batches[k - 1].batch))
            return bad(r, at, "%s is not positive and ascending", "a batch size");
        st = rd_count(r, "a batch's record count", 14, INT32_MAX, &b->n_records);
        if (st != INFD_STATUS_OK)
            return st;
        b->records = infd_calloc((size_t)b->n_records + 1, sizeof(*b->records));
        if (!b->records)
            return infd_error_set(r->err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", r->path);
        for (int32_t i = 0; i < b->n_records; i++) {
            infd_plan_record *rec = &b->records[i];
            st = rd_str(r, "a record's node name", &rec->node);
            if (st == INFD_STATUS_OK)
                st = rd_str(r, "a record's op type", &rec->op_type);
            if (st == INFD_STATUS_OK) {
                at = r->pos;
                st = rd_u32(r, "a record's size", &rec->n_bytes);
            }
            if (st != INFD_STATUS_OK)
                return st;
            if (rec->n_bytes > INFD_KERNEL_TUNING_MAX)
                return bad(r, at, "%s is larger than %u bytes", "a tuning record",
                           (unsigned)INFD_KERNEL_TUNING_MAX);
            st = need(r, rec->n_bytes, "a tuning record");
            if (st != INFD_STATUS_OK)
                return st;
            rec->bytes = rec->n_bytes ? r->d + r->pos : NULL;
            r->pos += rec->n_bytes;
        }
    }
    return INFD_STATUS_OK;
}

bool infd_planfile_has_magic(const void *data, size_t n)
{
    return data && n >= 8 && memcmp(data, INFD_PLANFILE_MAGIC, 8) == 0;
}

/* The fixed header and the fingerprint: enough to say what a file is, even
 * one of another format (whose infd version is still at byte 24). */
static infd_status rd_header(reader *r, infd_planfile *pf)
{
    uint32_t format, flags;
    uint64_t file_bytes;
    if (!infd_planfile_has_magic(r->d, r->n))
        return bad(r, 0, "%s is missing", "the magic \"INFDPLAN\"");
    r->pos = 8;
    infd_status st = rd_u32(r, "the format version", &format);
    if (st == INFD_STATUS_OK)
        st = rd_u32(r, "the flags", &flags);
    if (st == INFD_STATUS_OK)
        st = rd_u64(r, "the file size", &file_bytes);
    if (st != INFD_STATUS_OK)
        return st;
    if (format != INFD_PLANFILE_FORMAT) {
        const char *version = NULL;
        infd_error ignored = { 0 };
        infd_error *keep = r->err;
        r->err = &ignored;
        if (rd_str(r, "", &version) != INFD_STATUS_OK)
            version = "an unknown version";
        r->err = keep;
        return infd_error_set(r->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: plan file format %u (built with infd %s); this is infd %s, "
                              "which reads format %u: rebuild it with infd build",
                              r->path, format, version, infd_version(), INFD_PLANFILE_FORMAT);
    }
    if (flags != 0)
        return bad(r, 12, "%s are not 0", "the flags");
    if (file_bytes != r->n)
        return infd_error_set(r->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: corrupt or truncated plan file: its header says %llu bytes, "
                              "the file has %zu",
                              r->path, (unsigned long long)file_bytes, r->n);
    if (r->n < 8 + 24)
        return bad(r, r->n, "%s runs past the end", "the checksum");
    r->n -= 8; /* the checksum is not read as a field */
    st = rd_str(r, "the infd version", &pf->infd_version);
    if (st == INFD_STATUS_OK)
        st = rd_str(r, "the infd git revision", &pf->infd_git);
    if (st == INFD_STATUS_OK)
        st = rd_str(r, "the backend name", &pf->backend);
    if (st == INFD_STATUS_OK)
        st = rd_str(r, "the device description", &pf->device);
    if (st == INFD_STATUS_OK)
        st = rd_str(r, "the library versions", &pf->libs);
    return st;
}

/* The file's last 8 bytes against the hash of the `n` - 8 before them. */
static infd_status check_checksum(const void *data, size_t n, const char *path, infd_error *err)
{
    if (infd_planfile_hash(data, n - 8) == load_u64le((const uint8_t *)data + n - 8))
        return INFD_STATUS_OK;
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                          "%s: corrupt plan file: the checksum at byte offset %zu does not match "
                          "its contents",
                          path, n - 8);
}

infd_status infd_planfile_decode(const void *data, size_t n, const char *path, bool check_sum,
                                 infd_planfile *pf, infd_error *err)
{
    reader r = { .d = data, .n = n, .file_n = n, .path = path, .err = err };
    memset(pf, 0, sizeof(*pf));
    infd_status st = rd_header(&r, pf);
    size_t at = r.pos;
    if (st == INFD_STATUS_OK)
        st = rd_u32(&r, "the device kind", &pf->device_kind);
    if (st == INFD_STATUS_OK && pf->device_kind > INFD_DEVICE_CUDA)
        st = bad(&r, at, "%s is unknown", "the device kind");
    at = r.pos;
    if (st == INFD_STATUS_OK)
        st = rd_u32(&r, "the precision", &pf->precision);
    if (st == INFD_STATUS_OK && pf->precision > INFD_PRECISION_TF32)
        st = bad(&r, at, "%s is unknown", "the precision");
    if (st == INFD_STATUS_OK)
        st = rd_count(&r, "the input shapes' count", 9, 4096, &pf->n_shapes);
    if (st == INFD_STATUS_OK) {
        pf->shapes = infd_calloc((size_t)pf->n_shapes + 1, sizeof(*pf->shapes));
        if (!pf->shapes)
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    for (int32_t i = 0; i < pf->n_shapes && st == INFD_STATUS_OK; i++) {
        st = rd_str(&r, "an input shape's name", &pf->shapes[i].name);
        if (st == INFD_STATUS_OK)
            st = rd_shape(&r, "an input shape", &pf->shapes[i].shape);
    }
    if (st == INFD_STATUS_OK)
        st = rd_values(&r, pf);
    if (st == INFD_STATUS_OK)
        st = rd_str(&r, "the model name", &pf->model_name);
    uint64_t model_offset = 0;
    if (st == INFD_STATUS_OK)
        st = rd_u64(&r, "the model hash", &pf->model_hash);
    if (st == INFD_STATUS_OK)
        st = rd_u64(&r, "the model size", &pf->model_bytes);
    at = r.pos;
    if (st == INFD_STATUS_OK)
        st = rd_u64(&r, "the model offset", &model_offset);
    if (st == INFD_STATUS_OK && (model_offset < r.pos || model_offset > r.n ||
                                 pf->model_bytes == 0 || pf->model_bytes > r.n - model_offset))
        st = bad(&r, at, "%s does not fit in the file", "the model");
    if (st == INFD_STATUS_OK) {
        pf->model = r.d + model_offset;
        r.pos = (size_t)(model_offset + pf->model_bytes);
        st = rd_batches(&r, pf);
    }
    if (st == INFD_STATUS_OK && r.pos != r.n)
        st = bad(&r, r.pos, "%s", "unexpected bytes before the checksum");
    if (st == INFD_STATUS_OK && check_sum)
        st = check_checksum(data, r.n + 8, path, err);
    if (st != INFD_STATUS_OK)
        infd_planfile_fini(pf);
    return st;
}

void infd_planfile_fini(infd_planfile *pf)
{
    if (!pf)
        return;
    for (int32_t k = 0; pf->batches && k < pf->n_batches; k++)
        infd_free(pf->batches[k].records);
    infd_free(pf->batches);
    infd_free(pf->shapes);
    infd_free(pf->values);
    memset(pf, 0, sizeof(*pf));
}

/* ------------------------------------------------------------------------- */
/* Files                                                                     */
/* ------------------------------------------------------------------------- */

/* A file mapped read-only (or borrowed bytes). */
typedef struct mapped {
    const uint8_t *data;
    size_t n;
    bool owned;
} mapped;

static infd_status map_file(const char *path, mapped *m, infd_error *err)
{
    memset(m, 0, sizeof(*m));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return infd_error_set(err, errno == ENOENT ? INFD_STATUS_NOT_FOUND : INFD_STATUS_IO,
                              "%s: %s", path, strerror(errno));
    struct stat sb;
    infd_status st = INFD_STATUS_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = infd_error_set(err, INFD_STATUS_IO, "%s: not a regular file", path);
    } else if (sb.st_size < 8) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: corrupt or truncated plan file: %lld bytes", path,
                            (long long)sb.st_size);
    } else {
        /* Populated up front: the checksum reads every page, and faulting
         * them in one by one cost about 100 ms for a 100 MB plan. */
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (p == MAP_FAILED) {
            st = infd_error_set(err, INFD_STATUS_IO, "%s: cannot map: %s", path, strerror(errno));
        } else {
            m->data = p;
            m->n = (size_t)sb.st_size;
            m->owned = true;
        }
    }
    close(fd);
    return st;
}

static void unmap(mapped *m)
{
    if (m->owned && m->data)
        munmap((void *)m->data, m->n);
    memset(m, 0, sizeof(*m));
}

bool infd_plan_file_is(const char *path)
{
    char magic[8];
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return false;
    ssize_t got = read(fd, magic, sizeof(magic));
    close(fd);
    return got == (ssize_t)sizeof(magic) && memcmp(magic, INFD_PLANFILE_MAGIC, 8) == 0;
}

static void copy_str(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src ? src : "");
}

static void fill_info(const infd_planfile *pf, infd_plan_file_info *out)
{
    memset(out, 0, sizeof(*out));
    copy_str(out->infd_version, sizeof(out->infd_version), pf->infd_version);
    copy_str(out->infd_git, sizeof(out->infd_git), pf->infd_git);
    copy_str(out->backend, sizeof(out->backend), pf->backend);
    copy_str(out->device, sizeof(out->device), pf->device);
    copy_str(out->model_name, sizeof(out->model_name), pf->model_name);
    out->device_kind = (infd_device_kind)pf->device_kind;
    out->precision = (infd_precision)pf->precision;
    out->n_batches = pf->n_batches;
    for (int32_t k = 0; k < pf->n_batches; k++) {
        out->batches[k] = pf->batches[k].batch;
        for (int32_t i = 0; i < pf->batches[k].n_records; i++)
            out->n_records += pf->batches[k].records[i].n_bytes > 0;
    }
    out->n_kernels = pf->n_batches ? pf->batches[0].n_records : 0;
    out->model_bytes = pf->model_bytes;
    out->model_hash = pf->model_hash;
}

infd_status infd_plan_file_read_info(const char *path, infd_plan_file_info *out, infd_error *err)
{
    mapped m;
    infd_planfile pf;
    infd_status st = map_file(path, &m, err);
    if (st != INFD_STATUS_OK)
        return st;
    st = infd_planfile_decode(m.data, m.n, path, true, &pf, err);
    if (st == INFD_STATUS_OK)
        fill_info(&pf, out);
    infd_planfile_fini(&pf);
    unmap(&m);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Loading                                                                   */
/* ------------------------------------------------------------------------- */

static const char *device_name(uint32_t kind)
{
    return kind == INFD_DEVICE_CUDA ? "cuda" : "cpu";
}

const char *infd_precision_name(infd_precision p)
{
    switch (p) {
    case INFD_PRECISION_BF16:
        return "bf16";
    case INFD_PRECISION_FP16:
        return "fp16";
    case INFD_PRECISION_TF32:
        return "tf32";
    default:
        return "fp32";
    }
}

bool infd_precision_parse(const char *name, infd_precision *out)
{
    static const infd_precision all[] = { INFD_PRECISION_FP32, INFD_PRECISION_BF16,
                                          INFD_PRECISION_FP16, INFD_PRECISION_TF32 };
    for (size_t k = 0; name && k < sizeof(all) / sizeof(all[0]); k++)
        if (strcasecmp(name, infd_precision_name(all[k])) == 0) {
            *out = all[k];
            return true;
        }
    return false;
}

static const char *precision_name(uint32_t p)
{
    return infd_precision_name((infd_precision)p);
}

/* One "NAME VERSION" entry of a library list ("cuDNN 9.13.0, cuBLASLt
 * 13.1.0"): the entry at *p is [*p, end), its name the part before the
 * last space (the whole entry when it has none). Advances *p past the
 * ", " that follows; false at the end of the list. */
typedef struct lib_entry {
    const char *at;
    size_t len, name_len;
} lib_entry;

static bool next_lib(const char **p, lib_entry *e)
{
    while (**p == ' ' || **p == ',')
        (*p)++;
    if (**p == '\0')
        return false;
    const char *end = strchr(*p, ',');
    e->at = *p;
    e->len = end ? (size_t)(end - *p) : strlen(*p);
    while (e->len > 0 && e->at[e->len - 1] == ' ')
        e->len--;
    e->name_len = e->len;
    for (size_t i = e->len; i > 0; i--) {
        if (e->at[i - 1] == ' ') {
            e->name_len = i - 1;
            break;
        }
    }
    *p += end ? (size_t)(end - *p) : strlen(*p);
    return true;
}

/* The entry of `list` with the same name as `e`, if any. */
static bool find_lib(const char *list, const lib_entry *e, lib_entry *out)
{
    while (next_lib(&list, out)) {
        if (out->name_len == e->name_len && memcmp(out->at, e->at, e->name_len) == 0)
            return true;
    }
    return false;
}

bool infd_planfile_libs_differ(const char *built, const char *here, char *was, char *is, size_t n)
{
    lib_entry a, b;
    const char *p;
    built = built ? built : "";
    here = here ? here : "";
    if (strcmp(built, here) == 0)
        return false;
    if (built[0] == '\0') { /* a plan from before infd recorded them */
        snprintf(was, n, "no library versions recorded");
        snprintf(is, n, "%s", here);
        return true;
    }
    for (p = built; next_lib(&p, &a);) {
        bool found = find_lib(here, &a, &b);
        if (found && a.len == b.len && memcmp(a.at, b.at, a.len) == 0)
            continue;
        snprintf(was, n, "%.*s", (int)a.len, a.at);
        if (found)
            snprintf(is, n, "%.*s", (int)b.len, b.at);
        else
            snprintf(is, n, "no %.*s", (int)a.name_len, a.at);
        return true;
    }
    for (p = here; next_lib(&p, &b);) {
        if (find_lib(built, &b, &a))
            continue;
        snprintf(was, n, "no %.*s", (int)b.name_len, b.at);
        snprintf(is, n, "%.*s", (int)b.len, b.at);
        return true;
    }
    snprintf(was, n, "'%s'", built); /* the same entries, written differently */
    snprintf(is, n, "'%s'", here);
    return true;
}

/* The fingerprint against this process. The device and the library
 * versions must match for GPU plans and for any plan holding tuning
 * records (what tuning chose is specific to the hardware and to the
 * library that offered the choice); a CPU plan holds none, so it runs on
 * any CPU with the same infd. */
static infd_status check_fingerprint(const infd_planfile *pf, const char *path, int device_index,
                                     infd_error *err)
{
    if (strcmp(pf->infd_version, infd_version()) != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: built for '%s' with infd %s; this is infd %s: rebuild it "
                              "with infd build",
                              path, pf->device, pf->infd_version, infd_version());
    const char *want = device_name(pf->device_kind);
    if (strcmp(pf->backend, want) != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: corrupt plan file: backend '%s' for device %s", path,
                              pf->backend, want);
    if (!infd_engine_has_backend((infd_device_kind)pf->device_kind))
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                              "%s: no usable CUDA device: built for '%s' (cuda); this build has "
                              "no CUDA backend",
                              path, pf->device);
    bool tuned = pf->device_kind != INFD_DEVICE_CPU;
    for (int32_t k = 0; k < pf->n_batches && !tuned; k++) {
        for (int32_t i = 0; i < pf->batches[k].n_records; i++)
            tuned |= pf->batches[k].records[i].n_bytes > 0;
    }
    if (!tuned)
        return INFD_STATUS_OK;
    char here[256];
    infd_error why = { 0 };
    if (infd_engine_device_count((infd_device_kind)pf->device_kind, &why) < 1 ||
        infd_engine_device_describe((infd_device_kind)pf->device_kind, device_index, here,
                                    sizeof(here), &why) != INFD_STATUS_OK)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                              "%s: no usable CUDA device: built for '%s': %s", path, pf->device,
                              why.msg);
    if (strcmp(here, pf->device) != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: built for '%s' with infd %s; this process has '%s': rebuild "
                              "it with infd build",
                              path, pf->device, pf->infd_version, here);
    char libs[INFD_PLANFILE_LIBS_MAX], was[INFD_PLANFILE_LIBS_MAX], is[INFD_PLANFILE_LIBS_MAX];
    infd_devices_libs((infd_device_kind)pf->device_kind, libs, sizeof(libs));
    if (infd_planfile_libs_differ(pf->libs, libs, was, is, sizeof(was)))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: built with %s; this process has %s: rebuild it with infd build",
                              path, was, is);
    return INFD_STATUS_OK;
}

/* The batch sizes of a plan file, "1, 2, 4". */
static void format_batches(const infd_planfile *pf, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int32_t k = 0; k < pf->n_batches && len < n; k++) {
        int w =
            snprintf(buf + len, n - len, "%s%lld", k ? ", " : "", (long long)pf->batches[k].batch);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

/* The options a plan file is compiled with: its own, with the caller's
 * threads and contexts; the caller's device, precision and batch only
 * choose among what was built. */
static infd_status choose_options(const infd_planfile *pf, const char *path,
                                  const infd_plan_options *opts, infd_plan_options *o,
                                  const infd_planfile_batch **batch, infd_error *err)
{
    infd_plan_options_init(o);
    if (opts) {
        *o = *opts;
        if (opts->device != INFD_DEVICE_CPU && (uint32_t)opts->device != pf->device_kind)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: built for device %s; asked for %s: rebuild it with infd "
                                  "build --device %s",
                                  path, device_name(pf->device_kind),
                                  device_name((uint32_t)opts->device),
                                  device_name((uint32_t)opts->device));
        /* FP32, the default, means "as built", so a TF32 plan loads with
         * default options and runs (and takes its records) as TF32; its
         * records never reach a strict FP32 plan, which is built afresh. */
        if (opts->precision != INFD_PRECISION_FP32 && (uint32_t)opts->precision != pf->precision)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: built with precision %s; asked for %s: rebuild it with "
                                  "infd build --precision %s",
                                  path, precision_name(pf->precision),
                                  precision_name((uint32_t)opts->precision),
                                  precision_name((uint32_t)opts->precision));
    }
    o->device = (infd_device_kind)pf->device_kind;
    o->precision = (infd_precision)pf->precision;
    o->shapes = pf->shapes;
    o->n_shapes = pf->n_shapes;
    o->values = pf->values;
    o->n_values = pf->n_values;
    int64_t want = opts && opts->batch > 0 ? opts->batch : pf->batches[0].batch;
    for (int32_t k = 0; k < pf->n_batches; k++) {
        if (pf->batches[k].batch == want)
            *batch = &pf->batches[k];
    }
    if (!*batch) {
        char list[256];
        format_batches(pf, list, sizeof(list));
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: built for batch sizes %s, not %lld: rebuild it with infd "
                              "build --max-batch or --batch",
                              path, list, (long long)want);
    }
    o->batch = want;
    return INFD_STATUS_OK;
}

infd_status infd_planfile_load(const void *data, size_t n, const char *path,
                               const infd_plan_options *opts, infd_plan **out, infd_error *err)
{
    mapped m = { .data = data, .n = n };
    infd_planfile pf;
    infd_plan_options o;
    const infd_planfile_batch *batch = NULL;
    *out = NULL;
    memset(&pf, 0, sizeof(pf));

    infd_status st = data ? INFD_STATUS_OK : map_file(path, &m, err);
    if (st == INFD_STATUS_OK)
        st = infd_planfile_decode(m.data, m.n, path, false, &pf, err);
    if (st == INFD_STATUS_OK) {
        /* The device starts up (CUDA: about 100 ms) while the checksum is
         * computed; a fingerprint mismatch ("built with infd X") is
         * reported before a checksum mismatch ("corrupt"). */
        infd_device_prep prep;
        infd_error sum_err = { 0 };
        int index = opts ? opts->device_index : 0;
        infd_device_prep_start(&prep, (infd_device_kind)pf.device_kind, index, false);
        infd_status sum = check_checksum(m.data, m.n, path, &sum_err);
        infd_device_prep_join(&prep, NULL); /* its failure is the fingerprint's to report */
        st = check_fingerprint(&pf, path, index, err);
        if (st == INFD_STATUS_OK && sum != INFD_STATUS_OK) {
            if (err)
                *err = sum_err;
            st = sum;
        }
    }
    if (st == INFD_STATUS_OK)
        st = choose_options(&pf, path, opts, &o, &batch, err);
    if (st == INFD_STATUS_OK)
        st = infd_plan_create_tuned(pf.model, (size_t)pf.model_bytes, path, &o, batch->records,
                                    batch->n_records, out, err);
    infd_planfile_fini(&pf);
    unmap(&m);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Building                                                                  */
/* ------------------------------------------------------------------------- */

int infd_plan_batch_sizes(int64_t max_batch, int64_t *out, int cap)
{
    int n = 0;
    if (max_batch < 1)
        return 0;
    for (int64_t b = 1; b < max_batch; b *= 2, n++) {
        if (n < cap)
            out[n] = b;
    }
    if (n < cap)
        out[n] = max_batch;
    return n + 1;
}

struct infd_plan_builder {
    char *model_path;
    uint8_t *model;
    size_t model_bytes;
    infd_plan_options opts; /* shapes and values point into the copies below */
    infd_input_shape *shapes;
    infd_input_value *values;
    char backend[32];
    char device[256];
    char libs[INFD_PLANFILE_LIBS_MAX];
    int32_t n_batches;
    infd_planfile_batch batches[INFD_PLAN_FILE_MAX_BATCHES];
};

void infd_plan_builder_destroy(infd_plan_builder *b)
{
    if (!b)
        return;
    for (int32_t k = 0; k < b->n_batches; k++) {
        for (int32_t i = 0; i < b->batches[k].n_records; i++) {
            infd_free((void *)b->batches[k].records[i].node);
            infd_free((void *)b->batches[k].records[i].op_type);
            infd_free((void *)b->batches[k].records[i].bytes);
        }
        infd_free(b->batches[k].records);
    }
    for (int i = 0; b->shapes && i < b->opts.n_shapes; i++)
        infd_free((void *)b->shapes[i].name);
    for (int i = 0; b->values && i < b->opts.n_values; i++) {
        infd_free((void *)b->values[i].name);
        infd_free(b->values[i].value.data);
    }
    infd_free(b->shapes);
    infd_free(b->values);
    infd_free(b->model);
    infd_free(b->model_path);
    infd_free(b);
}

static infd_status read_model(infd_plan_builder *b, const char *path, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    FILE *f = fopen(path, "rb");
    if (!f)
        return infd_error_set(err, errno == ENOENT ? INFD_STATUS_NOT_FOUND : INFD_STATUS_IO,
                              "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = infd_error_set(err, INFD_STATUS_IO, "%s: not a regular file", path);
    } else if (sb.st_size == 0) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: the model is empty", path);
    } else if (!(b->model = infd_malloc((size_t)sb.st_size))) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory reading %lld bytes",
                            path, (long long)sb.st_size);
    } else if (fread(b->model, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
        st = infd_error_set(err, INFD_STATUS_IO, "%s: read error", path);
    } else {
        b->model_bytes = (size_t)sb.st_size;
        if (infd_planfile_has_magic(b->model, b->model_bytes))
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s: already a plan file; give infd build the ONNX model", path);
    }
    fclose(f);
    return st;
}

/* Deep copies of the caller's shapes and bound values (borrowed for the
 * create call only). */
static infd_status copy_options(infd_plan_builder *b, const infd_plan_options *opts,
                                infd_error *err)
{
    b->opts = *opts;
    b->opts.shapes = NULL;
    b->opts.values = NULL;
    b->opts.n_shapes = 0;
    b->opts.n_values = 0;
    b->shapes = infd_calloc((size_t)INFD_MAX(opts->n_shapes, 0) + 1, sizeof(*b->shapes));
    b->values = infd_calloc((size_t)INFD_MAX(opts->n_values, 0) + 1, sizeof(*b->values));
    if (!b->shapes || !b->values)
        goto oom;
    for (int i = 0; i < opts->n_shapes; i++) {
        b->shapes[i] = opts->shapes[i];
        b->shapes[i].name = infd_strdup(opts->shapes[i].name ? opts->shapes[i].name : "");
        b->opts.n_shapes++;
        if (!b->shapes[i].name)
            goto oom;
    }
    for (int i = 0; i < opts->n_values; i++) {
        const infd_tensor *t = &opts->values[i].value;
        b->values[i].value = *t;
        b->values[i].value.owns_data = false;
        b->values[i].value.data = infd_malloc(t->nbytes ? t->nbytes : 1);
        b->values[i].name = infd_strdup(opts->values[i].name ? opts->values[i].name : "");
        b->opts.n_values++;
        if (!b->values[i].value.data || !b->values[i].name)
            goto oom;
        if (t->nbytes)
            memcpy(b->values[i].value.data, t->data, t->nbytes);
    }
    b->opts.shapes = b->shapes;
    b->opts.values = b->values;
    return INFD_STATUS_OK;
oom:
    return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
}

infd_status infd_plan_builder_create(const char *path, const infd_plan_options *opts,
                                     infd_plan_builder **out, infd_error *err)
{
    infd_plan_options defaults;
    infd_status st;
    *out = NULL;
    if (!opts) {
        infd_plan_options_init(&defaults);
        opts = &defaults;
    }
    infd_plan_builder *b = infd_calloc(1, sizeof(*b));
    if (!b)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    b->model_path = infd_strdup(path);
    st = b->model_path ? read_model(b, path, err)
                       : infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    if (st == INFD_STATUS_OK)
        st = copy_options(b, opts, err);
    if (st != INFD_STATUS_OK) {
        infd_plan_builder_destroy(b);
        return st;
    }
    *out = b;
    return INFD_STATUS_OK;
}

static infd_status keep_records(infd_plan_builder *b, const infd_plan *plan, int64_t batch,
                                infd_error *err)
{
    infd_planfile_batch *bt = &b->batches[b->n_batches];
    int32_t n = infd_plan_n_records(plan);
    bt->batch = batch;
    bt->records = infd_calloc((size_t)n + 1, sizeof(*bt->records));
    if (!bt->records)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    b->n_batches++; /* owned from here, so destroy frees what was copied */
    for (int32_t s = 0; s < n; s++) {
        infd_plan_record r;
        infd_plan_record_at(plan, s, &r);
        infd_plan_record *dst = &bt->records[s];
        dst->node = infd_strdup(r.node);
        dst->op_type = infd_strdup(r.op_type);
        dst->n_bytes = r.n_bytes;
        if (r.n_bytes) {
            uint8_t *bytes = infd_malloc(r.n_bytes);
            if (bytes)
                memcpy(bytes, r.bytes, r.n_bytes);
            dst->bytes = bytes;
        }
        bt->n_records++;
        if (!dst->node || !dst->op_type || (r.n_bytes && !dst->bytes))
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    return INFD_STATUS_OK;
}

infd_status infd_plan_builder_add(infd_plan_builder *b, int64_t batch, infd_plan_stats *stats,
                                  infd_error *err)
{
    infd_plan *plan = NULL;
    if (batch < 1 || batch > (1 << 20))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: batch size %lld is not in [1, 1048576]", b->model_path,
                              (long long)batch);
    for (int32_t k = 0; k < b->n_batches; k++) {
        if (b->batches[k].batch == batch)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: batch size %lld was already built", b->model_path,
                                  (long long)batch);
    }
    if (b->n_batches >= INFD_PLAN_FILE_MAX_BATCHES)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: a plan file holds at most %d batch sizes", b->model_path,
                              INFD_PLAN_FILE_MAX_BATCHES);
    infd_plan_options o = b->opts;
    o.batch = batch;
    o.max_contexts = 1;
    infd_status st =
        infd_plan_create_tuned(b->model, b->model_bytes, b->model_path, &o, NULL, 0, &plan, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (stats)
        infd_plan_get_stats(plan, stats);
    if (b->n_batches == 0) {
        infd_error why = { 0 };
        copy_str(b->backend, sizeof(b->backend), infd_plan_backend_name(plan));
        if (infd_engine_device_describe(b->opts.device, b->opts.device_index, b->device,
                                        sizeof(b->device), &why) != INFD_STATUS_OK)
            copy_str(b->device, sizeof(b->device), "unknown device");
        infd_devices_libs(b->opts.device, b->libs, sizeof(b->libs));
    }
    st = keep_records(b, plan, batch, err);
    infd_plan_destroy(plan);
    return st;
}

/* Batches in ascending order, as the format wants (built in any order). */
static void sort_batches(infd_plan_builder *b)
{
    for (int32_t i = 1; i < b->n_batches; i++) {
        for (int32_t j = i; j > 0 && b->batches[j - 1].batch > b->batches[j].batch; j--) {
            infd_planfile_batch t = b->batches[j];
            b->batches[j] = b->batches[j - 1];
            b->batches[j - 1] = t;
        }
    }
}

static infd_status write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return INFD_STATUS_IO;
        p += w;
        n -= (size_t)w;
    }
    return INFD_STATUS_OK;
}

infd_status infd_plan_builder_write(infd_plan_builder *b, const char *path, infd_error *err)
{
    infd_strbuf buf = { 0 };
    char tmp[4096];
    infd_status st = INFD_STATUS_OK;
    if (b->n_batches == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: no batch size was built for the plan file", path);
    sort_batches(b);
    const char *slash = strrchr(b->model_path, '/');
    infd_planfile pf = {
        .infd_version = infd_version(),
        .infd_git = infd_version_git(),
        .backend = b->backend,
        .device = b->device,
        .libs = b->libs,
        .device_kind = (uint32_t)b->opts.device,
        .precision = (uint32_t)b->opts.precision,
        .n_shapes = b->opts.n_shapes,
        .shapes = b->shapes,
        .n_values = b->opts.n_values,
        .values = b->values,
        .model_name = slash ? slash + 1 : b->model_path,
        .model_hash = infd_planfile_hash(b->model, b->model_bytes),
        .model = b->model,
        .model_bytes = b->model_bytes,
        .n_batches = b->n_batches,
        .batches = b->batches,
    };
    infd_planfile_encode(&pf, &buf);
    if (buf.oom)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    int w = snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    if (w < 0 || (size_t)w >= sizeof(tmp)) {
        infd_strbuf_fini(&buf);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: path too long", path);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = infd_error_set(err, INFD_STATUS_IO, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        if (write_all(fd, (const uint8_t *)buf.data, buf.len) != INFD_STATUS_OK || fsync(fd) != 0)
            st = infd_error_set(err, INFD_STATUS_IO, "%s: write error: %s", tmp, strerror(errno));
        if (close(fd) != 0 && st == INFD_STATUS_OK)
            st = infd_error_set(err, INFD_STATUS_IO, "%s: write error: %s", tmp, strerror(errno));
        if (st == INFD_STATUS_OK && rename(tmp, path) != 0)
            st = infd_error_set(err, INFD_STATUS_IO, "%s: cannot rename %s to it: %s", path, tmp,
                                strerror(errno));
        if (st != INFD_STATUS_OK)
            unlink(tmp);
    }
    infd_strbuf_fini(&buf);
    return st;
}
