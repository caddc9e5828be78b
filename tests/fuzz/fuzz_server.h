/*
 * fuzz_server.h - the server of the fuzz targets that build requests
 * (fuzz_link, fuzz_raw): models of built-in or target-registered kinds,
 * each with the parameter classes=4, written to a temporary repository,
 * loaded (control mode none), and the folder removed. Included by one .c
 * each, so its functions are static.
 */
#ifndef INFD_TESTS_FUZZ_SERVER_H
#define INFD_TESTS_FUZZ_SERVER_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "infd/infd.h"
#include "plugins/plugins.h"

typedef struct fuzz_model {
    const char *name;
    const char *backend;
    int max_batch;
} fuzz_model;

static void fuzz_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        abort();
}

static int fuzz_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* The server (aborts on failure, naming `who`), with `shared_memory` its
 * infd_server_options.shared_memory and no pinned pool. */
static infd_server *fuzz_server_create(const char *who, const fuzz_model *models, int n,
                                       unsigned shared_memory)
{
    char root[] = "/tmp/infd-fuzz-XXXXXX", path[512], text[512];
    infd_error err;
    if (!mkdtemp(root) || infd_plugins_register(&err) != INFD_STATUS_OK)
        abort();
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", root, models[i].name);
        mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/%s/1", root, models[i].name);
        mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/%s/config.pbtxt", root, models[i].name);
        snprintf(text, sizeof(text),
                 "backend: \"%s\"\nmax_batch_size: %d\n"
                 "parameters { key: \"classes\" value { string_value: \"4\" } }\n",
                 models[i].backend, models[i].max_batch);
        fuzz_write_file(path, text);
    }
    infd_log_set_level(INFD_LOG_LEVEL_ERROR);
    infd_server_options o;
    infd_server_options_init(&o);
    o.model_repository = root;
    o.pinned_pool_bytes = 0;
    o.shared_memory = shared_memory;
    infd_server *server = NULL;
    if (infd_server_create(&o, &server, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "%s: %s\n", who, err.msg);
        abort();
    }
    /* Loaded (built-in kinds read no file): the folder goes. */
    nftw(root, fuzz_remove_one, 8, FTW_DEPTH | FTW_PHYS);
    return server;
}

#endif /* INFD_TESTS_FUZZ_SERVER_H */
