/*
 * test_sequence.c - model kinds (include/infd/plugin.h) and the sequence
 * batcher (src/runtime/sequence.c), with a kind made here: "acc" keeps a
 * running sum per sequence slot. Each request adds its IN to its
 * sequence's sum (START resets it) and gets back the sum, the rows of the
 * execution it ran in and its slot, so the tests see the order of a
 * sequence's requests, its state, and how sequences were batched.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "core/clock.h"
#include "infd/plugin.h"
#include "test.h"
#include "test_repo.h"

#define MAX_SLOTS 64

typedef struct acc_model {
    int n_slots;
    int64_t sum[MAX_SLOTS];
    atomic_int busy[MAX_SLOTS]; /* a request of the slot's sequence is running */
    atomic_int overlap;         /* a slot ran two requests at once */
    atomic_int freed;           /* sequence_free calls */
    atomic_int bad_use;         /* a freed slot used without START */
} acc_model;

static acc_model *last_model;

static infd_status acc_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    acc_model *a = calloc(1, sizeof(*a));
    if (!a)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "oom");
    a->n_slots = infd_kind_model_n_sequence_slots(km);
    if (a->n_slots > MAX_SLOTS) {
        free(a);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "too many slots");
    }
    for (int s = 0; s < MAX_SLOTS; s++)
        a->sum[s] = -1000000; /* no sequence yet */
    int64_t one = 1;
    infd_status st = infd_kind_model_add_input(km, "IN", INFD_DTYPE_INT64, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "SUM", INFD_DTYPE_INT64, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "ROWS", INFD_DTYPE_INT64, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "SLOT", INFD_DTYPE_INT64, 1, &one, err);
    if (st != INFD_STATUS_OK) {
        free(a);
        return st;
    }
    last_model = a;
    *state = a;
    return INFD_STATUS_OK;
}

static void acc_unload(void *state)
{
    free(state);
}

static void set_i64(infd_request *req, int j, int64_t v)
{
    infd_tensor t = { .dtype = INFD_DTYPE_INT64, .data = &v, .nbytes = 8 };
    t.shape.rank = 2;
    t.shape.dims[0] = t.shape.dims[1] = 1;
    infd_request_output_set(req, j, &t, NULL);
}

static infd_status acc_run(void *state, int instance, infd_batch *b, infd_error *err)
{
    (void)instance;
    (void)err;
    acc_model *a = state;
    int n = infd_batch_size(b);
    for (int k = 0; k < n; k++) {
        infd_request *req = infd_batch_request(b, k);
        infd_sequence_info si;
        infd_request_sequence(req, &si);
        if (si.slot < 0 || si.slot >= a->n_slots) {
            infd_request_fail(req, INFD_STATUS_INTERNAL, "bad slot");
            continue;
        }
        if (atomic_fetch_add(&a->busy[si.slot], 1) != 0)
            atomic_fetch_add(&a->overlap, 1);
        infd_tensor in;
        infd_request_input(req, 0, &in, NULL);
        if (si.flags & INFD_SEQUENCE_START)
            a->sum[si.slot] = 0;
        else if (a->sum[si.slot] < 0)
            atomic_fetch_add(&a->bad_use, 1);
        a->sum[si.slot] += *(const int64_t *)in.data;
        set_i64(req, 0, a->sum[si.slot]);
        set_i64(req, 1, n);
        set_i64(req, 2, si.slot);
    }
    infd_clock_sleep_us(2000); /* lets later requests queue up behind the batch */
    for (int k = 0; k < n; k++) {
        infd_sequence_info si;
        infd_request_sequence(infd_batch_request(b, k), &si);
        if (si.slot >= 0 && si.slot < a->n_slots)
            atomic_fetch_sub(&a->busy[si.slot], 1);
    }
    return INFD_STATUS_OK;
}

static void acc_free(void *state, int slot)
{
    acc_model *a = state;
    a->sum[slot] = -1000000;
    atomic_fetch_add(&a->freed, 1);
}

static const infd_model_kind acc_kind = {
    .name = "acc",
    .platform = "test_acc",
    .load = acc_load,
    .unload = acc_unload,
    .run_batch = acc_run,
    .sequence_free = acc_free,
};

static void register_once(void)
{
    static bool done;
    if (!done) {
        infd_error err = { 0 };
        ASSERT_STATUS(infd_model_kind_register(&acc_kind, &err), INFD_STATUS_OK);
        done = true;
    }
}

/* One request: its value, sequence and flags; after completion, outputs. */
typedef struct call {
    infd_request *req;
    int64_t in;
    infd_status status;
    int64_t sum, rows, slot;
    int freed_before; /* the kind's sequence_free calls when it completed */
    atomic_int done;
} call;

static void on_done(void *user, infd_request *req, infd_status status, const char *message)
{
    (void)message;
    call *c = user;
    c->status = status;
    c->freed_before = atomic_load(&last_model->freed);
    if (status == INFD_STATUS_OK) {
        infd_tensor t;
        infd_request_output(req, 0, NULL, &t);
        c->sum = *(int64_t *)t.data;
        infd_request_output(req, 1, NULL, &t);
        c->rows = *(int64_t *)t.data;
        infd_request_output(req, 2, NULL, &t);
        c->slot = *(int64_t *)t.data;
    }
    atomic_store(&c->done, 1);
}

static infd_status submit(infd_model *m, call *c, uint64_t id, const char *sid, uint32_t flags,
                          int64_t value, infd_error *err)
{
    int64_t shape[2] = { 1, 1 };
    memset(c, 0, sizeof(*c));
    c->in = value;
    infd_status st = infd_request_create(m, &c->req, err);
    if (st == INFD_STATUS_OK)
        st = infd_request_add_input(c->req, "IN", INFD_DTYPE_INT64, shape, 2, &c->in, 8, err);
    if (st == INFD_STATUS_OK && (id || sid))
        st = infd_request_set_sequence(c->req, id, sid, flags, err);
    if (st == INFD_STATUS_OK)
        st = infd_infer_async(c->req, on_done, c, err);
    if (st != INFD_STATUS_OK) {
        infd_request_destroy(c->req);
        c->req = NULL;
    }
    return st;
}

static bool wait_calls(call *c, int n)
{
    for (int i = 0; i < 20000; i++) {
        int d = 0;
        for (int k = 0; k < n; k++)
            d += atomic_load(&c[k].done);
        if (d == n)
            return true;
        infd_clock_sleep_us(1000);
    }
    return false;
}

static void finish(call *c, int n)
{
    for (int k = 0; k < n; k++)
        infd_request_destroy(c[k].req);
}

/* Direct: four sequences of five requests, interleaved, on one instance of
 * four slots: each sequence's sums are its running sums, the four are
 * batched (the delay waits for all active slots), each keeps its slot. */
static void test_direct_batches_sequences_in_order(void)
{
    register_once();
    const char *repo = test_repo_new("sequence", "direct");
    test_write_config(repo, "acc",
                      "backend: \"acc\"\nmax_batch_size: 4\n"
                      "sequence_batching { direct { max_queue_delay_microseconds: "
                      "200000 } }\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "acc", -1, &m, &err), INFD_STATUS_OK);
    ASSERT_STR_EQ(infd_model_platform(m), "test_acc");
    static call c[20];
    for (int k = 0; k < 5; k++) {
        if (k == 1) /* every sequence active: from here on batches wait for all four */
            ASSERT_TRUE(wait_calls(c, 4));
        for (int q = 0; q < 4; q++) {
            uint32_t f = (k == 0 ? INFD_SEQUENCE_START : 0) | (k == 4 ? INFD_SEQUENCE_END : 0);
            ASSERT_STATUS(submit(m, &c[k * 4 + q], 100 + (uint64_t)q, NULL, f, q * 10 + k, &err),
                          INFD_STATUS_OK);
        }
    }
    ASSERT_TRUE(wait_calls(c, 20));
    for (int q = 0; q < 4; q++) {
        int64_t sum = 0;
        for (int k = 0; k < 5; k++) {
            call *x = &c[k * 4 + q];
            ASSERT_STATUS(x->status, INFD_STATUS_OK);
            sum += q * 10 + k;
            ASSERT_EQ_I64(x->sum, sum);
            ASSERT_EQ_I64(x->slot, c[q].slot);
        }
    }
    ASSERT_EQ_INT(atomic_load(&last_model->overlap), 0);
    ASSERT_EQ_INT(atomic_load(&last_model->bad_use), 0);
    infd_model_stats st;
    infd_model_get_stats(m, &st);
    ASSERT_EQ_U64(st.inference_count, 20);
    /* With the four active, each batch waited (up to the 200 ms delay) for
     * a request of each: the four rounds after the STARTs ran as four
     * batches of four. */
    ASSERT_EQ_U64(st.batch_exec_count[4] - (c[0].rows == 4), 4);
    ASSERT_EQ_INT(atomic_load(&last_model->freed), 4);
    finish(c, 20);
    infd_model_release(m);
    infd_server_destroy(s);
}

/* Oldest, two instances, three slots of batches of two: six sequences, three
 * of them waiting in the backlog until others END; string ids. */
static void test_oldest_backlog_and_string_ids(void)
{
    register_once();
    const char *repo = test_repo_new("sequence", "oldest");
    test_write_config(repo, "acc",
                      "backend: \"acc\"\nmax_batch_size: 2\n"
                      "instance_group [{ kind: KIND_CPU count: 2 }]\n"
                      "sequence_batching { oldest { max_candidate_sequences: 3 } }\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "acc", -1, &m, &err), INFD_STATUS_OK);
    static call c[6][4];
    char id[32];
    for (int k = 0; k < 4; k++)
        for (int q = 0; q < 6; q++) {
            snprintf(id, sizeof(id), "seq-%d", q);
            uint32_t f = (k == 0 ? INFD_SEQUENCE_START : 0) | (k == 3 ? INFD_SEQUENCE_END : 0);
            ASSERT_STATUS(submit(m, &c[q][k], 0, id, f, 1 + q * k, &err), INFD_STATUS_OK);
        }
    ASSERT_TRUE(wait_calls(&c[0][0], 24));
    for (int q = 0; q < 6; q++) {
        int64_t sum = 0;
        for (int k = 0; k < 4; k++) {
            ASSERT_STATUS(c[q][k].status, INFD_STATUS_OK);
            sum += 1 + q * k;
            ASSERT_EQ_I64(c[q][k].sum, sum);
            ASSERT_TRUE(c[q][k].slot >= 0 && c[q][k].slot < 3);
            ASSERT_TRUE(c[q][k].rows >= 1 && c[q][k].rows <= 2);
        }
    }
    ASSERT_EQ_INT(atomic_load(&last_model->overlap), 0);
    ASSERT_EQ_INT(atomic_load(&last_model->bad_use), 0);
    ASSERT_EQ_INT(atomic_load(&last_model->freed), 6);
    finish(&c[0][0], 24);
    infd_model_release(m);
    infd_server_destroy(s);
}

/* What the sequence batcher refuses, with messages that say why. */
static void test_sequence_errors(void)
{
    register_once();
    const char *repo = test_repo_new("sequence", "errors");
    test_write_config(repo, "acc", "backend: \"acc\"\nmax_batch_size: 2\nsequence_batching {}\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "acc", -1, &m, &err), INFD_STATUS_OK);
    static call c[8];
    ASSERT_STATUS(submit(m, &c[0], 0, NULL, 0, 1, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_TRUE(strstr(err.msg, "correlation id") != NULL);
    ASSERT_STATUS(submit(m, &c[0], 9, NULL, 0, 1, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_TRUE(strstr(err.msg, "sequence 9 is not active") != NULL);
    ASSERT_STATUS(submit(m, &c[0], 9, NULL, INFD_SEQUENCE_START, 1, &err), INFD_STATUS_OK);
    ASSERT_STATUS(submit(m, &c[1], 9, NULL, INFD_SEQUENCE_START, 1, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_TRUE(strstr(err.msg, "already active") != NULL);
    /* A string id is not the number's. */
    ASSERT_STATUS(submit(m, &c[1], 0, "9", INFD_SEQUENCE_START | INFD_SEQUENCE_END, 5, &err),
                  INFD_STATUS_OK);
    ASSERT_STATUS(submit(m, &c[2], 9, NULL, INFD_SEQUENCE_END, 2, &err), INFD_STATUS_OK);
    ASSERT_STATUS(submit(m, &c[3], 9, NULL, 0, 1, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_TRUE(strstr(err.msg, "has ended") != NULL || strstr(err.msg, "not active") != NULL);
    ASSERT_TRUE(wait_calls(c, 3));
    ASSERT_EQ_I64(c[1].sum, 5);
    ASSERT_EQ_I64(c[2].sum, 3);
    /* Flags and ids that cannot be. */
    infd_request *r = NULL;
    ASSERT_STATUS(infd_request_create(m, &r, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_request_set_sequence(r, 0, NULL, INFD_SEQUENCE_START, &err),
                  INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STATUS(infd_request_set_sequence(r, 1, "", 0, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STATUS(infd_request_set_sequence(r, 1, NULL, 4, &err), INFD_STATUS_INVALID_ARGUMENT);
    /* Two rows in one request of a sequence. */
    int64_t shape[2] = { 2, 1 }, two[2] = { 1, 2 };
    ASSERT_STATUS(infd_request_add_input(r, "IN", INFD_DTYPE_INT64, shape, 2, two, 16, &err),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_request_set_sequence(r, 11, NULL, INFD_SEQUENCE_START, &err),
                  INFD_STATUS_OK);
    ASSERT_STATUS(infd_infer_async(r, on_done, &c[4], &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_TRUE(strstr(err.msg, "one row") != NULL);
    infd_request_destroy(r);
    finish(c, 3);
    infd_model_release(m);
    infd_server_destroy(s);
}

/* One slot and a 50 ms idle limit: a sequence left without END holds the
 * slot until it is released; the one waiting then runs, and the first is
 * gone (the kind was told). */
static void test_idle_sequence_is_released(void)
{
    register_once();
    const char *repo = test_repo_new("sequence", "idle");
    test_write_config(repo, "acc",
                      "backend: \"acc\"\nmax_batch_size: 1\n"
                      "sequence_batching { max_sequence_idle_microseconds: 50000 }\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "acc", -1, &m, &err), INFD_STATUS_OK);
    static call c[3];
    ASSERT_STATUS(submit(m, &c[0], 1, NULL, INFD_SEQUENCE_START, 7, &err), INFD_STATUS_OK);
    ASSERT_TRUE(wait_calls(c, 1));
    ASSERT_STATUS(submit(m, &c[1], 2, NULL, INFD_SEQUENCE_START | INFD_SEQUENCE_END, 3, &err),
                  INFD_STATUS_OK);
    ASSERT_TRUE(wait_calls(&c[1], 1));
    /* It ran only once the first had been released (the kind told). */
    ASSERT_EQ_INT(c[1].freed_before, 1);
    ASSERT_EQ_I64(c[1].sum, 3);
    ASSERT_STATUS(submit(m, &c[2], 1, NULL, 0, 1, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_EQ_INT(atomic_load(&last_model->freed), 2);
    finish(c, 2);
    infd_model_release(m);
    infd_server_destroy(s);
}

/* Kinds: registration rules, and config checks against what a kind
 * declares. */
static void test_kind_registration_and_config(void)
{
    register_once();
    infd_error err = { 0 };
    ASSERT_STATUS(infd_model_kind_register(&acc_kind, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_TRUE(strstr(err.msg, "already registered") != NULL);
    infd_model_kind bad = acc_kind;
    bad.name = "Bad-Name";
    ASSERT_STATUS(infd_model_kind_register(&bad, &err), INFD_STATUS_INVALID_ARGUMENT);
    bad.name = "norun";
    bad.run_batch = NULL;
    ASSERT_STATUS(infd_model_kind_register(&bad, &err), INFD_STATUS_INVALID_ARGUMENT);
    const char *repo = test_repo_new("sequence", "config");
    test_write_config(repo, "wrong_type",
                      "backend: \"acc\"\nmax_batch_size: 1\n"
                      "input [{ name: \"IN\" data_type: TYPE_FP32 dims: [1] }]\n");
    test_write_config(repo, "no_such",
                      "backend: \"acc\"\nmax_batch_size: 1\n"
                      "output [{ name: \"OUT\" data_type: TYPE_INT64 dims: [1] }]\n");
    test_write_config(repo, "state",
                      "backend: \"acc\"\nmax_batch_size: 1\nsequence_batching { state "
                      "[{ input_name: \"a\" output_name: \"b\" }] }\n");
    test_write_config(repo, "plain",
                      "backend: \"acc\"\nmax_batch_size: 4\n"
                      "dynamic_batching {}\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_repository_entry *rows = NULL;
    int n = 0;
    ASSERT_STATUS(infd_server_repository_index(s, false, &rows, &n, &err), INFD_STATUS_OK);
    int seen = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(rows[i].name, "wrong_type") == 0)
            seen += strstr(rows[i].reason, "TYPE_INT64") != NULL;
        if (strcmp(rows[i].name, "no_such") == 0)
            seen += strstr(rows[i].reason, "'OUT': backend 'acc' has no such output") != NULL;
        if (strcmp(rows[i].name, "state") == 0)
            seen += strstr(rows[i].reason, "are for ONNX models") != NULL;
        if (strcmp(rows[i].name, "plain") == 0)
            seen += rows[i].state == INFD_MODEL_STATE_READY;
    }
    infd_free(rows);
    ASSERT_EQ_INT(seen, 4);
    /* Without a sequence batcher the kind sees slot -1, and a sequence id
     * is ignored. */
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "plain", -1, &m, &err), INFD_STATUS_OK);
    static call c[1];
    ASSERT_STATUS(submit(m, &c[0], 5, NULL, INFD_SEQUENCE_START, 1, &err), INFD_STATUS_OK);
    ASSERT_TRUE(wait_calls(c, 1));
    ASSERT_STATUS(c[0].status, INFD_STATUS_INTERNAL); /* acc fails a request without a slot */
    finish(c, 1);
    infd_model_release(m);
    infd_server_destroy(s);
}

/* An ONNX model under the sequence batcher (no control inputs or state):
 * its requests are routed by sequence and run in order, batched across
 * sequences like any other rows. */
static void test_onnx_model_with_sequences(void)
{
    const char *repo = test_repo_new("sequence", "onnx");
    test_add_sub(
        repo, "add_sub", true,
        "max_batch_size: 4\nsequence_batching { oldest { max_candidate_sequences: 4 } }\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_error err = { 0 };
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "add_sub", -1, &m, &err), INFD_STATUS_OK);
    static float a[6][16], b[6][16];
    infd_request *r[6];
    int64_t shape[2] = { 1, 16 };
    for (int k = 0; k < 6; k++) {
        for (int i = 0; i < 16; i++) {
            a[k][i] = (float)(k * 16 + i);
            b[k][i] = 1.0f;
        }
        ASSERT_STATUS(infd_request_create(m, &r[k], &err), INFD_STATUS_OK);
        ASSERT_STATUS(
            infd_request_add_input(r[k], "INPUT0", INFD_DTYPE_FP32, shape, 2, a[k], 64, &err),
            INFD_STATUS_OK);
        ASSERT_STATUS(
            infd_request_add_input(r[k], "INPUT1", INFD_DTYPE_FP32, shape, 2, b[k], 64, &err),
            INFD_STATUS_OK);
        uint32_t f = (k < 2 ? INFD_SEQUENCE_START : 0) | (k >= 4 ? INFD_SEQUENCE_END : 0);
        ASSERT_STATUS(infd_request_set_sequence(r[k], 1 + (uint64_t)(k % 2), NULL, f, &err),
                      INFD_STATUS_OK);
    }
    for (int k = 0; k < 6; k++)
        ASSERT_STATUS(infd_infer(r[k], &err), INFD_STATUS_OK);
    for (int k = 0; k < 6; k++) {
        infd_tensor t;
        ASSERT_STATUS(infd_request_output(r[k], 0, NULL, &t), INFD_STATUS_OK);
        for (int i = 0; i < 16; i++)
            ASSERT_TRUE(((float *)t.data)[i] == (float)(k * 16 + i) + 1.0f);
        infd_request_destroy(r[k]);
    }
    infd_model_release(m);
    infd_server_destroy(s);
}

/* ----- deferred completion (infd_request_defer / infd_request_done) ----- */

/* "later" holds every request it gets, unfinished, for the test to finish. */
static infd_request *held[16];
static atomic_int n_held;

static infd_status later_load(void *user, infd_kind_model *km, void **state, infd_error *err)
{
    (void)user;
    int64_t one = 1;
    *state = NULL;
    infd_status st = infd_kind_model_add_input(km, "IN", INFD_DTYPE_INT64, 1, &one, err);
    if (st == INFD_STATUS_OK)
        st = infd_kind_model_add_output(km, "OUT", INFD_DTYPE_INT64, 1, &one, err);
    return st;
}

static void later_unload(void *state)
{
    (void)state;
}

static infd_status later_run(void *state, int instance, infd_batch *b, infd_error *err)
{
    (void)state;
    (void)instance;
    for (int k = 0; k < infd_batch_size(b); k++) {
        infd_request *req = infd_batch_request(b, k);
        if (infd_request_defer(req, err) != INFD_STATUS_OK)
            return err->code;
        held[atomic_fetch_add(&n_held, 1)] = req;
    }
    return INFD_STATUS_OK;
}

static const infd_model_kind later_kind = {
    .name = "later",
    .platform = "test_later",
    .load = later_load,
    .unload = later_unload,
    .run_batch = later_run,
};

typedef struct later_call {
    infd_request *req;
    int64_t in, out;
    infd_status status;
    char message[128];
    atomic_int done;
} later_call;

static void later_done(void *user, infd_request *req, infd_status status, const char *message)
{
    later_call *c = user;
    c->status = status;
    snprintf(c->message, sizeof(c->message), "%s", message ? message : "");
    infd_tensor t;
    if (status == INFD_STATUS_OK && infd_request_output(req, 0, NULL, &t) == INFD_STATUS_OK)
        c->out = *(int64_t *)t.data;
    atomic_store(&c->done, 1);
}

static atomic_int n_released;

static void count_release(void *user)
{
    (void)user;
    atomic_fetch_add(&n_released, 1);
}

/* One instance runs three requests' batches one after another without
 * finishing any; they finish later, out of order, one of them failed. */
static void test_deferred_requests_finish_later(void)
{
    register_once();
    infd_error err = { 0 };
    ASSERT_STATUS(infd_model_kind_register(&later_kind, &err), INFD_STATUS_OK);
    const char *repo = test_repo_new("sequence", "later");
    test_write_config(repo, "later",
                      "backend: \"later\"\nmax_batch_size: 0\n"
                      "instance_group [ { count: 1 kind: KIND_CPU } ]\n");
    test_write_config(repo, "acc",
                      "backend: \"acc\"\nmax_batch_size: 4\n"
                      "sequence_batching { direct { } }\n");
    infd_server *s = test_server_start(repo, INFD_MODEL_CONTROL_NONE, NULL, 0);
    ASSERT_TRUE(s != NULL);
    infd_model *m = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "later", -1, &m, &err), INFD_STATUS_OK);
    static later_call c[3];
    int64_t one = 1;
    for (int k = 0; k < 3; k++) {
        c[k].in = 10 + k;
        ASSERT_STATUS(infd_request_create(m, &c[k].req, &err), INFD_STATUS_OK);
        ASSERT_STATUS(
            infd_request_add_input(c[k].req, "IN", INFD_DTYPE_INT64, &one, 1, &c[k].in, 8, &err),
            INFD_STATUS_OK);
        ASSERT_STATUS(infd_infer_async(c[k].req, later_done, &c[k], &err), INFD_STATUS_OK);
    }
    for (int i = 0; i < 5000 && atomic_load(&n_held) < 3; i++)
        infd_clock_sleep_us(1000);
    ASSERT_EQ_INT(atomic_load(&n_held), 3); /* the instance went on to the next */
    infd_clock_sleep_us(20000);
    for (int k = 0; k < 3; k++)
        ASSERT_EQ_INT(atomic_load(&c[k].done), 0); /* none finished by itself */
    /* Finished in reverse order; the middle one fails. */
    for (int k = 2; k >= 0; k--) {
        infd_request *req = held[k];
        infd_tensor in;
        ASSERT_STATUS(infd_request_input(req, 0, &in, &err), INFD_STATUS_OK);
        int64_t v = *(const int64_t *)in.data * 2;
        infd_tensor out = { .dtype = INFD_DTYPE_INT64, .data = &v, .nbytes = 8 };
        out.shape.rank = 1;
        out.shape.dims[0] = 1;
        if (k == 1)
            infd_request_fail(req, INFD_STATUS_UNAVAILABLE, "the worker went away");
        else
            ASSERT_STATUS(infd_request_output_set(req, 0, &out, &err), INFD_STATUS_OK);
        infd_request_done(req);
    }
    for (int k = 0; k < 3; k++) {
        ASSERT_EQ_INT(atomic_load(&c[k].done), 1);
        int64_t want = k == 1 ? 0 : c[k].in * 2;
        ASSERT_EQ_I64(c[k].out, want);
        infd_request_destroy(c[k].req);
    }
    ASSERT_STATUS(c[0].status, INFD_STATUS_OK);
    ASSERT_STATUS(c[1].status, INFD_STATUS_UNAVAILABLE);
    ASSERT_STR_EQ(c[1].message, "the worker went away");
    /* Lent outputs (infd_request_output_adopt): the request's output is the
     * kind's memory until the request is destroyed; a caller's buffer gets
     * a copy and the memory back at once; a wrong tensor is refused and
     * the memory given back too. Pieces of an input stay pieces. */
    static later_call d[3];
    static int64_t lent_v[3] = { 70, 71, 72 };
    static int64_t in_v[2] = { 5, 6 };
    int64_t user_buf = 0;
    infd_data_segment halves[2] = { { &in_v[0], 4 }, { (const char *)&in_v[0] + 4, 4 } };
    for (int k = 0; k < 3; k++) {
        ASSERT_STATUS(infd_request_create(m, &d[k].req, &err), INFD_STATUS_OK);
        ASSERT_STATUS(infd_request_add_input_segments(d[k].req, "IN", INFD_DTYPE_INT64, &one, 1,
                                                      halves, 2, &err),
                      INFD_STATUS_OK);
        if (k == 1)
            ASSERT_STATUS(infd_request_set_output_buffer(d[k].req, "OUT", &user_buf, 8, &err),
                          INFD_STATUS_OK);
        ASSERT_STATUS(infd_infer_async(d[k].req, later_done, &d[k], &err), INFD_STATUS_OK);
    }
    for (int i = 0; i < 5000 && atomic_load(&n_held) < 6; i++)
        infd_clock_sleep_us(1000);
    ASSERT_EQ_INT(atomic_load(&n_held), 6);
    atomic_store(&n_released, 0);
    for (int k = 0; k < 3; k++) {
        infd_request *req = held[3 + k];
        infd_tensor info;
        const infd_data_segment *pcs = NULL;
        int n = 0;
        ASSERT_STATUS(infd_request_input_pieces(req, 0, &info, &pcs, &n, &err), INFD_STATUS_OK);
        ASSERT_EQ_INT(n, 2);
        ASSERT_TRUE(info.data == NULL && info.nbytes == 8 && pcs[1].data == halves[1].data);
        infd_tensor out = { .dtype = INFD_DTYPE_INT64, .data = &lent_v[k], .nbytes = 8 };
        out.shape.rank = 1;
        out.shape.dims[0] = k == 2 ? 2 : 1; /* the third does not fit */
        ASSERT_STATUS(infd_request_output_adopt(req, 0, &out, count_release, &lent_v[k], &err),
                      k == 2 ? INFD_STATUS_INVALID_ARGUMENT : INFD_STATUS_OK);
        if (k == 2)
            infd_request_fail(req, INFD_STATUS_INTERNAL, "a bad output");
        infd_request_done(req);
    }
    ASSERT_EQ_INT(atomic_load(&n_released), 2); /* the copied one and the refused one */
    infd_tensor got;
    ASSERT_STATUS(infd_request_output(d[0].req, 0, NULL, &got), INFD_STATUS_OK);
    ASSERT_TRUE(got.data == (void *)&lent_v[0]); /* lent, not copied */
    ASSERT_EQ_I64(d[0].out, 70);
    ASSERT_EQ_I64(user_buf, 71); /* copied into the caller's buffer */
    ASSERT_STATUS(d[2].status, INFD_STATUS_INTERNAL);
    for (int k = 0; k < 3; k++)
        infd_request_destroy(d[k].req);
    ASSERT_EQ_INT(atomic_load(&n_released), 3); /* the lent one at destroy */
    /* A sequence-batched model's requests cannot be deferred. */
    infd_model *seq = NULL;
    infd_request *r = NULL;
    ASSERT_STATUS(infd_server_model_acquire(s, "acc", -1, &seq, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_request_create(seq, &r, &err), INFD_STATUS_OK);
    ASSERT_STATUS(infd_request_defer(r, &err), INFD_STATUS_INVALID_ARGUMENT);
    infd_request_destroy(r);
    infd_model_release(seq);
    infd_model_release(m);
    infd_server_destroy(s);
}

static void test_cleanup(void)
{
    test_rm_rf(test_repo_root);
}

TEST_MAIN(test_direct_batches_sequences_in_order, test_oldest_backlog_and_string_ids,
          test_sequence_errors, test_idle_sequence_is_released, test_kind_registration_and_config,
          test_onnx_model_with_sequences, test_deferred_requests_finish_later, test_cleanup)
