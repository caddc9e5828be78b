/*
 * kserve_json.c - the SAX decoder behind kserve_json.h.
 *
 * yajl calls one function per token. The decoder keeps a small stack of
 * frames (the request object, its "inputs" array, one input object, its
 * "shape" array, ...) and, inside an object, the key whose value comes
 * next. Values of keys it does not know are skipped whole (`skip` counts
 * the containers still open). Inside "data" it only counts array depth and
 * hands every scalar to put_element(), which converts it for the input's
 * datatype and stores it at the next index of the input's buffer.
 *
 * Deferred data: when "data" opens before the input's datatype and shape
 * are known, the decoder records the offset of its '[' (yajl's
 * bytes-consumed counter points just past the token being reported) and,
 * when the array closes, the offset past its ']'. At the end of the input
 * object it runs a second yajl parser over just that span. Clients write
 * "data" last in practice, so this path is for correctness, not speed.
 */
#include "frontends/http/kserve_json.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

#include "core/alloc.h"
#include "core/strbuf.h"

/* yajl's handle, lexer, token buffer and state stack take about 2.5 KiB;
 * long strings with escapes may grow the token buffer past this, into
 * overflow allocations. */
#define ARENA_BYTES 16384
#define MAX_FRAMES  16
/* A number token longer than this is not a number any datatype holds. */
#define NUMBER_CHARS 64

/* ------------------------------------------------------------------------- */
/* Arena for yajl's allocations                                              */
/* ------------------------------------------------------------------------- */

/* Each block starts with this header; `next` links overflow blocks. */
typedef struct block_hdr {
    size_t size;
    struct block_hdr *next;
} block_hdr;

static void arena_reset(kserve_request *r)
{
    block_hdr *b = r->_overflow;
    while (b) {
        block_hdr *next = b->next;
        infd_free(b);
        b = next;
    }
    r->_overflow = NULL;
    r->_arena_used = 0;
}

/* yajl's allocator context. yajl (2.1) does not check what its allocator
 * returns: a NULL handle, buffer or state stack is written through. So when
 * an overflow block cannot be had, arena_malloc does not return: it jumps
 * back to run_yajl, which reports OUT_OF_MEMORY. Nothing is lost by leaving
 * yajl mid-parse: every byte it holds is in this request's arena and
 * overflow blocks (released by arena_reset), and it holds nothing else. */
typedef struct arena_ctx {
    kserve_request *r;
    jmp_buf oom;
} arena_ctx;

static void *arena_malloc(void *ctx, size_t sz)
{
    arena_ctx *a = ctx;
    kserve_request *r = a->r;
    size_t need = sizeof(block_hdr) + ((sz + 15) & ~(size_t)15);
    block_hdr *b;
    if (need < sz)
        longjmp(a->oom, 1);
    if (r->_arena && r->_arena_cap - r->_arena_used >= need) {
        b = (block_hdr *)(r->_arena + r->_arena_used);
        r->_arena_used += need;
        b->next = NULL;
    } else {
        b = infd_malloc(need);
        if (!b)
            longjmp(a->oom, 1);
        b->next = r->_overflow;
        r->_overflow = b;
    }
    b->size = sz;
    return b + 1;
}

static void arena_free(void *ctx, void *p)
{
    /* Everything is released at once by arena_reset. */
    (void)ctx;
    (void)p;
}

static void *arena_realloc(void *ctx, void *p, size_t sz)
{
    if (!p)
        return arena_malloc(ctx, sz);
    block_hdr *old = (block_hdr *)p - 1;
    if (sz <= old->size)
        return p;
    void *q = arena_malloc(ctx, sz);
    if (q)
        memcpy(q, p, old->size);
    return q;
}

/* ------------------------------------------------------------------------- */
/* Parser state                                                              */
/* ------------------------------------------------------------------------- */

typedef enum frame {
    F_ROOT,
    F_TOP,     /* the request object */
    F_TPARAMS, /* request "parameters" */
    F_INPUTS,  /* "inputs" array */
    F_INPUT,   /* one input object */
    F_SHAPE,   /* an input's "shape" */
    F_IPARAMS, /* an input's "parameters" */
    F_OUTPUTS, /* "outputs" array */
    F_OUTPUT,  /* one output object */
    F_OPARAMS, /* an output's "parameters" */
    F_DATA,    /* inside an input's "data" (depth in data_depth) */
} frame;

typedef enum key {
    K_NONE,
    K_UNKNOWN,
    K_ID,
    K_INPUTS,
    K_OUTPUTS,
    K_PARAMETERS,
    K_NAME,
    K_SHAPE,
    K_DATATYPE,
    K_DATA,
    K_BINARY_DATA_SIZE,
    K_BINARY_DATA,
    K_BINARY_DATA_OUTPUT,
    K_TIMEOUT,
    K_PRIORITY,
    K_SEQUENCE_ID,
    K_SEQUENCE_START,
    K_SEQUENCE_END,
    K_CLASSIFICATION,
    K_SHM_REGION,
    K_SHM_OFFSET,
    K_SHM_BYTE_SIZE,
} key;

typedef enum vkind { V_NULL, V_BOOL, V_NUMBER, V_STRING, V_MAP, V_ARRAY } vkind;

typedef struct parser {
    kserve_request *r;
    infd_error *err;
    infd_status status; /* first error (OK while none) */
    yajl_handle h;
    const char *json;
    size_t json_n;
    frame frames[MAX_FRAMES];
    int depth;
    key key;  /* key whose value comes next in the current object */
    int skip; /* > 0: inside a skipped value, that many containers open */
    int max_depth;
    /* Data decoding. */
    kserve_input *in; /* the input whose data is being read */
    int in_index;
    int data_depth;
    bool direct; /* elements go to the buffer (else: deferred, only counted) */
} parser;

static const char *vkind_name(vkind k)
{
    switch (k) {
    case V_NULL:
        return "null";
    case V_BOOL:
        return "a boolean";
    case V_NUMBER:
        return "a number";
    case V_STRING:
        return "a string";
    case V_MAP:
        return "an object";
    case V_ARRAY:
        return "an array";
    }
    return "?";
}

const char *kserve_input_label(const kserve_request *r, int i, char *buf, size_t n)
{
    if (i >= 0 && i < r->n_inputs && r->inputs[i].name[0])
        snprintf(buf, n, "input '%s'", r->inputs[i].name);
    else
        snprintf(buf, n, "input #%d", i);
    return buf;
}

static int fail(parser *p, infd_status code, const char *fmt, ...) INFD_PRINTF(3, 4);

/* Records the first error and makes yajl stop (a callback returning 0). */
static int fail(parser *p, infd_status code, const char *fmt, ...)
{
    if (p->status == INFD_STATUS_OK) {
        va_list ap;
        va_start(ap, fmt);
        infd_error_setv(p->err, code, fmt, ap);
        va_end(ap);
        p->status = code;
    }
    return 0;
}

/* Label of the input being parsed, in a buffer that lives in the parser's
 * caller frame for one message. */
#define IN_LABEL(p, buf) kserve_input_label((p)->r, (p)->in_index, (buf), sizeof(buf))

static int push(parser *p, frame f)
{
    if (p->depth >= MAX_FRAMES)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT, "JSON nested too deeply");
    p->frames[p->depth++] = f;
    p->key = K_NONE;
    return 1;
}

static frame top(const parser *p)
{
    return p->depth > 0 ? p->frames[p->depth - 1] : F_ROOT;
}

/* Grows input `in`'s buffer to at least `n` bytes (keeping its contents). */
static int grow(parser *p, kserve_input *in, size_t n)
{
    if (n <= in->_cap)
        return 1;
    size_t cap = in->_cap ? in->_cap : 256;
    while (cap < n)
        cap = cap * 2 > cap ? cap * 2 : n;
    uint8_t *b = infd_realloc(in->_buf, cap);
    if (!b) {
        char lb[160];
        return fail(p, INFD_STATUS_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes for its data",
                    IN_LABEL(p, lb), cap);
    }
    in->_buf = b;
    in->_cap = cap;
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Elements                                                                  */
/* ------------------------------------------------------------------------- */

/* Copies a number token into `buf` as a C string. */
static int number_text(parser *p, const char *s, size_t n, char *buf)
{
    if (n >= NUMBER_CHARS) {
        char lb[160];
        return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: element %" PRId64 ": number too long",
                    IN_LABEL(p, lb), p->in->_count);
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    return 1;
}

static bool is_integer_text(const char *t)
{
    return strpbrk(t, ".eE") == NULL;
}

/* Range of each integer dtype, for the checks in put_integer. */
static void int_range(infd_dtype dt, int64_t *lo, uint64_t *hi)
{
    switch (dt) {
    case INFD_DTYPE_UINT8:
        *lo = 0, *hi = UINT8_MAX;
        return;
    case INFD_DTYPE_UINT16:
        *lo = 0, *hi = UINT16_MAX;
        return;
    case INFD_DTYPE_UINT32:
        *lo = 0, *hi = UINT32_MAX;
        return;
    case INFD_DTYPE_UINT64:
        *lo = 0, *hi = UINT64_MAX;
        return;
    case INFD_DTYPE_INT8:
        *lo = INT8_MIN, *hi = INT8_MAX;
        return;
    case INFD_DTYPE_INT16:
        *lo = INT16_MIN, *hi = INT16_MAX;
        return;
    case INFD_DTYPE_INT32:
        *lo = INT32_MIN, *hi = INT32_MAX;
        return;
    default:
        *lo = INT64_MIN, *hi = INT64_MAX;
        return;
    }
}

static int put_integer(parser *p, const char *t, uint8_t *dst)
{
    kserve_input *in = p->in;
    char lb[160];
    int64_t lo;
    uint64_t hi;
    int_range(in->dtype, &lo, &hi);
    if (!is_integer_text(t))
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s: element %" PRId64 ": %s is not an integer (datatype %s)", IN_LABEL(p, lb),
                    in->_count, t, infd_dtype_name(in->dtype));
    errno = 0;
    bool neg = t[0] == '-';
    uint64_t u = 0;
    int64_t s = 0;
    bool ok;
    if (neg) {
        s = strtoll(t, NULL, 10);
        ok = errno != ERANGE && s >= lo;
    } else {
        u = strtoull(t, NULL, 10);
        ok = errno != ERANGE && u <= hi;
        s = (int64_t)u;
    }
    if (!ok)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s: element %" PRId64 ": %s is out of range for %s", IN_LABEL(p, lb),
                    in->_count, t, infd_dtype_name(in->dtype));
    switch (in->dtype) {
    case INFD_DTYPE_UINT8:
    case INFD_DTYPE_INT8:
        *dst = (uint8_t)s;
        break;
    case INFD_DTYPE_UINT16:
    case INFD_DTYPE_INT16: {
        uint16_t v = (uint16_t)s;
        memcpy(dst, &v, 2);
        break;
    }
    case INFD_DTYPE_UINT32:
    case INFD_DTYPE_INT32: {
        uint32_t v = (uint32_t)s;
        memcpy(dst, &v, 4);
        break;
    }
    case INFD_DTYPE_UINT64:
        memcpy(dst, &u, 8);
        break;
    default:
        memcpy(dst, &s, 8);
        break;
    }
    return 1;
}

static int put_float(parser *p, const char *t, uint8_t *dst)
{
    kserve_input *in = p->in;
    char lb[160];
    double v = strtod(t, NULL);
    double max = in->dtype == INFD_DTYPE_FP16   ? 65504.0
                 : in->dtype == INFD_DTYPE_FP64 ? DBL_MAX
                                                : (double)FLT_MAX;
    if (!(fabs(v) <= max))
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s: element %" PRId64 ": %s is out of range for %s", IN_LABEL(p, lb),
                    in->_count, t, infd_dtype_name(in->dtype));
    switch (in->dtype) {
    case INFD_DTYPE_FP16: {
        uint16_t h = infd_fp16_from_fp32((float)v);
        memcpy(dst, &h, 2);
        break;
    }
    case INFD_DTYPE_BF16: {
        uint16_t h = infd_bf16_from_fp32((float)v);
        memcpy(dst, &h, 2);
        break;
    }
    case INFD_DTYPE_FP32: {
        float f = (float)v;
        memcpy(dst, &f, 4);
        break;
    }
    default:
        memcpy(dst, &v, 8);
        break;
    }
    return 1;
}

/* Stores one scalar of "data" at the next index of the current input. */
static int put_element(parser *p, vkind kind, bool b, const char *s, size_t n)
{
    kserve_input *in = p->in;
    char lb[160];
    if (kind == V_MAP)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s: 'data' may hold only arrays and values, not objects", IN_LABEL(p, lb));
    if (!p->direct)
        return 1;
    if (in->_count >= in->_numel)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s: 'data' has more than the %" PRId64 " elements of its shape",
                    IN_LABEL(p, lb), in->_numel);
    infd_dtype dt = in->dtype;
    if (dt == INFD_DTYPE_BYTES) {
        if (kind != V_STRING)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "%s: element %" PRId64 ": expected a string for BYTES, got %s",
                        IN_LABEL(p, lb), in->_count, vkind_name(kind));
        if (n > UINT32_MAX)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: element %" PRId64 " is too long",
                        IN_LABEL(p, lb), in->_count);
        if (!grow(p, in, in->nbytes + 4 + n))
            return 0;
        uint8_t *d = in->_buf + in->nbytes;
        uint32_t len = (uint32_t)n;
        d[0] = (uint8_t)len, d[1] = (uint8_t)(len >> 8), d[2] = (uint8_t)(len >> 16);
        d[3] = (uint8_t)(len >> 24);
        memcpy(d + 4, s, n);
        in->nbytes += 4 + n;
        in->_count++;
        return 1;
    }
    size_t es = infd_dtype_size(dt);
    uint8_t *dst = in->_buf + (size_t)in->_count * es;
    if (dt == INFD_DTYPE_BOOL) {
        if (kind != V_BOOL)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "%s: element %" PRId64 ": expected true or false for BOOL, got %s",
                        IN_LABEL(p, lb), in->_count, vkind_name(kind));
        *dst = b ? 1 : 0;
        in->_count++;
        return 1;
    }
    if (kind != V_NUMBER)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s: element %" PRId64 ": expected a number for %s, got %s", IN_LABEL(p, lb),
                    in->_count, infd_dtype_name(dt), vkind_name(kind));
    char t[NUMBER_CHARS];
    if (!number_text(p, s, n, t))
        return 0;
    int ok;
    if (dt == INFD_DTYPE_FP16 || dt == INFD_DTYPE_BF16 || dt == INFD_DTYPE_FP32 ||
        dt == INFD_DTYPE_FP64)
        ok = put_float(p, t, dst);
    else
        ok = put_integer(p, t, dst);
    if (ok)
        in->_count++;
    return ok;
}

/* Readies the current input's buffer for direct decoding: numel from the
 * shape, bounded by what the JSON text could hold (each element takes at
 * least one byte), so a huge shape cannot make us allocate. */
static int begin_direct(parser *p)
{
    kserve_input *in = p->in;
    char lb[160], sb[96];
    int64_t numel = 1;
    for (int d = 0; d < in->rank; d++) {
        if (in->shape[d] != 0 && numel > INT64_MAX / in->shape[d])
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: shape overflows", IN_LABEL(p, lb));
        numel *= in->shape[d];
    }
    if ((uint64_t)numel > p->json_n) {
        infd_shape sh = { .rank = in->rank };
        memcpy(sh.dims, in->shape, sizeof(int64_t) * (size_t)in->rank);
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s: shape %s has %" PRId64 " elements, more than 'data' can hold",
                    IN_LABEL(p, lb), infd_shape_format(&sh, sb, sizeof(sb)), numel);
    }
    in->_numel = numel;
    in->_count = 0;
    in->nbytes = 0;
    if (in->dtype != INFD_DTYPE_BYTES && !grow(p, in, (size_t)numel * infd_dtype_size(in->dtype)))
        return 0;
    p->direct = true;
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Keyed values                                                              */
/* ------------------------------------------------------------------------- */

static int copy_name(parser *p, char *dst, const char *s, size_t n, const char *what)
{
    if (n == 0 || n >= KSERVE_NAME_BYTES || memchr(s, '\0', n))
        return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s must be 1 to %d bytes without NUL", what,
                    KSERVE_NAME_BYTES - 1);
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 1;
}

/* A non-negative integer parameter or shape dim. */
static int int_value(parser *p, vkind kind, const char *s, size_t n, const char *what, int64_t *out)
{
    char t[NUMBER_CHARS];
    if (kind != V_NUMBER || n >= NUMBER_CHARS)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s must be an integer, got %s", what,
                    vkind_name(kind));
    memcpy(t, s, n);
    t[n] = '\0';
    errno = 0;
    char *end;
    long long v = strtoll(t, &end, 10);
    if (*end != '\0' || errno == ERANGE || v < 0)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s must be a non-negative integer, got %s",
                    what, t);
    *out = v;
    return 1;
}

static int top_value(parser *p, key k, vkind kind, const char *s, size_t n)
{
    kserve_request *r = p->r;
    switch (k) {
    case K_ID:
        if (kind != V_STRING)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "'id' must be a string, got %s",
                        vkind_name(kind));
        n = n < KSERVE_NAME_BYTES - 1 ? n : KSERVE_NAME_BYTES - 1;
        memcpy(r->id, s, n);
        r->id[n] = '\0';
        r->has_id = true;
        return 1;
    case K_INPUTS:
        if (kind != V_ARRAY)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "'inputs' must be an array, got %s",
                        vkind_name(kind));
        return push(p, F_INPUTS);
    case K_OUTPUTS:
        if (kind != V_ARRAY)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "'outputs' must be an array, got %s",
                        vkind_name(kind));
        return push(p, F_OUTPUTS);
    case K_PARAMETERS:
        if (kind != V_MAP)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "'parameters' must be an object, got %s",
                        vkind_name(kind));
        return push(p, F_TPARAMS);
    default:
        return 1;
    }
}

static int tparam_value(parser *p, key k, vkind kind, bool b, const char *s, size_t n)
{
    kserve_request *r = p->r;
    switch (k) {
    case K_BINARY_DATA_OUTPUT:
        if (kind != V_BOOL)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "parameter 'binary_data_output' must be a boolean, got %s",
                        vkind_name(kind));
        r->binary_data_output = b;
        return 1;
    case K_TIMEOUT:
        return int_value(p, kind, s, n, "parameter 'timeout'", &r->timeout_us);
    case K_PRIORITY:
        return int_value(p, kind, s, n, "parameter 'priority'", &r->priority);
    case K_SEQUENCE_ID:
        if (kind == V_STRING) {
            if (n == 0 || n >= sizeof(r->sequence_id_string) || memchr(s, '\0', n))
                return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                            "parameter 'sequence_id': a string id must have 1 to %zu bytes",
                            sizeof(r->sequence_id_string) - 1);
            memcpy(r->sequence_id_string, s, n);
            r->sequence_id_string[n] = '\0';
            r->has_sequence = true;
            return 1;
        }
        if (kind == V_NUMBER && n < NUMBER_CHARS) {
            char t[NUMBER_CHARS];
            memcpy(t, s, n);
            t[n] = '\0';
            errno = 0;
            char *end;
            unsigned long long v = strtoull(t, &end, 10);
            if (*end == '\0' && errno != ERANGE && t[0] != '-') {
                r->sequence_id = v;
                r->has_sequence = true;
                return 1;
            }
        }
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "parameter 'sequence_id' must be an unsigned 64-bit integer or a string, got "
                    "%s",
                    vkind_name(kind));
    case K_SEQUENCE_START:
    case K_SEQUENCE_END:
        if (kind != V_BOOL)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "parameter '%s' must be a boolean, got %s",
                        k == K_SEQUENCE_START ? "sequence_start" : "sequence_end",
                        vkind_name(kind));
        if (b)
            r->sequence_flags |= k == K_SEQUENCE_START ? INFD_SEQUENCE_START : INFD_SEQUENCE_END;
        return 1;
    default:
        return 1;
    }
}

static int input_value(parser *p, key k, vkind kind, const char *s, size_t n)
{
    kserve_input *in = p->in;
    char lb[160];
    switch (k) {
    case K_NAME:
        if (kind != V_STRING)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: 'name' must be a string, got %s",
                        IN_LABEL(p, lb), vkind_name(kind));
        return copy_name(p, in->name, s, n, "an input name");
    case K_DATATYPE: {
        char t[32];
        if (kind != V_STRING)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: 'datatype' must be a string, got %s",
                        IN_LABEL(p, lb), vkind_name(kind));
        size_t m = n < sizeof(t) - 1 ? n : sizeof(t) - 1;
        memcpy(t, s, m);
        t[m] = '\0';
        in->dtype = n < sizeof(t) ? infd_dtype_from_name(t) : INFD_DTYPE_INVALID;
        if (in->dtype == INFD_DTYPE_INVALID || strncmp(t, "TYPE_", 5) == 0)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: unknown datatype '%s'",
                        IN_LABEL(p, lb), t);
        in->_has_dtype = true;
        return 1;
    }
    case K_SHAPE:
        if (kind != V_ARRAY)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: 'shape' must be an array, got %s",
                        IN_LABEL(p, lb), vkind_name(kind));
        in->rank = 0;
        return push(p, F_SHAPE);
    case K_DATA:
        if (kind != V_ARRAY)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: 'data' must be an array, got %s",
                        IN_LABEL(p, lb), vkind_name(kind));
        if (in->_has_data)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: 'data' given twice", IN_LABEL(p, lb));
        in->_has_data = true;
        p->data_depth = 1;
        p->direct = false;
        if (in->_has_dtype && in->rank >= 0) {
            if (!begin_direct(p))
                return 0;
        } else {
            /* yajl has consumed the '['; the sub-parse starts there. */
            in->_deferred = true;
            in->_data_begin = yajl_get_bytes_consumed(p->h) - 1;
        }
        return push(p, F_DATA);
    case K_PARAMETERS:
        if (kind != V_MAP)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "%s: 'parameters' must be an object, got %s", IN_LABEL(p, lb),
                        vkind_name(kind));
        return push(p, F_IPARAMS);
    default:
        return 1;
    }
}

static int output_value(parser *p, key k, vkind kind, bool b, const char *s, size_t n)
{
    kserve_output *out = &p->r->outputs[p->r->n_outputs - 1];
    switch (k) {
    case K_NAME:
        if (kind != V_STRING)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "output #%d: 'name' must be a string, got %s", p->r->n_outputs - 1,
                        vkind_name(kind));
        return copy_name(p, out->name, s, n, "an output name");
    case K_PARAMETERS:
        if (kind != V_MAP)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "output #%d: 'parameters' must be an object, got %s", p->r->n_outputs - 1,
                        vkind_name(kind));
        return push(p, F_OPARAMS);
    case K_BINARY_DATA:
        if (top(p) != F_OPARAMS)
            return 1;
        if (kind != V_BOOL)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "output '%s': parameter 'binary_data' must be a boolean, got %s", out->name,
                        vkind_name(kind));
        out->binary_data = b;
        return 1;
    case K_CLASSIFICATION: {
        if (top(p) != F_OPARAMS)
            return 1;
        int64_t v = 0;
        if (!int_value(p, kind, s, n, "output parameter 'classification'", &v))
            return 0;
        if (v < 1 || v > 1000000)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "output '%s': parameter 'classification' must be 1 to 1000000, got %lld",
                        out->name, (long long)v);
        out->class_count = (int)v;
        return 1;
    }
    case K_SHM_REGION:
        if (top(p) != F_OPARAMS)
            return 1;
        if (kind != V_STRING)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "output '%s': parameter 'shared_memory_region' must be a string, got %s",
                        out->name, vkind_name(kind));
        return copy_name(p, out->shm_region, s, n, "a shared memory region name");
    case K_SHM_OFFSET:
    case K_SHM_BYTE_SIZE: {
        if (top(p) != F_OPARAMS)
            return 1;
        char what[200];
        snprintf(what, sizeof(what), "output '%s': parameter '%s'", out->name,
                 k == K_SHM_OFFSET ? "shared_memory_offset" : "shared_memory_byte_size");
        int64_t *dst = k == K_SHM_OFFSET ? &out->shm_offset : &out->shm_byte_size;
        return int_value(p, kind, s, n, what, dst); /* never negative */
    }
    default:
        return 1;
    }
}

/* Every value (scalars and container starts) comes through here. */
static int on_value(parser *p, vkind kind, bool b, const char *s, size_t n)
{
    /* Containers open at once, skipped ones included (issue #24). */
    if ((kind == V_MAP || kind == V_ARRAY) && p->depth + p->skip + p->data_depth >= p->max_depth)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT, "JSON nested deeper than %d levels",
                    p->max_depth);
    if (p->skip > 0) {
        if (kind == V_MAP || kind == V_ARRAY)
            p->skip++;
        return 1;
    }
    frame f = top(p);
    key k = p->key;
    p->key = K_NONE;
    switch (f) {
    case F_DATA:
        if (kind == V_ARRAY) {
            if (p->data_depth >= INFD_MAX_RANK)
                return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                            "'data' nested deeper than %d arrays (the largest rank)",
                            INFD_MAX_RANK);
            p->data_depth++;
            return 1;
        }
        return put_element(p, kind, b, s, n);
    case F_ROOT:
        if (kind != V_MAP)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "the request must be a JSON object, got %s", vkind_name(kind));
        return push(p, F_TOP);
    case F_SHAPE: {
        char lb[160], what[200];
        int64_t d;
        snprintf(what, sizeof(what), "%s: a 'shape' dim", IN_LABEL(p, lb));
        if (p->in->rank >= INFD_MAX_RANK)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: 'shape' has more than %d dims",
                        IN_LABEL(p, lb), INFD_MAX_RANK);
        if (!int_value(p, kind, s, n, what, &d))
            return 0;
        p->in->shape[p->in->rank++] = d;
        return 1;
    }
    case F_INPUTS: {
        kserve_request *r = p->r;
        if (kind != V_MAP)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "'inputs' must hold objects, got %s",
                        vkind_name(kind));
        if (r->n_inputs >= INFD_MAX_MODEL_IO)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "more than %d inputs", INFD_MAX_MODEL_IO);
        p->in_index = r->n_inputs++;
        p->in = &r->inputs[p->in_index];
        return push(p, F_INPUT);
    }
    case F_OUTPUTS: {
        kserve_request *r = p->r;
        if (kind != V_MAP)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "'outputs' must hold objects, got %s",
                        vkind_name(kind));
        if (r->n_outputs >= INFD_MAX_MODEL_IO)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "more than %d outputs", INFD_MAX_MODEL_IO);
        kserve_output *o = &r->outputs[r->n_outputs++];
        o->name[0] = '\0';
        o->class_count = 0;
        o->binary_data = -1;
        o->shm_region[0] = '\0';
        o->shm_offset = 0;
        o->shm_byte_size = -1;
        return push(p, F_OUTPUT);
    }
    default:
        break;
    }
    /* A value in an object: unknown keys are skipped whole. */
    if (k == K_UNKNOWN || k == K_NONE) {
        if (kind == V_MAP || kind == V_ARRAY)
            p->skip = 1;
        return 1;
    }
    switch (f) {
    case F_TOP:
        return top_value(p, k, kind, s, n);
    case F_TPARAMS:
        return tparam_value(p, k, kind, b, s, n);
    case F_INPUT:
        return input_value(p, k, kind, s, n);
    case F_IPARAMS: {
        char lb[160], what[200];
        if (k == K_SHM_REGION) {
            if (kind != V_STRING)
                return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: parameter 'shared_memory_region' must be a string, got %s",
                            IN_LABEL(p, lb), vkind_name(kind));
            return copy_name(p, p->in->shm_region, s, n, "a shared memory region name");
        }
        const char *pname = k == K_SHM_OFFSET      ? "shared_memory_offset"
                            : k == K_SHM_BYTE_SIZE ? "shared_memory_byte_size"
                                                   : "binary_data_size";
        int64_t *dst = k == K_SHM_OFFSET      ? &p->in->shm_offset
                       : k == K_SHM_BYTE_SIZE ? &p->in->shm_byte_size
                                              : &p->in->binary_data_size;
        snprintf(what, sizeof(what), "%s: parameter '%s'", IN_LABEL(p, lb), pname);
        return int_value(p, kind, s, n, what, dst); /* never negative */
    }
    case F_OUTPUT:
    case F_OPARAMS:
        return output_value(p, k, kind, b, s, n);
    default:
        return 1;
    }
}

/* ------------------------------------------------------------------------- */
/* End of containers                                                         */
/* ------------------------------------------------------------------------- */

static int decode_deferred(parser *p);

static int finish_input(parser *p)
{
    kserve_input *in = p->in;
    char lb[160], sb[96];
    if (!in->name[0])
        return fail(p, INFD_STATUS_INVALID_ARGUMENT, "input #%d has no 'name'", p->in_index);
    if (!in->_has_dtype)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s has no 'datatype'", IN_LABEL(p, lb));
    if (in->rank < 0)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s has no 'shape'", IN_LABEL(p, lb));
    infd_shape sh = { .rank = in->rank };
    memcpy(sh.dims, in->shape, sizeof(int64_t) * (size_t)in->rank);
    infd_shape_format(&sh, sb, sizeof(sb));
    if (in->shm_region[0] || in->shm_offset >= 0 || in->shm_byte_size >= 0) {
        if (!in->shm_region[0] || in->shm_byte_size < 0)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "%s: parameters 'shared_memory_region' and 'shared_memory_byte_size' go "
                        "together",
                        IN_LABEL(p, lb));
        if (in->_has_data || in->binary_data_size >= 0)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "%s is in shared memory region '%s': it has no 'data' or "
                        "'binary_data_size'",
                        IN_LABEL(p, lb), in->shm_region);
        if (in->shm_offset < 0)
            in->shm_offset = 0;
        size_t want;
        if (in->dtype != INFD_DTYPE_BYTES) {
            if (infd_tensor_nbytes_for(in->dtype, &sh, &want, NULL) != INFD_STATUS_OK)
                return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: shape %s overflows",
                            IN_LABEL(p, lb), sb);
            if ((uint64_t)in->shm_byte_size != want)
                return fail(
                    p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s: shared_memory_byte_size is %" PRId64 " bytes, shape %s of %s needs %zu",
                    IN_LABEL(p, lb), in->shm_byte_size, sb, infd_dtype_name(in->dtype), want);
        }
        in->data = NULL;
        in->nbytes = (size_t)in->shm_byte_size;
        return 1;
    }
    if (in->_has_data && in->binary_data_size >= 0)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s has both 'data' and parameter 'binary_data_size'", IN_LABEL(p, lb));
    if (!in->_has_data && in->binary_data_size < 0)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s has neither 'data' nor parameter 'binary_data_size'", IN_LABEL(p, lb));
    if (in->binary_data_size >= 0) {
        size_t want;
        if (in->dtype != INFD_DTYPE_BYTES) {
            if (infd_tensor_nbytes_for(in->dtype, &sh, &want, NULL) != INFD_STATUS_OK)
                return fail(p, INFD_STATUS_INVALID_ARGUMENT, "%s: shape %s overflows",
                            IN_LABEL(p, lb), sb);
            if ((uint64_t)in->binary_data_size != want)
                return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: binary_data_size is %" PRId64 " bytes, shape %s of %s needs %zu",
                            IN_LABEL(p, lb), in->binary_data_size, sb, infd_dtype_name(in->dtype),
                            want);
        }
        in->data = NULL;
        in->nbytes = (size_t)in->binary_data_size;
        return 1;
    }
    if (in->_deferred && !decode_deferred(p))
        return 0;
    if (in->_count != in->_numel)
        return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                    "%s: 'data' has %" PRId64 " elements, shape %s needs %" PRId64, IN_LABEL(p, lb),
                    in->_count, sb, in->_numel);
    if (in->dtype != INFD_DTYPE_BYTES)
        in->nbytes = (size_t)in->_numel * infd_dtype_size(in->dtype);
    in->data = in->_buf;
    return 1;
}

static int on_end(parser *p)
{
    if (p->skip > 0) {
        p->skip--;
        return 1;
    }
    frame f = top(p);
    if (f == F_DATA) {
        if (--p->data_depth > 0)
            return 1;
        if (p->in->_deferred)
            p->in->_data_end = yajl_get_bytes_consumed(p->h);
    }
    p->depth--;
    p->key = K_NONE;
    switch (f) {
    case F_INPUT:
        return finish_input(p);
    case F_OUTPUT: {
        kserve_output *o = &p->r->outputs[p->r->n_outputs - 1];
        if (!o->name[0])
            return fail(p, INFD_STATUS_INVALID_ARGUMENT, "output #%d has no 'name'",
                        p->r->n_outputs - 1);
        if ((o->shm_region[0] != '\0') != (o->shm_byte_size >= 0) ||
            (!o->shm_region[0] && o->shm_offset != 0))
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "output '%s': parameters 'shared_memory_region' and "
                        "'shared_memory_byte_size' go together",
                        o->name);
        if (o->shm_region[0] && o->class_count > 0)
            return fail(p, INFD_STATUS_INVALID_ARGUMENT,
                        "output '%s': a classification cannot go to shared memory", o->name);
        return 1;
    }
    default:
        return 1;
    }
}

/* ------------------------------------------------------------------------- */
/* yajl callbacks                                                            */
/* ------------------------------------------------------------------------- */

static int cb_null(void *ctx)
{
    return on_value(ctx, V_NULL, false, NULL, 0);
}

static int cb_boolean(void *ctx, int b)
{
    return on_value(ctx, V_BOOL, b != 0, NULL, 0);
}

static int cb_number(void *ctx, const char *s, size_t n)
{
    return on_value(ctx, V_NUMBER, false, s, n);
}

static int cb_string(void *ctx, const unsigned char *s, size_t n)
{
    return on_value(ctx, V_STRING, false, (const char *)s, n);
}

static int cb_start_map(void *ctx)
{
    return on_value(ctx, V_MAP, false, NULL, 0);
}

static int cb_start_array(void *ctx)
{
    return on_value(ctx, V_ARRAY, false, NULL, 0);
}

static int cb_end(void *ctx)
{
    return on_end(ctx);
}

static bool key_is(const unsigned char *s, size_t n, const char *name)
{
    return strlen(name) == n && memcmp(s, name, n) == 0;
}

static int cb_map_key(void *ctx, const unsigned char *s, size_t n)
{
    parser *p = ctx;
    if (p->skip > 0)
        return 1;
    key k = K_UNKNOWN;
    switch (top(p)) {
    case F_TOP:
        k = key_is(s, n, "id")           ? K_ID
            : key_is(s, n, "inputs")     ? K_INPUTS
            : key_is(s, n, "outputs")    ? K_OUTPUTS
            : key_is(s, n, "parameters") ? K_PARAMETERS
                                         : K_UNKNOWN;
        break;
    case F_TPARAMS:
        k = key_is(s, n, "binary_data_output") ? K_BINARY_DATA_OUTPUT
            : key_is(s, n, "timeout")          ? K_TIMEOUT
            : key_is(s, n, "priority")         ? K_PRIORITY
            : key_is(s, n, "sequence_id")      ? K_SEQUENCE_ID
            : key_is(s, n, "sequence_start")   ? K_SEQUENCE_START
            : key_is(s, n, "sequence_end")     ? K_SEQUENCE_END
                                               : K_UNKNOWN;
        break;
    case F_INPUT:
        k = key_is(s, n, "name")         ? K_NAME
            : key_is(s, n, "datatype")   ? K_DATATYPE
            : key_is(s, n, "shape")      ? K_SHAPE
            : key_is(s, n, "data")       ? K_DATA
            : key_is(s, n, "parameters") ? K_PARAMETERS
                                         : K_UNKNOWN;
        break;
    case F_IPARAMS:
        k = key_is(s, n, "binary_data_size")          ? K_BINARY_DATA_SIZE
            : key_is(s, n, "shared_memory_region")    ? K_SHM_REGION
            : key_is(s, n, "shared_memory_offset")    ? K_SHM_OFFSET
            : key_is(s, n, "shared_memory_byte_size") ? K_SHM_BYTE_SIZE
                                                      : K_UNKNOWN;
        break;
    case F_OUTPUT:
        k = key_is(s, n, "name") ? K_NAME : key_is(s, n, "parameters") ? K_PARAMETERS : K_UNKNOWN;
        break;
    case F_OPARAMS:
        k = key_is(s, n, "binary_data")               ? K_BINARY_DATA
            : key_is(s, n, "classification")          ? K_CLASSIFICATION
            : key_is(s, n, "shared_memory_region")    ? K_SHM_REGION
            : key_is(s, n, "shared_memory_offset")    ? K_SHM_OFFSET
            : key_is(s, n, "shared_memory_byte_size") ? K_SHM_BYTE_SIZE
                                                      : K_UNKNOWN;
        break;
    default:
        break;
    }
    p->key = k;
    return 1;
}

static const yajl_callbacks callbacks = {
    .yajl_null = cb_null,
    .yajl_boolean = cb_boolean,
    .yajl_number = cb_number,
    .yajl_string = cb_string,
    .yajl_start_map = cb_start_map,
    .yajl_map_key = cb_map_key,
    .yajl_end_map = cb_end,
    .yajl_start_array = cb_start_array,
    .yajl_end_array = cb_end,
};

/* Runs `p` over `n` bytes at `text`. On a syntax error the message says
 * yajl's reason and the byte offset (`base` + where it stopped). */
static infd_status parse_with(parser *p, arena_ctx *a, const char *text, size_t n, size_t base);

static infd_status run_yajl(parser *p, const char *text, size_t n, size_t base)
{
    arena_ctx a = { .r = p->r };
    if (setjmp(a.oom) != 0) {
        /* arena_malloc found no memory (yajl's handle is in the arena). */
        p->h = NULL;
        p->status = INFD_STATUS_OUT_OF_MEMORY;
        return infd_error_set(p->err, p->status, "out of memory parsing the JSON body");
    }
    return parse_with(p, &a, text, n, base);
}

static infd_status parse_with(parser *p, arena_ctx *a, const char *text, size_t n, size_t base)
{
    yajl_alloc_funcs afs = { arena_malloc, arena_realloc, arena_free, a };
    p->h = yajl_alloc(&callbacks, &afs, p);
    yajl_status st = yajl_parse(p->h, (const unsigned char *)text, n);
    bool at_end = false;
    if (st == yajl_status_ok) {
        st = yajl_complete_parse(p->h);
        at_end = true; /* a premature end: the error is at the last byte */
    }
    if (st != yajl_status_ok && p->status == INFD_STATUS_OK) {
        /* A syntax error (a callback's error is already in p->err). */
        unsigned char *msg = yajl_get_error(p->h, 0, (const unsigned char *)text, n);
        char m[200];
        snprintf(m, sizeof(m), "%s", msg ? (const char *)msg : "parse error");
        size_t len = strlen(m);
        while (len > 0 && (m[len - 1] == '\n' || m[len - 1] == ' ' || m[len - 1] == '.'))
            m[--len] = '\0';
        if (msg)
            yajl_free_error(p->h, msg);
        p->status = INFD_STATUS_INVALID_ARGUMENT;
        infd_error_set(p->err, p->status, "malformed JSON at byte %zu: %s",
                       base + (at_end ? n : yajl_get_bytes_consumed(p->h)), m);
    }
    yajl_free(p->h);
    p->h = NULL;
    return p->status;
}

/* Decodes a "data" array recorded before its input's datatype/shape. */
static int decode_deferred(parser *p)
{
    kserve_input *in = p->in;
    parser sub = {
        .r = p->r,
        .err = p->err,
        .json = p->json,
        .json_n = p->json_n,
        .in = in,
        .in_index = p->in_index,
        .max_depth = p->max_depth, /* the data was checked in the first pass */
    };
    sub.frames[0] = F_DATA;
    sub.depth = 1;
    sub.data_depth = 0;
    /* The data array is the sub-parse's top-level value: its '[' raises
     * data_depth to 1 and its ']' ends the F_DATA frame. */
    if (!begin_direct(&sub)) {
        p->status = sub.status;
        return 0;
    }
    in->_deferred = false; /* so on_end does not record offsets again */
    if (run_yajl(&sub, p->json + in->_data_begin, in->_data_end - in->_data_begin,
                 in->_data_begin) != INFD_STATUS_OK) {
        p->status = sub.status;
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------- */
/* API                                                                       */
/* ------------------------------------------------------------------------- */

void kserve_request_init(kserve_request *r)
{
    memset(r, 0, sizeof(*r));
}

void kserve_request_fini(kserve_request *r)
{
    if (!r)
        return;
    for (int i = 0; i < INFD_MAX_MODEL_IO; i++)
        infd_free(r->inputs[i]._buf);
    arena_reset(r);
    infd_free(r->_arena);
    memset(r, 0, sizeof(*r));
}

static void reset(kserve_request *r)
{
    r->id[0] = '\0';
    r->has_id = false;
    r->binary_data_output = -1;
    r->timeout_us = -1;
    r->priority = -1;
    r->has_sequence = false;
    r->sequence_id = 0;
    r->sequence_id_string[0] = '\0';
    r->sequence_flags = 0;
    for (int i = 0; i < r->n_inputs; i++) {
        kserve_input *in = &r->inputs[i];
        in->name[0] = '\0';
        in->dtype = INFD_DTYPE_INVALID;
        in->rank = -1;
        in->binary_data_size = -1;
        in->shm_region[0] = '\0';
        in->shm_offset = in->shm_byte_size = -1;
        in->data = NULL;
        in->nbytes = 0;
        in->_has_data = in->_has_dtype = in->_deferred = false;
        in->_numel = in->_count = 0;
    }
    r->n_inputs = 0;
    r->n_outputs = 0;
    arena_reset(r);
}

void kserve_request_reset(kserve_request *r)
{
    reset(r);
}

infd_status kserve_request_parse(kserve_request *r, const char *json, size_t n, infd_error *err)
{
    /* Slots past n_inputs are reset lazily: mark all as fresh first. */
    r->n_inputs = INFD_MAX_MODEL_IO;
    reset(r);
    if (!r->_arena) {
        r->_arena = infd_malloc(ARENA_BYTES);
        r->_arena_cap = r->_arena ? ARENA_BYTES : 0;
    }
    parser p = { .r = r,
                 .err = err,
                 .json = json,
                 .json_n = n,
                 .max_depth = r->max_depth > 0 ? r->max_depth : KSERVE_MAX_JSON_DEPTH };
    if (run_yajl(&p, json, n, 0) != INFD_STATUS_OK)
        return p.status;
    if (r->n_inputs == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "the request has no 'inputs'");
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Writing                                                                   */
/* ------------------------------------------------------------------------- */

void kserve_write_str(infd_strbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    infd_strbuf_reserve(b, n + 2);
    infd_strbuf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char esc[2] = { '\\', (char)c };
            infd_strbuf_put(b, esc, sizeof(esc));
        } else if (c < 0x20 || c == 0x7f) {
            char esc[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
            infd_strbuf_put(b, esc, sizeof(esc));
        } else {
            infd_strbuf_putc(b, (char)c);
        }
    }
    infd_strbuf_putc(b, '"');
}

void kserve_write_cstr(infd_strbuf *b, const char *s)
{
    kserve_write_str(b, s, strlen(s));
}

/* A float in the shortest %g form that reads back to the same value at
 * `digits` significant digits; NaN and infinities as Python's json writes
 * them (JSON has no literal for them). */
void kserve_write_float(infd_strbuf *b, double v, int digits)
{
    if (isnan(v)) {
        infd_strbuf_put(b, "NaN", 3);
        return;
    }
    if (isinf(v)) {
        infd_strbuf_puts(b, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    infd_strbuf_printf(b, "%.*g", digits, v);
}

bool kserve_output_is_binary(const kserve_request *r, const char *name)
{
    for (int i = 0; i < r->n_outputs; i++)
        if (strcmp(r->outputs[i].name, name) == 0 && r->outputs[i].binary_data >= 0)
            return r->outputs[i].binary_data == 1;
    return r->binary_data_output == 1;
}

/* Writes `n` elements of `t` as a flat JSON array. */
void kserve_write_data(infd_strbuf *b, const infd_tensor *t, int64_t n)
{
    const uint8_t *d = t->data;
    infd_strbuf_puts(b, "[");
    if (t->dtype == INFD_DTYPE_BYTES) {
        size_t off = 0;
        for (int64_t i = 0; i < n && off + 4 <= t->nbytes; i++) {
            uint32_t len = (uint32_t)d[off] | (uint32_t)d[off + 1] << 8 |
                           (uint32_t)d[off + 2] << 16 | (uint32_t)d[off + 3] << 24;
            off += 4;
            if (len > t->nbytes - off)
                break;
            if (i)
                infd_strbuf_puts(b, ",");
            kserve_write_str(b, (const char *)d + off, len);
            off += len;
        }
        infd_strbuf_puts(b, "]");
        return;
    }
    /* Numbers are formatted straight into the buffer's free capacity
     * (infd_strbuf_printf); stop early once memory has run out. */
    for (int64_t i = 0; i < n && !b->oom; i++) {
        if (i)
            infd_strbuf_putc(b, ',');
        switch (t->dtype) {
        case INFD_DTYPE_BOOL:
            infd_strbuf_puts(b, d[i] ? "true" : "false");
            break;
        case INFD_DTYPE_UINT8:
            infd_strbuf_printf(b, "%u", (unsigned)d[i]);
            break;
        case INFD_DTYPE_INT8:
            infd_strbuf_printf(b, "%d", (int)(int8_t)d[i]);
            break;
        case INFD_DTYPE_UINT16: {
            uint16_t v;
            memcpy(&v, d + 2 * i, 2);
            infd_strbuf_printf(b, "%u", (unsigned)v);
            break;
        }
        case INFD_DTYPE_INT16: {
            int16_t v;
            memcpy(&v, d + 2 * i, 2);
            infd_strbuf_printf(b, "%d", (int)v);
            break;
        }
        case INFD_DTYPE_UINT32: {
            uint32_t v;
            memcpy(&v, d + 4 * i, 4);
            infd_strbuf_printf(b, "%" PRIu32, v);
            break;
        }
        case INFD_DTYPE_INT32: {
            int32_t v;
            memcpy(&v, d + 4 * i, 4);
            infd_strbuf_printf(b, "%" PRId32, v);
            break;
        }
        case INFD_DTYPE_UINT64: {
            uint64_t v;
            memcpy(&v, d + 8 * i, 8);
            infd_strbuf_printf(b, "%" PRIu64, v);
            break;
        }
        case INFD_DTYPE_INT64: {
            int64_t v;
            memcpy(&v, d + 8 * i, 8);
            infd_strbuf_printf(b, "%" PRId64, v);
            break;
        }
        case INFD_DTYPE_FP16:
        case INFD_DTYPE_BF16: {
            uint16_t v;
            memcpy(&v, d + 2 * i, 2);
            float f = t->dtype == INFD_DTYPE_FP16 ? infd_fp16_to_fp32(v) : infd_bf16_to_fp32(v);
            kserve_write_float(b, f, 9); /* the exact float value (%.5g reads back too) */
            break;
        }
        case INFD_DTYPE_FP32: {
            float v;
            memcpy(&v, d + 4 * i, 4);
            kserve_write_float(b, v, 9);
            break;
        }
        case INFD_DTYPE_FP64: {
            double v;
            memcpy(&v, d + 8 * i, 8);
            kserve_write_float(b, v, 17);
            break;
        }
        default:
            break;
        }
    }
    infd_strbuf_puts(b, "]");
}

void kserve_write_output_head(infd_strbuf *b, const char *name, const infd_tensor *t)
{
    infd_strbuf_puts(b, "{\"name\":");
    kserve_write_cstr(b, name);
    infd_strbuf_puts(b, ",\"datatype\":");
    kserve_write_cstr(b, infd_dtype_name(t->dtype));
    infd_strbuf_puts(b, ",\"shape\":[");
    for (int d = 0; d < t->shape.rank; d++)
        infd_strbuf_printf(b, d ? ",%" PRId64 : "%" PRId64, t->shape.dims[d]);
    infd_strbuf_putc(b, ']');
}

infd_status kserve_request_add_outputs(const kserve_request *r, infd_request *req, infd_error *err)
{
    for (int i = 0; i < r->n_outputs; i++) {
        const kserve_output *o = &r->outputs[i];
        infd_status st =
            o->class_count > 0
                ? infd_request_add_output_classification(req, o->name, o->class_count, err)
                : infd_request_add_output(req, o->name, err);
        if (st != INFD_STATUS_OK)
            return st;
    }
    return INFD_STATUS_OK;
}

const kserve_output *kserve_output_shm(const kserve_request *r, const char *name)
{
    for (int i = 0; i < r->n_outputs; i++)
        if (strcmp(r->outputs[i].name, name) == 0)
            return r->outputs[i].shm_region[0] ? &r->outputs[i] : NULL;
    return NULL;
}

int kserve_output_class_count(const kserve_request *r, const char *name)
{
    for (int i = 0; i < r->n_outputs; i++)
        if (strcmp(r->outputs[i].name, name) == 0)
            return r->outputs[i].class_count;
    return 0;
}

infd_status kserve_request_apply(const kserve_request *r, infd_request *req, infd_error *err)
{
    if (r->has_id)
        infd_request_set_id(req, r->id);
    if (r->timeout_us > 0)
        infd_request_set_timeout_us(req, (uint64_t)r->timeout_us);
    if (r->priority > 0 &&
        infd_request_set_priority(req, (uint32_t)r->priority, err) != INFD_STATUS_OK)
        return err->code;
    if (r->has_sequence &&
        infd_request_set_sequence(req, r->sequence_id,
                                  r->sequence_id_string[0] ? r->sequence_id_string : NULL,
                                  r->sequence_flags, err) != INFD_STATUS_OK)
        return err->code;
    return INFD_STATUS_OK;
}
