/*
 * weights.c - a model's constants shared by its plans (weights.h says how).
 *
 * The table is a hash map of forms chained in buckets (n_buckets a power
 * of two, grown at a load of 1); a form is unlinked when its last
 * reference goes. Memory: the model as loaded (base, an IR graph with the
 * initializers) until infd_weights_trim; each form's bytes until its last
 * holder lets go. The weights object itself lives until its last reference:
 * the caller's (infd_weights_destroy) and one per plan built from it.
 */
#include "graph/weights.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "core/alloc.h"
#include "core/common.h"
#include "core/log.h"
#include "graph/planfile.h"
#include "onnx/loader.h"

typedef enum form_state {
    FORM_PENDING = 0, /* being made by the thread that added it */
    FORM_READY,
} form_state;

struct infd_weight_form {
    infd_weights *w; /* NULL: unshared */
    infd_form_key key;
    uint64_t hash; /* of the key, for the buckets */
    infd_weight_form *next;
    form_state state;
    int32_t refs; /* guarded by w->mu (or the only holder's when unshared) */
    void *data;
    size_t bytes;
    infd_form_free_fn free_fn;
    const void *free_arg;
};

struct infd_weights {
    atomic_int refs;
    char *path; /* the file the model is (re)loaded from; NULL when from memory: trim keeps it */
    char *name; /* for messages */

    pthread_mutex_t model_mu; /* guards the four below */
    infd_ir_graph *base;      /* the model as loaded, or NULL once trimmed */
    int model_users;          /* plan builds reading base (infd_weights_use_model) */
    bool drop_pending;        /* a drop waits for the last user */
    bool trimmed;             /* trim was asked: a reloaded base goes with its last user */
    infd_graph_input *inputs; /* the graph inputs as declared, read at load (trim keeps them) */
    int n_inputs;
    char **meta; /* the model's metadata_props, key and value alternating (trim keeps them) */
    int n_meta;

    pthread_mutex_t mu;  /* guards everything below */
    pthread_cond_t made; /* a pending form became ready or was dropped */
    infd_weight_form **buckets;
    size_t n_buckets;
    size_t n_forms;
    size_t host_bytes;
    size_t device_bytes;
    size_t gpu_bytes[INFD_WEIGHTS_MAX_GPUS];
    uint64_t n_reused;
    int n_plans;
};

void infd_form_key_init(infd_form_key *k, const void *src, size_t src_bytes, const char *tag,
                        const void *desc, size_t desc_bytes, int32_t device)
{
    memset(k, 0, sizeof(*k));
    XXH128_hash_t s = XXH3_128bits(src_bytes ? src : "", src_bytes);
    k->src[0] = s.low64;
    k->src[1] = s.high64;
    k->src_bytes = src_bytes;
    /* The tag seeds the description's hash: no streaming state (it needs
     * xxHash's static-linking API). */
    XXH128_hash_t f = XXH3_128bits_withSeed(desc_bytes ? desc : "", desc ? desc_bytes : 0,
                                            XXH3_64bits(tag, strlen(tag)));
    k->form[0] = f.low64;
    k->form[1] = f.high64;
    k->device = device;
}

static bool key_equal(const infd_form_key *a, const infd_form_key *b)
{
    return a->src[0] == b->src[0] && a->src[1] == b->src[1] && a->src_bytes == b->src_bytes &&
           a->form[0] == b->form[0] && a->form[1] == b->form[1] && a->device == b->device;
}

static uint64_t key_hash(const infd_form_key *k)
{
    return k->src[0] ^ (k->form[0] * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uint32_t)k->device;
}

/* ---- the object -------------------------------------------------------- */

static infd_status weights_new(const char *path, const char *name, infd_weights **out,
                               infd_error *err)
{
    infd_weights *w = infd_calloc(1, sizeof(*w));
    if (!w)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", name);
    atomic_init(&w->refs, 1);
    pthread_mutex_init(&w->model_mu, NULL);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->made, NULL);
    w->n_buckets = 64;
    w->buckets = infd_calloc(w->n_buckets, sizeof(*w->buckets));
    w->name = infd_strdup(name);
    w->path = path ? infd_strdup(path) : NULL;
    if (!w->buckets || !w->name || (path && !w->path)) {
        infd_weights_release(w);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", name);
    }
    *out = w;
    return INFD_STATUS_OK;
}

/* Keeps the model's graph inputs (constants excluded) as declared, so that
 * infd_weights_input answers without the model, after a trim too. */
static infd_status record_inputs(infd_weights *w, infd_error *err)
{
    const infd_ir_graph *g = w->base;
    int n = 0;
    for (int32_t k = 0; k < g->n_inputs; k++)
        n += g->values[g->inputs[k]].data == NULL;
    w->inputs = infd_calloc((size_t)n + 1, sizeof(*w->inputs));
    if (!w->inputs)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", w->name);
    for (int32_t k = 0; k < g->n_inputs; k++) {
        const infd_ir_value *v = &g->values[g->inputs[k]];
        if (v->data)
            continue;
        infd_graph_input *in = &w->inputs[w->n_inputs++];
        snprintf(in->name, sizeof(in->name), "%s", v->name);
        in->dtype = v->dtype;
        in->shape.rank = v->shape.rank;
        for (int32_t d = 0; d < v->shape.rank && d < INFD_MAX_RANK; d++)
            in->shape.dims[d] = v->shape.dims[d].value;
    }
    return INFD_STATUS_OK;
}

/* A weights object holding the model read from `path` or, when `data` is
 * set, from its n bytes (named `name` in messages). */
static infd_status weights_load(const char *path, const void *data, size_t n, const char *name,
                                infd_weights **out, infd_error *err)
{
    infd_weights *w = NULL;
    infd_status st = weights_new(path, name, &w, err);
    if (st != INFD_STATUS_OK)
        return st;
    st = data ? infd_onnx_load_buffer(data, n, name, NULL, &w->base, err)
              : infd_onnx_load_file(path, &w->base, err);
    if (st == INFD_STATUS_OK)
        st = record_inputs(w, err);
    if (st == INFD_STATUS_OK && w->base->n_meta > 0) {
        w->meta = infd_calloc((size_t)w->base->n_meta * 2, sizeof(char *));
        if (!w->meta)
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", w->name);
        for (int32_t i = 0; st == INFD_STATUS_OK && i < w->base->n_meta; i++) {
            w->meta[2 * i] = infd_strdup(w->base->meta_keys[i]);
            w->meta[2 * i + 1] = infd_strdup(w->base->meta_values[i]);
            w->n_meta = i + 1;
            if (!w->meta[2 * i] || !w->meta[2 * i + 1])
                st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", w->name);
        }
    }
    if (st != INFD_STATUS_OK) {
        infd_weights_release(w);
        return st;
    }
    *out = w;
    return INFD_STATUS_OK;
}

infd_status infd_weights_create(const char *path, infd_weights **out, infd_error *err)
{
    *out = NULL;
    if (!path)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "no model path given");
    if (infd_plan_file_is(path))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: a plan file (infd build), not an ONNX model: load it with "
                              "infd_plan_create",
                              path);
    return weights_load(path, NULL, 0, path, out, err);
}

infd_status infd_weights_create_from_memory(const void *data, size_t n, const char *name,
                                            infd_weights **out, infd_error *err)
{
    *out = NULL;
    name = name ? name : "<memory>";
    if (!data || n == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: the model is empty", name);
    if (infd_planfile_has_magic(data, n))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: a plan file (infd build), not an ONNX model: load it with "
                              "infd_plan_create_from_memory",
                              name);
    return weights_load(NULL, data, n, name, out, err);
}

void infd_weights_retain(infd_weights *w)
{
    if (w)
        atomic_fetch_add(&w->refs, 1);
}

void infd_weights_release(infd_weights *w)
{
    if (!w)
        return;
    int before = atomic_fetch_sub(&w->refs, 1);
    INFD_ASSERT(before > 0);
    if (before != 1)
        return;
    /* No plan holds a form any more: every form was released with its
     * holder, so the table is empty. */
    INFD_ASSERT(w->n_forms == 0);
    infd_ir_graph_destroy(w->base);
    infd_free(w->inputs);
    for (int i = 0; i < w->n_meta; i++) {
        infd_free(w->meta[2 * i]);
        infd_free(w->meta[2 * i + 1]);
    }
    infd_free(w->meta);
    infd_free(w->buckets);
    infd_free(w->path);
    infd_free(w->name);
    pthread_cond_destroy(&w->made);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->model_mu);
    infd_free(w);
}

void infd_weights_destroy(infd_weights *w)
{
    infd_weights_release(w);
}

const char *infd_weights_name(const infd_weights *w)
{
    return w->name;
}

/* Frees base now, or when its last user lets go (model_mu held). */
static void drop_locked(infd_weights *w)
{
    if (w->model_users > 0) {
        w->drop_pending = true;
        return;
    }
    infd_ir_graph_destroy(w->base);
    w->base = NULL;
    w->drop_pending = false;
}

void infd_weights_trim(infd_weights *w)
{
    if (!w || !w->path)
        return;
    pthread_mutex_lock(&w->model_mu);
    w->trimmed = true;
    drop_locked(w);
    pthread_mutex_unlock(&w->model_mu);
}

void infd_weights_drop_model(infd_weights *w)
{
    pthread_mutex_lock(&w->model_mu);
    drop_locked(w);
    pthread_mutex_unlock(&w->model_mu);
}

infd_status infd_weights_use_model(infd_weights *w, const infd_ir_graph **out, infd_error *err)
{
    pthread_mutex_lock(&w->model_mu);
    if (!w->base) {
        if (!w->path) { /* dropped (a single plan's weights): nothing to load from */
            pthread_mutex_unlock(&w->model_mu);
            *out = NULL;
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: the model was released with its only plan", w->name);
        }
        INFD_LOG_DEBUG("%s: loading the model again (its constants were trimmed)", w->path);
        /* Loaded under the lock: a second build waits for this load
         * rather than loading the model too. */
        infd_status st = infd_onnx_load_file(w->path, &w->base, err);
        if (st != INFD_STATUS_OK) {
            pthread_mutex_unlock(&w->model_mu);
            *out = NULL;
            return st;
        }
    }
    w->model_users++;
    *out = w->base;
    pthread_mutex_unlock(&w->model_mu);
    return INFD_STATUS_OK;
}

void infd_weights_unuse_model(infd_weights *w)
{
    pthread_mutex_lock(&w->model_mu);
    INFD_ASSERT(w->model_users > 0);
    if (--w->model_users == 0 && (w->drop_pending || w->trimmed))
        drop_locked(w);
    pthread_mutex_unlock(&w->model_mu);
}

void infd_weights_count_plan(infd_weights *w, int delta)
{
    pthread_mutex_lock(&w->mu);
    w->n_plans += delta;
    pthread_mutex_unlock(&w->mu);
}

void infd_weights_get_stats(const infd_weights *cw, infd_weights_stats *out)
{
    infd_weights *w = (infd_weights *)cw; /* the locks only */
    memset(out, 0, sizeof(*out));
    if (!w)
        return;
    pthread_mutex_lock(&w->model_mu);
    out->model_bytes = w->base ? infd_arena_used_bytes(&w->base->weights) : 0;
    pthread_mutex_unlock(&w->model_mu);
    pthread_mutex_lock(&w->mu);
    out->host_bytes = w->host_bytes;
    out->device_bytes = w->device_bytes;
    memcpy(out->gpu_bytes, w->gpu_bytes, sizeof(out->gpu_bytes));
    out->n_forms = (int)w->n_forms;
    out->n_reused = w->n_reused;
    out->n_plans = w->n_plans;
    pthread_mutex_unlock(&w->mu);
}

/* ---- the table (w->mu held) -------------------------------------------- */

static infd_weight_form *find(infd_weights *w, const infd_form_key *k, uint64_t h)
{
    for (infd_weight_form *f = w->buckets[h & (w->n_buckets - 1)]; f; f = f->next) {
        if (f->hash == h && key_equal(&f->key, k))
            return f;
    }
    return NULL;
}

static void grow_buckets(infd_weights *w)
{
    size_t n = w->n_buckets * 2;
    infd_weight_form **b = infd_calloc(n, sizeof(*b));
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < w->n_buckets; i++) {
        for (infd_weight_form *f = w->buckets[i], *next; f; f = next) {
            next = f->next;
            f->next = b[f->hash & (n - 1)];
            b[f->hash & (n - 1)] = f;
        }
    }
    infd_free(w->buckets);
    w->buckets = b;
    w->n_buckets = n;
}

/* Adds (or takes away) a ready form's bytes to the totals. */
static void count_bytes(infd_weights *w, const infd_weight_form *f, bool add)
{
    size_t *total = f->key.device < 0 ? &w->host_bytes : &w->device_bytes;
    *total = add ? *total + f->bytes : *total - f->bytes;
    if (f->key.device >= 0 && f->key.device < INFD_WEIGHTS_MAX_GPUS) {
        size_t *g = &w->gpu_bytes[f->key.device];
        *g = add ? *g + f->bytes : *g - f->bytes;
    }
}

static void unlink_form(infd_weights *w, infd_weight_form *f)
{
    infd_weight_form **p = &w->buckets[f->hash & (w->n_buckets - 1)];
    while (*p != f)
        p = &(*p)->next;
    *p = f->next;
    w->n_forms--;
    if (f->state == FORM_READY)
        count_bytes(w, f, false);
}

static void form_free(infd_weight_form *f)
{
    if (f->data && f->free_fn)
        f->free_fn(f->data, f->key.device, f->free_arg);
    infd_free(f);
}

infd_status infd_weights_form(infd_weights *w, const infd_form_key *k, infd_form_make_fn make,
                              void *ctx, infd_form_free_fn free_fn, const void *free_arg,
                              const char *what, infd_weight_form **out, infd_error *err)
{
    *out = NULL;
    infd_weight_form *f = NULL;
    uint64_t h = key_hash(k);
    if (w) {
        pthread_mutex_lock(&w->mu);
        for (;;) {
            f = find(w, k, h);
            if (!f || f->state == FORM_READY)
                break;
            pthread_cond_wait(&w->made, &w->mu); /* another plan is making it */
        }
        if (f) {
            f->refs++;
            w->n_reused++;
            pthread_mutex_unlock(&w->mu);
            *out = f;
            return INFD_STATUS_OK;
        }
    }
    f = infd_calloc(1, sizeof(*f));
    if (!f) {
        if (w)
            pthread_mutex_unlock(&w->mu);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: out of memory", what);
    }
    f->w = w;
    f->key = *k;
    f->hash = h;
    f->refs = 1;
    f->free_fn = free_fn;
    f->free_arg = free_arg;
    f->state = FORM_PENDING;
    if (w) { /* pending: others wait for it instead of making it too */
        if (w->n_forms >= w->n_buckets)
            grow_buckets(w);
        f->next = w->buckets[h & (w->n_buckets - 1)];
        w->buckets[h & (w->n_buckets - 1)] = f;
        w->n_forms++;
        pthread_mutex_unlock(&w->mu);
    }
    infd_status st = make(ctx, &f->data, &f->bytes, err);
    if (w) {
        pthread_mutex_lock(&w->mu);
        if (st == INFD_STATUS_OK) {
            f->state = FORM_READY;
            count_bytes(w, f, true);
        } else {
            unlink_form(w, f); /* a waiter looks again and makes it itself */
        }
        pthread_cond_broadcast(&w->made);
        pthread_mutex_unlock(&w->mu);
    }
    if (st != INFD_STATUS_OK) {
        form_free(f);
        return st;
    }
    if (!w) /* a shared form became ready under the lock, where others read it */
        f->state = FORM_READY;
    *out = f;
    return INFD_STATUS_OK;
}

void *infd_weight_form_data(const infd_weight_form *f)
{
    return f->data;
}

size_t infd_weight_form_bytes(const infd_weight_form *f)
{
    return f->bytes;
}

void infd_weight_form_release(infd_weight_form *f)
{
    if (!f)
        return;
    infd_weights *w = f->w;
    if (w) {
        pthread_mutex_lock(&w->mu);
        INFD_ASSERT(f->refs > 0);
        bool last = --f->refs == 0;
        if (last)
            unlink_form(w, f);
        pthread_mutex_unlock(&w->mu);
        if (!last)
            return;
    }
    form_free(f);
}

/* ---- plain copies ------------------------------------------------------ */

typedef struct copy_ctx {
    const void *data;
    size_t bytes;
    const char *what;
} copy_ctx;

static infd_status make_copy(void *ctx, void **data, size_t *bytes, infd_error *err)
{
    const copy_ctx *c = ctx;
    void *d = infd_aligned_alloc(INFD_ALIGNMENT, c->bytes ? c->bytes : 1);
    if (!d)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                              "%s: out of memory for a %zu-byte constant", c->what, c->bytes);
    if (c->bytes)
        memcpy(d, c->data, c->bytes);
    *data = d;
    *bytes = c->bytes;
    return INFD_STATUS_OK;
}

static void free_copy(void *data, int32_t device, const void *arg)
{
    (void)device;
    (void)arg;
    infd_free(data);
}

infd_status infd_weights_copy(infd_weights *w, const void *data, size_t bytes, const char *what,
                              infd_weight_form **out, infd_error *err)
{
    infd_form_key k;
    infd_form_key_init(&k, data, bytes, "bytes", NULL, 0, -1);
    copy_ctx c = { data, bytes, what };
    return infd_weights_form(w, &k, make_copy, &c, free_copy, NULL, what, out, err);
}

const char *infd_weights_metadata(const infd_weights *w, const char *key)
{
    for (int i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta[2 * i], key) == 0)
            return w->meta[2 * i + 1];
    return NULL;
}

int infd_weights_n_inputs(const infd_weights *w)
{
    return w->n_inputs;
}

infd_status infd_weights_input(const infd_weights *w, int i, infd_graph_input *out, infd_error *err)
{
    if (i < 0 || i >= w->n_inputs) {
        memset(out, 0, sizeof(*out));
        return infd_error_set(err, INFD_STATUS_NOT_FOUND, "%s: no graph input %d", w->name, i);
    }
    *out = w->inputs[i];
    return INFD_STATUS_OK;
}
