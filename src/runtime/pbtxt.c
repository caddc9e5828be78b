/*
 * pbtxt.c - protobuf text format parser and printer over protobuf-c
 * descriptors (see pbtxt.h for the grammar and the error format).
 *
 * Shape: a lexer with one token of lookahead and a recursive-descent parser,
 * one C frame per message level (bounded by INFD_PBTXT_MAX_DEPTH). Values
 * are stored through the field descriptors' offsets exactly as
 * protobuf_c_message_unpack() stores them.
 *
 * The invariant that makes error paths simple: the message tree is valid for
 * protobuf_c_message_free_unpacked() after every single step. A submessage
 * is linked into its parent (and a repeated count bumped) before its body is
 * parsed, a string is stored only once it is complete, an array grows before
 * its count does. So any failure just frees the root; nothing is tracked on
 * the side. Repeated arrays grow to the next power of two, so their capacity
 * need not be stored: it is implied by the count.
 */
#include "runtime/pbtxt.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/common.h"
#include "core/strbuf.h"

/* ------------------------------------------------------------------------- */
/* Allocator                                                                 */
/* ------------------------------------------------------------------------- */

static void *pb_alloc(void *data, size_t size)
{
    INFD_UNUSED(data);
    return infd_malloc(size ? size : 1);
}

static void pb_free(void *data, void *p)
{
    INFD_UNUSED(data);
    infd_free(p);
}

static ProtobufCAllocator pb_allocator = { .alloc = pb_alloc,
                                           .free = pb_free,
                                           .allocator_data = NULL };

ProtobufCAllocator *infd_pbtxt_allocator(void)
{
    return &pb_allocator;
}

void infd_pbtxt_free(ProtobufCMessage *msg)
{
    if (msg)
        protobuf_c_message_free_unpacked(msg, &pb_allocator);
}

/* ------------------------------------------------------------------------- */
/* Descriptor helpers                                                        */
/* ------------------------------------------------------------------------- */

const char *infd_pbtxt_enum_name(const ProtobufCEnumDescriptor *desc, int value)
{
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(desc, value);
    return v ? v->name : NULL;
}

int infd_pbtxt_is_map_entry(const ProtobufCMessageDescriptor *desc)
{
    size_t len = strlen(desc->short_name);
    if (desc->n_fields != 2 || len < 5 || strcmp(desc->short_name + len - 5, "Entry") != 0)
        return 0;
    const ProtobufCFieldDescriptor *k = &desc->fields[0], *v = &desc->fields[1];
    return k->id == 1 && v->id == 2 && strcmp(k->name, "key") == 0 &&
           strcmp(v->name, "value") == 0 && k->label != PROTOBUF_C_LABEL_REPEATED &&
           v->label != PROTOBUF_C_LABEL_REPEATED;
}

/* "ModelInput" for "inference.ModelInput", "ModelVersionPolicy.Latest" for a
 * nested type: the full name less the package, which reads better in errors
 * than short_name ("Latest"). */
static const char *type_name(const ProtobufCMessageDescriptor *desc)
{
    size_t n = desc->package_name ? strlen(desc->package_name) : 0;
    if (n && strncmp(desc->name, desc->package_name, n) == 0 && desc->name[n] == '.')
        return desc->name + n + 1;
    return desc->name;
}

static void *field_ptr(const ProtobufCMessage *msg, const ProtobufCFieldDescriptor *fd)
{
    return (char *)msg + fd->offset;
}

static void *quantifier_ptr(const ProtobufCMessage *msg, const ProtobufCFieldDescriptor *fd)
{
    return (char *)msg + fd->quantifier_offset;
}

/* Bytes one value of type `t` takes in a message or a repeated array. */
static size_t value_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_ENUM: /* protoc-c forces enums to int size */
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_FLOAT:
        return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

/* "an int32", "a DataType value": what a value of the field must be, for
 * "expected X, found Y" messages. */
static const char *expected_what(const ProtobufCFieldDescriptor *fd, char *buf, size_t size)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
        return "an int32";
    case PROTOBUF_C_TYPE_SINT32:
        return "a sint32";
    case PROTOBUF_C_TYPE_SFIXED32:
        return "a sfixed32";
    case PROTOBUF_C_TYPE_INT64:
        return "an int64";
    case PROTOBUF_C_TYPE_SINT64:
        return "a sint64";
    case PROTOBUF_C_TYPE_SFIXED64:
        return "a sfixed64";
    case PROTOBUF_C_TYPE_UINT32:
        return "a uint32";
    case PROTOBUF_C_TYPE_FIXED32:
        return "a fixed32";
    case PROTOBUF_C_TYPE_UINT64:
        return "a uint64";
    case PROTOBUF_C_TYPE_FIXED64:
        return "a fixed64";
    case PROTOBUF_C_TYPE_FLOAT:
        return "a float";
    case PROTOBUF_C_TYPE_DOUBLE:
        return "a double";
    case PROTOBUF_C_TYPE_BOOL:
        return "a bool (true or false)";
    case PROTOBUF_C_TYPE_STRING:
        return "a quoted string";
    case PROTOBUF_C_TYPE_BYTES:
        return "a quoted bytes string";
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumDescriptor *ed = fd->descriptor;
        snprintf(buf, size, "a %s value", ed->short_name);
        return buf;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        snprintf(buf, size, "'{' to open a %s", type_name(fd->descriptor));
        return buf;
    }
    return "a value";
}

/* ------------------------------------------------------------------------- */
/* Lexer                                                                     */
/* ------------------------------------------------------------------------- */

typedef enum tok_kind {
    TOK_EOF,
    TOK_IDENT,  /* [A-Za-z_][A-Za-z0-9_]* */
    TOK_INT,    /* decimal, 0x hex or 0 octal, no sign */
    TOK_FLOAT,  /* has '.', an exponent or an f suffix, no sign */
    TOK_STRING, /* one quoted string, quotes included */
    TOK_PUNCT,  /* one of { } < > [ ] : , ; - */
} tok_kind;

typedef struct token {
    tok_kind kind;
    const char *p; /* first byte in the text; len bytes, never a newline */
    size_t len;
    uint32_t line, col; /* 1-based; col counts bytes */
} token;

typedef struct parser {
    const char *p, *end; /* the unread text */
    uint32_t line, col;  /* position of p */
    token tok;           /* the current (lookahead) token */
    const char *file;
    infd_error *err;
    int depth; /* message nesting of the frame being parsed */
    size_t path_len;
    char path[256]; /* "input[1].dims": the field being parsed */
} parser;

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static int is_hex(int c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int hex_val(int c)
{
    return is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
}

static int is_ident_start(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_ident_char(int c)
{
    return is_ident_start(c) || is_digit(c);
}

static infd_status fail_at(parser *ps, uint32_t line, uint32_t col, const char *fmt, ...)
    INFD_PRINTF(4, 5);

/* Sets the error "file:line:col: path: message" and returns its code. */
static infd_status fail_at(parser *ps, uint32_t line, uint32_t col, const char *fmt, ...)
{
    char msg[INFD_ERROR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (ps->path_len)
        return infd_error_set(ps->err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s:%" PRIu32 ":%" PRIu32 ": %s: %s", ps->file, line, col, ps->path,
                              msg);
    return infd_error_set(ps->err, INFD_STATUS_INVALID_ARGUMENT, "%s:%" PRIu32 ":%" PRIu32 ": %s",
                          ps->file, line, col, msg);
}

static infd_status fail_oom(parser *ps)
{
    if (ps->path_len)
        return infd_error_set(ps->err, INFD_STATUS_OUT_OF_MEMORY,
                              "%s:%" PRIu32 ":%" PRIu32 ": %s: out of memory", ps->file,
                              ps->tok.line, ps->tok.col, ps->path);
    return infd_error_set(ps->err, INFD_STATUS_OUT_OF_MEMORY,
                          "%s:%" PRIu32 ":%" PRIu32 ": out of memory", ps->file, ps->tok.line,
                          ps->tok.col);
}

static infd_status fail_lex(parser *ps, uint32_t line, uint32_t col, const char *fmt, ...)
    INFD_PRINTF(4, 5);

/* A lexical error: "file:line:col: message" without a field path, since the
 * token may already belong to the next field. */
static infd_status fail_lex(parser *ps, uint32_t line, uint32_t col, const char *fmt, ...)
{
    char msg[INFD_ERROR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return infd_error_set(ps->err, INFD_STATUS_INVALID_ARGUMENT, "%s:%" PRIu32 ":%" PRIu32 ": %s",
                          ps->file, line, col, msg);
}

/* Copies at most `max` bytes of [p, p+n) into buf, replacing bytes that
 * would garble a log line, and marks a cut with "...". */
static void render_bytes(const char *p, size_t n, char *buf, size_t size, size_t max)
{
    size_t o = 0;
    for (size_t i = 0; i < n && i < max && o + 5 < size; i++) {
        unsigned char c = (unsigned char)p[i];
        buf[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (n > max && o + 4 < size) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
}

/* The token as an error message shows it: end of file, '{', 1.5, name,
 * "a string". */
static const char *describe(const token *t, char *buf, size_t size)
{
    switch (t->kind) {
    case TOK_EOF:
        return "end of file";
    case TOK_PUNCT:
        snprintf(buf, size, "'%c'", t->p[0]);
        return buf;
    default:
        render_bytes(t->p, t->len, buf, size, 40);
        return buf;
    }
}

/* Skips whitespace and # comments. */
static void skip_space(parser *ps)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '\n') {
            ps->line++;
            ps->col = 1;
            ps->p++;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            ps->col++;
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n') {
                ps->p++;
                ps->col++;
            }
        } else {
            break;
        }
    }
}

/* Length of the number at p (which starts with a digit or ".digit"); sets
 * *is_float. 0 when the number is malformed (1e, 0x, 1.2.3, 12abc). */
static size_t scan_number(const char *p, const char *end, int *is_float)
{
    const char *s = p;
    *is_float = 0;
    if (end - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        s += 2;
        const char *digits = s;
        while (s < end && is_hex(*s))
            s++;
        if (s == digits)
            return 0;
    } else {
        while (s < end && is_digit(*s))
            s++;
        if (s < end && *s == '.') {
            *is_float = 1;
            s++;
            while (s < end && is_digit(*s))
                s++;
        }
        if (s < end && (*s == 'e' || *s == 'E')) {
            *is_float = 1;
            s++;
            if (s < end && (*s == '+' || *s == '-'))
                s++;
            const char *digits = s;
            while (s < end && is_digit(*s))
                s++;
            if (s == digits)
                return 0;
        }
        if (s < end && (*s == 'f' || *s == 'F')) {
            *is_float = 1;
            s++;
        }
    }
    if (s < end && (is_ident_char(*s) || *s == '.'))
        return 0;
    return (size_t)(s - p);
}

/* Reads the next token into ps->tok. */
static infd_status lex_next(parser *ps)
{
    skip_space(ps);
    token *t = &ps->tok;
    t->p = ps->p;
    t->line = ps->line;
    t->col = ps->col;
    t->len = 0;
    if (ps->p == ps->end) {
        t->kind = TOK_EOF;
        return INFD_STATUS_OK;
    }
    const char *p = ps->p, *end = ps->end;
    unsigned char c = (unsigned char)*p;
    if (is_ident_start(c)) {
        const char *s = p + 1;
        while (s < end && is_ident_char(*s))
            s++;
        t->kind = TOK_IDENT;
        t->len = (size_t)(s - p);
    } else if (is_digit(c) || (c == '.' && end - p > 1 && is_digit(p[1]))) {
        int is_float;
        t->len = scan_number(p, end, &is_float);
        if (t->len == 0) {
            char buf[64];
            const char *s = p;
            while (s < end && (is_ident_char(*s) || *s == '.' || *s == '+' || *s == '-'))
                s++;
            render_bytes(p, (size_t)(s - p), buf, sizeof(buf), 40);
            return fail_lex(ps, t->line, t->col, "malformed number %s", buf);
        }
        t->kind = is_float ? TOK_FLOAT : TOK_INT;
    } else if (c == '"' || c == '\'') {
        const char *s = p + 1;
        while (s < end && *s != (char)c && *s != '\n') {
            if (*s == '\\' && s + 1 < end && s[1] != '\n')
                s++;
            s++;
        }
        if (s == end || *s != (char)c)
            return fail_lex(ps, t->line, t->col, "string not closed before the end of the %s",
                            s == end ? "file" : "line");
        t->kind = TOK_STRING;
        t->len = (size_t)(s + 1 - p);
    } else if (c != '\0' && strchr("{}<>[]:,;-", c)) {
        t->kind = TOK_PUNCT;
        t->len = 1;
    } else if (c >= 0x20 && c < 0x7f) {
        return fail_lex(ps, t->line, t->col, "unexpected character '%c'", c);
    } else {
        return fail_lex(ps, t->line, t->col, "unexpected byte 0x%02x", c);
    }
    ps->p += t->len;
    ps->col += (uint32_t)t->len;
    return INFD_STATUS_OK;
}

static int is_punct(const token *t, char c)
{
    return t->kind == TOK_PUNCT && t->p[0] == c;
}

static int ident_is(const token *t, const char *s)
{
    return t->kind == TOK_IDENT && t->len == strlen(s) && memcmp(t->p, s, t->len) == 0;
}

static int ident_is_nocase(const token *t, const char *s)
{
    if (t->kind != TOK_IDENT || t->len != strlen(s))
        return 0;
    for (size_t i = 0; i < t->len; i++)
        if ((t->p[i] | 0x20) != s[i])
            return 0;
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Field paths                                                               */
/* ------------------------------------------------------------------------- */

static size_t path_push(parser *ps, const char *fmt, ...) INFD_PRINTF(2, 3);

/* Appends to the path (truncating, never overflowing); returns the length
 * to hand back to path_pop. */
static size_t path_push(parser *ps, const char *fmt, ...)
{
    size_t old = ps->path_len;
    if (old + 1 < sizeof(ps->path)) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(ps->path + old, sizeof(ps->path) - old, fmt, ap);
        va_end(ap);
        if (n > 0)
            ps->path_len = INFD_MIN(old + (size_t)n, sizeof(ps->path) - 1);
    }
    return old;
}

static void path_pop(parser *ps, size_t len)
{
    ps->path_len = len;
    ps->path[len] = '\0';
}

/* ------------------------------------------------------------------------- */
/* Scalars                                                                   */
/* ------------------------------------------------------------------------- */

typedef union scalar {
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f;
    double d;
    protobuf_c_boolean b;
    char *s;
    ProtobufCBinaryData bytes;
} scalar;

/* The magnitude of an integer token: decimal, 0x hex or 0 octal. Returns 0
 * on overflow of 64 bits or a bad octal digit. */
static int int_token_value(const token *t, uint64_t *out)
{
    const char *p = t->p, *end = t->p + t->len;
    unsigned base = 10;
    if (t->len > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    } else if (t->len > 1 && p[0] == '0') {
        base = 8;
        p++;
    }
    uint64_t v = 0;
    for (; p < end; p++) {
        unsigned d = (unsigned)hex_val((unsigned char)*p);
        if (d >= base || v > (UINT64_MAX - d) / base)
            return 0;
        v = v * base + d;
    }
    *out = v;
    return 1;
}

/* Consumes an optional '-' before a number ('-' is a token of its own, as in
 * protobuf's tokenizer); *neg says whether there was one. */
static infd_status take_sign(parser *ps, int *neg)
{
    *neg = 0;
    if (is_punct(&ps->tok, '-')) {
        *neg = 1;
        return lex_next(ps);
    }
    return INFD_STATUS_OK;
}

static infd_status fail_expected(parser *ps, const ProtobufCFieldDescriptor *fd, const token *t,
                                 int neg)
{
    char what[96], found[64];
    return fail_at(ps, t->line, t->col, "expected %s, found %s%s",
                   expected_what(fd, what, sizeof(what)), neg ? "-" : "",
                   describe(t, found, sizeof(found)));
}

static infd_status parse_integer(parser *ps, const ProtobufCFieldDescriptor *fd, scalar *v)
{
    uint32_t line = ps->tok.line, col = ps->tok.col;
    int neg;
    infd_status st = take_sign(ps, &neg);
    if (st != INFD_STATUS_OK)
        return st;
    token t = ps->tok;
    uint64_t mag;
    if (t.kind != TOK_INT)
        return fail_expected(ps, fd, &t, neg);
    char what_buf[96], found[64];
    describe(&t, found, sizeof(found));
    const char *what = expected_what(fd, what_buf, sizeof(what_buf));
    if (!int_token_value(&t, &mag))
        return fail_at(ps, line, col,
                       "expected %s, found %s%s (not a valid integer or out of range)", what,
                       neg ? "-" : "", found);
    int is_signed = 1;
    uint64_t max;
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        max = INT32_MAX;
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        max = INT64_MAX;
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        max = UINT32_MAX;
        is_signed = 0;
        break;
    default:
        max = UINT64_MAX;
        is_signed = 0;
        break;
    }
    if (neg && !is_signed && mag != 0)
        return fail_at(ps, line, col, "expected %s, found -%s (negative)", what, found);
    /* A signed type reaches one further below zero than above it. */
    if (mag > max + (uint64_t)(neg && is_signed))
        return fail_at(ps, line, col, "expected %s, found %s%s (out of range)", what,
                       neg ? "-" : "", found);
    switch (value_size(fd->type)) {
    case 4:
        if (is_signed)
            v->i32 = neg ? (int32_t)(0 - (int64_t)mag) : (int32_t)mag;
        else
            v->u32 = (uint32_t)mag;
        break;
    default:
        if (is_signed)
            v->i64 = neg ? (int64_t)(0 - mag) : (int64_t)mag;
        else
            v->u64 = mag;
        break;
    }
    return lex_next(ps);
}

static infd_status parse_real(parser *ps, const ProtobufCFieldDescriptor *fd, scalar *v)
{
    int neg;
    infd_status st = take_sign(ps, &neg);
    if (st != INFD_STATUS_OK)
        return st;
    token t = ps->tok;
    double d;
    if (t.kind == TOK_INT) {
        uint64_t mag;
        if (!int_token_value(&t, &mag))
            return fail_expected(ps, fd, &t, neg);
        d = (double)mag;
    } else if (t.kind == TOK_FLOAT) {
        /* strtod needs a NUL; a longer literal carries no more precision. */
        char buf[128];
        size_t n = t.len;
        if (t.p[n - 1] == 'f' || t.p[n - 1] == 'F')
            n--;
        if (n >= sizeof(buf))
            return fail_at(ps, t.line, t.col, "number longer than %zu characters", sizeof(buf) - 1);
        memcpy(buf, t.p, n);
        buf[n] = '\0';
        d = strtod(buf, NULL);
    } else if (ident_is_nocase(&t, "inf") || ident_is_nocase(&t, "infinity")) {
        d = INFINITY;
    } else if (ident_is_nocase(&t, "nan")) {
        d = NAN;
    } else {
        return fail_expected(ps, fd, &t, neg);
    }
    if (neg)
        d = -d;
    if (fd->type == PROTOBUF_C_TYPE_FLOAT) {
        /* Out-of-range doubles become infinities, as protobuf's
         * SafeDoubleToFloat does; a plain cast would be undefined. */
        if (d > FLT_MAX)
            v->f = INFINITY;
        else if (d < -FLT_MAX)
            v->f = -INFINITY;
        else
            v->f = (float)d;
    } else {
        v->d = d;
    }
    return lex_next(ps);
}

static infd_status parse_bool(parser *ps, const ProtobufCFieldDescriptor *fd, scalar *v)
{
    const token *t = &ps->tok;
    uint64_t mag;
    if (ident_is(t, "true") || ident_is(t, "True") || ident_is(t, "t"))
        v->b = 1;
    else if (ident_is(t, "false") || ident_is(t, "False") || ident_is(t, "f"))
        v->b = 0;
    else if (t->kind == TOK_INT && int_token_value(t, &mag) && mag <= 1)
        v->b = (protobuf_c_boolean)mag;
    else
        return fail_expected(ps, fd, t, 0);
    return lex_next(ps);
}

static infd_status parse_enum(parser *ps, const ProtobufCFieldDescriptor *fd, scalar *v)
{
    const ProtobufCEnumDescriptor *ed = fd->descriptor;
    const ProtobufCEnumValue *ev = NULL;
    uint32_t line = ps->tok.line, col = ps->tok.col;
    int neg = 0;
    if (ps->tok.kind == TOK_IDENT) {
        char name[128];
        if (ps->tok.len < sizeof(name)) {
            memcpy(name, ps->tok.p, ps->tok.len);
            name[ps->tok.len] = '\0';
            ev = protobuf_c_enum_descriptor_get_value_by_name(ed, name);
        }
    } else {
        infd_status st = take_sign(ps, &neg);
        if (st != INFD_STATUS_OK)
            return st;
        uint64_t mag;
        if (ps->tok.kind == TOK_INT && int_token_value(&ps->tok, &mag) &&
            mag <= (uint64_t)INT32_MAX + (uint64_t)neg)
            ev = protobuf_c_enum_descriptor_get_value(ed, neg ? (int)(0 - (int64_t)mag) : (int)mag);
    }
    if (!ev) {
        /* List the names while they fit: the fix is usually one of them. */
        char names[300], found[64];
        size_t o = 0;
        names[0] = '\0';
        for (unsigned i = 0; i < ed->n_values && o < sizeof(names); i++) {
            int n =
                snprintf(names + o, sizeof(names) - o, "%s%s", i ? ", " : "", ed->values[i].name);
            if (n < 0 || (size_t)n >= sizeof(names) - o) {
                snprintf(names + o, sizeof(names) - o, ", ...");
                break;
            }
            o += (size_t)n;
        }
        return fail_at(ps, line, col, "expected a %s value (%s), found %s%s", ed->short_name, names,
                       neg ? "-" : "", describe(&ps->tok, found, sizeof(found)));
    }
    v->i32 = ev->value;
    return lex_next(ps);
}

/* Appends code point `cp` as UTF-8. */
static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Reads exactly `n` hex digits at *p (bounded by end). */
static int take_hex(const char **p, const char *end, int n, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        if (*p >= end || !is_hex(**p))
            return 0;
        v = v * 16 + (uint32_t)hex_val((unsigned char)**p);
        (*p)++;
    }
    *out = v;
    return 1;
}

/* Decodes one string token (quotes included) into o; returns the bytes
 * written, at most the token's length (every escape is shorter than its
 * expansion: \U0001F600 is 10 bytes for 4). */
static infd_status decode_string(parser *ps, const token *t, char *o, size_t *n_out)
{
    const char *p = t->p + 1, *end = t->p + t->len - 1;
    size_t n = 0;
    while (p < end) {
        if (*p != '\\') {
            o[n++] = *p++;
            continue;
        }
        uint32_t col = t->col + (uint32_t)(p - t->p);
        p++; /* the lexer guarantees a character after the backslash */
        char c = *p++;
        uint32_t cp;
        switch (c) {
        case 'a':
            o[n++] = '\a';
            break;
        case 'b':
            o[n++] = '\b';
            break;
        case 'f':
            o[n++] = '\f';
            break;
        case 'n':
            o[n++] = '\n';
            break;
        case 'r':
            o[n++] = '\r';
            break;
        case 't':
            o[n++] = '\t';
            break;
        case 'v':
            o[n++] = '\v';
            break;
        case '\\':
        case '\'':
        case '"':
        case '?':
            o[n++] = c;
            break;
        case 'x':
        case 'X':
            if (p >= end || !is_hex(*p))
                return fail_at(ps, t->line, col, "\\x escape without hex digits");
            cp = (uint32_t)hex_val((unsigned char)*p++);
            if (p < end && is_hex(*p))
                cp = cp * 16 + (uint32_t)hex_val((unsigned char)*p++);
            o[n++] = (char)cp;
            break;
        case 'u':
        case 'U':
            if (!take_hex(&p, end, c == 'u' ? 4 : 8, &cp))
                return fail_at(ps, t->line, col, "\\%c escape needs %d hex digits", c,
                               c == 'u' ? 4 : 8);
            if (cp >= 0xd800 && cp < 0xdc00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                /* A UTF-16 surrogate pair written as two escapes. */
                const char *q = p + 2;
                uint32_t lo;
                if (take_hex(&q, end, 4, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    p = q;
                }
            }
            if ((cp >= 0xd800 && cp < 0xe000) || cp > 0x10ffff)
                return fail_at(ps, t->line, col,
                               "\\%c escape U+%04" PRIX32 " is not a Unicode scalar value", c, cp);
            n += put_utf8(o + n, cp);
            break;
        default:
            if (c >= '0' && c <= '7') {
                cp = (uint32_t)(c - '0');
                for (int i = 0; i < 2 && p < end && *p >= '0' && *p <= '7'; i++)
                    cp = cp * 8 + (uint32_t)(*p++ - '0');
                if (cp > 0xff)
                    return fail_at(ps, t->line, col, "octal escape \\%o is above \\377",
                                   (unsigned)cp);
                o[n++] = (char)cp;
                break;
            }
            if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
                return fail_at(ps, t->line, col, "unknown escape \\%c in string", c);
            return fail_at(ps, t->line, col,
                           "unknown escape in string (backslash before byte 0x%02x)",
                           (unsigned char)c);
        }
    }
    *n_out = n;
    return INFD_STATUS_OK;
}

/* Offset of the first byte that breaks UTF-8 (overlongs, surrogates and
 * code points above U+10FFFF included), or n when all is valid. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (n - i < len)
            return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return i;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
            return i;
        i += len;
    }
    return n;
}

/* A string value: one or more adjacent quoted strings, concatenated. */
static infd_status parse_string(parser *ps, const ProtobufCFieldDescriptor *fd, scalar *v)
{
    if (ps->tok.kind != TOK_STRING)
        return fail_expected(ps, fd, &ps->tok, 0);
    uint32_t line = ps->tok.line, col = ps->tok.col;

    /* Size the buffer by a look-ahead over the adjacent strings: the lexer
     * state is plain data, so saving and restoring it rewinds. */
    const char *save_p = ps->p;
    uint32_t save_line = ps->line, save_col = ps->col;
    token save_tok = ps->tok;
    size_t cap = 0;
    infd_status st = INFD_STATUS_OK;
    while (ps->tok.kind == TOK_STRING) {
        cap += ps->tok.len;
        if ((st = lex_next(ps)) != INFD_STATUS_OK)
            break;
    }
    ps->p = save_p;
    ps->line = save_line;
    ps->col = save_col;
    ps->tok = save_tok;
    /* A lexing error after the strings belongs to the next token: it is
     * reported again when that token is read. */
    infd_error_clear(ps->err);

    char *buf = infd_malloc(cap + 1);
    if (!buf)
        return fail_oom(ps);
    size_t n = 0;
    while (ps->tok.kind == TOK_STRING) {
        size_t k = 0;
        if ((st = decode_string(ps, &ps->tok, buf + n, &k)) != INFD_STATUS_OK)
            goto out;
        n += k;
        if ((st = lex_next(ps)) != INFD_STATUS_OK)
            goto out;
    }
    buf[n] = '\0';
    if (fd->type == PROTOBUF_C_TYPE_STRING) {
        size_t bad = utf8_invalid_at((const unsigned char *)buf, n);
        if (bad < n) {
            st = fail_at(ps, line, col,
                         "string is not valid UTF-8 (byte 0x%02x at offset %zu); use "
                         "a bytes field for binary data",
                         (unsigned char)buf[bad], bad);
            goto out;
        }
        if (memchr(buf, '\0', n)) {
            st = fail_at(ps, line, col, "string contains a NUL byte");
            goto out;
        }
        v->s = buf;
    } else {
        v->bytes.data = (uint8_t *)buf;
        v->bytes.len = n;
    }
    buf = NULL;
out:
    infd_free(buf);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Storing values                                                            */
/* ------------------------------------------------------------------------- */

/* Makes room for one more element of a repeated field and returns its slot;
 * the caller fills it, then increments the count. Arrays grow when the
 * count reaches a power of two, so the capacity is implied by the count. */
static infd_status grow_repeated(parser *ps, ProtobufCMessage *msg,
                                 const ProtobufCFieldDescriptor *fd, void **slot)
{
    size_t count = *(size_t *)quantifier_ptr(msg, fd);
    void **arr = field_ptr(msg, fd);
    size_t size = value_size(fd->type);
    if (count == 0 || (count & (count - 1)) == 0) {
        size_t cap = count ? count * 2 : 1;
        if (cap > SIZE_MAX / size)
            return fail_oom(ps);
        void *p = infd_realloc(*arr, cap * size);
        if (!p)
            return fail_oom(ps);
        *arr = p;
    }
    *slot = (char *)*arr + count * size;
    return INFD_STATUS_OK;
}

/* Marks a singular field present: the oneof case, or the has_ flag of a
 * proto2 optional scalar. */
static void mark_present(ProtobufCMessage *msg, const ProtobufCFieldDescriptor *fd)
{
    if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *(uint32_t *)quantifier_ptr(msg, fd) = fd->id;
    else if (fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->type != PROTOBUF_C_TYPE_STRING &&
             fd->type != PROTOBUF_C_TYPE_MESSAGE)
        *(protobuf_c_boolean *)quantifier_ptr(msg, fd) = 1;
}

/* Stores a parsed scalar; takes the string or bytes buffer in `v` (freed
 * on failure). */
static infd_status store_scalar(parser *ps, ProtobufCMessage *msg,
                                const ProtobufCFieldDescriptor *fd, scalar *v)
{
    size_t size = value_size(fd->type);
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
        void *slot;
        infd_status st = grow_repeated(ps, msg, fd, &slot);
        if (st != INFD_STATUS_OK) {
            if (fd->type == PROTOBUF_C_TYPE_STRING)
                infd_free(v->s);
            else if (fd->type == PROTOBUF_C_TYPE_BYTES)
                infd_free(v->bytes.data);
            return st;
        }
        memcpy(slot, v, size);
        (*(size_t *)quantifier_ptr(msg, fd))++;
        return INFD_STATUS_OK;
    }
    memcpy(field_ptr(msg, fd), v, size);
    mark_present(msg, fd);
    return INFD_STATUS_OK;
}

static infd_status parse_scalar(parser *ps, ProtobufCMessage *msg,
                                const ProtobufCFieldDescriptor *fd)
{
    scalar v;
    infd_status st;
    memset(&v, 0, sizeof(v));
    switch (fd->type) {
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE:
        st = parse_real(ps, fd, &v);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        st = parse_bool(ps, fd, &v);
        break;
    case PROTOBUF_C_TYPE_ENUM:
        st = parse_enum(ps, fd, &v);
        break;
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
        st = parse_string(ps, fd, &v);
        break;
    default:
        st = parse_integer(ps, fd, &v);
        break;
    }
    if (st != INFD_STATUS_OK)
        return st;
    return store_scalar(ps, msg, fd, &v);
}

/* ------------------------------------------------------------------------- */
/* Messages                                                                  */
/* ------------------------------------------------------------------------- */

static ProtobufCMessage *message_new(const ProtobufCMessageDescriptor *desc)
{
    ProtobufCMessage *m = infd_malloc(desc->sizeof_message);
    if (m)
        desc->message_init(m);
    return m;
}

/* Compares the keys of two map entries. */
static int map_keys_equal(const ProtobufCFieldDescriptor *kf, const ProtobufCMessage *a,
                          const ProtobufCMessage *b)
{
    const void *ka = field_ptr(a, kf), *kb = field_ptr(b, kf);
    if (kf->type == PROTOBUF_C_TYPE_STRING)
        return strcmp(*(char *const *)ka, *(char *const *)kb) == 0;
    return memcmp(ka, kb, value_size(kf->type)) == 0;
}

static void render_map_key(const ProtobufCFieldDescriptor *kf, const ProtobufCMessage *e, char *buf,
                           size_t size)
{
    const void *k = field_ptr(e, kf);
    switch (kf->type) {
    case PROTOBUF_C_TYPE_STRING: {
        char tmp[48];
        const char *s = *(char *const *)k;
        render_bytes(s, strlen(s), tmp, sizeof(tmp), 40);
        snprintf(buf, size, "\"%s\"", tmp);
        break;
    }
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        snprintf(buf, size, "%" PRId32, *(const int32_t *)k);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        snprintf(buf, size, "%" PRIu32, *(const uint32_t *)k);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        snprintf(buf, size, "%" PRId64, *(const int64_t *)k);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        snprintf(buf, size, "%s", *(const protobuf_c_boolean *)k ? "true" : "false");
        break;
    default:
        snprintf(buf, size, "%" PRIu64, *(const uint64_t *)k);
        break;
    }
}

static infd_status parse_body(parser *ps, ProtobufCMessage *msg, const token *open);

/* One message value at `{` or `<`: a new submessage linked into `parent`
 * (appended for a repeated field), then its body. */
static infd_status parse_message_value(parser *ps, ProtobufCMessage *parent,
                                       const ProtobufCFieldDescriptor *fd)
{
    const ProtobufCMessageDescriptor *sub_desc = fd->descriptor;
    token open = ps->tok;
    if (!is_punct(&open, '{') && !is_punct(&open, '<'))
        return fail_expected(ps, fd, &open, 0);
    if (ps->depth >= INFD_PBTXT_MAX_DEPTH)
        return fail_at(ps, open.line, open.col, "messages nested deeper than %d levels",
                       INFD_PBTXT_MAX_DEPTH);
    ProtobufCMessage *sub = message_new(sub_desc);
    if (!sub)
        return fail_oom(ps);
    size_t index = 0;
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
        void *slot;
        infd_status st = grow_repeated(ps, parent, fd, &slot);
        if (st != INFD_STATUS_OK) {
            infd_pbtxt_free(sub);
            return st;
        }
        *(ProtobufCMessage **)slot = sub;
        index = (*(size_t *)quantifier_ptr(parent, fd))++;
    } else {
        *(ProtobufCMessage **)field_ptr(parent, fd) = sub;
        mark_present(parent, fd);
    }
    /* From here `sub` belongs to the tree. */
    size_t path =
        fd->label == PROTOBUF_C_LABEL_REPEATED ? path_push(ps, "[%zu]", index) : ps->path_len;
    infd_status st = lex_next(ps);
    if (st == INFD_STATUS_OK) {
        ps->depth++;
        st = parse_body(ps, sub, &open);
        ps->depth--;
    }
    if (st == INFD_STATUS_OK && fd->label == PROTOBUF_C_LABEL_REPEATED &&
        infd_pbtxt_is_map_entry(sub_desc)) {
        /* Quadratic in the entries of one map; maps in configs hold a few. */
        const ProtobufCFieldDescriptor *kf = &sub_desc->fields[0];
        ProtobufCMessage **entries = *(ProtobufCMessage ***)field_ptr(parent, fd);
        for (size_t i = 0; i < index; i++) {
            if (map_keys_equal(kf, entries[i], sub)) {
                char key[64];
                render_map_key(kf, sub, key, sizeof(key));
                st = fail_at(ps, open.line, open.col, "duplicate map key %s (entry %zu has it too)",
                             key, i);
                break;
            }
        }
    }
    path_pop(ps, path);
    return st;
}

/* `[ v, v, ... ]` for a repeated field, the current token being '['. */
static infd_status parse_list(parser *ps, ProtobufCMessage *msg, const ProtobufCFieldDescriptor *fd)
{
    infd_status st = lex_next(ps);
    if (st != INFD_STATUS_OK)
        return st;
    if (is_punct(&ps->tok, ']'))
        return lex_next(ps);
    for (;;) {
        if (fd->type == PROTOBUF_C_TYPE_MESSAGE)
            st = parse_message_value(ps, msg, fd);
        else
            st = parse_scalar(ps, msg, fd);
        if (st != INFD_STATUS_OK)
            return st;
        if (is_punct(&ps->tok, ']'))
            return lex_next(ps);
        if (!is_punct(&ps->tok, ',')) {
            char found[64];
            return fail_at(ps, ps->tok.line, ps->tok.col, "expected ',' or ']' in list, found %s",
                           describe(&ps->tok, found, sizeof(found)));
        }
        if ((st = lex_next(ps)) != INFD_STATUS_OK)
            return st;
    }
}

/* Levenshtein distance of two short names, capped: only used to suggest a
 * field for a misspelt one. */
static size_t edit_distance(const char *a, size_t na, const char *b)
{
    size_t nb = strlen(b);
    size_t row[65];
    if (na > 64 || nb > 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            best = INFD_MIN(best, up + 1);
            best = INFD_MIN(best, row[j - 1] + 1);
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

static infd_status fail_unknown_field(parser *ps, const ProtobufCMessageDescriptor *desc)
{
    const token *t = &ps->tok;
    char name[64];
    const char *best = NULL;
    size_t best_d = 3; /* suggest only close names */
    for (unsigned i = 0; i < desc->n_fields; i++) {
        size_t d = edit_distance(t->p, t->len, desc->fields[i].name);
        if (d < best_d && d < t->len) {
            best_d = d;
            best = desc->fields[i].name;
        }
    }
    render_bytes(t->p, t->len, name, sizeof(name), 48);
    if (best)
        return fail_at(ps, t->line, t->col, "%s has no field \"%s\" (did you mean \"%s\"?)",
                       type_name(desc), name, best);
    return fail_at(ps, t->line, t->col, "%s has no field \"%s\"", type_name(desc), name);
}

/* Where each field of the message being parsed was first given (line 0:
 * not yet), for duplicate and oneof errors. */
typedef struct seen_pos {
    uint32_t line, col;
} seen_pos;

/* One `name: value` / `name { ... }` / `name: [ ... ]` entry, the current
 * token being the name. */
static infd_status parse_field(parser *ps, ProtobufCMessage *msg,
                               const ProtobufCFieldDescriptor *fd, seen_pos *seen)
{
    const ProtobufCMessageDescriptor *desc = msg->descriptor;
    token name = ps->tok;
    size_t idx = (size_t)(fd - desc->fields);
    size_t path = path_push(ps, ps->path_len ? ".%s" : "%s", fd->name);
    infd_status st = INFD_STATUS_OK;
    char found[64];

    if (fd->label != PROTOBUF_C_LABEL_REPEATED) {
        if (seen[idx].line) {
            st = fail_at(ps, name.line, name.col,
                         "field given twice (first at %" PRIu32 ":%" PRIu32 ")", seen[idx].line,
                         seen[idx].col);
            goto out;
        }
        uint32_t set_case =
            (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ? *(uint32_t *)quantifier_ptr(msg, fd) : 0;
        if (set_case && set_case != fd->id) {
            const ProtobufCFieldDescriptor *other =
                protobuf_c_message_descriptor_get_field(desc, set_case);
            const seen_pos *o = other ? &seen[other - desc->fields] : &seen[idx];
            st = fail_at(ps, name.line, name.col,
                         "only one of a oneof may be set, and \"%s\" already is (at %" PRIu32
                         ":%" PRIu32 ")",
                         other ? other->name : "?", o->line, o->col);
            goto out;
        }
        seen[idx].line = name.line;
        seen[idx].col = name.col;
    }
    if ((st = lex_next(ps)) != INFD_STATUS_OK)
        goto out;
    int colon = is_punct(&ps->tok, ':');
    if (colon && (st = lex_next(ps)) != INFD_STATUS_OK)
        goto out;
    if (!colon && fd->type != PROTOBUF_C_TYPE_MESSAGE) {
        st = fail_at(ps, ps->tok.line, ps->tok.col, "expected ':' after the field name, found %s",
                     describe(&ps->tok, found, sizeof(found)));
        goto out;
    }
    if (is_punct(&ps->tok, '[')) {
        if (fd->label != PROTOBUF_C_LABEL_REPEATED) {
            st = fail_at(ps, ps->tok.line, ps->tok.col,
                         "field is not repeated, so a list '[' is not allowed");
            goto out;
        }
        st = parse_list(ps, msg, fd);
    } else if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
        st = parse_message_value(ps, msg, fd);
    } else {
        st = parse_scalar(ps, msg, fd);
    }
out:
    path_pop(ps, path);
    return st;
}

/* The fields of `msg` up to the token closing `open` (left current for the
 * caller), or to the end of the text when `open` is NULL. */
static infd_status parse_body(parser *ps, ProtobufCMessage *msg, const token *open)
{
    const ProtobufCMessageDescriptor *desc = msg->descriptor;
    char close = open ? (is_punct(open, '<') ? '>' : '}') : 0;
    char name[128], found[64];
    infd_status st = INFD_STATUS_OK;
    seen_pos *seen = infd_calloc(desc->n_fields ? desc->n_fields : 1, sizeof(*seen));
    if (!seen)
        return fail_oom(ps);
    for (;;) {
        const token *t = &ps->tok;
        if (t->kind == TOK_EOF && !close)
            break;
        if (close && is_punct(t, close))
            break;
        if (t->kind != TOK_IDENT) {
            if (t->kind == TOK_EOF)
                st = fail_at(ps, t->line, t->col,
                             "expected a field name or '%c' closing the '%c' at %" PRIu32
                             ":%" PRIu32 ", found end of file",
                             close, open->p[0], open->line, open->col);
            else if (is_punct(t, '['))
                st = fail_at(ps, t->line, t->col,
                             "extension and Any fields ('[') are not supported");
            else if (close)
                st = fail_at(ps, t->line, t->col, "expected a field name or '%c', found %s", close,
                             describe(t, found, sizeof(found)));
            else
                st = fail_at(ps, t->line, t->col, "expected a field name, found %s",
                             describe(t, found, sizeof(found)));
            goto out;
        }
        const ProtobufCFieldDescriptor *fd = NULL;
        if (t->len < sizeof(name)) {
            memcpy(name, t->p, t->len);
            name[t->len] = '\0';
            fd = protobuf_c_message_descriptor_get_field_by_name(desc, name);
        }
        if (!fd) {
            st = fail_unknown_field(ps, desc);
            goto out;
        }
        if ((st = parse_field(ps, msg, fd, seen)) != INFD_STATUS_OK)
            goto out;
        if ((is_punct(&ps->tok, ',') || is_punct(&ps->tok, ';')) &&
            (st = lex_next(ps)) != INFD_STATUS_OK)
            goto out;
    }
    for (unsigned i = 0; i < desc->n_fields; i++) {
        if (desc->fields[i].label == PROTOBUF_C_LABEL_REQUIRED && !seen[i].line) {
            st = fail_at(ps, ps->tok.line, ps->tok.col, "%s misses required field \"%s\"",
                         type_name(desc), desc->fields[i].name);
            goto out;
        }
    }
    if (close)
        st = lex_next(ps);
out:
    infd_free(seen);
    return st;
}

infd_status infd_pbtxt_parse(const char *text, size_t n, const ProtobufCMessageDescriptor *desc,
                             const char *file, ProtobufCMessage **out, infd_error *err)
{
    ProtobufCMessage *msg = NULL;
    parser ps;
    infd_status st;
    if (out)
        *out = NULL;
    if ((!text && n) || !desc || !out)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "infd_pbtxt_parse: NULL argument");
    memset(&ps, 0, sizeof(ps));
    ps.file = file ? file : "<text>";
    ps.err = err;
    if (n > INFD_PBTXT_MAX_BYTES)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %zu bytes, more than the %zu a text message may have", ps.file,
                              n, INFD_PBTXT_MAX_BYTES);
    ps.p = text ? text : "";
    ps.end = ps.p + n;
    ps.line = ps.col = 1;
    if (n >= 3 && memcmp(ps.p, "\xef\xbb\xbf", 3) == 0)
        ps.p += 3; /* a UTF-8 byte order mark some editors write */
    ps.tok.line = ps.tok.col = 1;

    msg = message_new(desc);
    if (!msg) {
        st = fail_oom(&ps);
        goto out;
    }
    if ((st = lex_next(&ps)) != INFD_STATUS_OK)
        goto out;
    if ((st = parse_body(&ps, msg, NULL)) != INFD_STATUS_OK)
        goto out;
    *out = msg;
    msg = NULL;
out:
    infd_pbtxt_free(msg);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Printing                                                                  */
/* ------------------------------------------------------------------------- */

int infd_pbtxt_format_real(double v, int is_float, char buf[32])
{
    if (isnan(v))
        return snprintf(buf, 32, "nan");
    if (isinf(v))
        return snprintf(buf, 32, "%s", v < 0 ? "-inf" : "inf");
    /* The fewest significant digits that read back to the same value. */
    int len = 0;
    for (int prec = 1; prec <= 17; prec++) {
        len = snprintf(buf, 32, "%.*g", prec, v);
        if (is_float ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
            break;
    }
    return len;
}

static void indent(infd_strbuf *b, int depth)
{
    for (int i = 0; i < depth; i++)
        infd_strbuf_put(b, "  ", 2);
}

static void put_quoted(infd_strbuf *b, const uint8_t *s, size_t n, int keep_utf8)
{
    infd_strbuf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            infd_strbuf_put(b, esc, 2);
        } else if (c == '\n') {
            infd_strbuf_put(b, "\\n", 2);
        } else if (c == '\r') {
            infd_strbuf_put(b, "\\r", 2);
        } else if (c == '\t') {
            infd_strbuf_put(b, "\\t", 2);
        } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !keep_utf8)) {
            snprintf(esc, sizeof(esc), "\\%03o", c);
            infd_strbuf_put(b, esc, 4);
        } else {
            infd_strbuf_put(b, (const char *)&c, 1);
        }
    }
    infd_strbuf_put(b, "\"", 1);
}

/* One value of a scalar field at `p` (an element of an array or the
 * member itself). */
static void put_scalar(infd_strbuf *b, const ProtobufCFieldDescriptor *fd, const void *p)
{
    char num[40];
    const char *name;
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        snprintf(num, sizeof(num), "%" PRId32, *(const int32_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        snprintf(num, sizeof(num), "%" PRIu32, *(const uint32_t *)p);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        snprintf(num, sizeof(num), "%" PRId64, *(const int64_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        snprintf(num, sizeof(num), "%" PRIu64, *(const uint64_t *)p);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        infd_pbtxt_format_real(*(const float *)p, 1, num);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        infd_pbtxt_format_real(*(const double *)p, 0, num);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        snprintf(num, sizeof(num), "%s", *(const protobuf_c_boolean *)p ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_ENUM:
        name = infd_pbtxt_enum_name(fd->descriptor, *(const int32_t *)p);
        if (name) {
            infd_strbuf_puts(b, name);
            return;
        }
        snprintf(num, sizeof(num), "%" PRId32, *(const int32_t *)p);
        break;
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        s = s ? s : "";
        put_quoted(b, (const uint8_t *)s, strlen(s), 1);
        return;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *bd = p;
        put_quoted(b, bd->data, bd->len, 0);
        return;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        return;
    }
    infd_strbuf_puts(b, num);
}

/* True when a singular non-message field holds nothing to print: a proto3
 * scalar at its default, an unset proto2 optional, an unset oneof member. */
static int scalar_is_absent(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd)
{
    const void *p = field_ptr(m, fd);
    if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return *(const uint32_t *)quantifier_ptr(m, fd) != fd->id;
    if (fd->label == PROTOBUF_C_LABEL_REQUIRED)
        return 0;
    if (fd->type == PROTOBUF_C_TYPE_STRING) {
        const char *s = *(char *const *)p;
        if (fd->label == PROTOBUF_C_LABEL_OPTIONAL)
            return !s || s == fd->default_value;
        return !s || !s[0];
    }
    if (fd->label == PROTOBUF_C_LABEL_OPTIONAL)
        return !*(const protobuf_c_boolean *)quantifier_ptr(m, fd);
    if (fd->type == PROTOBUF_C_TYPE_BYTES)
        return ((const ProtobufCBinaryData *)p)->len == 0;
    static const char zero[8];
    return memcmp(p, zero, value_size(fd->type)) == 0;
}

static int write_message(infd_strbuf *b, const ProtobufCMessage *m, int depth)
{
    const ProtobufCMessageDescriptor *desc = m->descriptor;
    if (depth > INFD_PBTXT_MAX_DEPTH)
        return 0;
    for (unsigned i = 0; i < desc->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &desc->fields[i];
        const void *p = field_ptr(m, fd);
        size_t count = 1;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            count = *(const size_t *)quantifier_ptr(m, fd);
            p = *(void *const *)p;
        } else if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
            if (!*(void *const *)p || ((fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
                                       *(const uint32_t *)quantifier_ptr(m, fd) != fd->id))
                continue;
        } else if (scalar_is_absent(m, fd)) {
            continue;
        }
        for (size_t k = 0; k < count; k++) {
            const void *elem = (const char *)p + k * value_size(fd->type);
            indent(b, depth);
            infd_strbuf_puts(b, fd->name);
            if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
                const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)elem;
                infd_strbuf_put(b, " {\n", 3);
                if (sub && !write_message(b, sub, depth + 1))
                    return 0;
                indent(b, depth);
                infd_strbuf_put(b, "}\n", 2);
            } else {
                infd_strbuf_put(b, ": ", 2);
                put_scalar(b, fd, elem);
                infd_strbuf_put(b, "\n", 1);
            }
        }
    }
    return 1;
}

infd_status infd_pbtxt_write(const ProtobufCMessage *msg, char **out, size_t *n, infd_error *err)
{
    infd_strbuf b = { 0 };
    infd_status st = INFD_STATUS_OK;
    if (out)
        *out = NULL;
    if (!msg || !out)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "infd_pbtxt_write: NULL argument");
    infd_strbuf_reserve(&b, 0); /* an empty message still yields "" */
    if (!write_message(&b, msg, 0)) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "infd_pbtxt_write: %s nests messages deeper than %d levels",
                            type_name(msg->descriptor), INFD_PBTXT_MAX_DEPTH);
        goto out;
    }
    if (b.oom) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                            "infd_pbtxt_write: out of memory writing %s",
                            type_name(msg->descriptor));
        goto out;
    }
    *out = infd_strbuf_take(&b, n);
out:
    infd_strbuf_fini(&b);
    return st;
}
