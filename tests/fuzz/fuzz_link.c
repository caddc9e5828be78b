/*
 * fuzz_link.c - libFuzzer target for what a worker reads from the
 * router-worker link (src/cluster/link.c, proto/cluster.proto): a
 * LinkMessage header and tensor frames, unpacked, and an INFER's request
 * built from them against a real server's models (not submitted). Any
 * bytes must become a request or an error with a message, never a crash, a
 * leak or an out-of-bounds read.
 *
 * Input: a byte n (frames, at most 9), then n 4-byte little-endian
 * lengths, then the frames' bytes one after another (frame 0 the header);
 * missing bytes make short frames. The server has two models of the
 * built-in softmax kind, one batching (max_batch_size 4) and one not.
 * Seeds: tests/fuzz/seeds-link (INFER messages written for this project).
 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cluster.pb-c.h"
#include "cluster/link.h"
#include "plugins/plugins.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static infd_server *server;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        abort();
}

static void model(const char *root, const char *name, int max_batch)
{
    char path[512], text[512];
    snprintf(path, sizeof(path), "%s/%s", root, name);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/1", root, name);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/config.pbtxt", root, name);
    snprintf(text, sizeof(text),
             "backend: \"softmax\"\nmax_batch_size: %d\n"
             "parameters { key: \"classes\" value { string_value: \"4\" } }\n",
             max_batch);
    write_file(path, text);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void setup(void)
{
    char root[] = "/tmp/infd-fuzz-link-XXXXXX";
    infd_error err;
    if (!mkdtemp(root) || infd_plugins_register(&err) != INFD_STATUS_OK)
        abort();
    model(root, "sm", 4);
    model(root, "sm_flat", 0);
    infd_log_set_level(INFD_LOG_LEVEL_ERROR);
    infd_server_options o;
    infd_server_options_init(&o);
    o.model_repository = root;
    o.pinned_pool_bytes = 0;
    if (infd_server_create(&o, &server, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "fuzz_link: %s\n", err.msg);
        abort();
    }
    /* Loaded (control mode none; softmax reads no file): the folder goes. */
    nftw(root, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!server)
        setup();
    if (size < 1)
        return 0;
    int n = data[0] % 10;
    size_t at = 1 + 4 * (size_t)n;
    if (n == 0 || at > size)
        return 0;
    const void *frame[10];
    size_t len[10];
    infd_data_segment seg[10];
    for (int i = 0; i < n; i++) {
        const uint8_t *p = data + 1 + 4 * i;
        size_t want = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
        len[i] = want < size - at ? want : size - at;
        frame[i] = data + at;
        seg[i] = (infd_data_segment){ frame[i], len[i] };
        at += len[i];
    }
    Infd__Cluster__LinkMessage *h = infd__cluster__link_message__unpack(NULL, len[0], frame[0]);
    if (!h)
        return 0;
    if (h->kind == INFD__CLUSTER__LINK_MESSAGE__KIND__INFER && h->request) {
        infd_model *m = NULL;
        infd_request *req = NULL;
        infd_error err;
        infd_error_clear(&err);
        if (cluster_link_request(server, h, seg + 1, n - 1, &m, &req, &err) != INFD_STATUS_OK &&
            !err.msg[0])
            abort(); /* an error always says what */
        infd_request_destroy(req);
        if (m)
            infd_model_release(m);
    }
    infd__cluster__link_message__free_unpacked(h, NULL);
    return 0;
}
