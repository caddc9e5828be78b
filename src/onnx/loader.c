/*
 * loader.c - ONNX protobuf -> IR, checking everything on the way.
 *
 * Three stages, each refusing bad input with a message:
 *
 *   1. scan_message: walks the wire format against protobuf-c's descriptors
 *      without allocating. It checks that every key, varint and length fits
 *      in its enclosing message and that sub-messages nest at most
 *      MAX_DEPTH deep. protobuf-c's own unpacker recurses once per level
 *      with no limit, so without this scan a few kilobytes of nested
 *      attribute graphs would overflow the stack.
 *   2. protobuf_c_message_unpack with a budget allocator: protobuf-c sizes
 *      its arrays from what is on the wire, so its memory is bounded by a
 *      multiple of the file size; the budget makes that bound explicit.
 *   3. build: names resolved through a hash table sized up front; tensors
 *      converted with their byte size checked against the bytes that back
 *      them (inline or external) before anything is allocated for them.
 *
 * Peak memory while loading is about twice the weights (protobuf-c's copy of
 * raw_data plus ours); the file itself is mapped, not read.
 */
#include "onnx/loader.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/common.h"
#include "onnx.pb-c.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "ONNX raw_data is little-endian");

/* Deepest nesting of messages accepted (a model with subgraphs inside
 * subgraphs stays far below this). */
#define MAX_DEPTH 48

/* ------------------------------------------------------------------------- */
/* Stage 1: wire-format scan                                                 */
/* ------------------------------------------------------------------------- */

typedef struct scan {
    const uint8_t *base; /* start of the whole buffer, for offsets in messages */
    const char *source;
    infd_error *err;
} scan;

static infd_status scan_fail(scan *s, const uint8_t *at, const char *what)
{
    return infd_error_set(s->err, INFD_STATUS_INVALID_ARGUMENT,
                          "%s: not a valid ONNX protobuf: %s at byte %zu", s->source, what,
                          (size_t)(at - s->base));
}

/* Reads a varint at *p (< end); advances *p. -1 when truncated or too long. */
static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*p >= end)
            return -1;
        uint8_t b = *(*p)++;
        if (shift == 63 && (b & 0x7e))
            return -1; /* more than 64 bits */
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

static infd_status scan_message(scan *s, const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                                const uint8_t *end, int depth)
{
    if (depth > MAX_DEPTH)
        return scan_fail(s, p, "messages nested too deeply");
    while (p < end) {
        const uint8_t *field_start = p;
        uint64_t key, len;
        if (read_varint(&p, end, &key) != 0)
            return scan_fail(s, field_start, "truncated field key");
        uint32_t wire = (uint32_t)(key & 7);
        uint64_t id = key >> 3;
        if (id == 0 || id > 536870911u)
            return scan_fail(s, field_start, "invalid field number");
        switch (wire) {
        case 0:
            if (read_varint(&p, end, &len) != 0)
                return scan_fail(s, field_start, "truncated varint");
            break;
        case 1:
            if (end - p < 8)
                return scan_fail(s, field_start, "truncated 64-bit field");
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return scan_fail(s, field_start, "truncated 32-bit field");
            p += 4;
            break;
        case 2: {
            if (read_varint(&p, end, &len) != 0)
                return scan_fail(s, field_start, "truncated length");
            if (len > (uint64_t)(end - p))
                return scan_fail(s, field_start, "length runs past the end of its message");
            const ProtobufCFieldDescriptor *f =
                desc ? protobuf_c_message_descriptor_get_field(desc, (unsigned)id) : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                infd_status st = scan_message(s, f->descriptor, p, p + len, depth + 1);
                if (st != INFD_STATUS_OK)
                    return st;
            }
            p += len;
            break;
        }
        default:
            return scan_fail(s, field_start, "unsupported wire type");
        }
    }
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Stage 2: unpack under a memory budget                                     */
/* ------------------------------------------------------------------------- */

typedef struct budget {
    size_t left;
    int exceeded;
    int oom; /* an allocation within the budget failed */
} budget;

static void *budget_alloc(void *data, size_t size)
{
    budget *b = data;
    if (size > b->left) {
        b->exceeded = 1;
        return NULL;
    }
    void *p = infd_malloc(size);
    if (p)
        b->left -= size;
    else
        b->oom = 1;
    return p;
}

static void budget_free(void *data, void *p)
{
    (void)data;
    infd_free(p);
}

/* ------------------------------------------------------------------------- */
/* Stage 3: build the IR                                                     */
/* ------------------------------------------------------------------------- */

typedef struct loader {
    infd_ir_graph *g;
    const char *source;
    const char *base_dir; /* NULL: external data refused */
    infd_error *err;
    /* Name -> value index, open addressing; cap is a power of two and at
     * least twice the number of names that can ever be inserted. */
    int32_t *table;
    size_t table_cap;
    int32_t n_unknown_dims; /* for naming anonymous dims "unk__N" */
} loader;

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) {
        h ^= (uint8_t)*s++;
        h *= 1099511628211ull;
    }
    return h;
}

/* The value named `name`, or -1. */
static int32_t lookup(const loader *l, const char *name)
{
    size_t mask = l->table_cap - 1;
    for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
        int32_t v = l->table[i];
        if (v < 0)
            return -1;
        if (strcmp(l->g->values[v].name, name) == 0)
            return v;
    }
}

static void insert(loader *l, int32_t v)
{
    size_t mask = l->table_cap - 1;
    size_t i = hash_name(l->g->values[v].name) & mask;
    while (l->table[i] >= 0)
        i = (i + 1) & mask;
    l->table[i] = v;
}

static infd_status oom(loader *l)
{
    return infd_error_set(l->err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory while loading",
                          l->source);
}

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

/* A new value named `name`, registered in the name table. Fails on a
 * duplicate (`what` says which kind of definition it was). */
static infd_status define_value(loader *l, const char *name, const char *what, int32_t *out)
{
    if (name[0] == '\0')
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT, "%s: %s has an empty name",
                              l->source, what);
    if (lookup(l, name) >= 0)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s '%s' is defined more than once", l->source, what, name);
    int32_t v = infd_ir_graph_add_value(l->g, name);
    if (v < 0)
        return oom(l);
    insert(l, v);
    *out = v;
    return INFD_STATUS_OK;
}

/* Opens the external data of tensor `what` and checks that `nbytes` bytes
 * exist at its offset; on success *fd_out is open and *offset_out set. */
static infd_status open_external(loader *l, const Onnx__TensorProto *t, const char *what,
                                 size_t nbytes, int *fd_out, uint64_t *offset_out)
{
    const char *location = NULL;
    uint64_t offset = 0, length = UINT64_MAX;
    char path[PATH_MAX];
    int fd = -1;
    infd_status st = INFD_STATUS_OK;

    for (size_t i = 0; i < t->n_external_data; i++) {
        const char *k = str_or_empty(t->external_data[i]->key);
        const char *v = str_or_empty(t->external_data[i]->value);
        char *end = NULL;
        if (strcmp(k, "location") == 0) {
            location = v;
        } else if (strcmp(k, "offset") == 0 || strcmp(k, "length") == 0) {
            errno = 0;
            unsigned long long x = strtoull(v, &end, 10);
            if (errno || !end || *end || v[0] == '-' || v[0] == '\0')
                return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: %s: external data %s '%s' is not a number", l->source,
                                      what, k, v);
            if (k[0] == 'o')
                offset = x;
            else
                length = x;
        }
    }
    if (!location || !location[0])
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s: external data without a location", l->source, what);
    if (!l->base_dir)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s: external data '%s' cannot be used when loading from memory",
                              l->source, what, location);
    /* The location is relative to the model's folder and may not leave it. */
    if (location[0] == '/' || strcmp(location, "..") == 0 || strncmp(location, "../", 3) == 0 ||
        strstr(location, "/../") ||
        (strlen(location) >= 3 && strcmp(location + strlen(location) - 3, "/..") == 0))
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s: external data location '%s' must be a relative path "
                              "inside the model's folder",
                              l->source, what, location);
    if (length != UINT64_MAX && length != nbytes)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s: external data length %llu, expected %zu", l->source, what,
                              (unsigned long long)length, nbytes);
    int w = snprintf(path, sizeof(path), "%s/%s", l->base_dir, location);
    if (w < 0 || (size_t)w >= sizeof(path))
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s: external data path too long", l->source, what);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return infd_error_set(l->err, errno == ENOENT ? INFD_STATUS_NOT_FOUND : INFD_STATUS_IO,
                              "%s: %s: cannot open external data '%s': %s", l->source, what, path,
                              strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = infd_error_set(l->err, INFD_STATUS_IO, "%s: %s: external data '%s' is not a file",
                            l->source, what, path);
        goto out;
    }
    if (offset > (uint64_t)sb.st_size || nbytes > (uint64_t)sb.st_size - offset) {
        st = infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: %s: external data '%s' has %lld bytes, the tensor needs %zu at "
                            "offset %llu",
                            l->source, what, location, (long long)sb.st_size, nbytes,
                            (unsigned long long)offset);
        goto out;
    }
    *fd_out = fd;
    *offset_out = offset;
    return INFD_STATUS_OK;
out:
    close(fd);
    return st;
}

/* Reads `nbytes` at `offset` of `fd` into `dst`. */
static infd_status read_external(loader *l, int fd, uint64_t offset, const char *what, void *dst,
                                 size_t nbytes)
{
    size_t done = 0;
    while (done < nbytes) {
        ssize_t r = pread(fd, (char *)dst + done, nbytes - done, (off_t)(offset + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return infd_error_set(l->err, INFD_STATUS_IO, "%s: %s: reading external data: %s",
                                  l->source, what, r < 0 ? strerror(errno) : "short read");
        done += (size_t)r;
    }
    return INFD_STATUS_OK;
}

/* Where typed (non-raw) data of `dtype` lives in a TensorProto, and how many
 * elements it holds there. */
static size_t typed_count(const Onnx__TensorProto *t, infd_dtype dtype)
{
    switch (dtype) {
    case INFD_DTYPE_FP32:
        return t->n_float_data;
    case INFD_DTYPE_INT64:
        return t->n_int64_data;
    case INFD_DTYPE_FP64:
        return t->n_double_data;
    case INFD_DTYPE_UINT32:
    case INFD_DTYPE_UINT64:
        return t->n_uint64_data;
    default:
        return t->n_int32_data; /* INT32, INT16, INT8, UINT8, UINT16, BOOL, FP16, BF16 */
    }
}

static void copy_typed(const Onnx__TensorProto *t, infd_dtype dtype, void *dst, size_t numel)
{
    if (numel == 0)
        return; /* the arrays may be NULL, which memcpy may not be given */
    switch (dtype) {
    case INFD_DTYPE_FP32:
        memcpy(dst, t->float_data, numel * sizeof(float));
        return;
    case INFD_DTYPE_INT64:
        memcpy(dst, t->int64_data, numel * sizeof(int64_t));
        return;
    case INFD_DTYPE_FP64:
        memcpy(dst, t->double_data, numel * sizeof(double));
        return;
    case INFD_DTYPE_UINT64:
        memcpy(dst, t->uint64_data, numel * sizeof(uint64_t));
        return;
    case INFD_DTYPE_UINT32:
        for (size_t i = 0; i < numel; i++)
            ((uint32_t *)dst)[i] = (uint32_t)t->uint64_data[i];
        return;
    case INFD_DTYPE_INT32:
        memcpy(dst, t->int32_data, numel * sizeof(int32_t));
        return;
    case INFD_DTYPE_INT16:
    case INFD_DTYPE_UINT16:
    case INFD_DTYPE_FP16:
    case INFD_DTYPE_BF16: /* half types are stored as their bit patterns */
        for (size_t i = 0; i < numel; i++)
            ((uint16_t *)dst)[i] = (uint16_t)t->int32_data[i];
        return;
    default: /* INT8, UINT8, BOOL */
        for (size_t i = 0; i < numel; i++)
            ((uint8_t *)dst)[i] = (uint8_t)t->int32_data[i];
        return;
    }
}

/* Fills value `v` from tensor `t`: dtype, shape and a checked copy of its
 * data. `what` names the tensor in messages ("initializer 'w'"). */
static infd_status load_tensor(loader *l, const Onnx__TensorProto *t, int32_t v, const char *what)
{
    infd_ir_value *val = &l->g->values[v];
    int32_t code = t->has_data_type ? t->data_type : 0;
    infd_dtype dtype = infd_dtype_from_onnx(code);
    if (dtype == INFD_DTYPE_INVALID)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s has data type %d, which infd does not support", l->source,
                              what, (int)code);
    if (dtype == INFD_DTYPE_BYTES)
        return infd_error_set(l->err, INFD_STATUS_UNIMPLEMENTED,
                              "%s: %s is a STRING tensor; infd runs numeric tensors only",
                              l->source, what);
    if (t->segment)
        return infd_error_set(l->err, INFD_STATUS_UNIMPLEMENTED,
                              "%s: %s is segmented, which infd does not support", l->source, what);
    if (t->n_dims > INFD_MAX_RANK)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s has rank %zu, more than infd's maximum %d", l->source, what,
                              t->n_dims, INFD_MAX_RANK);
    infd_shape shape;
    size_t nbytes;
    infd_error sub = { 0 };
    if (infd_shape_init(&shape, (int32_t)t->n_dims, t->dims, &sub) != INFD_STATUS_OK ||
        infd_tensor_nbytes_for(dtype, &shape, &nbytes, &sub) != INFD_STATUS_OK)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT, "%s: %s: %s", l->source, what,
                              sub.msg);
    char shape_str[128];
    infd_shape_format(&shape, shape_str, sizeof(shape_str));

    int external =
        t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    size_t numel = nbytes / infd_dtype_size(dtype);
    /* Check that the bytes exist before allocating room for them. */
    int fd = -1;
    uint64_t offset = 0;
    if (external) {
        infd_status st = open_external(l, t, what, nbytes, &fd, &offset);
        if (st != INFD_STATUS_OK)
            return st;
    } else {
        if (t->has_raw_data) {
            if (t->raw_data.len != nbytes)
                return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: %s: raw_data has %zu bytes, expected %zu for %s %s",
                                      l->source, what, t->raw_data.len, nbytes,
                                      infd_dtype_name(dtype), shape_str);
        } else if (typed_count(t, dtype) != numel) {
            return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: %s: has %zu data elements, expected %zu for %s %s",
                                  l->source, what, typed_count(t, dtype), numel,
                                  infd_dtype_name(dtype), shape_str);
        }
    }
    /* Zero-element tensors still get a (tiny) buffer so data is never NULL. */
    void *dst = infd_arena_alloc(&l->g->weights, nbytes ? nbytes : 1, INFD_ALIGNMENT);
    if (!dst) {
        if (fd >= 0)
            close(fd);
        return oom(l);
    }
    if (external) {
        infd_status st = read_external(l, fd, offset, what, dst, nbytes);
        close(fd);
        if (st != INFD_STATUS_OK)
            return st;
    } else if (t->has_raw_data) {
        if (nbytes)
            memcpy(dst, t->raw_data.data, nbytes);
    } else {
        copy_typed(t, dtype, dst, numel);
    }
    val = &l->g->values[v];
    val->dtype = dtype;
    val->shape.rank = shape.rank;
    for (int32_t i = 0; i < shape.rank; i++) {
        val->shape.dims[i].value = shape.dims[i];
        val->shape.dims[i].sym = -1;
    }
    val->data = dst;
    val->nbytes = nbytes;
    return INFD_STATUS_OK;
}

/* dtype and shape of a graph input or output from its declared type. For
 * outputs (`required` false) a missing type is allowed. */
static infd_status load_value_info(loader *l, const Onnx__ValueInfoProto *vi, int32_t v,
                                   const char *what, int required)
{
    infd_ir_value *val = &l->g->values[v];
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
        if (!required)
            return INFD_STATUS_OK;
        return infd_error_set(l->err, tp ? INFD_STATUS_UNIMPLEMENTED : INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s '%s' is not a tensor (sequences, maps and optionals are "
                              "not supported)",
                              l->source, what, val->name);
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int32_t code = tt->has_elem_type ? tt->elem_type : 0;
    infd_dtype dtype = infd_dtype_from_onnx(code);
    if (dtype == INFD_DTYPE_INVALID && (required || code != 0))
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s '%s' has element type %d, which infd does not support",
                              l->source, what, val->name, (int)code);
    if (dtype == INFD_DTYPE_BYTES)
        return infd_error_set(l->err, INFD_STATUS_UNIMPLEMENTED,
                              "%s: %s '%s' is a STRING tensor; infd runs numeric tensors only",
                              l->source, what, val->name);
    val->dtype = dtype;
    if (!tt->shape)
        return INFD_STATUS_OK; /* rank unknown */
    if (tt->shape->n_dim > INFD_MAX_RANK)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s '%s' has rank %zu, more than infd's maximum %d", l->source,
                              what, val->name, tt->shape->n_dim, INFD_MAX_RANK);
    infd_ir_shape shape = { .rank = (int32_t)tt->shape->n_dim };
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        infd_ir_dim *dim = &shape.dims[i];
        dim->value = -1;
        dim->sym = -1;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (d->dim_value < 0)
                return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: %s '%s': dim %zu is %lld, expected >= 0", l->source,
                                      what, val->name, i, (long long)d->dim_value);
            dim->value = d->dim_value;
            continue;
        }
        char anon[32];
        const char *sym = NULL;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param &&
            d->dim_param[0])
            sym = d->dim_param;
        else {
            snprintf(anon, sizeof(anon), "unk__%d", (int)l->n_unknown_dims++);
            sym = anon;
        }
        dim->sym = infd_ir_graph_intern_sym(l->g, sym);
        if (dim->sym < 0)
            return oom(l);
    }
    l->g->values[v].shape = shape;
    return INFD_STATUS_OK;
}

static infd_status load_attr(loader *l, const Onnx__NodeProto *np, const char *node_name,
                             const Onnx__AttributeProto *ap, infd_ir_attr *a)
{
    infd_arena *arena = &l->g->arena;
    memset(a, 0, sizeof(*a));
    a->tensor = -1;
    a->name = infd_arena_strdup(arena, str_or_empty(ap->name));
    if (!a->name)
        return oom(l);
    if (!a->name[0])
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: node '%s' (%s) has an attribute without a name", l->source,
                              node_name, np->op_type);
    if (ap->ref_attr_name && ap->ref_attr_name[0])
        return infd_error_set(l->err, INFD_STATUS_UNIMPLEMENTED,
                              "%s: node '%s' (%s): attribute '%s' refers to a function attribute, "
                              "which infd does not support",
                              l->source, node_name, np->op_type, a->name);
    int type = ap->has_type ? (int)ap->type : 0;
    switch (type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        a->type = INFD_IR_ATTR_FLOAT;
        a->f = ap->f;
        return INFD_STATUS_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        a->type = INFD_IR_ATTR_INT;
        a->i = ap->i;
        return INFD_STATUS_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
        a->type = INFD_IR_ATTR_STRING;
        char *s = infd_arena_alloc(arena, ap->s.len + 1, 1);
        if (!s)
            return oom(l);
        if (ap->s.len)
            memcpy(s, ap->s.data, ap->s.len);
        s[ap->s.len] = '\0';
        a->s = s;
        a->s_len = ap->s.len;
        return INFD_STATUS_OK;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: {
        a->type = INFD_IR_ATTR_FLOATS;
        if (ap->n_floats > INT32_MAX)
            return oom(l);
        a->n = (int32_t)ap->n_floats;
        if (a->n) {
            float *f = infd_arena_alloc(arena, ap->n_floats * sizeof(float), 0);
            if (!f)
                return oom(l);
            memcpy(f, ap->floats, ap->n_floats * sizeof(float));
            a->floats = f;
        }
        return INFD_STATUS_OK;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: {
        a->type = INFD_IR_ATTR_INTS;
        if (ap->n_ints > INT32_MAX)
            return oom(l);
        a->n = (int32_t)ap->n_ints;
        if (a->n) {
            int64_t *x = infd_arena_alloc(arena, ap->n_ints * sizeof(int64_t), 0);
            if (!x)
                return oom(l);
            memcpy(x, ap->ints, ap->n_ints * sizeof(int64_t));
            a->ints = x;
        }
        return INFD_STATUS_OK;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: {
        a->type = INFD_IR_ATTR_STRINGS;
        if (ap->n_strings > INT32_MAX)
            return oom(l);
        a->n = (int32_t)ap->n_strings;
        if (a->n) {
            const char **list = infd_arena_alloc(arena, ap->n_strings * sizeof(char *), 0);
            if (!list)
                return oom(l);
            for (size_t i = 0; i < ap->n_strings; i++) {
                char *s = infd_arena_alloc(arena, ap->strings[i].len + 1, 1);
                if (!s)
                    return oom(l);
                if (ap->strings[i].len)
                    memcpy(s, ap->strings[i].data, ap->strings[i].len);
                s[ap->strings[i].len] = '\0';
                list[i] = s;
            }
            a->strings = list;
        }
        return INFD_STATUS_OK;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
        a->type = INFD_IR_ATTR_TENSOR;
        if (!ap->t)
            return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: node '%s' (%s): tensor attribute '%s' has no tensor",
                                  l->source, node_name, np->op_type, a->name);
        /* An anonymous constant: named after its node and attribute, which
         * cannot collide with model names because of the '#'. */
        char name[512];
        char what[600];
        snprintf(name, sizeof(name), "%s#%s", node_name, a->name);
        snprintf(what, sizeof(what), "node '%s' (%s) attribute '%s'", node_name, np->op_type,
                 a->name);
        int32_t v = infd_ir_graph_add_value(l->g, name);
        if (v < 0)
            return oom(l);
        infd_status st = load_tensor(l, ap->t, v, what);
        if (st != INFD_STATUS_OK)
            return st;
        l->g->values[v].flags |= INFD_IR_VALUE_INITIALIZER;
        a->tensor = v;
        return INFD_STATUS_OK;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
        a->type = INFD_IR_ATTR_GRAPH;
        return INFD_STATUS_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED:
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: node '%s' (%s): attribute '%s' has no type", l->source,
                              node_name, np->op_type, a->name);
    default:
        a->type = INFD_IR_ATTR_OTHER;
        return INFD_STATUS_OK;
    }
}

/* Upper bound of the values a model defines (for the name table). */
static size_t count_names(const Onnx__GraphProto *gp)
{
    size_t n = gp->n_initializer + gp->n_input + 16;
    for (size_t i = 0; i < gp->n_node; i++) {
        n += gp->node[i]->n_output;
        for (size_t k = 0; k < gp->node[i]->n_attribute; k++)
            n += 1; /* tensor attributes become values */
    }
    return n;
}

static infd_status find_opset(loader *l, const Onnx__ModelProto *mp)
{
    int64_t opset = -1;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const char *domain = str_or_empty(mp->opset_import[i]->domain);
        if (domain[0] == '\0' || strcmp(domain, "ai.onnx") == 0)
            opset = mp->opset_import[i]->version;
    }
    if (opset < 0 && mp->n_opset_import > 0)
        return infd_error_set(l->err, INFD_STATUS_UNIMPLEMENTED,
                              "%s: the model imports only other operator domains ('%s', ...); "
                              "infd runs the default ONNX domain",
                              l->source, str_or_empty(mp->opset_import[0]->domain));
    if (opset < 0)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: the model imports no opset of the default ONNX domain",
                              l->source);
    if (opset < INFD_ONNX_OPSET_MIN || opset > INFD_ONNX_OPSET_MAX)
        return infd_error_set(l->err, INFD_STATUS_UNIMPLEMENTED,
                              "%s: opset %lld of the default ONNX domain is not supported "
                              "(infd reads opsets %d to %d)",
                              l->source, (long long)opset, INFD_ONNX_OPSET_MIN,
                              INFD_ONNX_OPSET_MAX);
    l->g->opset = opset;
    return INFD_STATUS_OK;
}

static infd_status build(loader *l, const Onnx__ModelProto *mp)
{
    infd_ir_graph *g = l->g;
    infd_status st;
    char what[600];

    if (!mp->graph)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT, "%s: the model has no graph",
                              l->source);
    g->ir_version = mp->has_ir_version ? mp->ir_version : 0;
    if (g->ir_version < 3)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: IR version %lld is not supported (infd reads 3 and later)",
                              l->source, (long long)g->ir_version);
    st = find_opset(l, mp);
    if (st != INFD_STATUS_OK)
        return st;
    const Onnx__GraphProto *gp = mp->graph;
    if (gp->name && !(g->name = infd_arena_strdup(&g->arena, gp->name)))
        return oom(l);
    if (mp->n_metadata_props > 0) {
        size_t nm = mp->n_metadata_props;
        g->meta_keys = infd_arena_alloc(&g->arena, nm * sizeof(char *), _Alignof(char *));
        g->meta_values = infd_arena_alloc(&g->arena, nm * sizeof(char *), _Alignof(char *));
        if (!g->meta_keys || !g->meta_values)
            return oom(l);
        for (size_t i = 0; i < nm; i++) {
            const Onnx__StringStringEntryProto *e = mp->metadata_props[i];
            g->meta_keys[i] = infd_arena_strdup(&g->arena, str_or_empty(e->key));
            g->meta_values[i] = infd_arena_strdup(&g->arena, str_or_empty(e->value));
            if (!g->meta_keys[i] || !g->meta_values[i])
                return oom(l);
        }
        g->n_meta = (int32_t)nm;
    }

    /* Name table, sized once: nothing is inserted beyond count_names. */
    size_t want = count_names(gp) * 2;
    l->table_cap = 64;
    while (l->table_cap < want)
        l->table_cap *= 2;
    l->table = infd_malloc(l->table_cap * sizeof(*l->table));
    if (!l->table)
        return oom(l);
    memset(l->table, 0xff, l->table_cap * sizeof(*l->table));

    /* Initializers. */
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *t = gp->initializer[i];
        int32_t v;
        st = define_value(l, str_or_empty(t->name), "initializer", &v);
        if (st != INFD_STATUS_OK)
            return st;
        snprintf(what, sizeof(what), "initializer '%s'", g->values[v].name);
        st = load_tensor(l, t, v, what);
        if (st != INFD_STATUS_OK)
            return st;
        g->values[v].flags |= INFD_IR_VALUE_INITIALIZER;
    }

    /* Graph inputs; an input that is also an initializer (older exporters
     * list weights as inputs) is a constant, not something to feed. */
    g->inputs = infd_malloc((gp->n_input ? gp->n_input : 1) * sizeof(*g->inputs));
    if (!g->inputs)
        return oom(l);
    for (size_t i = 0; i < gp->n_input; i++) {
        const char *name = str_or_empty(gp->input[i]->name);
        int32_t v = lookup(l, name);
        if (v >= 0 && (g->values[v].flags & INFD_IR_VALUE_INITIALIZER))
            continue;
        st = define_value(l, name, "graph input", &v);
        if (st != INFD_STATUS_OK)
            return st;
        st = load_value_info(l, gp->input[i], v, "graph input", 1);
        if (st != INFD_STATUS_OK)
            return st;
        g->values[v].flags |= INFD_IR_VALUE_INPUT;
        g->inputs[g->n_inputs++] = v;
    }

    /* Nodes, in two passes: define every output first, so that inputs may
     * refer to nodes further down (the sort below orders them). */
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        const char *op = str_or_empty(np->op_type);
        char auto_name[96];
        const char *name = str_or_empty(np->name);
        if (!op[0])
            return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: node %zu ('%s') has no op_type", l->source, i, name);
        if (!name[0]) {
            snprintf(auto_name, sizeof(auto_name), "%.64s_%zu", op, i);
            name = auto_name;
        }
        if (np->n_input > INT32_MAX / 2 || np->n_output > INT32_MAX / 2 ||
            np->n_attribute > INT32_MAX / 2)
            return oom(l);
        infd_ir_node node = { 0 };
        node.name = infd_arena_strdup(&g->arena, name);
        node.op_type = infd_arena_strdup(&g->arena, op);
        node.domain = infd_arena_strdup(&g->arena, str_or_empty(np->domain));
        int32_t *outs = infd_arena_alloc(&g->arena, (np->n_output + 1) * sizeof(int32_t), 0);
        int32_t *ins = infd_arena_alloc(&g->arena, (np->n_input + 1) * sizeof(int32_t), 0);
        infd_ir_attr *attrs =
            infd_arena_alloc(&g->arena, (np->n_attribute + 1) * sizeof(infd_ir_attr), 0);
        if (!node.name || !node.op_type || !node.domain || !outs || !ins || !attrs)
            return oom(l);
        if (strcmp(node.domain, "ai.onnx") == 0)
            node.domain = "";
        node.n_outputs = (int32_t)np->n_output;
        for (size_t k = 0; k < np->n_output; k++) {
            const char *out_name = str_or_empty(np->output[k]);
            if (!out_name[0]) {
                outs[k] = -1; /* an optional output nobody reads */
                continue;
            }
            snprintf(what, sizeof(what), "output %zu of node '%s' (%s)", k, node.name, op);
            st = define_value(l, out_name, what, &outs[k]);
            if (st != INFD_STATUS_OK)
                return st;
        }
        node.outputs = outs;
        node.inputs = ins;
        node.n_inputs = (int32_t)np->n_input;
        node.attrs = attrs;
        node.n_attrs = (int32_t)np->n_attribute;
        for (size_t k = 0; k < np->n_attribute; k++) {
            st = load_attr(l, np, node.name, np->attribute[k], &attrs[k]);
            if (st != INFD_STATUS_OK)
                return st;
            for (size_t j = 0; j < k; j++) {
                if (strcmp(attrs[j].name, attrs[k].name) == 0)
                    return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                                          "%s: node '%s' (%s) has attribute '%s' twice", l->source,
                                          node.name, op, attrs[k].name);
            }
        }
        if (infd_ir_graph_add_node(g, &node) < 0)
            return oom(l);
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        infd_ir_node *node = &g->nodes[i];
        int32_t *ins = (int32_t *)node->inputs;
        for (size_t k = 0; k < np->n_input; k++) {
            const char *in_name = str_or_empty(np->input[k]);
            if (!in_name[0]) {
                ins[k] = -1;
                continue;
            }
            ins[k] = lookup(l, in_name);
            if (ins[k] < 0)
                return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: node '%s' (%s): input %zu '%s' is not a graph input, "
                                      "initializer or node output",
                                      l->source, node->name, node->op_type, k, in_name);
        }
        for (int32_t k = 0; k < node->n_outputs; k++) {
            if (node->outputs[k] >= 0)
                g->values[node->outputs[k]].producer = i;
        }
    }

    /* Graph outputs. */
    if (gp->n_output == 0)
        return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT, "%s: the graph has no outputs",
                              l->source);
    g->outputs = infd_malloc(gp->n_output * sizeof(*g->outputs));
    if (!g->outputs)
        return oom(l);
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = str_or_empty(gp->output[i]->name);
        int32_t v = lookup(l, name);
        if (v < 0)
            return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: graph output '%s' is not produced by any node, input or "
                                  "initializer",
                                  l->source, name);
        if (g->values[v].flags & INFD_IR_VALUE_OUTPUT)
            return infd_error_set(l->err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: graph output '%s' is listed twice", l->source, name);
        if (g->values[v].producer >= 0) {
            st = load_value_info(l, gp->output[i], v, "graph output", 0);
            if (st != INFD_STATUS_OK)
                return st;
        }
        g->values[v].flags |= INFD_IR_VALUE_OUTPUT;
        g->outputs[g->n_outputs++] = v;
    }
    return infd_ir_graph_toposort(g, l->err);
}

/* The loader proper. `release` (nullable) is called with `data` once the
 * wire bytes are no longer needed (after unpacking; not at all when it
 * fails before), so a mapped file can be dropped before the weights are
 * copied: peak memory is then two copies of the weights, not three. */
static infd_status load(const void *data, size_t n, const char *source, const char *base_dir,
                        void (*release)(void *arg), void *release_arg, infd_ir_graph **out,
                        infd_error *err)
{
    infd_status st;
    Onnx__ModelProto *mp = NULL;
    loader l = { .source = source ? source : "<memory>", .base_dir = base_dir, .err = err };
    *out = NULL;

    if (n > INFD_ONNX_MAX_FILE_BYTES)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %zu bytes is larger than protobuf's 2 GiB limit", l.source, n);
    if (n == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: the file is empty", l.source);
    scan s = { .base = data, .source = l.source, .err = err };
    st = scan_message(&s, &onnx__model_proto__descriptor, data, (const uint8_t *)data + n, 0);
    if (st != INFD_STATUS_OK)
        return st;

    /* protobuf-c's structures take a bounded multiple of the wire size (an
     * empty sub-message is 2 bytes on the wire and about 100 in memory). */
    budget b = { .left = n * 64 + ((size_t)16 << 20) };
    ProtobufCAllocator alloc = { budget_alloc, budget_free, &b };
    mp = onnx__model_proto__unpack(&alloc, n, data);
    if (release)
        release(release_arg);
    if (!mp) {
        if (b.exceeded)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: the model needs more memory to parse than its size allows "
                                  "(hostile or corrupt file?)",
                                  l.source);
        if (b.oom)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory parsing it",
                                  l.source);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: not a valid ONNX model (protobuf parse failed)", l.source);
    }

    l.g = infd_ir_graph_create(l.source);
    if (!l.g) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", l.source);
        goto out;
    }
    st = build(&l, mp);
    if (st == INFD_STATUS_OK) {
        *out = l.g;
        l.g = NULL;
    }
out:
    infd_free(l.table);
    infd_ir_graph_destroy(l.g);
    onnx__model_proto__free_unpacked(mp, &alloc);
    return st;
}

infd_status infd_onnx_load_buffer(const void *data, size_t n, const char *source,
                                  const char *base_dir, infd_ir_graph **out, infd_error *err)
{
    return load(data, n, source, base_dir, NULL, NULL, out, err);
}

typedef struct mapping {
    void *addr; /* MAP_FAILED when not mapped or already unmapped */
    size_t n;
} mapping;

static void unmap(void *arg)
{
    mapping *m = arg;
    if (m->addr != MAP_FAILED)
        munmap(m->addr, m->n);
    m->addr = MAP_FAILED;
}

infd_status infd_onnx_load_file(const char *path, infd_ir_graph **out, infd_error *err)
{
    infd_status st;
    mapping map = { .addr = MAP_FAILED };
    struct stat sb;
    char dir[PATH_MAX];
    *out = NULL;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return infd_error_set(err, errno == ENOENT ? INFD_STATUS_NOT_FOUND : INFD_STATUS_IO,
                              "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = infd_error_set(err, INFD_STATUS_IO, "%s: not a regular file", path);
        goto out;
    }
    if ((uint64_t)sb.st_size > INFD_ONNX_MAX_FILE_BYTES) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: %lld bytes is larger than protobuf's 2 GiB limit", path,
                            (long long)sb.st_size);
        goto out;
    }
    if (sb.st_size == 0) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: the file is empty", path);
        goto out;
    }
    map.n = (size_t)sb.st_size;
    map.addr = mmap(NULL, map.n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map.addr == MAP_FAILED) {
        st = infd_error_set(err, INFD_STATUS_IO, "%s: cannot map: %s", path, strerror(errno));
        goto out;
    }
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    st = load(map.addr, map.n, path, dir, unmap, &map, out, err);
out:
    unmap(&map); /* when load() did not already */
    close(fd);
    return st;
}
