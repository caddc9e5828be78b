/*
 * contract.c - a speech model's contract as JSON, written and checked
 * (contract.h). yajl generates and parses; the check compares the model's
 * own document with the file's, field by field.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_gen.h>
#include <yajl/yajl_tree.h>

#include "apps/asr/contract.h"

void asr_contract_record(asr_contract_net *net, const char *role, const char *file,
                         const infd_plan *p)
{
    memset(net, 0, sizeof(*net));
    net->role = role;
    net->file = file;
    for (int out = 0; out < 2; out++) {
        int n = out ? infd_plan_n_outputs(p) : infd_plan_n_inputs(p);
        if (n > ASR_CONTRACT_MAX_IO)
            n = ASR_CONTRACT_MAX_IO;
        for (int i = 0; i < n; i++) {
            infd_tensor_info t;
            if ((out ? infd_plan_output(p, i, &t) : infd_plan_input(p, i, &t)) != INFD_STATUS_OK)
                break;
            asr_contract_io *io = out ? &net->out[i] : &net->in[i];
            snprintf(io->name, sizeof(io->name), "%s", t.name);
            io->dtype = t.dtype;
            io->rank = t.shape.rank;
            for (int d = 0; d < t.shape.rank; d++)
                io->dims[d] = t.shape.dims[d];
            if (out)
                net->n_out = i + 1;
            else
                net->n_in = i + 1;
        }
    }
}

static void key(yajl_gen g, const char *k)
{
    yajl_gen_string(g, (const unsigned char *)k, strlen(k));
}

static void str(yajl_gen g, const char *k, const char *v)
{
    key(g, k);
    yajl_gen_string(g, (const unsigned char *)v, strlen(v));
}

static void integer(yajl_gen g, const char *k, long long v)
{
    key(g, k);
    yajl_gen_integer(g, v);
}

/* A float as the shortest text that reads back the same float. */
static void real(yajl_gen g, const char *k, double v)
{
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%.9g", v);
    key(g, k);
    yajl_gen_number(g, buf, (size_t)n);
}

static void tensors(yajl_gen g, const char *k, const asr_contract_io *io, int n)
{
    key(g, k);
    yajl_gen_array_open(g);
    for (int i = 0; i < n; i++) {
        yajl_gen_map_open(g);
        str(g, "name", io[i].name);
        str(g, "dtype", infd_dtype_name(io[i].dtype));
        key(g, "shape");
        yajl_gen_array_open(g);
        for (int d = 0; d < io[i].rank; d++)
            if (io[i].dims[d] < 0)
                yajl_gen_string(g, (const unsigned char *)"?", 1);
            else
                yajl_gen_integer(g, io[i].dims[d]);
        yajl_gen_array_close(g);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
}

char *asr_contract_json(const asr_contract *c)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    if (!g)
        return NULL;
    yajl_gen_config(g, yajl_gen_beautify, 1);
    yajl_gen_config(g, yajl_gen_indent_string, "  ");
    yajl_gen_map_open(g);
    str(g, "contract", ASR_CONTRACT_NAME);
    str(g, "model", c->model);
    str(g, "layout", c->layout);
    const asr_feature_params *f = &c->features;
    key(g, "features");
    yajl_gen_map_open(g);
    integer(g, "sample_rate", f->sample_rate);
    integer(g, "n_fft", f->n_fft);
    integer(g, "win_length", f->win_length);
    str(g, "window", "hann (symmetric)");
    integer(g, "hop_length", f->hop_length);
    integer(g, "n_mels", f->n_mels);
    str(g, "mel_scale", "slaney");
    real(g, "preemphasis", f->preemph);
    real(g, "f_min", f->f_min);
    real(g, "f_max", f->f_max > 0 ? f->f_max : f->sample_rate / 2.0);
    real(g, "log_guard", f->log_guard);
    str(g, "normalize", f->normalize == ASR_NORM_PER_FEATURE ? "per_feature" : "NA");
    yajl_gen_map_close(g);
    key(g, "networks");
    yajl_gen_map_open(g);
    for (int i = 0; i < c->n_nets; i++) {
        key(g, c->nets[i].role);
        yajl_gen_map_open(g);
        str(g, "file", c->nets[i].file);
        tensors(g, "inputs", c->nets[i].in, c->nets[i].n_in);
        tensors(g, "outputs", c->nets[i].out, c->nets[i].n_out);
        yajl_gen_map_close(g);
    }
    yajl_gen_map_close(g);
    key(g, "encoder");
    yajl_gen_map_open(g);
    integer(g, "subsampling", c->subsampling);
    integer(g, "d_model", c->d_model);
    yajl_gen_map_close(g);
    key(g, "predictor");
    yajl_gen_map_open(g);
    integer(g, "layers", c->pred_layers);
    integer(g, "hidden", c->pred_hidden);
    yajl_gen_map_close(g);
    key(g, "tdt");
    yajl_gen_map_open(g);
    integer(g, "vocab_size", c->tdt.vocab);
    integer(g, "blank_id", c->tdt.vocab);
    key(g, "durations");
    yajl_gen_array_open(g);
    for (int i = 0; i < c->tdt.n_durations; i++)
        yajl_gen_integer(g, c->tdt.durations[i]);
    yajl_gen_array_close(g);
    integer(g, "max_symbols_per_step", c->tdt.max_symbols);
    yajl_gen_map_close(g);
    key(g, "cache");
    yajl_gen_map_open(g);
    str(g, "kind", c->cache_kind);
    if (strcmp(c->cache_kind, "cache_aware") == 0) {
        integer(g, "window_size", c->window);
        integer(g, "chunk_shift", c->shift);
    }
    yajl_gen_map_close(g);
    yajl_gen_map_close(g);
    const unsigned char *buf = NULL;
    size_t len = 0;
    char *out = NULL;
    if (yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok && (out = malloc(len + 2))) {
        memcpy(out, buf, len);
        out[len] = '\n';
        out[len + 1] = '\0';
    }
    yajl_gen_free(g);
    return out;
}

/* A value, briefly, for a message. */
static void show(yajl_val v, char *buf, size_t n)
{
    if (!v)
        snprintf(buf, n, "nothing");
    else if (YAJL_IS_STRING(v))
        snprintf(buf, n, "\"%.80s\"", YAJL_GET_STRING(v));
    else if (YAJL_IS_NUMBER(v))
        snprintf(buf, n, "%.40s", YAJL_GET_NUMBER(v));
    else if (YAJL_IS_OBJECT(v))
        snprintf(buf, n, "an object");
    else if (YAJL_IS_ARRAY(v))
        snprintf(buf, n, "a list of %zu", YAJL_GET_ARRAY(v)->len);
    else if (YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v))
        snprintf(buf, n, "%s", YAJL_IS_TRUE(v) ? "true" : "false");
    else
        snprintf(buf, n, "null");
}

static bool same_kind(yajl_val a, yajl_val b)
{
    return (YAJL_IS_STRING(a) && YAJL_IS_STRING(b)) || (YAJL_IS_NUMBER(a) && YAJL_IS_NUMBER(b)) ||
           (YAJL_IS_OBJECT(a) && YAJL_IS_OBJECT(b)) || (YAJL_IS_ARRAY(a) && YAJL_IS_ARRAY(b)) ||
           (YAJL_IS_TRUE(a) && YAJL_IS_TRUE(b)) || (YAJL_IS_FALSE(a) && YAJL_IS_FALSE(b)) ||
           (YAJL_IS_NULL(a) && YAJL_IS_NULL(b));
}

static infd_status differ(const char *path, const char *field, yajl_val model, yajl_val file,
                          infd_error *err)
{
    char m[128], f[128];
    show(model, m, sizeof(m));
    show(file, f, sizeof(f));
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                          "%s: %s: the model has %s, the contract %s", path, field, m, f);
}

/* Compares the model's value with the file's at `field` (depth-limited:
 * the model's document is 6 deep). */
static infd_status compare(const char *path, const char *field, yajl_val model, yajl_val file,
                           int depth, infd_error *err)
{
    if (!same_kind(model, file) || depth > 8)
        return differ(path, field, model, file, err);
    char sub[512];
    if (YAJL_IS_OBJECT(model)) {
        size_t nm = YAJL_GET_OBJECT(model)->len, nf = YAJL_GET_OBJECT(file)->len;
        for (size_t i = 0; i < nm; i++) {
            const char *k = YAJL_GET_OBJECT(model)->keys[i];
            yajl_val fv = NULL;
            for (size_t j = 0; j < nf && !fv; j++)
                if (strcmp(YAJL_GET_OBJECT(file)->keys[j], k) == 0)
                    fv = YAJL_GET_OBJECT(file)->values[j];
            snprintf(sub, sizeof(sub), "%s%s%s", field, *field ? "." : "", k);
            infd_status st =
                compare(path, sub, YAJL_GET_OBJECT(model)->values[i], fv, depth + 1, err);
            if (st != INFD_STATUS_OK)
                return st;
        }
        for (size_t j = 0; j < nf; j++) {
            const char *k = YAJL_GET_OBJECT(file)->keys[j];
            bool found = false;
            for (size_t i = 0; i < nm && !found; i++)
                found = strcmp(YAJL_GET_OBJECT(model)->keys[i], k) == 0;
            if (!found) {
                snprintf(sub, sizeof(sub), "%s%s%s", field, *field ? "." : "", k);
                return differ(path, sub, NULL, YAJL_GET_OBJECT(file)->values[j], err);
            }
        }
        return INFD_STATUS_OK;
    }
    if (YAJL_IS_ARRAY(model)) {
        size_t nm = YAJL_GET_ARRAY(model)->len, nf = YAJL_GET_ARRAY(file)->len;
        for (size_t i = 0; i < nm || i < nf; i++) {
            yajl_val mv = i < nm ? YAJL_GET_ARRAY(model)->values[i] : NULL;
            yajl_val fv = i < nf ? YAJL_GET_ARRAY(file)->values[i] : NULL;
            /* a tensor is named by its name, from whichever side has it */
            const char *name_key[] = { "name", NULL };
            yajl_val name = mv && YAJL_IS_OBJECT(mv)   ? yajl_tree_get(mv, name_key, yajl_t_string)
                            : fv && YAJL_IS_OBJECT(fv) ? yajl_tree_get(fv, name_key, yajl_t_string)
                                                       : NULL;
            if (name)
                snprintf(sub, sizeof(sub), "%s[%zu] ('%.100s')", field, i, YAJL_GET_STRING(name));
            else
                snprintf(sub, sizeof(sub), "%s[%zu]", field, i);
            infd_status st = compare(path, sub, mv, fv, depth + 1, err);
            if (st != INFD_STATUS_OK)
                return st;
        }
        return INFD_STATUS_OK;
    }
    if (YAJL_IS_STRING(model)) {
        const char *a = YAJL_GET_STRING(model), *b = YAJL_GET_STRING(file);
        if (!a || !b || strcmp(a, b) != 0)
            return differ(path, field, model, file, err);
    }
    if (YAJL_IS_NUMBER(model)) {
        double a = YAJL_GET_DOUBLE(model), b = YAJL_GET_DOUBLE(file);
        if (!(fabs(a - b) <= 1e-6 * fmax(1.0, fabs(a))))
            return differ(path, field, model, file, err);
    }
    return INFD_STATUS_OK;
}

/* Nesting beyond any contract's (which is 6 deep), found before yajl
 * builds a tree of it: strings skipped, brackets counted. */
static bool too_deep(const char *s)
{
    int depth = 0;
    for (bool in_str = false; *s; s++) {
        if (in_str) {
            if (*s == '\\' && s[1])
                s++;
            else if (*s == '"')
                in_str = false;
        } else if (*s == '"') {
            in_str = true;
        } else if (*s == '[' || *s == '{') {
            if (++depth > 16)
                return true;
        } else if (*s == ']' || *s == '}') {
            depth--;
        }
    }
    return false;
}

/* yajl's message without the lines of the file it quotes after it: an
 * error can reach a network client (the repository index's reason), and
 * the file need not be JSON at all (a contract path pointing elsewhere). */
static void first_line(char *ebuf)
{
    ebuf[strcspn(ebuf, "\n")] = '\0';
    size_t k = strlen(ebuf);
    while (k > 0 && ebuf[k - 1] == ' ')
        ebuf[--k] = '\0';
}

infd_status asr_contract_check(const asr_contract *c, const char *text, size_t n, const char *path,
                               infd_error *err)
{
    char ebuf[256] = "";
    char *own = asr_contract_json(c), *copy = malloc(n + 1);
    if (!own || !copy) {
        free(own);
        free(copy);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    memcpy(copy, text, n);
    copy[n] = '\0';
    infd_status st = INFD_STATUS_OK;
    yajl_val model = yajl_tree_parse(own, ebuf, sizeof(ebuf));
    ebuf[0] = '\0';
    bool deep = too_deep(copy);
    yajl_val file = strlen(copy) == n && !deep ? yajl_tree_parse(copy, ebuf, sizeof(ebuf)) : NULL;
    if (!model) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL,
                            "%s: the model's own contract does not "
                            "parse",
                            path);
    } else if (!file || !YAJL_IS_OBJECT(file)) {
        first_line(ebuf);
        const char *why = ebuf[0]             ? ebuf
                          : deep              ? "nested more than 16 deep"
                          : strlen(copy) != n ? "a NUL byte in it"
                          : file              ? "not an object"
                                              : "empty";
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: not a JSON object: %s", path,
                            why);
    } else {
        const char *k_contract[] = { "contract", NULL };
        yajl_val name = yajl_tree_get(file, k_contract, yajl_t_string);
        const char *nv = name ? YAJL_GET_STRING(name) : NULL;
        if (!nv || strcmp(nv, ASR_CONTRACT_NAME) != 0) {
            char got[128];
            show(name ? name : yajl_tree_get(file, k_contract, yajl_t_any), got, sizeof(got));
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "%s: contract is %s; infd reads \"%s\"", path, got,
                                ASR_CONTRACT_NAME);
        } else {
            st = compare(path, "", model, file, 0, err);
        }
    }
    yajl_tree_free(model);
    yajl_tree_free(file);
    free(own);
    free(copy);
    return st;
}

infd_status asr_config_parse(const char *text, size_t n, const char *path, int *n_mels,
                             int *subsampling, int *max_symbols, infd_error *err)
{
    char ebuf[256] = "";
    char *copy = malloc(n + 1);
    if (!copy)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    memcpy(copy, text, n);
    copy[n] = '\0';
    infd_status st = INFD_STATUS_OK;
    bool deep = too_deep(copy);
    yajl_val root = strlen(copy) == n && !deep ? yajl_tree_parse(copy, ebuf, sizeof(ebuf)) : NULL;
    if (!root || !YAJL_IS_OBJECT(root)) {
        first_line(ebuf);
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: not a JSON object: %s", path,
                            ebuf[0]             ? ebuf
                            : deep              ? "nested more than 16 deep"
                            : strlen(copy) != n ? "a NUL byte in it"
                                                : "no object");
        goto out;
    }
    const char *k_type[] = { "model_type", NULL }, *k_feat[] = { "features_size", NULL },
               *k_sub[] = { "subsampling_factor", NULL },
               *k_max[] = { "max_tokens_per_step", NULL };
    yajl_val type = yajl_tree_get(root, k_type, yajl_t_string);
    const char *tv = type ? YAJL_GET_STRING(type) : NULL;
    if (!tv || strcmp(tv, "nemo-conformer-tdt") != 0) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: model_type is %s%.80s%s; infd reads \"nemo-conformer-tdt\"", path,
                            tv ? "\"" : "", tv ? tv : "missing", tv ? "\"" : "");
        goto out;
    }
    yajl_val feat = yajl_tree_get(root, k_feat, yajl_t_number);
    yajl_val sub = yajl_tree_get(root, k_sub, yajl_t_number);
    yajl_val max = yajl_tree_get(root, k_max, yajl_t_number);
    long long nf = feat && YAJL_IS_INTEGER(feat) ? YAJL_GET_INTEGER(feat) : -1;
    long long ns = sub && YAJL_IS_INTEGER(sub) ? YAJL_GET_INTEGER(sub) : 8;
    long long nm = max && YAJL_IS_INTEGER(max) ? YAJL_GET_INTEGER(max) : 10;
    if (nf < 1 || nf > 512) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: features_size is %lld; expected an integer in [1, 512]", path, nf);
        goto out;
    }
    if (ns < 1 || ns > 64 || nm < 1 || nm > 1000) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "%s: subsampling_factor %lld or max_tokens_per_step %lld out of "
                            "range ([1, 64] and [1, 1000])",
                            path, ns, nm);
        goto out;
    }
    *n_mels = (int)nf;
    *subsampling = (int)ns;
    *max_symbols = (int)nm;
out:
    yajl_tree_free(root);
    free(copy);
    return st;
}
