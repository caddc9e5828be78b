/*
 * model.c - one version of a served model: its config completed from the
 * ONNX file, its plans (one per served batch size), its instances, and the
 * model half of the public API (metadata, config, statistics).
 *
 * Config completion follows Triton's auto-complete for ONNX models: inputs
 * and outputs missing from config.pbtxt are taken from the model; when the
 * config names no inputs and every model input has a variable first dim,
 * the model batches with max_batch_size 4 (Triton's default) and a default
 * dynamic batcher. Declared entries are checked against the model (names,
 * datatypes, dims) with errors naming the config file and the field.
 *
 * Plans have concrete shapes (docs/ARCHITECTURE.md), so a batching model is
 * compiled once per served batch size: powers of two up to max_batch_size,
 * max_batch_size itself and every preferred_batch_size. A batch runs on the
 * smallest plan that holds it; the rows past the batch are padding whose
 * results are dropped.
 *
 * Instance groups are resolved as Triton resolves them (resolve_groups) and
 * place every instance on a device: the CPU, or a GPU. Each device gets its
 * own plans, compiled for it (infd_plan_options.device / device_index) with
 * max_contexts equal to its instance count, and each instance creates its
 * contexts from its device's plans. GPUs are compiled first, so that a
 * KIND_AUTO group whose GPU plan fails (an op the CUDA backend lacks) can
 * move to the CPU before the CPU's plans are sized.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/log.h"
#include "core/pool.h"
#include "graph/weights.h"
#include "runtime/runtime.h"

/* Triton's default max_batch_size when auto-completing a batching model. */
#define RT_DEFAULT_MAX_BATCH 4
/* Most instances, and instance groups, per model. */
#define RT_MAX_INSTANCES 64
#define RT_MAX_GROUPS    RT_MAX_INSTANCES

/* ------------------------------------------------------------------------- */
/* Config files                                                              */
/* ------------------------------------------------------------------------- */

void rt_config_free(Inference__ModelConfig *c)
{
    if (c)
        infd_pbtxt_free(&c->base);
}

infd_status rt_read_file(const char *path, char **out, size_t *n, infd_error *err)
{
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return infd_error_set(err, errno == ENOENT ? INFD_STATUS_NOT_FOUND : INFD_STATUS_IO,
                              "%s: %s", path, strerror(errno));
    infd_status st = INFD_STATUS_OK;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        st = infd_error_set(err, INFD_STATUS_IO, "%s: %s", path, strerror(errno));
        goto out;
    }
    long len = ftell(f);
    if (len < 0 || len > (16L << 20)) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: %ld bytes; infd reads files of at most 16 MiB here", path, len);
        goto out;
    }
    rewind(f);
    buf = infd_malloc((size_t)len + 1);
    if (!buf) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
        goto out;
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        st = infd_error_set(err, INFD_STATUS_IO, "%s: short read", path);
        goto out;
    }
    buf[len] = '\0';
    *out = buf;
    *n = (size_t)len;
    buf = NULL;
out:
    infd_free(buf);
    fclose(f);
    return st;
}

infd_status rt_config_read(const char *dir, Inference__ModelConfig **out, infd_error *err)
{
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.pbtxt", dir);
    char *text = NULL;
    size_t n = 0;
    infd_status st = rt_read_file(path, &text, &n, err);
    if (st == INFD_STATUS_NOT_FOUND) {
        /* No config: everything comes from the model. */
        infd_error_clear(err);
        Inference__ModelConfig *c = infd_malloc(sizeof(*c));
        if (!c)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        inference__model_config__init(c);
        *out = c;
        return INFD_STATUS_OK;
    }
    if (st != INFD_STATUS_OK)
        return st;
    ProtobufCMessage *msg = NULL;
    st = infd_pbtxt_parse(text, n, &inference__model_config__descriptor, path, &msg, err);
    infd_free(text);
    if (st != INFD_STATUS_OK)
        return st;
    *out = (Inference__ModelConfig *)msg;
    return INFD_STATUS_OK;
}

/* A deep copy through the wire format, owned by infd_pbtxt_allocator(). */
static infd_status config_copy(const Inference__ModelConfig *src, Inference__ModelConfig **out,
                               infd_error *err)
{
    size_t n = protobuf_c_message_get_packed_size(&src->base);
    uint8_t *buf = infd_malloc(n ? n : 1);
    if (!buf)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    protobuf_c_message_pack(&src->base, buf);
    *out = inference__model_config__unpack(infd_pbtxt_allocator(), n, buf);
    infd_free(buf);
    if (!*out)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory copying a config");
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Completion                                                                */
/* ------------------------------------------------------------------------- */

static const char *type_name(Inference__DataType t)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&inference__data_type__descriptor, (int)t);
    return v ? v->name : "TYPE_?";
}

static Inference__DataType type_of(infd_dtype d)
{
    char name[32];
    snprintf(name, sizeof(name), "TYPE_%s", d == INFD_DTYPE_BYTES ? "STRING" : infd_dtype_name(d));
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value_by_name(&inference__data_type__descriptor, name);
    return v ? (Inference__DataType)v->value : INFERENCE__DATA_TYPE__TYPE_INVALID;
}

static infd_dtype dtype_of(Inference__DataType t)
{
    if (t == INFERENCE__DATA_TYPE__TYPE_STRING)
        return INFD_DTYPE_BYTES;
    return infd_dtype_from_name(type_name(t));
}

infd_dtype rt_config_dtype(Inference__DataType t)
{
    return dtype_of(t);
}

static bool push_ptr(void ***arr, size_t *n, void *item)
{
    void **p = infd_realloc(*arr, (*n + 1) * sizeof(void *));
    if (!p)
        return false;
    p[*n] = item;
    *arr = p;
    (*n)++;
    return true;
}

static bool set_dims(int64_t **dst, size_t *n_dst, const int64_t *dims, int rank)
{
    int64_t *d = rank ? infd_malloc((size_t)rank * sizeof(int64_t)) : NULL;
    if (rank && !d)
        return false;
    for (int i = 0; i < rank; i++)
        d[i] = dims[i];
    infd_free(*dst);
    *dst = d;
    *n_dst = (size_t)rank;
    return true;
}

static bool set_string(char **dst, const char *s)
{
    char *c = infd_strdup(s);
    if (!c)
        return false;
    if (*dst && *dst != protobuf_c_empty_string)
        infd_free(*dst);
    *dst = c;
    return true;
}

static const infd_ir_value *graph_input(const infd_ir_graph *g, const char *name)
{
    for (int i = 0; i < g->n_inputs; i++)
        if (strcmp(g->values[g->inputs[i]].name, name) == 0)
            return &g->values[g->inputs[i]];
    return NULL;
}

/* Checks (and completes) one declared input against the model. */
static infd_status complete_input(infd_model *m, const char *cfile, size_t k,
                                  Inference__ModelInput *ci, const infd_ir_value *v,
                                  infd_model_io *io, infd_error *err)
{
    int lead = m->max_batch > 0 ? 1 : 0;
    infd_dtype dt = v->dtype;
    if (ci->data_type == INFERENCE__DATA_TYPE__TYPE_INVALID)
        ci->data_type = type_of(dt);
    else if (dtype_of(ci->data_type) != dt)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: input[%zu] '%s': data_type %s, the model's input is %s", cfile,
                              k, ci->name, type_name(ci->data_type), type_name(type_of(dt)));
    if (dt == INFD_DTYPE_BYTES || infd_dtype_size(dt) == 0)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                              "input '%s': datatype %s is not served yet", ci->name,
                              infd_dtype_name(dt));
    if (ci->reshape || ci->is_shape_tensor)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                              "%s: input[%zu] '%s': reshape and is_shape_tensor are not supported",
                              cfile, k, ci->name);
    if (v->shape.rank < lead)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: max_batch_size %d but model input '%s' is a scalar", cfile,
                              m->max_batch, ci->name);
    if (lead && v->shape.rank > 0 && v->shape.dims[0].value >= 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: max_batch_size %d but model input '%s' has a fixed first dim "
                              "%lld (set max_batch_size: 0 and give the full shape in dims)",
                              cfile, m->max_batch, ci->name, (long long)v->shape.dims[0].value);
    int rank = v->shape.rank >= 0 ? v->shape.rank - lead : (int)ci->n_dims;
    if (ci->n_dims == 0 && rank > 0) {
        int64_t dims[INFD_MAX_RANK];
        for (int d = 0; d < rank; d++)
            dims[d] = v->shape.dims[d + lead].value;
        if (!set_dims(&ci->dims, &ci->n_dims, dims, rank))
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    if (v->shape.rank >= 0 && (int)ci->n_dims != rank)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: input[%zu] '%s': dims has %zu entries, the model's input has "
                              "%d%s",
                              cfile, k, ci->name, ci->n_dims, rank,
                              lead ? " after the batch dim" : "");
    if (ci->n_dims > INFD_MAX_RANK - 1)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: input[%zu] '%s': %zu dims, at most %d", cfile, k, ci->name,
                              ci->n_dims, INFD_MAX_RANK - 1);
    io->name = ci->name;
    io->dtype = dt;
    io->rank = (int32_t)ci->n_dims;
    size_t row = infd_dtype_size(dt);
    for (int d = 0; d < io->rank; d++) {
        int64_t want = ci->dims[d];
        int64_t have = v->shape.rank >= 0 ? v->shape.dims[d + lead].value : -1;
        if (want < 0 && have >= 0)
            want = ci->dims[d] = have;
        if (want < 0)
            return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                                  "%s: input[%zu] '%s': dims[%d] is variable; infd serves fixed "
                                  "shapes: give it a size in config.pbtxt",
                                  cfile, k, ci->name, d);
        if (have >= 0 && want != have)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: input[%zu] '%s': dims[%d] is %lld, the model has %lld",
                                  cfile, k, ci->name, d, (long long)want, (long long)have);
        io->dims[d] = want;
        row *= (size_t)want;
    }
    io->row_bytes = row;
    return INFD_STATUS_OK;
}

/* The sequence batcher's config, or NULL. */
static const Inference__ModelSequenceBatching *seq_config(const Inference__ModelConfig *c)
{
    return c->scheduling_choice_case == INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_SEQUENCE_BATCHING
               ? c->sequence_batching
               : NULL;
}

/* Whether `name` is an input (or, `output`, an output) the runtime feeds
 * or reads itself: a control_input, or a state's input_name/output_name. */
static bool is_hidden(const Inference__ModelConfig *c, const char *name, bool output)
{
    const Inference__ModelSequenceBatching *sb = seq_config(c);
    for (size_t k = 0; sb && !output && k < sb->n_control_input; k++)
        if (strcmp(sb->control_input[k]->name, name) == 0)
            return true;
    for (size_t k = 0; sb && k < sb->n_state; k++)
        if (strcmp(output ? sb->state[k]->output_name : sb->state[k]->input_name, name) == 0)
            return true;
    return false;
}

/* Writes `v` as one element of `dt` into `out` (8 bytes); false for a
 * dtype a START/END/READY control cannot have. */
static bool control_value(infd_dtype dt, double v, uint8_t *out)
{
    memset(out, 0, 8);
    if (dt == INFD_DTYPE_BOOL) {
        out[0] = v != 0;
    } else if (dt == INFD_DTYPE_INT32) {
        int32_t x = (int32_t)v;
        memcpy(out, &x, 4);
    } else if (dt == INFD_DTYPE_FP32) {
        float x = (float)v;
        memcpy(out, &x, 4);
    } else {
        return false;
    }
    return true;
}

/* The kind of a START/END/READY control; false for another kind. */
static bool flag_kind(Inference__ModelSequenceBatching__Control__Kind k, rt_hidden_kind *out)
{
    switch (k) {
    case INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL__KIND__CONTROL_SEQUENCE_START:
        *out = RT_HIDDEN_START;
        return true;
    case INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL__KIND__CONTROL_SEQUENCE_END:
        *out = RT_HIDDEN_END;
        return true;
    case INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL__KIND__CONTROL_SEQUENCE_READY:
        *out = RT_HIDDEN_READY;
        return true;
    default:
        return false;
    }
}

/* Reads one control_input into `h`; its dtype into *dt. */
static infd_status read_control(const Inference__ModelSequenceBatching__ControlInput *ctl,
                                const char *cfile, const char *where, rt_hidden *h, infd_dtype *dt,
                                infd_error *err)
{
    if (ctl->n_control != 1)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s '%s' has %zu controls; infd takes exactly one", cfile, where,
                              ctl->name, ctl->n_control);
    const Inference__ModelSequenceBatching__Control *ct = ctl->control[0];
    if (ct->kind == INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL__KIND__CONTROL_SEQUENCE_CORRID) {
        h->kind = RT_HIDDEN_CORRID;
        *dt = dtype_of(ct->data_type);
        if (*dt != INFD_DTYPE_UINT64 && *dt != INFD_DTYPE_INT64 && *dt != INFD_DTYPE_UINT32 &&
            *dt != INFD_DTYPE_INT32)
            return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                                  "%s: %s '%s': a CORRID control of data_type %s; infd feeds "
                                  "TYPE_UINT64, TYPE_INT64, TYPE_UINT32 or TYPE_INT32 (a string "
                                  "correlation id is fed as 0)",
                                  cfile, where, ctl->name, type_name(ct->data_type));
        return INFD_STATUS_OK;
    }
    if (!flag_kind(ct->kind, &h->kind))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: %s '%s': control kind %d",
                              cfile, where, ctl->name, (int)ct->kind);
    double v[2];
    if (ct->n_int32_false_true == 2) {
        *dt = INFD_DTYPE_INT32;
        v[0] = ct->int32_false_true[0];
        v[1] = ct->int32_false_true[1];
    } else if (ct->n_fp32_false_true == 2) {
        *dt = INFD_DTYPE_FP32;
        v[0] = ct->fp32_false_true[0];
        v[1] = ct->fp32_false_true[1];
    } else if (ct->n_bool_false_true == 2) {
        *dt = INFD_DTYPE_BOOL;
        v[0] = ct->bool_false_true[0];
        v[1] = ct->bool_false_true[1];
    } else {
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %s '%s': give the false and true values as two entries of "
                              "int32_false_true, fp32_false_true or bool_false_true",
                              cfile, where, ctl->name);
    }
    control_value(*dt, v[0], h->off);
    control_value(*dt, v[1], h->on);
    return INFD_STATUS_OK;
}

/* Appends the sequence batcher's controls and states to m->in (after the
 * client's inputs), each checked against the model's input of its name:
 * a control is [1] per row of its Control's type, a state has the state's
 * data_type and dims. */
static infd_status complete_hidden_inputs(infd_model *m, const Inference__ModelConfig *c,
                                          const char *cfile, const infd_ir_graph *g,
                                          infd_error *err)
{
    const Inference__ModelSequenceBatching *sb = seq_config(c);
    m->n_in_pub = m->n_in;
    if (!sb)
        return INFD_STATUS_OK;
    size_t n_hidden = sb->n_control_input + sb->n_state;
    if ((size_t)m->n_in + n_hidden > INFD_MAX_MODEL_IO)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "%s: more than %d inputs", cfile,
                              INFD_MAX_MODEL_IO);
    for (size_t k = 0; k < n_hidden; k++) {
        bool control = k < sb->n_control_input;
        const Inference__ModelSequenceBatching__State *stt =
            control ? NULL : sb->state[k - sb->n_control_input];
        const char *name = control ? sb->control_input[k]->name : stt->input_name;
        char where[96];
        snprintf(where, sizeof(where), "sequence_batching.%s[%zu]",
                 control ? "control_input" : "state", control ? k : k - sb->n_control_input);
        const infd_ir_value *v = graph_input(g, name);
        if (!v)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: %s '%s' is not an input of the model", cfile, where, name);
        for (int i = 0; i < m->n_in; i++)
            if (strcmp(m->in[i].name, name) == 0)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: %s '%s' is used twice", cfile, where, name);
        rt_hidden *h = &m->hidden[m->n_in - m->n_in_pub];
        memset(h, 0, sizeof(*h));
        Inference__ModelInput ci = INFERENCE__MODEL_INPUT__INIT;
        ci.name = (char *)name;
        int64_t dims[INFD_MAX_RANK] = { 1 };
        ci.dims = dims;
        if (control) {
            infd_dtype dt = INFD_DTYPE_INVALID;
            infd_status st = read_control(sb->control_input[k], cfile, where, h, &dt, err);
            if (st != INFD_STATUS_OK)
                return st;
            ci.data_type = type_of(dt);
            ci.n_dims = 1;
        } else {
            h->kind = RT_HIDDEN_STATE;
            if (stt->n_dims == 0 || stt->n_dims > INFD_MAX_RANK - 1 ||
                stt->data_type == INFERENCE__DATA_TYPE__TYPE_INVALID)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: %s '%s' needs data_type and 1 to %d dims", cfile, where,
                                      name, INFD_MAX_RANK - 1);
            ci.data_type = stt->data_type;
            ci.n_dims = stt->n_dims;
            memcpy(dims, stt->dims, stt->n_dims * sizeof(int64_t));
        }
        infd_model_io *io = &m->in[m->n_in];
        infd_status st = complete_input(m, cfile, (size_t)m->n_in, &ci, v, io, err);
        if (st != INFD_STATUS_OK)
            return infd_error_prefix(err, "%s", where);
        io->name = name;
        m->n_in++;
        if (h->kind == RT_HIDDEN_STATE) {
            h->state_at = m->state_bytes;
            m->state_bytes += io->row_bytes;
        }
    }
    return INFD_STATUS_OK;
}

static infd_status complete_inputs(infd_model *m, Inference__ModelConfig *c, const char *cfile,
                                   const infd_ir_graph *g, infd_error *err)
{
    bool declared = c->n_input > 0;
    if (g->n_inputs > INFD_MAX_MODEL_IO)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "the model has %d inputs, at most %d",
                              g->n_inputs, INFD_MAX_MODEL_IO);
    /* Batching: declared, or inferred when nothing about inputs is declared. */
    if (c->max_batch_size < 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: max_batch_size is %d; it must be >= 0", cfile,
                              c->max_batch_size);
    if (c->max_batch_size > INFD_STATS_MAX_BATCH)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: max_batch_size %d exceeds infd's limit %d", cfile,
                              c->max_batch_size, INFD_STATS_MAX_BATCH);
    if (c->max_batch_size == 0 && !declared && g->n_inputs > 0) {
        bool batchable = true;
        for (int i = 0; i < g->n_inputs; i++) {
            const infd_ir_value *v = &g->values[g->inputs[i]];
            if (v->shape.rank < 1 || v->shape.dims[0].value >= 0)
                batchable = false;
        }
        if (batchable) {
            c->max_batch_size = RT_DEFAULT_MAX_BATCH;
            if (c->scheduling_choice_case == INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE__NOT_SET) {
                Inference__ModelDynamicBatching *db = infd_malloc(sizeof(*db));
                if (!db)
                    return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
                inference__model_dynamic_batching__init(db);
                c->dynamic_batching = db;
                c->scheduling_choice_case =
                    INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING;
            }
        }
    }
    m->max_batch = c->max_batch_size;
    for (size_t k = 0; k < c->n_input; k++) {
        const char *name = c->input[k]->name;
        if (!graph_input(g, name))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: input[%zu] '%s' is not an input of the model", cfile, k,
                                  name);
        if (is_hidden(c, name, false))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: input[%zu] '%s' is a sequence_batching control or state; "
                                  "the server feeds it, so it is not listed as an input",
                                  cfile, k, name);
        for (size_t k2 = 0; k2 < k; k2++)
            if (strcmp(c->input[k2]->name, name) == 0)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: input '%s' is declared twice", cfile, name);
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const infd_ir_value *v = &g->values[g->inputs[i]];
        bool found = is_hidden(c, v->name, false);
        for (size_t k = 0; k < c->n_input && !found; k++)
            found = strcmp(c->input[k]->name, v->name) == 0;
        if (found)
            continue;
        if (declared)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: model input '%s' is missing from the config's inputs", cfile,
                                  v->name);
        Inference__ModelInput *ci = infd_malloc(sizeof(*ci));
        if (!ci)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        inference__model_input__init(ci);
        if (!push_ptr((void ***)&c->input, &c->n_input, ci)) {
            infd_free(ci);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
        if (!set_string(&ci->name, v->name))
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    m->n_in = (int)c->n_input;
    for (size_t k = 0; k < c->n_input; k++) {
        infd_status st = complete_input(m, cfile, k, c->input[k], graph_input(g, c->input[k]->name),
                                        &m->in[k], err);
        if (st != INFD_STATUS_OK)
            return st;
    }
    return complete_hidden_inputs(m, c, cfile, g, err);
}

/* Appends each state's output to m->out (after the client's), checked to
 * have its input's type and shape. */
static infd_status complete_state_outputs(infd_model *m, const Inference__ModelConfig *c,
                                          const char *cfile, const infd_plan *plan, infd_error *err)
{
    m->n_out_pub = m->n_out;
    const Inference__ModelSequenceBatching *sb = seq_config(c);
    int lead = m->max_batch > 0 ? 1 : 0;
    for (int i = m->n_in_pub; i < m->n_in; i++) {
        rt_hidden *h = &m->hidden[i - m->n_in_pub];
        if (h->kind != RT_HIDDEN_STATE)
            continue;
        const char *oname = NULL;
        for (size_t k = 0; sb && k < sb->n_state; k++)
            if (strcmp(sb->state[k]->input_name, m->in[i].name) == 0)
                oname = sb->state[k]->output_name;
        infd_tensor_info ti = { 0 };
        bool found = false;
        for (int o = 0; oname && o < infd_plan_n_outputs(plan) && !found; o++) {
            infd_plan_output(plan, o, &ti);
            found = strcmp(ti.name, oname) == 0;
        }
        if (!found)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: sequence_batching state '%s': output_name '%s' is not an "
                                  "output of the model",
                                  cfile, m->in[i].name, oname ? oname : "");
        if (m->n_out == INFD_MAX_MODEL_IO)
            return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "more than %d outputs",
                                  INFD_MAX_MODEL_IO);
        infd_model_io *io = &m->out[m->n_out];
        *io = m->in[i];
        io->name = oname;
        bool same = ti.dtype == io->dtype && ti.shape.rank == io->rank + lead;
        for (int d = 0; same && d < io->rank; d++)
            same = ti.shape.dims[d + lead] == io->dims[d];
        if (!same)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: sequence_batching state '%s': output '%s' differs from "
                                  "the input in type or shape",
                                  cfile, m->in[i].name, oname);
        h->state_out = m->n_out++;
    }
    return INFD_STATUS_OK;
}

/* Outputs from the first plan's concrete shapes. */
static infd_status complete_outputs(infd_model *m, Inference__ModelConfig *c, const char *cfile,
                                    const infd_plan *plan, int64_t batch, infd_error *err)
{
    int lead = m->max_batch > 0 ? 1 : 0;
    int n_plan = infd_plan_n_outputs(plan);
    if (c->n_output == 0) {
        if (n_plan > INFD_MAX_MODEL_IO)
            return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                                  "the model has %d outputs, at most %d", n_plan,
                                  INFD_MAX_MODEL_IO);
        for (int o = 0; o < n_plan; o++) {
            infd_tensor_info ti;
            infd_plan_output(plan, o, &ti);
            if (is_hidden(c, ti.name, true))
                continue;
            Inference__ModelOutput *co = infd_malloc(sizeof(*co));
            if (!co)
                return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
            inference__model_output__init(co);
            if (!push_ptr((void ***)&c->output, &c->n_output, co)) {
                infd_free(co);
                return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
            }
            if (!set_string(&co->name, ti.name))
                return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
    }
    if (c->n_output > INFD_MAX_MODEL_IO)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "%s: %zu outputs, at most %d", cfile,
                              c->n_output, INFD_MAX_MODEL_IO);
    m->n_out = (int)c->n_output;
    for (size_t k = 0; k < c->n_output; k++) {
        Inference__ModelOutput *co = c->output[k];
        infd_tensor_info ti = { 0 };
        bool found = false;
        for (int o = 0; o < n_plan && !found; o++) {
            infd_plan_output(plan, o, &ti);
            found = strcmp(ti.name, co->name) == 0;
        }
        if (!found)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: output[%zu] '%s' is not an output of the model", cfile, k,
                                  co->name);
        if (is_hidden(c, co->name, true))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: output[%zu] '%s' is a sequence_batching state's "
                                  "output_name; the server keeps it, so it is not listed",
                                  cfile, k, co->name);
        if (co->data_type == INFERENCE__DATA_TYPE__TYPE_INVALID)
            co->data_type = type_of(ti.dtype);
        else if (dtype_of(co->data_type) != ti.dtype)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: output[%zu] '%s': data_type %s, the model's output is %s",
                                  cfile, k, co->name, type_name(co->data_type),
                                  type_name(type_of(ti.dtype)));
        if (co->reshape)
            return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                                  "%s: output[%zu] '%s': reshape is not supported", cfile, k,
                                  co->name);
        if (lead && (ti.shape.rank < 1 || ti.shape.dims[0] != batch))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: max_batch_size %d but model output '%s' does not have the "
                                  "batch as its first dim",
                                  cfile, m->max_batch, co->name);
        int rank = ti.shape.rank - lead;
        if (co->n_dims == 0 && rank > 0 &&
            !set_dims(&co->dims, &co->n_dims, &ti.shape.dims[lead], rank))
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        if ((int)co->n_dims != rank)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: output[%zu] '%s': dims has %zu entries, the model's output "
                                  "has %d",
                                  cfile, k, co->name, co->n_dims, rank);
        infd_model_io *io = &m->out[k];
        io->name = co->name;
        io->dtype = ti.dtype;
        io->rank = rank;
        size_t row = infd_dtype_size(ti.dtype);
        for (int d = 0; d < rank; d++) {
            int64_t have = ti.shape.dims[d + lead];
            if (co->dims[d] >= 0 && co->dims[d] != have)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: output[%zu] '%s': dims[%d] is %lld, the model gives "
                                      "%lld",
                                      cfile, k, co->name, d, (long long)co->dims[d],
                                      (long long)have);
            co->dims[d] = have;
            io->dims[d] = have;
            row *= (size_t)have;
        }
        io->row_bytes = row;
    }
    return complete_state_outputs(m, c, cfile, plan, err);
}

/* Maps the model's inputs/outputs onto a plan's and checks the shapes. */
static infd_status map_plan(infd_model *m, rt_plan *p, const infd_plan *plan, infd_error *err)
{
    int lead = m->max_batch > 0 ? 1 : 0;
    for (int i = 0; i < m->n_in; i++) {
        p->in_map[i] = -1;
        for (int k = 0; k < infd_plan_n_inputs(plan); k++) {
            infd_tensor_info ti;
            infd_plan_input(plan, k, &ti);
            if (strcmp(ti.name, m->in[i].name) == 0)
                p->in_map[i] = k;
        }
        if (p->in_map[i] < 0)
            return infd_error_set(err, INFD_STATUS_INTERNAL, "input '%s' missing from the plan",
                                  m->in[i].name);
    }
    if (infd_plan_n_inputs(plan) != m->n_in)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                              "the plan has %d inputs, the model %d (bound inputs are not served)",
                              infd_plan_n_inputs(plan), m->n_in);
    for (int j = 0; j < m->n_out; j++) {
        p->out_map[j] = -1;
        for (int k = 0; k < infd_plan_n_outputs(plan); k++) {
            infd_tensor_info ti;
            infd_plan_output(plan, k, &ti);
            if (strcmp(ti.name, m->out[j].name) != 0)
                continue;
            p->out_map[j] = k;
            bool same =
                ti.shape.rank == m->out[j].rank + lead && (!lead || ti.shape.dims[0] == p->batch);
            for (int d = 0; same && d < m->out[j].rank; d++)
                same = ti.shape.dims[d + lead] == m->out[j].dims[d];
            if (!same)
                return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                                      "output '%s' changes shape with the batch size (at %lld) "
                                      "beyond its first dim",
                                      m->out[j].name, (long long)p->batch);
        }
        if (p->out_map[j] < 0)
            return infd_error_set(err, INFD_STATUS_INTERNAL, "output '%s' missing from the plan",
                                  m->out[j].name);
    }
    return INFD_STATUS_OK;
}

static infd_status build_plan(infd_model *m, const rt_device *dev, int64_t batch, infd_plan **out,
                              infd_error *err)
{
    infd_plan_options o;
    infd_plan_options_init(&o);
    o.device = dev->kind;
    o.device_index = dev->gpu;
    /* Device plans run no host threads; CPU instances share the cores. */
    o.n_threads = dev->kind == INFD_DEVICE_CPU ? m->n_threads : 1;
    o.max_contexts = dev->n_inst;
    o.precision = dev->kind == INFD_DEVICE_CUDA ? m->gpu_precision : INFD_PRECISION_FP32;
    o.batch = batch;
    infd_input_shape shapes[INFD_MAX_MODEL_IO];
    int lead = m->max_batch > 0 ? 1 : 0;
    for (int i = 0; i < m->n_in; i++) {
        shapes[i].name = m->in[i].name;
        shapes[i].shape.rank = m->in[i].rank + lead;
        if (lead)
            shapes[i].shape.dims[0] = batch;
        for (int d = 0; d < m->in[i].rank; d++)
            shapes[i].shape.dims[d + lead] = m->in[i].dims[d];
    }
    o.shapes = shapes;
    o.n_shapes = m->n_in;
    return infd_plan_create_from_weights(m->weights, &o, out, err);
}

/* Batch sizes to compile: the engine's rule (infd_plan_batch_sizes: powers
 * of two below max, then max; what `infd build --max-batch` builds), plus
 * the preferred sizes. */
static int plan_sizes(const infd_model *m, int64_t *sizes)
{
    int n = 0;
    if (m->max_batch <= 0) {
        sizes[n++] = 1;
        return n;
    }
    int64_t cand[64];
    int nc = INFD_MIN(infd_plan_batch_sizes(m->max_batch, cand, 40), 40);
    for (int k = 0; k < m->n_preferred && nc < 64; k++)
        cand[nc++] = m->preferred[k];
    for (int i = 0; i < nc; i++) { /* sort unique */
        bool dup = false;
        for (int j = 0; j < n; j++)
            dup |= sizes[j] == cand[i];
        if (!dup && n < RT_MAX_PLANS)
            sizes[n++] = cand[i];
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && sizes[j - 1] > sizes[j]; j--) {
            int64_t t = sizes[j];
            sizes[j] = sizes[j - 1];
            sizes[j - 1] = t;
        }
    return n;
}

static infd_status configure_queues(infd_model *m, const Inference__ModelConfig *c,
                                    const char *cfile, infd_error *err)
{
    m->n_levels = 1;
    m->default_level = 0;
    if (c->scheduling_choice_case == INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_SEQUENCE_BATCHING)
        return rt_seq_create(m, cfile, err);
    const Inference__ModelDynamicBatching *db =
        c->scheduling_choice_case == INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING
            ? c->dynamic_batching
            : NULL;
    if (!db)
        return INFD_STATUS_OK;
    m->dynamic = m->max_batch > 0;
    m->max_queue_delay_ns = db->max_queue_delay_microseconds * 1000u;
    if (db->n_preferred_batch_size > INFD_STATS_MAX_BATCH)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: too many preferred_batch_size entries", cfile);
    for (size_t k = 0; k < db->n_preferred_batch_size; k++) {
        int32_t b = db->preferred_batch_size[k];
        if (b < 1 || b > m->max_batch)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: dynamic_batching.preferred_batch_size[%zu] is %d; it must "
                                  "be in 1..max_batch_size (%d)",
                                  cfile, k, b, m->max_batch);
        m->preferred[m->n_preferred++] = b;
    }
    if (db->priority_levels > RT_MAX_PRIORITY_LEVELS)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: dynamic_batching.priority_levels is %llu; infd allows at most "
                              "%d",
                              cfile, (unsigned long long)db->priority_levels,
                              RT_MAX_PRIORITY_LEVELS);
    if (db->priority_levels > 0) {
        m->n_levels = (int)db->priority_levels;
        if (db->default_priority_level < 1 || db->default_priority_level > db->priority_levels)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: dynamic_batching.default_priority_level %llu is outside "
                                  "1..priority_levels (%llu)",
                                  cfile, (unsigned long long)db->default_priority_level,
                                  (unsigned long long)db->priority_levels);
        m->default_level = (uint32_t)db->default_priority_level - 1;
    }
    for (int l = 0; l < m->n_levels; l++) {
        const Inference__ModelQueuePolicy *qp = db->default_queue_policy;
        for (size_t k = 0; k < db->n_priority_queue_policy; k++)
            if (db->priority_queue_policy[k]->key == (uint64_t)l + 1)
                qp = db->priority_queue_policy[k]->value;
        if (!qp)
            continue;
        m->q[l].timeout_us = qp->default_timeout_microseconds;
        m->q[l].max_queue_size = qp->max_queue_size;
        m->q[l].allow_timeout_override = qp->allow_timeout_override;
        m->q[l].delay_on_timeout =
            qp->timeout_action == INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__DELAY;
    }
    for (size_t k = 0; k < db->n_priority_queue_policy; k++) {
        uint64_t key = db->priority_queue_policy[k]->key;
        if (key < 1 || key > (uint64_t)m->n_levels)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: dynamic_batching.priority_queue_policy key %llu is outside "
                                  "1..priority_levels (%d)",
                                  cfile, (unsigned long long)key, m->n_levels);
    }
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Instance groups and devices                                               */
/* ------------------------------------------------------------------------- */

/* The precision of the model's GPU plans, from Triton's spelling
 *   optimization { execution_accelerators { gpu_execution_accelerator [ {
 *     name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ] } }
 * or infd's model parameter `precision` ("fp32" / "tf32" / "fp16" / "bf16"). Both may be
 * given when they agree. CPU plans stay FP32 either way. */
static infd_status read_precision(infd_model *m, const Inference__ModelConfig *c, const char *cfile,
                                  infd_error *err)
{
    infd_precision prec = INFD_PRECISION_FP32;
    bool from_accel = false;
    const Inference__ModelOptimizationPolicy *opt = c->optimization;
    const Inference__ModelOptimizationPolicy__ExecutionAccelerators *ea =
        opt ? opt->execution_accelerators : NULL;
    for (size_t k = 0; ea && k < ea->n_gpu_execution_accelerator; k++) {
        const Inference__ModelOptimizationPolicy__ExecutionAccelerators__Accelerator *acc =
            ea->gpu_execution_accelerator[k];
        if (strcmp(acc->name, "cuda") == 0)
            continue; /* onnxruntime's CUDA provider options: nothing to do */
        if (strcmp(acc->name, "tensorrt") != 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: optimization.execution_accelerators."
                                  "gpu_execution_accelerator[%zu]: unknown accelerator '%s' (infd "
                                  "reads \"tensorrt\" for its precision_mode and accepts \"cuda\")",
                                  cfile, k, acc->name);
        for (size_t p = 0; p < acc->n_parameters; p++) {
            if (strcmp(acc->parameters[p]->key, "precision_mode") != 0)
                continue; /* TensorRT's workspace and segment sizes mean nothing here */
            if (!infd_precision_parse(acc->parameters[p]->value, &prec))
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: optimization.execution_accelerators."
                                      "gpu_execution_accelerator[%zu].parameters['precision_mode'] "
                                      "is '%s'; expected FP32, TF32, FP16 or BF16",
                                      cfile, k, acc->parameters[p]->value);
            from_accel = true;
        }
    }
    for (size_t k = 0; k < c->n_parameters; k++) {
        if (strcmp(c->parameters[k]->key, "precision") != 0)
            continue;
        const char *v = c->parameters[k]->value ? c->parameters[k]->value->string_value : "";
        infd_precision p;
        if (!infd_precision_parse(v, &p))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: parameters['precision'].string_value is '%s'; expected "
                                  "fp32, tf32, fp16 or bf16",
                                  cfile, v);
        if (from_accel && p != prec)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: parameters['precision'] is '%s' but the tensorrt "
                                  "accelerator's precision_mode says otherwise",
                                  cfile, v);
        prec = p;
    }
    m->gpu_precision = prec;
    return INFD_STATUS_OK;
}

static const char *kind_name(Inference__ModelInstanceGroup__Kind k)
{
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
        &inference__model_instance_group__kind__descriptor, (int)k);
    return v ? v->name : "KIND_?";
}

/* GPUs usable for KIND_GPU and KIND_AUTO, read once per load: the count, or
 * 0 with the reason in `why`. */
static int usable_gpus(char *why, size_t n)
{
    infd_error e = { 0 };
    int count = infd_engine_device_count(INFD_DEVICE_CUDA, &e);
    snprintf(why, n, "%s", count > 0 ? "" : e.msg[0] ? e.msg : "the driver reports no GPU");
    return count > 0 ? count : 0;
}

static bool set_gpus(Inference__ModelInstanceGroup *ig, int n_gpus)
{
    int32_t *g = infd_malloc((size_t)n_gpus * sizeof(int32_t));
    if (!g)
        return false;
    for (int i = 0; i < n_gpus; i++)
        g[i] = i;
    infd_free(ig->gpus);
    ig->gpus = g;
    ig->n_gpus = (size_t)n_gpus;
    return true;
}

/* Resolves the config's instance groups as Triton does and writes the result
 * back into the config (so the config APIs report it): no group means one
 * KIND_AUTO group; KIND_AUTO becomes KIND_GPU on every listed GPU (default:
 * all) when a CUDA device is usable and has them, else KIND_CPU; KIND_GPU
 * without `gpus` takes every GPU; `count` (default 1) instances run per GPU
 * listed, or on the CPU; an empty name becomes "<model>_<index>". Then
 * places the instances: m->inst (device and group set) and m->dev (GPUs
 * ascending, then the CPU), with `auto_group[k]` saying which groups were
 * KIND_AUTO. */
static void sort_devices(infd_model *m);

static infd_status resolve_groups(infd_model *m, Inference__ModelConfig *c, const char *cfile,
                                  bool *auto_group, infd_error *err)
{
    if (c->n_instance_group == 0) {
        Inference__ModelInstanceGroup *ig = infd_malloc(sizeof(*ig));
        if (!ig)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        inference__model_instance_group__init(ig);
        if (!push_ptr((void ***)&c->instance_group, &c->n_instance_group, ig)) {
            infd_free(ig);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
    }
    if (c->n_instance_group > RT_MAX_GROUPS)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: %zu instance groups; at most %d", cfile, c->n_instance_group,
                              RT_MAX_GROUPS);
    char why[INFD_ERROR_MSG_BYTES] = "";
    int n_gpus = -1; /* not asked yet: a CPU-only config never touches the driver */
    int n = 0;
    for (size_t k = 0; k < c->n_instance_group; k++) {
        Inference__ModelInstanceGroup *ig = c->instance_group[k];
        auto_group[k] = ig->kind == INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_AUTO;
        if (ig->kind == INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_MODEL)
            return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                                  "%s: instance_group[%zu]: KIND_MODEL is not supported", cfile, k);
        if (ig->kind != INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_AUTO &&
            ig->kind != INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU &&
            ig->kind != INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU)
            return infd_error_set(
                err, INFD_STATUS_INVALID_ARGUMENT,
                "%s: instance_group[%zu].kind is %d; expected KIND_AUTO, KIND_GPU "
                "or KIND_CPU",
                cfile, k, (int)ig->kind);
        if (ig->count < 0 || ig->count > RT_MAX_INSTANCES)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: instance_group[%zu].count is %d; at most %d instances per "
                                  "model",
                                  cfile, k, ig->count, RT_MAX_INSTANCES);
        for (size_t g = 0; g < ig->n_gpus; g++) {
            if (ig->gpus[g] < 0)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: instance_group[%zu].gpus[%zu] is %d; GPU ids start at 0",
                                      cfile, k, g, ig->gpus[g]);
            for (size_t g2 = 0; g2 < g; g2++)
                if (ig->gpus[g2] == ig->gpus[g])
                    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                          "%s: instance_group[%zu].gpus lists GPU %d twice", cfile,
                                          k, ig->gpus[g]);
        }
        if (ig->kind == INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU && ig->n_gpus)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: instance_group[%zu]: KIND_CPU with gpus; gpus are for "
                                  "KIND_GPU",
                                  cfile, k);
        if (ig->kind != INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU && n_gpus < 0)
            n_gpus = usable_gpus(why, sizeof(why));
        int missing = -1; /* a listed GPU past the last one */
        for (size_t g = 0; g < ig->n_gpus && missing < 0; g++)
            if (ig->gpus[g] >= n_gpus)
                missing = ig->gpus[g];
        if (auto_group[k]) {
            char reason[INFD_ERROR_MSG_BYTES + 64];
            if (n_gpus == 0)
                snprintf(reason, sizeof(reason), "no usable CUDA device: %s", why);
            else if (missing >= 0)
                snprintf(reason, sizeof(reason), "GPU %d does not exist (%d GPU%s)", missing,
                         n_gpus, n_gpus == 1 ? "" : "s");
            else
                snprintf(reason, sizeof(reason), "%d usable CUDA device%s", n_gpus,
                         n_gpus == 1 ? "" : "s");
            ig->kind = n_gpus > 0 && missing < 0 ? INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU
                                                 : INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU;
            if (ig->kind == INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU && ig->n_gpus) {
                infd_free(ig->gpus);
                ig->gpus = NULL;
                ig->n_gpus = 0;
            }
            infd_log(INFD_LOG_LEVEL_INFO, "model '%s': instance_group[%zu] KIND_AUTO is %s (%s)",
                     m->name, k, kind_name(ig->kind), reason);
        } else if (ig->kind == INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU) {
            if (n_gpus == 0)
                return infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                                      "%s: instance_group[%zu]: KIND_GPU, but no usable CUDA "
                                      "device: %s",
                                      cfile, k, why);
            if (missing >= 0)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: instance_group[%zu]: GPU %d does not exist (%d GPU%s)",
                                      cfile, k, missing, n_gpus, n_gpus == 1 ? "" : "s");
        }
        if (ig->kind == INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU && ig->n_gpus == 0 &&
            !set_gpus(ig, n_gpus))
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        if (ig->count == 0)
            ig->count = 1;
        if (ig->name[0] == '\0') {
            char name[300];
            snprintf(name, sizeof(name), "%s_%zu", m->name, k);
            if (!set_string(&ig->name, name))
                return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
        int places =
            ig->kind == INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU ? (int)ig->n_gpus : 1;
        if ((int64_t)ig->count * places > RT_MAX_INSTANCES - n)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: instance_group[%zu] makes the model's instances more than "
                                  "%d",
                                  cfile, k, RT_MAX_INSTANCES);
        n += ig->count * places;
    }
    m->n_inst = n;
    m->inst = infd_calloc((size_t)n, sizeof(rt_instance));
    if (!m->inst)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    /* Instances in group order, a GPU group's per GPU in its listed order;
     * devices are found (or added) as instances need them, then sorted. */
    int i = 0;
    for (size_t k = 0; k < c->n_instance_group; k++) {
        const Inference__ModelInstanceGroup *ig = c->instance_group[k];
        bool gpu = ig->kind == INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU;
        int places = gpu ? (int)ig->n_gpus : 1;
        for (int pl = 0; pl < places; pl++) {
            for (int r = 0; r < ig->count; r++, i++) {
                rt_instance *inst = &m->inst[i];
                inst->model = m;
                inst->index = i;
                inst->group = (int)k;
                inst->device = -1;
                infd_device_kind kind = gpu ? INFD_DEVICE_CUDA : INFD_DEVICE_CPU;
                int ord = gpu ? ig->gpus[pl] : 0;
                for (int d = 0; d < m->n_dev && inst->device < 0; d++)
                    if (m->dev[d].kind == kind && m->dev[d].gpu == ord)
                        inst->device = d;
                if (inst->device < 0) {
                    /* One slot stays free for a KIND_AUTO fallback to the CPU. */
                    if (m->n_dev == RT_MAX_DEVICES - 1)
                        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                                              "%s: the instance groups use more than %d devices",
                                              cfile, RT_MAX_DEVICES - 1);
                    rt_device *dev = &m->dev[m->n_dev];
                    memset(dev, 0, sizeof(*dev));
                    dev->kind = kind;
                    dev->gpu = ord;
                    dev->auto_only = true;
                    inst->device = m->n_dev++;
                }
                m->dev[inst->device].auto_only &= auto_group[k]; /* n_inst: sort_devices */
            }
        }
    }
    sort_devices(m);
    return INFD_STATUS_OK;
}

/* Orders m->dev as GPUs ascending, then the CPU, recounts their instances
 * and renumbers inst->device; a device left without instances is dropped
 * (its plans must have been freed). */
static void sort_devices(infd_model *m)
{
    rt_device old[RT_MAX_DEVICES];
    int map[RT_MAX_DEVICES];
    bool taken[RT_MAX_DEVICES] = { false };
    int n_old = m->n_dev, n = 0;
    memcpy(old, m->dev, sizeof(rt_device) * (size_t)n_old);
    for (int d = 0; d < n_old; d++) {
        old[d].n_inst = 0;
        map[d] = -1;
    }
    for (int i = 0; i < m->n_inst; i++)
        old[m->inst[i].device].n_inst++;
    for (;;) {
        int best = -1;
        for (int d = 0; d < n_old; d++) {
            if (taken[d] || old[d].n_inst == 0)
                continue;
            int key = old[d].kind == INFD_DEVICE_CPU ? INT32_MAX : old[d].gpu;
            int best_key = best < 0                            ? 0
                           : old[best].kind == INFD_DEVICE_CPU ? INT32_MAX
                                                               : old[best].gpu;
            if (best < 0 || key < best_key)
                best = d;
        }
        if (best < 0)
            break;
        taken[best] = true;
        map[best] = n;
        m->dev[n++] = old[best];
    }
    m->n_dev = n;
    for (int i = 0; i < m->n_inst; i++)
        m->inst[i].device = map[m->inst[i].device];
}

/* KIND_AUTO found a GPU that cannot run the model (an op the CUDA backend
 * lacks, a CUDA runtime that cannot start): every KIND_AUTO group moves to
 * the CPU, as if there were no GPU, and the config says so. */
static void auto_to_cpu(infd_model *m, const bool *auto_group, const char *why)
{
    Inference__ModelConfig *c = m->config;
    int cpu = -1;
    for (int d = 0; d < m->n_dev; d++)
        if (m->dev[d].kind == INFD_DEVICE_CPU)
            cpu = d;
    if (cpu < 0) { /* resolve_groups keeps a slot free for it */
        cpu = m->n_dev++;
        memset(&m->dev[cpu], 0, sizeof(m->dev[cpu]));
        m->dev[cpu].kind = INFD_DEVICE_CPU;
    }
    for (int i = 0; i < m->n_inst; i++)
        if (auto_group[m->inst[i].group])
            m->inst[i].device = cpu;
    for (size_t k = 0; k < c->n_instance_group; k++) {
        Inference__ModelInstanceGroup *ig = c->instance_group[k];
        if (!auto_group[k] || ig->kind != INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU)
            continue;
        infd_log(INFD_LOG_LEVEL_WARN,
                 "model '%s': instance_group[%zu] KIND_AUTO falls back to KIND_CPU: %s", m->name, k,
                 why);
        ig->kind = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU;
        infd_free(ig->gpus);
        ig->gpus = NULL;
        ig->n_gpus = 0;
    }
    bool used[RT_MAX_DEVICES] = { false };
    for (int i = 0; i < m->n_inst; i++)
        used[m->inst[i].device] = true;
    for (int d = 0; d < m->n_dev; d++) {
        if (used[d])
            continue;
        for (int p = 0; p < RT_MAX_PLANS; p++) {
            infd_plan_destroy(m->dev[d].plans[p]);
            m->dev[d].plans[p] = NULL;
        }
    }
    sort_devices(m);
}

/* Fills m->mem: per device, the model's shared weights there (host forms
 * on the CPU, device forms on a GPU) and the arenas of the contexts of the
 * instances there. */
static void measure_memory(infd_model *m)
{
    infd_weights_stats ws;
    infd_weights_get_stats(m->weights, &ws);
    m->n_mem = 0;
    m->mem_weight_bytes = ws.host_bytes + ws.device_bytes;
    m->mem_arena_bytes = 0;
    bool host_weights_counted = false;
    for (int d = 0; d < m->n_dev && m->n_mem < INFD_STATS_MAX_MEMORY; d++) {
        const rt_device *dev = &m->dev[d];
        uint64_t weights = 0, arenas = 0;
        for (int p = 0; p < m->n_plans; p++) {
            infd_plan_stats s;
            if (!dev->plans[p])
                continue;
            infd_plan_get_stats(dev->plans[p], &s);
            for (int k = 0; k < m->n_inst; k++)
                if (m->inst[k].device == d)
                    arenas += s.arena_bytes;
        }
        if (dev->kind == INFD_DEVICE_CUDA) {
            /* The shared device copies: what kernels read of the plan's
             * constants and their own converted weights. */
            weights =
                dev->gpu >= 0 && dev->gpu < INFD_WEIGHTS_MAX_GPUS ? ws.gpu_bytes[dev->gpu] : 0;
        } else {
            weights = ws.host_bytes;
            host_weights_counted = true;
        }
        m->mem_arena_bytes += arenas;
        infd_memory_usage *u = &m->mem[m->n_mem++];
        u->type = dev->kind == INFD_DEVICE_CUDA ? "GPU" : "CPU";
        u->id = dev->kind == INFD_DEVICE_CUDA ? dev->gpu : 0;
        u->byte_size = weights + arenas;
    }
    /* A GPU-only model's host forms (graph inputs and outputs it keeps). */
    if (!host_weights_counted && ws.host_bytes && m->n_mem < INFD_STATS_MAX_MEMORY) {
        for (int i = m->n_mem; i > 0; i--)
            m->mem[i] = m->mem[i - 1];
        m->mem[0] = (infd_memory_usage){ "CPU", 0, ws.host_bytes };
        m->n_mem++;
    }
}

/* One plan of a device built on a thread of its own (build_rest). */
typedef struct plan_job {
    infd_model *m;
    const rt_device *dev;
    int64_t batch;
    infd_plan *plan;
    infd_status st;
    infd_error err;
    pthread_t thread;
    bool threaded;
} plan_job;

static void *plan_job_main(void *arg)
{
    plan_job *j = arg;
    j->st = build_plan(j->m, j->dev, j->batch, &j->plan, &j->err);
    return NULL;
}

/* Builds the device's plans [1, n_sizes) that are not built yet, in
 * parallel on up to the machine's cores: plan 0 made every shared form
 * (reordered and converted weights), so these only compile their kernels
 * (infd_plan_create_from_weights is thread-safe). Successes land in
 * dev->plans[p] with from_job[p] set; failures leave dev->plans[p] NULL
 * and their status and error in st[p] and errs[p], for build_devices to
 * handle in order as if it had built them itself. */
static void build_rest(infd_model *m, rt_device *dev, const int64_t *sizes, int n_sizes,
                       bool *from_job, infd_status *st, infd_error *errs)
{
    plan_job jobs[RT_MAX_PLANS];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    /* One GPU's plans build one after the other: their kernels' tuning
     * times candidates on the GPU's one compile stream, so in parallel they
     * only waited for each other (ResNet-50 FP16, 4 plans on the H200: 40 s
     * to READY in parallel, 20 s one by one). */
    int width = dev->kind == INFD_DEVICE_CUDA ? 1 : (int)(cores > 1 ? cores : 1);
    for (int first = 1; first < n_sizes; first += width) {
        int last = INFD_MIN(n_sizes, first + width);
        for (int p = first; p < last; p++) {
            plan_job *j = &jobs[p];
            memset(j, 0, sizeof(*j));
            if (dev->plans[p])
                continue;
            j->m = m;
            j->dev = dev;
            j->batch = sizes[p];
            j->threaded = pthread_create(&j->thread, NULL, plan_job_main, j) == 0;
            if (!j->threaded)
                plan_job_main(j);
            from_job[p] = true;
        }
        for (int p = first; p < last; p++) {
            if (!from_job[p])
                continue;
            if (jobs[p].threaded)
                pthread_join(jobs[p].thread, NULL);
            dev->plans[p] = jobs[p].plan;
            st[p] = jobs[p].st;
            errs[p] = jobs[p].err;
        }
    }
}

/* Compiles every device's plans (GPUs first, so that a KIND_AUTO fallback
 * is settled before the CPU's plans are sized for their instances) and maps
 * the served batch sizes on the first plans built. */
static infd_status build_devices(infd_model *m, Inference__ModelConfig *c, const char *cfile,
                                 const bool *auto_group, const int64_t *sizes, int n_sizes,
                                 infd_error *err)
{
    int n_mapped = 0;
    m->n_plans = n_sizes;
    m->n_threads = 1; /* set below when instances run on the CPU */
    for (int d = 0; d < m->n_dev; d++) {
        rt_device *dev = &m->dev[d];
        if (dev->kind == INFD_DEVICE_CPU) {
            int threads = rt_server_threads(m->server);
            if (threads <= 0) {
                /* One core is left to the frontends and the clients: on 2
                 * cores a served BlazeFace batch of 8 took 6.9 ms with 2
                 * engine threads against 4.1 ms with 1, since each parallel
                 * step waited for the thread the HTTP loop had preempted
                 * (bench/RESULTS.md, serving). GPU instances use no engine
                 * threads. */
                long cores = sysconf(_SC_NPROCESSORS_ONLN);
                threads = (int)(cores > 1 ? cores - 1 : 1) / dev->n_inst;
            }
            m->n_threads = threads > 0 ? threads : 1;
        }
        bool from_job[RT_MAX_PLANS] = { false };
        infd_status job_st[RT_MAX_PLANS];
        infd_error job_err[RT_MAX_PLANS];
        for (int p = 0; p < n_sizes; p++) {
            if (dev->plans[p] && !from_job[p])
                continue; /* built before a fallback renumbered the devices */
            if (p == 1 && n_sizes > 2)
                build_rest(m, dev, sizes, n_sizes, from_job, job_st, job_err);
            infd_status st;
            if (from_job[p]) {
                from_job[p] = false;
                st = job_st[p];
                if (st != INFD_STATUS_OK && err)
                    *err = job_err[p];
            } else {
                st = build_plan(m, dev, sizes[p], &dev->plans[p], err);
            }
            if (st != INFD_STATUS_OK) {
                if (dev->kind == INFD_DEVICE_CUDA)
                    infd_error_prefix(err, "%s (GPU %d, batch %lld)", m->path, dev->gpu,
                                      (long long)sizes[p]);
                else
                    infd_error_prefix(err, "%s (batch %lld)", m->path, (long long)sizes[p]);
                if (dev->kind == INFD_DEVICE_CUDA && dev->auto_only &&
                    (st == INFD_STATUS_UNIMPLEMENTED || st == INFD_STATUS_UNAVAILABLE)) {
                    auto_to_cpu(m, auto_group, err ? err->msg : infd_status_str(st));
                    infd_error_clear(err);
                    d = -1; /* devices were renumbered: start over, built ones are kept */
                    break;
                }
                return st;
            }
            if (p < n_mapped)
                continue;
            if (p == 0) {
                st = complete_outputs(m, c, cfile, dev->plans[0], sizes[0], err);
                if (st != INFD_STATUS_OK)
                    return st;
            }
            m->plans[p].batch = sizes[p];
            st = map_plan(m, &m->plans[p], dev->plans[p], err);
            if (st != INFD_STATUS_OK)
                return st;
            n_mapped = p + 1;
        }
    }
    return INFD_STATUS_OK;
}

/* Whether every plan's context of the instance stages model input i (or,
 * with `output`, output i) in its own pinned memory: a GPU instance then
 * needs no host batch buffer for it (the batcher gathers into, and
 * scatters from, the staging). */
static bool staged_everywhere(const infd_model *m, rt_instance *inst, int i, bool output)
{
    for (int p = 0; p < m->n_plans; p++) {
        void *b = output ? infd_context_output_buffer(inst->ctxs[p], m->plans[p].out_map[i])
                         : infd_context_input_buffer(inst->ctxs[p], m->plans[p].in_map[i]);
        if (!b)
            return false;
    }
    return true;
}

static bool has_gpu_instances(const infd_model *m)
{
    for (int k = 0; k < m->n_inst; k++)
        if (m->dev[m->inst[k].device].kind == INFD_DEVICE_CUDA)
            return true;
    return false;
}

/* Threads that gather a batching model's large batches (scheduler.c): one
 * copy thread managed about 4.7 GB/s on the H100 machine's cores, so a
 * ResNet-50 batch of 128 (77 MB) took 16 ms to gather into a GPU instance's
 * pinned staging, longer than the GPU ran it. Models with GPU instances get
 * half the cores, at most 8, counting the calling instance thread; none
 * below 4 cores, where the frontends need them, and CPU-only models none
 * (their engine threads are busy). INFD_GATHER_THREADS=N sets the count for
 * every batching model (1: none). Creating the pool failing costs only the
 * speed: a warning, and batches are gathered serially. */
static void create_copy_pool(infd_model *m)
{
    if (m->max_batch <= 1)
        return;
    bool gpu = has_gpu_instances(m);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = gpu && cores >= 4 ? (int)(cores / 2 < 8 ? cores / 2 : 8) : 1;
    const char *env = getenv("INFD_GATHER_THREADS");
    if (env && *env)
        threads = atoi(env);
    if (threads <= 1)
        return;
    infd_error err = { 0 };
    if (infd_pool_create(threads - 1, 0, &m->copy_pool, &err) != INFD_STATUS_OK)
        infd_log(INFD_LOG_LEVEL_WARN, "model '%s': no parallel gather (%s)", m->name, err.msg);
    else
        INFD_LOG_DEBUG("model '%s': batches of 1 MB or more gathered by %d threads", m->name,
                       threads);
}

/* Models with GPU instances make the process's pinned memory pool (once),
 * which request bodies are received into and copied to the GPU from
 * (infd.h, "pinned memory pool"). Failing costs only the speed. */
static void create_pinned_pool(infd_model *m)
{
    size_t bytes = rt_server_pinned_pool_bytes(m->server);
    infd_error err = { 0 };
    if (has_gpu_instances(m) && bytes && rt_pinned_init(bytes, &err) != INFD_STATUS_OK)
        infd_log(INFD_LOG_LEVEL_WARN, "model '%s': no pinned memory pool (%s)", m->name, err.msg);
}

static infd_status create_instances(infd_model *m, infd_error *err)
{
    int64_t max_rows = m->plans[m->n_plans - 1].batch;
    for (int k = 0; k < m->n_inst; k++) {
        rt_instance *inst = &m->inst[k];
        for (int p = 0; p < m->n_plans; p++) {
            infd_status st = infd_context_create(rt_instance_plan(inst, p), &inst->ctxs[p], err);
            if (st != INFD_STATUS_OK)
                return st;
        }
        inst->pieces_cap = RT_PIECES(max_rows);
        for (int i = 0; i < m->n_in; i++) {
            if (staged_everywhere(m, inst, i, false)) {
                inst->pieces[i] = infd_calloc((size_t)inst->pieces_cap, sizeof(infd_data_segment));
                if (!inst->pieces[i])
                    return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
                continue;
            }
            size_t bytes = (size_t)max_rows * m->in[i].row_bytes;
            inst->in_buf[i] = infd_aligned_alloc(INFD_ALIGNMENT, bytes ? bytes : 1);
            if (!inst->in_buf[i])
                return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
            memset(inst->in_buf[i], 0, bytes);
        }
        for (int j = 0; j < m->n_out; j++) {
            if (staged_everywhere(m, inst, j, true))
                continue;
            size_t bytes = (size_t)max_rows * m->out[j].row_bytes;
            inst->out_buf[j] = infd_aligned_alloc(INFD_ALIGNMENT, bytes ? bytes : 1);
            if (!inst->out_buf[j])
                return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
    }
    /* Device inputs are read where they lie when every instance copies
     * every client input to its GPU from pieces. */
    m->device_inputs = m->n_inst > 0;
    for (int k = 0; k < m->n_inst && m->device_inputs; k++) {
        const rt_instance *inst = &m->inst[k];
        m->device_inputs = m->dev[inst->device].kind == INFD_DEVICE_CUDA;
        for (int i = 0; i < m->n_in_pub && m->device_inputs; i++)
            m->device_inputs = inst->pieces[i] != NULL;
    }
    create_copy_pool(m);
    create_pinned_pool(m);
    return INFD_STATUS_OK;
}

/* "2 on GPU 0 (FP16), 1 on the CPU x 3 threads" for the READY log line. */
static void describe_devices(const infd_model *m, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int d = 0; d < m->n_dev && at < n; d++) {
        const rt_device *dev = &m->dev[d];
        int w;
        if (dev->kind == INFD_DEVICE_CUDA)
            w = snprintf(buf + at, n - at, "%s%d on GPU %d%s", d ? ", " : "", dev->n_inst, dev->gpu,
                         m->gpu_precision == INFD_PRECISION_FP16   ? " (FP16)"
                         : m->gpu_precision == INFD_PRECISION_BF16 ? " (BF16)"
                         : m->gpu_precision == INFD_PRECISION_TF32 ? " (TF32)"
                                                                   : "");
        else
            w = snprintf(buf + at, n - at, "%s%d on the CPU x %d thread(s)", d ? ", " : "",
                         dev->n_inst, m->n_threads);
        if (w < 0)
            break;
        at += (size_t)w;
    }
}

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* ------------------------------------------------------------------------- */
/* Models of a plugin kind                                                   */
/* ------------------------------------------------------------------------- */

static bool same_dims(const int64_t *a, size_t na, const int64_t *b, int nb)
{
    if ((int)na != nb)
        return false;
    for (int d = 0; d < nb; d++)
        if (a[d] != b[d])
            return false;
    return true;
}

/* Checks the config's inputs and outputs against those the kind declared
 * (m->in, m->out) and adds the ones it leaves out, so metadata and the
 * config show them all. */
static infd_status complete_kind_io(infd_model *m, Inference__ModelConfig *c, const char *cfile,
                                    infd_error *err)
{
    for (int pass = 0; pass < 2; pass++) {
        bool out = pass == 1;
        size_t n_cfg = out ? c->n_output : c->n_input;
        int n_decl = out ? m->n_out : m->n_in;
        const infd_model_io *decl = out ? m->out : m->in;
        const char *what = out ? "output" : "input";
        for (size_t k = 0; k < n_cfg; k++) {
            const char *name = out ? c->output[k]->name : c->input[k]->name;
            Inference__DataType t = out ? c->output[k]->data_type : c->input[k]->data_type;
            const int64_t *dims = out ? c->output[k]->dims : c->input[k]->dims;
            size_t nd = out ? c->output[k]->n_dims : c->input[k]->n_dims;
            int i = 0;
            while (i < n_decl && strcmp(decl[i].name, name) != 0)
                i++;
            if (i == n_decl)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: %s[%zu] '%s': backend '%s' has no such %s", cfile, what,
                                      k, name, c->backend, what);
            if (t != INFERENCE__DATA_TYPE__TYPE_INVALID && dtype_of(t) != decl[i].dtype)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: %s '%s': data_type %s, backend '%s' gives %s", cfile,
                                      what, name, type_name(t), c->backend,
                                      type_name(type_of(decl[i].dtype)));
            if (nd > 0 && !same_dims(dims, nd, decl[i].dims, decl[i].rank))
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "%s: %s '%s': dims differ from backend '%s''s (%d dims; -1 "
                                      "is any length)",
                                      cfile, what, name, c->backend, decl[i].rank);
        }
        for (int i = 0; i < n_decl; i++) {
            bool listed = false;
            for (size_t k = 0; k < n_cfg && !listed; k++)
                listed = strcmp(out ? c->output[k]->name : c->input[k]->name, decl[i].name) == 0;
            if (listed)
                continue;
            bool ok;
            if (out) {
                Inference__ModelOutput *co = infd_malloc(sizeof(*co));
                ok = co != NULL;
                if (ok) {
                    inference__model_output__init(co);
                    ok = push_ptr((void ***)&c->output, &c->n_output, co);
                    if (!ok)
                        infd_free(co);
                }
                ok = ok && set_string(&co->name, decl[i].name) &&
                     set_dims(&co->dims, &co->n_dims, decl[i].dims, decl[i].rank);
                if (ok)
                    co->data_type = type_of(decl[i].dtype);
            } else {
                Inference__ModelInput *ci = infd_malloc(sizeof(*ci));
                ok = ci != NULL;
                if (ok) {
                    inference__model_input__init(ci);
                    ok = push_ptr((void ***)&c->input, &c->n_input, ci);
                    if (!ok)
                        infd_free(ci);
                }
                ok = ok && set_string(&ci->name, decl[i].name) &&
                     set_dims(&ci->dims, &ci->n_dims, decl[i].dims, decl[i].rank);
                if (ok)
                    ci->data_type = type_of(decl[i].dtype);
            }
            if (!ok)
                return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
    }
    return INFD_STATUS_OK;
}

/* The rest of rt_model_load for a model of a plugin kind. */
static infd_status load_kind_model(infd_model *m, const char *version_dir, const char *cfile,
                                   bool *auto_group, infd_error *err)
{
    Inference__ModelConfig *c = m->config;
    if (c->max_batch_size < 0 || c->max_batch_size > INFD_STATS_MAX_BATCH)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: max_batch_size is %d; it must be in 0..%d", cfile,
                              c->max_batch_size, INFD_STATS_MAX_BATCH);
    m->max_batch = c->max_batch_size;
    if (c->platform[0] == '\0' && !set_string(&c->platform, m->kind->platform))
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    if (strcmp(c->platform, m->kind->platform) != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: platform '%s', but backend '%s' is platform '%s'", cfile,
                              c->platform, c->backend, m->kind->platform);
    if (m->kind == &rt_ensemble_kind) {
        /* An ensemble's "instances" are how many of its batches run at
         * once; its steps run on their own models' instances. */
        bool ens = c->scheduling_choice_case ==
                   INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_ENSEMBLE_SCHEDULING;
        if (c->n_instance_group || !ens)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: an ensemble takes ensemble_scheduling, and no "
                                  "instance_group, dynamic_batching or sequence_batching "
                                  "(ensemble_scheduling.max_inflight_responses sets how many of "
                                  "its requests run at once)",
                                  cfile);
        Inference__ModelInstanceGroup *ig = infd_malloc(sizeof(*ig));
        if (!ig)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        inference__model_instance_group__init(ig);
        ig->kind = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU;
        uint32_t inflight = c->ensemble_scheduling->max_inflight_responses;
        ig->count = inflight == 0 ? 16 : inflight > 64 ? 64 : (int)inflight;
        if (!push_ptr((void ***)&c->instance_group, &c->n_instance_group, ig)) {
            infd_free(ig);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        }
    }
    infd_status st = resolve_groups(m, c, cfile, auto_group, err);
    if (st == INFD_STATUS_OK)
        st = configure_queues(m, c, cfile, err);
    if (st == INFD_STATUS_OK)
        st = rt_plugin_load(m, version_dir, cfile, err);
    m->n_in_pub = m->n_in; /* a kind's inputs and outputs are all the client's */
    m->n_out_pub = m->n_out;
    if (st == INFD_STATUS_OK)
        st = complete_kind_io(m, c, cfile, err);
    if (st != INFD_STATUS_OK)
        return st;
    m->accepting = true;
    return rt_model_start_workers(m, err);
}

infd_status rt_model_load(infd_server *server, const char *name, int64_t version,
                          const char *version_dir, const Inference__ModelConfig *config,
                          const char *cfile, infd_model **out, infd_error *err)
{
    *out = NULL;
    uint64_t t0 = infd_clock_ns();
    infd_status st = INFD_STATUS_OK;
    bool auto_group[RT_MAX_GROUPS] = { false };
    infd_model *m = infd_calloc(1, sizeof(*m));
    if (!m)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    atomic_init(&m->refs, 1);
    atomic_init(&m->state, INFD_MODEL_STATE_LOADING);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->work_cv, NULL);
    pthread_cond_init(&m->drain_cv, NULL);
    m->server = server;
    m->version = version;
    m->name = infd_strdup(name);
    m->latency = infd_histogram_create();
    if (!m->name || !m->latency) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    st = config_copy(config, &m->config, err);
    if (st != INFD_STATUS_OK)
        goto out;
    Inference__ModelConfig *c = m->config;
    if (c->name[0] == '\0') {
        if (!set_string(&c->name, name)) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
            goto out;
        }
    } else if (strcmp(c->name, name) != 0) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: name is '%s' but the model folder is '%s'", cfile, c->name, name);
        goto out;
    }
    m->kind = c->backend[0]                          ? rt_kind_find(c->backend)
              : strcmp(c->platform, "ensemble") == 0 ? &rt_ensemble_kind
                                                     : NULL;
    if (m->kind) {
        st = load_kind_model(m, version_dir, cfile, auto_group, err);
        if (st == INFD_STATUS_OK)
            st = rt_labels_load(m, version_dir, cfile, err);
        if (st != INFD_STATUS_OK)
            goto out;
        atomic_store(&m->state, INFD_MODEL_STATE_READY);
        infd_log(INFD_LOG_LEVEL_INFO,
                 "model '%s' version %lld READY: backend %s, %d input(s), %d output(s), "
                 "max_batch_size %d, %d instance(s), %s batching, loaded in %.0f ms",
                 m->name, (long long)version, c->backend[0] ? c->backend : c->platform, m->n_in,
                 m->n_out, m->max_batch, m->n_inst,
                 m->seq       ? "sequence"
                 : m->dynamic ? "dynamic"
                              : "no",
                 (double)(infd_clock_ns() - t0) / 1e6);
        *out = m;
        return INFD_STATUS_OK;
    }
    bool onnx_platform = c->platform[0] == '\0' || strcmp(c->platform, "onnxruntime_onnx") == 0;
    bool onnx_backend = c->backend[0] == '\0' || strcmp(c->backend, "onnxruntime") == 0 ||
                        strcmp(c->backend, "infd") == 0;
    if (!onnx_platform || !onnx_backend) {
        st = infd_error_set(err, INFD_STATUS_UNIMPLEMENTED,
                            "%s: platform '%s' / backend '%s': infd serves ONNX models "
                            "(platform onnxruntime_onnx, backend onnxruntime) and the backends "
                            "registered with it (%s)",
                            cfile, c->platform, c->backend, rt_kind_names());
        goto out;
    }
    if ((c->platform[0] == '\0' && !set_string(&c->platform, "onnxruntime_onnx")) ||
        (c->backend[0] == '\0' && !set_string(&c->backend, "onnxruntime"))) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    const char *file = c->default_model_filename[0] ? c->default_model_filename : "model.onnx";
    if (strchr(file, '/') || strcmp(file, "..") == 0) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: default_model_filename '%s' must be a file name", cfile, file);
        goto out;
    }
    size_t plen = strlen(version_dir) + strlen(file) + 2;
    m->path = infd_malloc(plen);
    if (!m->path) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    snprintf(m->path, plen, "%s/%s", version_dir, file);
    if (!file_exists(m->path)) {
        st = infd_error_set(err, INFD_STATUS_NOT_FOUND, "%s: no model file", m->path);
        goto out;
    }
    /* Loaded once: the config is completed from it, and every plan is
     * built from it. */
    st = infd_weights_create(m->path, &m->weights, err);
    if (st != INFD_STATUS_OK)
        goto out;
    const infd_ir_graph *model_graph = NULL;
    st = infd_weights_use_model(m->weights, &model_graph, err);
    if (st != INFD_STATUS_OK)
        goto out;
    st = complete_inputs(m, c, cfile, model_graph, err);
    infd_weights_unuse_model(m->weights);
    if (st != INFD_STATUS_OK)
        goto out;
    st = read_precision(m, c, cfile, err);
    if (st == INFD_STATUS_OK)
        st = resolve_groups(m, c, cfile, auto_group, err);
    if (st == INFD_STATUS_OK)
        st = configure_queues(m, c, cfile, err);
    if (st != INFD_STATUS_OK)
        goto out;
    int64_t sizes[RT_MAX_PLANS];
    int n_sizes = plan_sizes(m, sizes);
    st = build_devices(m, c, cfile, auto_group, sizes, n_sizes, err);
    if (st != INFD_STATUS_OK)
        goto out;
    infd_weights_trim(m->weights); /* the plans hold what they use */
    st = create_instances(m, err);
    if (st == INFD_STATUS_OK)
        st = rt_labels_load(m, version_dir, cfile, err);
    if (st != INFD_STATUS_OK)
        goto out;
    st = rt_model_warmup(m, err);
    if (st != INFD_STATUS_OK)
        goto out;
    m->accepting = true;
    st = rt_model_start_workers(m, err);
    if (st != INFD_STATUS_OK)
        goto out;
    atomic_store(&m->state, INFD_MODEL_STATE_READY);
    char where[256];
    describe_devices(m, where, sizeof(where));
    measure_memory(m);
    char mem[256];
    size_t at = 0;
    for (int i = 0; i < m->n_mem && at < sizeof(mem); i++)
        at += (size_t)snprintf(mem + at, sizeof(mem) - at, "%s%s %lld %.1f MiB", i ? ", " : "",
                               m->mem[i].type, (long long)m->mem[i].id,
                               (double)m->mem[i].byte_size / 1048576.0);
    infd_log(INFD_LOG_LEVEL_INFO,
             "model '%s' version %lld memory: %s (weights %.1f MiB, one copy for %d plan(s) on "
             "%d device(s); arenas %.1f MiB)",
             m->name, (long long)version, m->n_mem ? mem : "none",
             (double)m->mem_weight_bytes / 1048576.0, m->n_plans, m->n_dev,
             (double)m->mem_arena_bytes / 1048576.0);
    infd_log(INFD_LOG_LEVEL_INFO,
             "model '%s' version %lld READY: %d input(s), %d output(s), max_batch_size %d, %d "
             "plan(s), %d instance(s) (%s), %s batching, loaded in %.0f ms",
             m->name, (long long)version, m->n_in, m->n_out, m->max_batch, m->n_plans, m->n_inst,
             where, m->dynamic ? "dynamic" : "no", (double)(infd_clock_ns() - t0) / 1e6);
    *out = m;
    m = NULL;
out:
    if (m) {
        rt_model_stop(m);
        rt_model_free(m);
    }
    return st;
}

void rt_model_stop(infd_model *m)
{
    pthread_mutex_lock(&m->mu);
    m->accepting = false;
    while (m->pending > 0)
        pthread_cond_wait(&m->drain_cv, &m->mu);
    m->stop_workers = true;
    pthread_cond_broadcast(&m->work_cv);
    pthread_mutex_unlock(&m->mu);
    for (int k = 0; m->inst && k < m->n_inst; k++)
        if (m->inst[k].started) {
            pthread_join(m->inst[k].thread, NULL);
            m->inst[k].started = false;
        }
}

void rt_model_free(infd_model *m)
{
    if (!m)
        return;
    for (int k = 0; m->inst && k < m->n_inst; k++) {
        rt_instance *inst = &m->inst[k];
        INFD_ASSERT(!inst->started);
        for (int p = 0; p < m->n_plans; p++)
            infd_context_destroy(inst->ctxs[p]);
        for (int i = 0; i < INFD_MAX_MODEL_IO; i++) {
            infd_free(inst->in_buf[i]);
            infd_free(inst->out_buf[i]);
            infd_free(inst->pieces[i]);
        }
    }
    if (m->kind) {
        if (m->kind_state)
            m->kind->unload(m->kind_state);
        for (int i = 0; i < m->n_in; i++)
            infd_free((char *)m->in[i].name);
        for (int j = 0; j < m->n_out; j++)
            infd_free((char *)m->out[j].name);
    }
    rt_seq_free(m);
    infd_free(m->inst);
    infd_pool_destroy(m->copy_pool);
    for (int d = 0; d < m->n_dev; d++)
        for (int p = 0; p < RT_MAX_PLANS; p++)
            infd_plan_destroy(m->dev[d].plans[p]);
    rt_request_pool_free(m);
    rt_labels_free(m);
    rt_config_free(m->config);
    infd_histogram_destroy(m->latency);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->work_cv);
    pthread_cond_destroy(&m->drain_cv);
    infd_weights_destroy(m->weights);
    infd_free(m->path);
    infd_free(m->name);
    infd_free(m);
}

/* ------------------------------------------------------------------------- */
/* Public model API                                                          */
/* ------------------------------------------------------------------------- */

void infd_model_retain(infd_model *model)
{
    atomic_fetch_add(&model->refs, 1);
}

void infd_model_release(infd_model *model)
{
    if (!model)
        return;
    int before = atomic_fetch_sub(&model->refs, 1);
    INFD_ASSERT(before >= 1);
    if (before == 1)
        rt_model_free(model);
}

const char *infd_model_name(const infd_model *model)
{
    return model->name;
}

int64_t infd_model_version(const infd_model *model)
{
    return model->version;
}

const char *infd_model_platform(const infd_model *model)
{
    return model->config->platform;
}

int infd_model_max_batch_size(const infd_model *model)
{
    return model->max_batch;
}

bool infd_model_is_ready(const infd_model *model)
{
    return atomic_load(&((infd_model *)model)->state) == INFD_MODEL_STATE_READY;
}

int infd_model_n_inputs(const infd_model *model)
{
    return model->n_in_pub;
}

int infd_model_n_outputs(const infd_model *model)
{
    return model->n_out_pub;
}

infd_status infd_model_input(const infd_model *model, int i, infd_model_io *out)
{
    if (i < 0 || i >= model->n_in_pub)
        return INFD_STATUS_NOT_FOUND;
    *out = model->in[i];
    return INFD_STATUS_OK;
}

infd_status infd_model_output(const infd_model *model, int i, infd_model_io *out)
{
    if (i < 0 || i >= model->n_out_pub)
        return INFD_STATUS_NOT_FOUND;
    *out = model->out[i];
    return INFD_STATUS_OK;
}

int infd_model_input_index(const infd_model *model, const char *name)
{
    for (int i = 0; name && i < model->n_in_pub; i++)
        if (strcmp(model->in[i].name, name) == 0)
            return i;
    return -1;
}

int infd_model_output_index(const infd_model *model, const char *name)
{
    for (int j = 0; name && j < model->n_out_pub; j++)
        if (strcmp(model->out[j].name, name) == 0)
            return j;
    return -1;
}

infd_status infd_model_config_json(const infd_model *model, char **out, size_t *n, infd_error *err)
{
    return infd_pbjson_write_flags(&model->config->base, INFD_PBJSON_INT64_AS_NUMBER, out, n, err);
}

infd_status infd_model_config_pb(const infd_model *model, void **out, size_t *n, infd_error *err)
{
    *out = NULL;
    *n = 0;
    size_t len = protobuf_c_message_get_packed_size(&model->config->base);
    /* One byte more so an empty config is not a zero-size allocation. */
    uint8_t *buf = infd_malloc(len + 1);
    if (!buf)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                              "model '%s': out of memory packing its config (%zu bytes)",
                              model->name, len);
    protobuf_c_message_pack(&model->config->base, buf);
    *out = buf;
    *n = len;
    return INFD_STATUS_OK;
}

static const double g_latency_bounds_us[INFD_LATENCY_BUCKETS] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 5000000,
};

const double *infd_latency_bucket_bounds_us(void)
{
    return g_latency_bounds_us;
}

#define LOAD(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

void infd_model_get_stats(const infd_model *model, infd_model_stats *out)
{
    infd_model *m = (infd_model *)model;
    const infd_model_stats *s = &m->st;
    memset(out, 0, sizeof(*out));
    out->success_count = LOAD(s->success_count);
    out->failure_count = LOAD(s->failure_count);
    out->inference_count = LOAD(s->inference_count);
    out->execution_count = LOAD(s->execution_count);
    out->success_ns = LOAD(s->success_ns);
    out->failure_ns = LOAD(s->failure_ns);
    out->queue_ns = LOAD(s->queue_ns);
    out->compute_input_ns = LOAD(s->compute_input_ns);
    out->compute_infer_ns = LOAD(s->compute_infer_ns);
    out->compute_output_ns = LOAD(s->compute_output_ns);
    out->last_inference_ms = LOAD(s->last_inference_ms);
    for (int b = 0; b <= INFD_STATS_MAX_BATCH; b++) {
        out->batch_exec_count[b] = LOAD(s->batch_exec_count[b]);
        out->batch_compute_ns[b] = LOAD(s->batch_compute_ns[b]);
    }
    for (int i = 0; i < m->n_mem; i++)
        out->memory_usage[i] = m->mem[i];
    out->n_memory_usage = m->n_mem;
    out->weight_bytes = m->mem_weight_bytes;
    out->arena_bytes = m->mem_arena_bytes;
    pthread_mutex_lock(&m->mu);
    out->queue_depth = m->depth;
    out->pending_count = m->pending;
    pthread_mutex_unlock(&m->mu);
    uint64_t prev = 0;
    for (int k = 0; k < INFD_LATENCY_BUCKETS; k++) {
        uint64_t le = infd_histogram_count_le(m->latency, (uint64_t)(g_latency_bounds_us[k] * 1e3));
        out->latency_buckets[k] = le - prev;
        prev = le;
    }
    out->latency_buckets[INFD_LATENCY_BUCKETS] = infd_histogram_count(m->latency) - prev;
    out->latency_p50_us = (double)infd_histogram_quantile(m->latency, 0.50) / 1e3;
    out->latency_p90_us = (double)infd_histogram_quantile(m->latency, 0.90) / 1e3;
    out->latency_p95_us = (double)infd_histogram_quantile(m->latency, 0.95) / 1e3;
    out->latency_p99_us = (double)infd_histogram_quantile(m->latency, 0.99) / 1e3;
}
