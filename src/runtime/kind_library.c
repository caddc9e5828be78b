/*
 * kind_library.c - the "plugin" backend: a model whose processing lives in
 * a shared library its config names (docs/PIPELINES.md):
 *
 *   backend: "plugin"
 *   parameters { key: "library" value { string_value: "libmyproc.so" } }
 *
 * The library exports
 *
 *   const infd_model_kind *infd_plugin_kind(void);
 *
 * (include/infd/plugin.h), and this kind hands each of its calls on to that
 * table: the processor declares its inputs and outputs in load and runs
 * batches in run_batch, as a model kind registered in-process does, so it
 * batches, has instances, statistics and metrics like any model. A
 * relative path is looked up in the version folder, then in the model
 * folder. The library is opened per model (RTLD_LOCAL) and closed when the
 * model unloads. It calls the host's infd_* functions: `infd` exports them
 * (ENABLE_EXPORTS), and an embedder loads libinfd.so with RTLD_GLOBAL.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "infd/plugin.h"
#include "runtime/runtime.h"

#define PLUGIN_SYMBOL "infd_plugin_kind"

typedef const infd_model_kind *(*plugin_entry_fn)(void);

typedef struct library_state {
    void *dl;
    const infd_model_kind *inner;
    void *state;
    char path[PATH_MAX];
} library_state;

/* The library's path: absolute, or found in the version folder, then in
 * the model folder (the version folder's parent). */
static bool resolve(const char *version_dir, const char *lib, char *out, size_t n)
{
    if (lib[0] == '/') {
        snprintf(out, n, "%s", lib);
        return access(out, F_OK) == 0;
    }
    snprintf(out, n, "%s/%s", version_dir, lib);
    if (access(out, F_OK) == 0)
        return true;
    snprintf(out, n, "%s/../%s", version_dir, lib);
    return access(out, F_OK) == 0;
}

static void library_unload(void *state)
{
    library_state *s = state;
    if (!s)
        return;
    if (s->inner && s->state)
        s->inner->unload(s->state);
    if (s->dl)
        dlclose(s->dl);
    infd_free(s);
}

static infd_status library_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    *state = NULL;
    const char *lib = infd_kind_model_parameter(km, "library");
    if (!lib || !lib[0])
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "backend \"plugin\" needs parameters { key: \"library\" value { "
                              "string_value: \"lib....so\" } }");
    library_state *s = infd_calloc(1, sizeof(*s));
    if (!s)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    const char *dir = infd_kind_model_dir(km);
    if (!resolve(dir, lib, s->path, sizeof(s->path))) {
        infd_free(s);
        return infd_error_set(err, INFD_STATUS_NOT_FOUND,
                              "plugin library '%s' not found (looked in %s and its parent)", lib,
                              dir);
    }
    s->dl = dlopen(s->path, RTLD_NOW | RTLD_LOCAL);
    if (!s->dl) {
        infd_status st =
            infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                           "plugin library '%s' cannot be loaded: %s", s->path, dlerror());
        infd_free(s);
        return st;
    }
    plugin_entry_fn entry;
    *(void **)&entry = dlsym(s->dl, PLUGIN_SYMBOL);
    if (!entry) {
        infd_status st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                        "plugin library '%s' has no %s() (include/infd/plugin.h)",
                                        s->path, PLUGIN_SYMBOL);
        library_unload(s);
        return st;
    }
    s->inner = entry();
    if (!s->inner || !s->inner->load || !s->inner->unload || !s->inner->run_batch) {
        infd_status st = infd_error_set(
            err, INFD_STATUS_INVALID_ARGUMENT, "plugin library '%s': %s() gave %s", s->path,
            PLUGIN_SYMBOL, s->inner ? "a table without load, unload or run_batch" : "NULL");
        s->inner = NULL;
        library_unload(s);
        return st;
    }
    infd_status st = s->inner->load(s->inner->user, km, &s->state, err);
    if (st != INFD_STATUS_OK) {
        infd_error_prefix(err, "plugin '%s' (%s)", s->inner->name ? s->inner->name : "?", s->path);
        s->state = NULL;
        library_unload(s);
        return st;
    }
    infd_log(INFD_LOG_LEVEL_INFO, "model '%s': plugin '%s' from %s", infd_kind_model_name(km),
             s->inner->name ? s->inner->name : "?", s->path);
    *state = s;
    return INFD_STATUS_OK;
}

static infd_status library_run_batch(void *state, int instance, infd_batch *batch, infd_error *err)
{
    library_state *s = state;
    return s->inner->run_batch(s->state, instance, batch, err);
}

static void library_sequence_free(void *state, int slot)
{
    library_state *s = state;
    if (s->inner->sequence_free)
        s->inner->sequence_free(s->state, slot);
}

const infd_model_kind rt_library_kind = {
    .name = "plugin",
    .platform = "infd_plugin",
    .user = NULL,
    .load = library_load,
    .unload = library_unload,
    .run_batch = library_run_batch,
    .sequence_free = library_sequence_free,
};
