/*
 * test_repo.h - model repositories and servers for the unit tests that run
 * an infd_server (runtime and frontend tests): a per-process scratch root,
 * a fresh repository under it per test, the add_sub model, and a server
 * with one engine thread. Header-only (static inline functions), like
 * onnx_model.h.
 */
#ifndef INFD_TESTS_UNIT_TEST_REPO_H
#define INFD_TESTS_UNIT_TEST_REPO_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infd/infd.h"
#include "onnx_model.h"
#include "test.h"

/* /tmp/infd-test-<name>-<pid>, set by the first test_repo_new. */
static char test_repo_root[256];

static inline void test_rm_rf(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", path);
}

/* An empty <root>/<tag> (the root named after `test_name`; logs quietened to
 * warnings on first use). The path stays valid until the next call. */
static inline const char *test_repo_new(const char *test_name, const char *tag)
{
    static char repo[300];
    if (!test_repo_root[0]) {
        snprintf(test_repo_root, sizeof(test_repo_root), "/tmp/infd-test-%s-%d", test_name,
                 (int)getpid());
        infd_log_set_level(INFD_LOG_LEVEL_WARN);
    }
    snprintf(repo, sizeof(repo), "%s/%s", test_repo_root, tag);
    test_rm_rf(repo);
    mkdir(test_repo_root, 0755);
    mkdir(repo, 0755);
    return repo;
}

/* Writes <repo>/<name>/config.pbtxt with an empty version folder 1/: a
 * model whose kind needs no file (a processor, a test kind). When it cannot
 * be written, loading the model reports it missing. */
static inline void test_write_config(const char *repo, const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", repo, name);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/1", repo, name);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/config.pbtxt", repo, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Writes <repo>/<name>/1/model.onnx (+ config.pbtxt when `config`): add_sub
 * with inputs [batch, 16], or [2, 16] without `batch`. */
static inline void test_add_sub(const char *repo, const char *name, bool batch, const char *config)
{
    const onnx_model_spec add_sub = {
        .graph_name = "add_sub",
        .rows = batch ? 0 : 2,
        .width = 16,
        .inputs = { "INPUT0", "INPUT1" },
        .outputs = { "OUTPUT0", "OUTPUT1" },
        .nodes = { { "Add", "add", { "INPUT0", "INPUT1" }, "OUTPUT0" },
                   { "Sub", "sub", { "INPUT0", "INPUT1" }, "OUTPUT1" } },
    };
    ASSERT_TRUE(onnx_model_add(repo, name, &add_sub, config));
}

/* A server over `repo` with one engine thread per instance, loading the
 * `n_load` models of `load` in explicit `mode`; NULL (after printing why)
 * when it cannot start, which the caller's first assertion reports. */
static inline infd_server *test_server_start(const char *repo, infd_model_control mode,
                                             const char *const *load, int n_load)
{
    infd_server_options o;
    infd_server_options_init(&o);
    o.model_repository = repo;
    o.control_mode = mode;
    o.startup_models = load;
    o.n_startup_models = n_load;
    o.n_threads = 1;
    infd_server *s = NULL;
    infd_error err = { 0 };
    if (infd_server_create(&o, &s, &err) != INFD_STATUS_OK)
        printf("    infd_server_create: %s\n", err.msg);
    return s;
}

#endif /* INFD_TESTS_UNIT_TEST_REPO_H */
