/*
 * server.c - the server: a registry of the repository's models, their
 * loading, unloading and polling, and the server half of the public API.
 *
 * The registry has one entry per model folder; an entry has one row per
 * version it tried (loaded, failed or unloaded). server->mu guards the
 * registry and is held only for short lookups and swaps; loading (which
 * compiles plans and can take seconds) runs under server->load_mu, which
 * serializes load, unload and poll against each other but never blocks
 * inference: a reload builds the new versions first and swaps them in, then
 * drains and frees the old ones.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/log.h"
#include "runtime/runtime.h"

typedef struct rt_version {
    int64_t version;
    infd_model *model; /* registry reference; NULL unless READY */
    infd_model_state state;
    char reason[512];
} rt_version;

typedef struct rt_entry {
    char name[128];
    rt_version *v; /* sorted by version */
    int n_v;
    infd_model_state state; /* model-level, for an entry without rows */
    char reason[512];
    uint64_t sig; /* files' fingerprint at the last load (poll) */
    bool tried;
} rt_entry;

struct infd_server {
    char *repo;
    char *id;
    infd_model_control mode;
    infd_repository_hook hook; /* infd_server_set_repository_hook */
    void *hook_user;
    pthread_rwlock_t hook_lock; /* calls hold it shared; setting it, exclusive */
    int poll_secs;
    int n_threads;
    size_t pinned_pool_bytes;
    pthread_mutex_t mu; /* registry */
    pthread_mutex_t load_mu;
    rt_entry *entries;
    int n_entries, cap_entries;
    atomic_bool draining;
    atomic_bool started;
    atomic_bool not_ready; /* infd_server_stop_ready */
    /* poll thread */
    pthread_t poller;
    bool poller_running;
    bool poller_stop;
    pthread_cond_t poller_cv;
    rt_shm_table shm; /* shm.c */
};

void infd_server_options_init(infd_server_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->control_mode = INFD_MODEL_CONTROL_NONE;
    opts->repository_poll_secs = 15;
    opts->server_id = "infd";
    opts->pinned_pool_bytes = (size_t)1 << 30;
}

infd_status infd_model_control_parse(const char *name, infd_model_control *out, infd_error *err)
{
    if (name && strcmp(name, "none") == 0)
        *out = INFD_MODEL_CONTROL_NONE;
    else if (name && strcmp(name, "poll") == 0)
        *out = INFD_MODEL_CONTROL_POLL;
    else if (name && strcmp(name, "explicit") == 0)
        *out = INFD_MODEL_CONTROL_EXPLICIT;
    else
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model control mode '%s': expected none, poll or explicit",
                              name ? name : "(null)");
    return INFD_STATUS_OK;
}

const char *infd_model_state_name(infd_model_state state)
{
    switch (state) {
    case INFD_MODEL_STATE_LOADING:
        return "LOADING";
    case INFD_MODEL_STATE_READY:
        return "READY";
    case INFD_MODEL_STATE_UNLOADING:
        return "UNLOADING";
    case INFD_MODEL_STATE_UNAVAILABLE:
        return "UNAVAILABLE";
    default:
        return "UNKNOWN";
    }
}

bool rt_server_is_draining(const infd_server *server)
{
    return atomic_load(&((infd_server *)server)->draining);
}

int rt_server_threads(const infd_server *server)
{
    return server->n_threads;
}

size_t rt_server_pinned_pool_bytes(const infd_server *server)
{
    return server->pinned_pool_bytes;
}

rt_shm_table *rt_server_shm(infd_server *server)
{
    return &server->shm;
}

/* ------------------------------------------------------------------------- */
/* Repository scanning                                                       */
/* ------------------------------------------------------------------------- */

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool valid_model_name(const char *name)
{
    if (!name[0] || name[0] == '.' || strlen(name) >= 128)
        return false;
    for (const char *p = name; *p; p++)
        if (*p == '/' || *p == '\\' || iscntrl((unsigned char)*p))
            return false;
    return true;
}

static bool is_version_name(const char *s, int64_t *v)
{
    if (!s[0] || strlen(s) > 18)
        return false;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    *v = strtoll(s, NULL, 10);
    return *v > 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Numeric version folders of a model, ascending (at most `cap`). */
static int list_versions(const char *dir, int64_t *out, int cap)
{
    int n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL && n < cap) {
        int64_t v;
        if (!is_version_name(e->d_name, &v))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (is_dir(path))
            out[n++] = v;
    }
    closedir(d);
    qsort(out, (size_t)n, sizeof(int64_t), cmp_i64);
    return n;
}

static void fnv(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        *h ^= b[i];
        *h *= 1099511628211ull;
    }
}

static void fnv_stat(uint64_t *h, const char *path)
{
    struct stat sb;
    fnv(h, path, strlen(path));
    if (stat(path, &sb) == 0) {
        fnv(h, &sb.st_mtim, sizeof(sb.st_mtim));
        fnv(h, &sb.st_size, sizeof(sb.st_size));
        fnv(h, &sb.st_ino, sizeof(sb.st_ino));
    }
}

/* A fingerprint of a model folder: config.pbtxt and every version folder's
 * files (names, sizes, mtimes), for poll mode. */
static uint64_t model_signature(const char *dir)
{
    uint64_t h = 1469598103934665603ull;
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.pbtxt", dir);
    fnv_stat(&h, path);
    int64_t vers[256];
    int n = list_versions(dir, vers, 256);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%lld", dir, (long long)vers[i]);
        fnv_stat(&h, path);
        DIR *d = opendir(path);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char f[4096 + 256];
            snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
            fnv_stat(&h, f);
        }
        closedir(d);
    }
    return h;
}

/* Finds or adds an entry (server->mu held). NULL on out of memory. */
static rt_entry *entry_get(infd_server *s, const char *name, bool create)
{
    for (int i = 0; i < s->n_entries; i++)
        if (strcmp(s->entries[i].name, name) == 0)
            return &s->entries[i];
    if (!create)
        return NULL;
    if (s->n_entries == s->cap_entries) {
        int cap = s->cap_entries ? s->cap_entries * 2 : 16;
        rt_entry *e = infd_realloc(s->entries, (size_t)cap * sizeof(*e));
        if (!e)
            return NULL;
        s->entries = e;
        s->cap_entries = cap;
    }
    rt_entry *e = &s->entries[s->n_entries++];
    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->state = INFD_MODEL_STATE_UNKNOWN;
    return e;
}

/* Adds entries for model folders not yet known and drops unloaded entries
 * whose folder is gone (server->mu held). */
static void scan_folders(infd_server *s)
{
    DIR *d = opendir(s->repo);
    if (!d)
        return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (!valid_model_name(e->d_name))
            continue;
        snprintf(path, sizeof(path), "%s/%s", s->repo, e->d_name);
        if (is_dir(path))
            entry_get(s, e->d_name, true);
    }
    closedir(d);
    for (int i = 0; i < s->n_entries;) {
        rt_entry *en = &s->entries[i];
        bool loaded = false;
        for (int k = 0; k < en->n_v; k++)
            loaded |= en->v[k].model != NULL;
        snprintf(path, sizeof(path), "%s/%s", s->repo, en->name);
        if (!loaded && !is_dir(path)) {
            infd_free(en->v);
            s->entries[i] = s->entries[--s->n_entries];
            continue;
        }
        i++;
    }
}

/* ------------------------------------------------------------------------- */
/* Load / unload (server->load_mu held)                                      */
/* ------------------------------------------------------------------------- */

/* Stops and releases the models of `rows` (taken out of the registry). */
static void retire(infd_model **models, int n)
{
    for (int i = 0; i < n; i++) {
        if (!models[i])
            continue;
        atomic_store(&models[i]->state, INFD_MODEL_STATE_UNLOADING);
        rt_model_stop(models[i]);
        atomic_store(&models[i]->state, INFD_MODEL_STATE_UNAVAILABLE);
        infd_log(INFD_LOG_LEVEL_INFO, "model '%s' version %lld unloaded", models[i]->name,
                 (long long)models[i]->version);
        infd_model_release(models[i]);
    }
}

static infd_status select_versions(const Inference__ModelConfig *c, const char *cfile,
                                   const int64_t *have, int n_have, int64_t *out, int *n_out,
                                   infd_error *err)
{
    *n_out = 0;
    const Inference__ModelVersionPolicy *vp = c->version_policy;
    int pc = vp ? (int)vp->policy_choice_case : 0;
    if (pc == INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_ALL) {
        for (int i = 0; i < n_have; i++)
            out[(*n_out)++] = have[i];
    } else if (pc == INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_SPECIFIC) {
        const Inference__ModelVersionPolicy__Specific *sp = vp->specific;
        for (size_t k = 0; sp && k < sp->n_versions; k++) {
            bool found = false;
            for (int i = 0; i < n_have; i++)
                found |= have[i] == sp->versions[k];
            if (!found)
                return infd_error_set(err, INFD_STATUS_NOT_FOUND,
                                      "%s: version_policy.specific.versions[%zu] = %lld has no "
                                      "folder",
                                      cfile, k, (long long)sp->versions[k]);
            if (*n_out < 256)
                out[(*n_out)++] = sp->versions[k];
        }
        qsort(out, (size_t)*n_out, sizeof(int64_t), cmp_i64);
    } else {
        uint32_t num = 1;
        if (pc == INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_LATEST && vp->latest &&
            vp->latest->num_versions > 0)
            num = vp->latest->num_versions;
        int first = n_have > (int)num ? n_have - (int)num : 0;
        for (int i = first; i < n_have; i++)
            out[(*n_out)++] = have[i];
    }
    if (*n_out == 0)
        return infd_error_set(err, INFD_STATUS_NOT_FOUND,
                              "%s: no version folder (such as '1/') to serve", cfile);
    return INFD_STATUS_OK;
}

/* True when `e` has a version loaded and READY (s->mu held). */
static bool entry_serving(const rt_entry *e)
{
    for (int k = 0; e && k < e->n_v; k++) {
        if (e->v[k].model && e->v[k].state == INFD_MODEL_STATE_READY)
            return true;
    }
    return false;
}

/* A load that failed: the model is UNAVAILABLE with `reason`, unless its
 * previous versions still serve (Triton keeps them when a reload fails);
 * then only the reason is recorded. */
static void set_entry_failed(infd_server *s, const char *name, const char *reason)
{
    pthread_mutex_lock(&s->mu);
    rt_entry *e = entry_get(s, name, true);
    if (e && entry_serving(e)) {
        snprintf(e->reason, sizeof(e->reason), "reload failed, previous version(s) serving: %.400s",
                 reason);
        e->tried = true;
    } else if (e) {
        e->state = INFD_MODEL_STATE_UNAVAILABLE;
        snprintf(e->reason, sizeof(e->reason), "%s", reason);
        e->tried = true;
    }
    pthread_mutex_unlock(&s->mu);
}

/* A load that is not swapped in: its models retired, its rows and config
 * freed. */
static void drop_rows(rt_version *rows, int n, Inference__ModelConfig *config)
{
    infd_model *nm[256];
    for (int i = 0; i < n; i++)
        nm[i] = rows[i].model;
    retire(nm, n);
    infd_free(rows);
    rt_config_free(config);
}

static infd_status load_locked(infd_server *s, const char *name, infd_error *err)
{
    char dir[4096], cfile[4200];
    infd_status st = INFD_STATUS_OK;
    Inference__ModelConfig *config = NULL;
    rt_version *rows = NULL;
    infd_model **old = NULL;
    int n_old = 0;
    if (!valid_model_name(name))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "'%s' is not a model name", name);
    snprintf(dir, sizeof(dir), "%s/%s", s->repo, name);
    snprintf(cfile, sizeof(cfile), "%s/config.pbtxt", dir);
    if (!is_dir(dir))
        return infd_error_set(err, INFD_STATUS_NOT_FOUND, "model '%s' is not in the repository %s",
                              name, s->repo);
    uint64_t sig = model_signature(dir);
    pthread_mutex_lock(&s->mu);
    rt_entry *e = entry_get(s, name, true);
    if (e && e->n_v == 0)
        e->state = INFD_MODEL_STATE_LOADING;
    pthread_mutex_unlock(&s->mu);
    if (!e)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    infd_log(INFD_LOG_LEVEL_INFO, "loading model '%s' from %s", name, dir);
    st = rt_config_read(dir, &config, err);
    if (st != INFD_STATUS_OK)
        goto failed;
    int64_t have[256], want[256];
    int n_have = list_versions(dir, have, 256), n_want = 0;
    st = select_versions(config, cfile, have, n_have, want, &n_want, err);
    if (st != INFD_STATUS_OK)
        goto failed;
    rows = infd_calloc((size_t)n_want, sizeof(*rows));
    if (!rows) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        goto failed;
    }
    infd_status first_err = INFD_STATUS_OK;
    for (int i = 0; i < n_want; i++) {
        char vdir[4200];
        snprintf(vdir, sizeof(vdir), "%s/%lld", dir, (long long)want[i]);
        infd_error verr;
        infd_error_clear(&verr);
        rows[i].version = want[i];
        infd_status vst =
            rt_model_load(s, name, want[i], vdir, config, cfile, &rows[i].model, &verr);
        if (vst == INFD_STATUS_OK) {
            rows[i].state = INFD_MODEL_STATE_READY;
        } else {
            rows[i].state = INFD_MODEL_STATE_UNAVAILABLE;
            snprintf(rows[i].reason, sizeof(rows[i].reason), "%s", verr.msg);
            infd_log(INFD_LOG_LEVEL_ERROR, "model '%s' version %lld failed to load: %s", name,
                     (long long)want[i], verr.msg);
            if (first_err == INFD_STATUS_OK) {
                first_err = vst;
                if (err)
                    *err = verr;
            }
        }
    }
    /* Swap the new rows in; the old versions keep serving until now. */
    pthread_mutex_lock(&s->mu);
    e = entry_get(s, name, true);
    if (!e) {
        pthread_mutex_unlock(&s->mu);
        drop_rows(rows, n_want, config);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    if (first_err != INFD_STATUS_OK && entry_serving(e)) {
        /* A reload that failed in part: the previous versions keep
         * serving, as in Triton; the new ones that loaded are dropped. */
        snprintf(e->reason, sizeof(e->reason), "reload failed, previous version(s) serving: %.400s",
                 err ? err->msg : "load failed");
        e->sig = sig;
        pthread_mutex_unlock(&s->mu);
        infd_log(INFD_LOG_LEVEL_WARN, "model '%s': reload failed; the previous version(s) serve on",
                 name);
        drop_rows(rows, n_want, config);
        return first_err;
    }
    old = infd_calloc((size_t)e->n_v + 1, sizeof(*old));
    for (int k = 0; k < e->n_v; k++)
        if (old)
            old[n_old++] = e->v[k].model;
    /* Without memory for the list the old models leak rather than crash. */
    infd_free(e->v);
    e->v = rows;
    e->n_v = n_want;
    e->sig = sig;
    e->tried = true;
    e->state = first_err == INFD_STATUS_OK ? INFD_MODEL_STATE_READY : INFD_MODEL_STATE_UNAVAILABLE;
    e->reason[0] = '\0';
    rows = NULL;
    pthread_mutex_unlock(&s->mu);
    retire(old, n_old);
    infd_free(old);
    rt_config_free(config);
    return first_err;

failed:
    set_entry_failed(s, name, err ? err->msg : "load failed");
    if (err)
        infd_log(INFD_LOG_LEVEL_ERROR, "model '%s' failed to load: %s", name, err->msg);
    rt_config_free(config);
    infd_free(rows);
    /* Remember the files so poll does not retry until they change. */
    pthread_mutex_lock(&s->mu);
    e = entry_get(s, name, false);
    if (e)
        e->sig = sig;
    pthread_mutex_unlock(&s->mu);
    return st;
}

static void unload_locked(infd_server *s, const char *name, const char *why)
{
    infd_model *models[256];
    int n = 0;
    pthread_mutex_lock(&s->mu);
    rt_entry *e = entry_get(s, name, false);
    if (e) {
        for (int k = 0; k < e->n_v; k++) {
            if (e->v[k].model && n < 256) {
                models[n++] = e->v[k].model;
                e->v[k].model = NULL;
            }
            e->v[k].state = INFD_MODEL_STATE_UNAVAILABLE;
            snprintf(e->v[k].reason, sizeof(e->v[k].reason), "%s", why);
        }
        e->state = INFD_MODEL_STATE_UNAVAILABLE;
        snprintf(e->reason, sizeof(e->reason), "%s", why);
    }
    pthread_mutex_unlock(&s->mu);
    retire(models, n);
}

static infd_status call_hook(infd_server *server, const char *name, bool load, infd_error *err)
{
    pthread_rwlock_rdlock(&server->hook_lock);
    infd_status st = server->hook ? server->hook(server->hook_user, name ? name : "", load, err)
                                  : INFD_STATUS_OK;
    pthread_rwlock_unlock(&server->hook_lock);
    return st;
}

infd_status infd_server_load_model(infd_server *server, const char *name, infd_error *err)
{
    if (server->mode != INFD_MODEL_CONTROL_EXPLICIT)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                              "explicit model load / unload is not allowed in model control mode "
                              "'%s' (start with --model-control-mode explicit)",
                              server->mode == INFD_MODEL_CONTROL_POLL ? "poll" : "none");
    if (rt_server_is_draining(server))
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "the server is shutting down");
    infd_status hs = call_hook(server, name, true, err);
    if (hs != INFD_STATUS_OK)
        return hs;
    pthread_mutex_lock(&server->load_mu);
    infd_status st = load_locked(server, name ? name : "", err);
    pthread_mutex_unlock(&server->load_mu);
    return st;
}

void infd_server_set_repository_hook(infd_server *server, infd_repository_hook hook, void *user)
{
    pthread_rwlock_wrlock(&server->hook_lock); /* after the calls in flight */
    server->hook = hook;
    server->hook_user = user;
    pthread_rwlock_unlock(&server->hook_lock);
}

infd_status infd_server_unload_model(infd_server *server, const char *name, infd_error *err)
{
    if (server->mode != INFD_MODEL_CONTROL_EXPLICIT)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                              "explicit model load / unload is not allowed in model control mode "
                              "'%s' (start with --model-control-mode explicit)",
                              server->mode == INFD_MODEL_CONTROL_POLL ? "poll" : "none");
    infd_status hs = call_hook(server, name, false, err);
    if (hs != INFD_STATUS_OK)
        return hs;
    pthread_mutex_lock(&server->load_mu);
    pthread_mutex_lock(&server->mu);
    bool known = name && entry_get(server, name, false) != NULL;
    pthread_mutex_unlock(&server->mu);
    infd_status st = INFD_STATUS_OK;
    if (!known)
        st = infd_error_set(err, INFD_STATUS_NOT_FOUND, "model '%s' is not known",
                            name ? name : "(null)");
    else
        unload_locked(server, name, "unloaded");
    pthread_mutex_unlock(&server->load_mu);
    return st;
}

infd_status infd_server_poll_repository(infd_server *server, infd_error *err)
{
    if (!is_dir(server->repo))
        return infd_error_set(err, INFD_STATUS_NOT_FOUND, "model repository %s: %s", server->repo,
                              strerror(errno));
    pthread_mutex_lock(&server->load_mu);
    /* Snapshot the registry and the folders. */
    pthread_mutex_lock(&server->mu);
    scan_folders(server);
    int n = server->n_entries;
    char(*names)[128] = infd_malloc((size_t)(n ? n : 1) * 128);
    uint64_t *sigs = infd_malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
    bool *loaded = infd_malloc((size_t)(n ? n : 1) * sizeof(bool));
    bool *tried = infd_malloc((size_t)(n ? n : 1) * sizeof(bool));
    if (!names || !sigs || !loaded || !tried) {
        pthread_mutex_unlock(&server->mu);
        pthread_mutex_unlock(&server->load_mu);
        infd_free(names);
        infd_free(sigs);
        infd_free(loaded);
        infd_free(tried);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        rt_entry *e = &server->entries[i];
        memcpy(names[i], e->name, 128);
        sigs[i] = e->sig;
        tried[i] = e->tried;
        loaded[i] = false;
        for (int k = 0; k < e->n_v; k++)
            loaded[i] |= e->v[k].model != NULL;
    }
    pthread_mutex_unlock(&server->mu);
    for (int i = 0; i < n && !rt_server_is_draining(server); i++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/%s", server->repo, names[i]);
        if (!is_dir(dir)) {
            if (loaded[i]) {
                infd_log(INFD_LOG_LEVEL_INFO, "model '%s' left the repository; unloading",
                         names[i]);
                unload_locked(server, names[i], "removed from the repository");
            }
            continue;
        }
        if (!tried[i] || model_signature(dir) != sigs[i]) {
            infd_error lerr;
            infd_error_clear(&lerr);
            load_locked(server, names[i], &lerr);
        }
    }
    pthread_mutex_unlock(&server->load_mu);
    infd_free(names);
    infd_free(sigs);
    infd_free(loaded);
    infd_free(tried);
    return INFD_STATUS_OK;
}

static void *poller_main(void *arg)
{
    infd_server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->poller_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += s->poll_secs;
        pthread_cond_timedwait(&s->poller_cv, &s->mu, &ts);
        if (s->poller_stop)
            break;
        pthread_mutex_unlock(&s->mu);
        infd_error err;
        infd_error_clear(&err);
        if (infd_server_poll_repository(s, &err) != INFD_STATUS_OK)
            infd_log(INFD_LOG_LEVEL_WARN, "repository poll: %s", err.msg);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* Server lifecycle                                                          */
/* ------------------------------------------------------------------------- */

infd_status infd_server_create(const infd_server_options *opts, infd_server **out, infd_error *err)
{
    *out = NULL;
    infd_status st = INFD_STATUS_OK;
    if (!opts->model_repository || !opts->model_repository[0])
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "no model repository given");
    if (!is_dir(opts->model_repository))
        return infd_error_set(err, INFD_STATUS_NOT_FOUND, "model repository %s is not a folder",
                              opts->model_repository);
    infd_server *s = infd_calloc(1, sizeof(*s));
    if (!s)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->load_mu, NULL);
    pthread_rwlock_init(&s->hook_lock, NULL);
    pthread_cond_init(&s->poller_cv, NULL);
    rt_shm_init(&s->shm, opts->shared_memory);
    s->repo = infd_strdup(opts->model_repository);
    s->id = infd_strdup(opts->server_id ? opts->server_id : "infd");
    if (!s->repo || !s->id) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    s->mode = opts->control_mode;
    s->poll_secs = opts->repository_poll_secs > 0 ? opts->repository_poll_secs : 15;
    s->n_threads = opts->n_threads;
    s->pinned_pool_bytes = opts->pinned_pool_bytes;
    pthread_mutex_lock(&s->mu);
    scan_folders(s);
    int n = s->n_entries;
    pthread_mutex_unlock(&s->mu);
    infd_log(INFD_LOG_LEVEL_INFO, "model repository %s: %d model folder(s), control mode %s",
             s->repo, n,
             s->mode == INFD_MODEL_CONTROL_EXPLICIT ? "explicit"
             : s->mode == INFD_MODEL_CONTROL_POLL   ? "poll"
                                                    : "none");
    pthread_mutex_lock(&s->load_mu);
    for (int i = 0; i < n; i++) {
        char name[128];
        pthread_mutex_lock(&s->mu);
        memcpy(name, s->entries[i].name, sizeof(name));
        pthread_mutex_unlock(&s->mu);
        bool want = s->mode != INFD_MODEL_CONTROL_EXPLICIT;
        for (int k = 0; k < opts->n_startup_models && !want; k++)
            want = strcmp(opts->startup_models[k], "*") == 0 ||
                   strcmp(opts->startup_models[k], name) == 0;
        if (!want)
            continue;
        infd_error lerr;
        infd_error_clear(&lerr);
        if (load_locked(s, name, &lerr) != INFD_STATUS_OK && opts->exit_on_error) {
            pthread_mutex_unlock(&s->load_mu);
            st = infd_error_set(err, lerr.code, "model '%s': %s", name, lerr.msg);
            goto out;
        }
    }
    for (int k = 0; k < opts->n_startup_models; k++) {
        const char *name = opts->startup_models[k];
        if (strcmp(name, "*") == 0)
            continue;
        pthread_mutex_lock(&s->mu);
        bool known = entry_get(s, name, false) != NULL;
        pthread_mutex_unlock(&s->mu);
        if (!known) {
            infd_log(INFD_LOG_LEVEL_ERROR, "--load-model %s: no such model folder in %s", name,
                     s->repo);
            if (opts->exit_on_error) {
                pthread_mutex_unlock(&s->load_mu);
                st = infd_error_set(err, INFD_STATUS_NOT_FOUND, "model '%s' is not in %s", name,
                                    s->repo);
                goto out;
            }
        }
    }
    pthread_mutex_unlock(&s->load_mu);
    if (s->mode == INFD_MODEL_CONTROL_POLL) {
        int rc = pthread_create(&s->poller, NULL, poller_main, s);
        if (rc != 0) {
            st = infd_error_set(err, INFD_STATUS_INTERNAL, "cannot start the poll thread: %s",
                                strerror(rc));
            goto out;
        }
        pthread_setname_np(s->poller, "infd-poll");
        s->poller_running = true;
    }
    atomic_store(&s->started, true);
    *out = s;
    s = NULL;
out:
    infd_server_destroy(s);
    return st;
}

void infd_server_drain(infd_server *server)
{
    if (!server)
        return;
    atomic_store(&server->draining, true);
    pthread_mutex_lock(&server->mu);
    server->poller_stop = true;
    pthread_cond_broadcast(&server->poller_cv);
    pthread_mutex_unlock(&server->mu);
    if (server->poller_running) {
        pthread_join(server->poller, NULL);
        server->poller_running = false;
    }
    /* Wait for every accepted request of every loaded model, holding
     * references rather than the registry lock (frontends keep looking
     * models up meanwhile). */
    pthread_mutex_lock(&server->load_mu);
    pthread_mutex_lock(&server->mu);
    int n = 0;
    for (int i = 0; i < server->n_entries; i++)
        n += server->entries[i].n_v;
    infd_model **models = infd_calloc((size_t)(n ? n : 1), sizeof(*models));
    int k = 0;
    for (int i = 0; models && i < server->n_entries; i++)
        for (int v = 0; v < server->entries[i].n_v; v++)
            if (server->entries[i].v[v].model) {
                models[k] = server->entries[i].v[v].model;
                infd_model_retain(models[k++]);
            }
    pthread_mutex_unlock(&server->mu);
    /* Ensembles first: their requests in flight still submit steps to
     * other models (as internal requests), which must be accepting. */
    for (int i = 0, e = 0; i < k; i++)
        if (models[i]->kind == &rt_ensemble_kind) {
            infd_model *t = models[e];
            models[e++] = models[i];
            models[i] = t;
        }
    for (int i = 0; i < k; i++) {
        infd_model *m = models[i];
        pthread_mutex_lock(&m->mu);
        m->accepting = false;
        while (m->pending > 0)
            pthread_cond_wait(&m->drain_cv, &m->mu);
        pthread_mutex_unlock(&m->mu);
        infd_model_release(m);
    }
    infd_free(models);
    pthread_mutex_unlock(&server->load_mu);
}

void infd_server_destroy(infd_server *server)
{
    if (!server)
        return;
    infd_server_drain(server);
    pthread_mutex_lock(&server->load_mu);
    for (int i = 0; i < server->n_entries; i++)
        unload_locked(server, server->entries[i].name, "server stopped");
    pthread_mutex_unlock(&server->load_mu);
    for (int i = 0; i < server->n_entries; i++)
        infd_free(server->entries[i].v);
    infd_free(server->entries);
    pthread_mutex_destroy(&server->mu);
    pthread_mutex_destroy(&server->load_mu);
    pthread_rwlock_destroy(&server->hook_lock);
    pthread_cond_destroy(&server->poller_cv);
    rt_shm_fini(&server->shm);
    infd_free(server->repo);
    infd_free(server->id);
    infd_free(server);
}

bool infd_server_is_live(const infd_server *server)
{
    return !rt_server_is_draining(server);
}

bool infd_server_is_ready(const infd_server *server)
{
    infd_server *s = (infd_server *)server;
    return atomic_load(&s->started) && !atomic_load(&s->not_ready) &&
           !rt_server_is_draining(server);
}

void infd_server_stop_ready(infd_server *server)
{
    if (server)
        atomic_store(&server->not_ready, true);
}

const char *infd_server_id(const infd_server *server)
{
    return server->id;
}

const char *infd_server_repository(const infd_server *server)
{
    return server->repo;
}

infd_model_control infd_server_control_mode(const infd_server *server)
{
    return server->mode;
}

/* ------------------------------------------------------------------------- */
/* Index and acquire                                                         */
/* ------------------------------------------------------------------------- */

static int cmp_rows(const void *a, const void *b)
{
    const infd_repository_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->version < y->version ? -1 : x->version > y->version;
}

infd_status infd_server_repository_index(infd_server *server, bool ready_only,
                                         infd_repository_entry **out, int *n, infd_error *err)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&server->mu);
    scan_folders(server);
    int cap = 0;
    for (int i = 0; i < server->n_entries; i++)
        cap += server->entries[i].n_v ? server->entries[i].n_v : 1;
    infd_repository_entry *rows = infd_calloc((size_t)(cap ? cap : 1), sizeof(*rows));
    if (!rows) {
        pthread_mutex_unlock(&server->mu);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    int k = 0;
    for (int i = 0; i < server->n_entries; i++) {
        const rt_entry *e = &server->entries[i];
        if (e->n_v == 0) {
            if (ready_only)
                continue;
            snprintf(rows[k].name, sizeof(rows[k].name), "%s", e->name);
            rows[k].version = -1;
            rows[k].state = e->state;
            snprintf(rows[k].reason, sizeof(rows[k].reason), "%s", e->reason);
            k++;
            continue;
        }
        for (int v = 0; v < e->n_v; v++) {
            infd_model_state state = e->v[v].model
                                         ? (infd_model_state)atomic_load(&e->v[v].model->state)
                                         : e->v[v].state;
            if (ready_only && state != INFD_MODEL_STATE_READY)
                continue;
            snprintf(rows[k].name, sizeof(rows[k].name), "%s", e->name);
            rows[k].version = e->v[v].version;
            rows[k].state = state;
            snprintf(rows[k].reason, sizeof(rows[k].reason), "%s", e->v[v].reason);
            k++;
        }
    }
    pthread_mutex_unlock(&server->mu);
    qsort(rows, (size_t)k, sizeof(*rows), cmp_rows);
    *out = rows;
    *n = k;
    return INFD_STATUS_OK;
}

infd_status infd_server_model_acquire(infd_server *server, const char *name, int64_t version,
                                      infd_model **out, infd_error *err)
{
    *out = NULL;
    infd_status st = INFD_STATUS_OK;
    pthread_mutex_lock(&server->mu);
    rt_entry *e = name ? entry_get(server, name, false) : NULL;
    if (!e) {
        st = infd_error_set(err, INFD_STATUS_NOT_FOUND, "unknown model '%s'",
                            name ? name : "(null)");
        goto out;
    }
    const rt_version *pick = NULL;
    for (int k = e->n_v - 1; k >= 0; k--) {
        const rt_version *v = &e->v[k];
        if (version > 0 ? v->version == version
                        : v->model && atomic_load(&v->model->state) == INFD_MODEL_STATE_READY) {
            pick = v;
            break;
        }
    }
    if (!pick) {
        if (version > 0)
            st = infd_error_set(err, INFD_STATUS_NOT_FOUND, "model '%s' has no version %lld", name,
                                (long long)version);
        else
            st = infd_error_set(err, INFD_STATUS_UNAVAILABLE, "model '%s' is not ready (%s%s%s)",
                                name, infd_model_state_name(e->state), e->reason[0] ? ": " : "",
                                e->reason[0]                           ? e->reason
                                : e->n_v && e->v[e->n_v - 1].reason[0] ? e->v[e->n_v - 1].reason
                                                                       : "");
        goto out;
    }
    if (!pick->model || atomic_load(&pick->model->state) != INFD_MODEL_STATE_READY) {
        st = infd_error_set(
            err, INFD_STATUS_UNAVAILABLE, "model '%s' version %lld is not ready (%s%s%s)", name,
            (long long)pick->version,
            infd_model_state_name(pick->model ? (infd_model_state)atomic_load(&pick->model->state)
                                              : pick->state),
            pick->reason[0] ? ": " : "", pick->reason);
        goto out;
    }
    infd_model_retain(pick->model);
    *out = pick->model;
out:
    pthread_mutex_unlock(&server->mu);
    return st;
}
