/*
 * pbjson.c - protobuf-c message to JSON through yajl's generator (see
 * pbjson.h for the mapping).
 *
 * yajl writes through a print callback into our own buffer rather than its
 * internal one: yajl's buffer code does not check its allocations, ours
 * does, so running out of memory is an error here and not a crash. The
 * generator object itself comes from yajl's default allocator for the same
 * reason: yajl_gen_alloc() allocates its internal buffer unchecked right
 * after the object, so a failure injected there would crash rather than
 * fail; our allocations (the output) still go through core/alloc.
 */
#include "runtime/pbjson.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <yajl_gen.h>

#include "core/alloc.h"
#include "core/common.h"
#include "core/strbuf.h"
#include "runtime/pbtxt.h"

typedef struct json_out {
    infd_strbuf text;
    unsigned flags; /* infd_pbjson_flags */
    /* Where generation failed, for the message. */
    const ProtobufCMessageDescriptor *bad_desc;
    const ProtobufCFieldDescriptor *bad_field;
} json_out;

static void print_cb(void *ctx, const char *s, size_t n)
{
    json_out *o = ctx;
    infd_strbuf_put(&o->text, s, n);
}

static yajl_gen_status gen_cstr(yajl_gen g, const char *s)
{
    return yajl_gen_string(g, (const unsigned char *)s, strlen(s));
}

static yajl_gen_status gen_base64(yajl_gen g, const ProtobufCBinaryData *bd, json_out *o)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = (bd->len + 2) / 3 * 4;
    char *s = infd_malloc(n + 1);
    if (!s) {
        o->text.oom = true;
        return yajl_gen_in_error_state;
    }
    size_t k = 0;
    for (size_t i = 0; i < bd->len; i += 3) {
        uint32_t v = (uint32_t)bd->data[i] << 16;
        if (i + 1 < bd->len)
            v |= (uint32_t)bd->data[i + 1] << 8;
        if (i + 2 < bd->len)
            v |= bd->data[i + 2];
        s[k++] = tab[(v >> 18) & 63];
        s[k++] = tab[(v >> 12) & 63];
        s[k++] = i + 1 < bd->len ? tab[(v >> 6) & 63] : '=';
        s[k++] = i + 2 < bd->len ? tab[v & 63] : '=';
    }
    yajl_gen_status gs = yajl_gen_string(g, (const unsigned char *)s, k);
    infd_free(s);
    return gs;
}

static yajl_gen_status gen_real(yajl_gen g, double v, int is_float)
{
    char buf[32];
    int n = infd_pbtxt_format_real(v, is_float, buf);
    if (strcmp(buf, "nan") == 0)
        return gen_cstr(g, "NaN");
    if (strcmp(buf, "inf") == 0)
        return gen_cstr(g, "Infinity");
    if (strcmp(buf, "-inf") == 0)
        return gen_cstr(g, "-Infinity");
    return yajl_gen_number(g, buf, (size_t)n);
}

static yajl_gen_status gen_message(yajl_gen g, const ProtobufCMessage *m, json_out *o);

/* One value of field `fd` stored at `p`. `as_key`: write it as an object
 * key, which JSON requires to be a string. */
static yajl_gen_status gen_value(yajl_gen g, const ProtobufCFieldDescriptor *fd, const void *p,
                                 int as_key, json_out *o)
{
    char num[32];
    const char *name;
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        if (!as_key)
            return yajl_gen_integer(g, *(const int32_t *)p);
        snprintf(num, sizeof(num), "%" PRId32, *(const int32_t *)p);
        return gen_cstr(g, num);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        if (!as_key)
            return yajl_gen_integer(g, *(const uint32_t *)p);
        snprintf(num, sizeof(num), "%" PRIu32, *(const uint32_t *)p);
        return gen_cstr(g, num);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        /* 64-bit integers are strings in protobuf's JSON (a double holds
         * only 53 bits); Triton turns them back into numbers. */
        snprintf(num, sizeof(num), "%" PRId64, *(const int64_t *)p);
        if (!as_key && (o->flags & INFD_PBJSON_INT64_AS_NUMBER))
            return yajl_gen_number(g, num, strlen(num));
        return gen_cstr(g, num);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        snprintf(num, sizeof(num), "%" PRIu64, *(const uint64_t *)p);
        if (!as_key && (o->flags & INFD_PBJSON_INT64_AS_NUMBER))
            return yajl_gen_number(g, num, strlen(num));
        return gen_cstr(g, num);
    case PROTOBUF_C_TYPE_FLOAT:
        return gen_real(g, *(const float *)p, 1);
    case PROTOBUF_C_TYPE_DOUBLE:
        return gen_real(g, *(const double *)p, 0);
    case PROTOBUF_C_TYPE_BOOL:
        if (as_key)
            return gen_cstr(g, *(const protobuf_c_boolean *)p ? "true" : "false");
        return yajl_gen_bool(g, *(const protobuf_c_boolean *)p != 0);
    case PROTOBUF_C_TYPE_ENUM:
        name = infd_pbtxt_enum_name(fd->descriptor, *(const int32_t *)p);
        if (name)
            return gen_cstr(g, name);
        return yajl_gen_integer(g, *(const int32_t *)p);
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return gen_cstr(g, s ? s : "");
    }
    case PROTOBUF_C_TYPE_BYTES:
        return gen_base64(g, p, o);
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)p;
        if (sub)
            return gen_message(g, sub, o);
        /* A map entry without its value: the value's default, {}. */
        yajl_gen_status gs = yajl_gen_map_open(g);
        return gs != yajl_gen_status_ok ? gs : yajl_gen_map_close(g);
    }
    }
    return yajl_gen_in_error_state;
}

static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    default:
        return 4; /* 32-bit integers, float, enum (protoc-c makes enums int-sized)
                   */
    }
}

/* A repeated field: an array, or an object for a map field. */
static yajl_gen_status gen_repeated(yajl_gen g, const ProtobufCMessage *m,
                                    const ProtobufCFieldDescriptor *fd, json_out *o)
{
    size_t count = *(const size_t *)((const char *)m + fd->quantifier_offset);
    const char *arr = *(const char *const *)((const char *)m + fd->offset);
    int is_map = fd->type == PROTOBUF_C_TYPE_MESSAGE && infd_pbtxt_is_map_entry(fd->descriptor);
    yajl_gen_status gs = is_map ? yajl_gen_map_open(g) : yajl_gen_array_open(g);
    size_t size = elem_size(fd->type);
    for (size_t i = 0; i < count && gs == yajl_gen_status_ok; i++) {
        const void *elem = arr + i * size;
        if (is_map) {
            const ProtobufCMessage *e = *(const ProtobufCMessage *const *)elem;
            const ProtobufCMessageDescriptor *ed = fd->descriptor;
            const ProtobufCFieldDescriptor *kf = &ed->fields[0], *vf = &ed->fields[1];
            o->bad_desc = ed;
            o->bad_field = kf;
            gs = gen_value(g, kf, (const char *)e + kf->offset, 1, o);
            if (gs == yajl_gen_status_ok) {
                o->bad_field = vf;
                gs = gen_value(g, vf, (const char *)e + vf->offset, 0, o);
            }
        } else {
            o->bad_desc = m->descriptor;
            o->bad_field = fd;
            gs = gen_value(g, fd, elem, 0, o);
        }
    }
    if (gs != yajl_gen_status_ok)
        return gs;
    return is_map ? yajl_gen_map_close(g) : yajl_gen_array_close(g);
}

/* True when a singular field is left out: a NULL submessage, an unset
 * oneof member or proto2 optional. proto3 scalars are always written. */
static int is_absent(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd)
{
    const char *base = (const char *)m;
    if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
        if (*(const uint32_t *)(base + fd->quantifier_offset) != fd->id)
            return 1;
    } else if (fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->type != PROTOBUF_C_TYPE_MESSAGE &&
               fd->type != PROTOBUF_C_TYPE_STRING) {
        if (!*(const protobuf_c_boolean *)(base + fd->quantifier_offset))
            return 1;
    }
    if (fd->type == PROTOBUF_C_TYPE_MESSAGE)
        return *(void *const *)(base + fd->offset) == NULL;
    if (fd->type == PROTOBUF_C_TYPE_STRING && fd->label == PROTOBUF_C_LABEL_OPTIONAL)
        return *(void *const *)(base + fd->offset) == NULL;
    return 0;
}

static yajl_gen_status gen_message(yajl_gen g, const ProtobufCMessage *m, json_out *o)
{
    const ProtobufCMessageDescriptor *desc = m->descriptor;
    yajl_gen_status gs = yajl_gen_map_open(g);
    for (unsigned i = 0; i < desc->n_fields && gs == yajl_gen_status_ok; i++) {
        const ProtobufCFieldDescriptor *fd = &desc->fields[i];
        if (fd->label != PROTOBUF_C_LABEL_REPEATED && is_absent(m, fd))
            continue;
        o->bad_desc = desc;
        o->bad_field = fd;
        gs = gen_cstr(g, fd->name);
        if (gs != yajl_gen_status_ok)
            break;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED)
            gs = gen_repeated(g, m, fd, o);
        else
            gs = gen_value(g, fd, (const char *)m + fd->offset, 0, o);
    }
    if (gs != yajl_gen_status_ok)
        return gs;
    return yajl_gen_map_close(g);
}

infd_status infd_pbjson_write(const ProtobufCMessage *msg, char **out, size_t *n, infd_error *err)
{
    return infd_pbjson_write_flags(msg, INFD_PBJSON_DEFAULT, out, n, err);
}

infd_status infd_pbjson_write_flags(const ProtobufCMessage *msg, unsigned flags, char **out,
                                    size_t *n, infd_error *err)
{
    json_out o;
    yajl_gen g = NULL;
    infd_status st = INFD_STATUS_OK;
    memset(&o, 0, sizeof(o));
    o.flags = flags;
    if (out)
        *out = NULL;
    if (!msg || !out)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "infd_pbjson_write: NULL argument");

    g = yajl_gen_alloc(NULL);
    if (!g) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "infd_pbjson_write: out of memory");
        goto out;
    }
    yajl_gen_config(g, yajl_gen_print_callback, print_cb, &o);
    yajl_gen_config(g, yajl_gen_validate_utf8, 1);
    infd_strbuf_reserve(&o.text, 0); /* the buffer exists even if nothing is printed */
    yajl_gen_status gs = gen_message(g, msg, &o);
    if (o.text.oom) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                            "infd_pbjson_write: out of memory writing %s", msg->descriptor->name);
    } else if (gs != yajl_gen_status_ok) {
        const char *why = gs == yajl_gen_invalid_string   ? "string is not valid UTF-8"
                          : gs == yajl_max_depth_exceeded ? "messages nested too deeply for JSON"
                                                          : "JSON generation failed";
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "infd_pbjson_write: %s.%s: %s",
                            o.bad_desc ? o.bad_desc->name : "?",
                            o.bad_field ? o.bad_field->name : "?", why);
    }
    if (st != INFD_STATUS_OK)
        goto out;
    *out = infd_strbuf_take(&o.text, n);
out:
    if (g)
        yajl_gen_free(g);
    infd_strbuf_fini(&o.text);
    return st;
}
