/*
 * model_onnx.c - the ONNX kind's execution: a batch of requests through one
 * of the instance's engine plans.
 *
 * The requests' rows are gathered into the instance's input buffers (a GPU
 * plan's pinned staging, or straight from pinned request memory), or a lone
 * request's memory is passed through; the plan that fits the rows runs
 * (extra rows are padding); the outputs are scattered to each request's
 * memory, or written straight into a lone request's. scheduler.c forms the
 * batch and completes the requests. Warmup runs every plan before the model
 * is READY.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/common.h"
#include "core/log.h"
#include "core/pool.h"
#include "runtime/runtime.h"

static const rt_plan *plan_for(const infd_model *m, int64_t rows, int *index)
{
    for (int p = 0; p < m->n_plans; p++)
        if (m->plans[p].batch >= rows) {
            *index = p;
            return &m->plans[p];
        }
    *index = m->n_plans - 1;
    return &m->plans[m->n_plans - 1];
}

static bool wants_all_outputs(const infd_request *r)
{
    return r->n_out == r->model->n_out;
}

/* Copies bytes [from, from + len) of the concatenation of `segs` to dst,
 * leaving out (with `skip_pinned`) the pieces in the pinned memory pool,
 * which the device copy reads where they lie. An input in device memory
 * is never copied here (wants_pieces lists it where it lies). */
static void copy_from_segments(char *dst, const infd_data_segment *segs, int n_segs, size_t from,
                               size_t len, bool skip_pinned, bool on_device)
{
    if (on_device)
        return;
    for (int g = 0; g < n_segs && len > 0; g++) {
        size_t n = segs[g].nbytes;
        if (from >= n) {
            from -= n;
            continue;
        }
        size_t take = n - from < len ? n - from : len;
        if (!skip_pinned || !infd_pinned_contains(segs[g].data, n))
            memcpy(dst, (const char *)segs[g].data + from, take);
        dst += take;
        len -= take;
        from = 0;
    }
}

/* Gathers chunk `task` of the instance's batch: bytes [c * chunk, (c + 1) *
 * chunk) of input i's batch, from the requests (and their pieces) that
 * hold them. Chunks split large requests too, so a pool balances batches of
 * a few big requests as well as many small ones. */
static void gather_chunk(void *arg, int64_t task)
{
    rt_instance *inst = arg;
    const infd_model *m = inst->model;
    int i = 0;
    while (inst->gather_first[i + 1] <= task)
        i++;
    size_t rb = m->in[i].row_bytes;
    size_t at = (size_t)(task - inst->gather_first[i]) * inst->gather_chunk;
    size_t end = at + inst->gather_chunk;
    /* The request holding byte `at`: the last one starting at or before it. */
    int lo = 0, hi = inst->gather_n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((size_t)inst->row_at[mid] * rb <= at)
            lo = mid;
        else
            hi = mid - 1;
    }
    for (int k = lo; k < inst->gather_n && at < end; k++) {
        const infd_request *r = inst->batch[k];
        size_t base = (size_t)inst->row_at[k] * rb, stop = base + r->in[i].nbytes;
        size_t upto = stop < end ? stop : end;
        if (upto > at)
            copy_from_segments(inst->gather_dst[i] + at, r->in[i].segs, r->in[i].n_segs, at - base,
                               upto - at, inst->gather_skip_pinned[i], r->in[i].on_device);
        at = upto;
    }
}

/* Batches at least this large are gathered by the model's copy pool, in
 * chunks of GATHER_CHUNK_BYTES. */
#define PARALLEL_GATHER_BYTES (1u << 20)
#define GATHER_CHUNK_BYTES    (512u << 10)

/* Gathers the batch's inputs into inst->gather_dst. */
static void gather(const infd_model *m, rt_instance *inst, int n, int64_t rows)
{
    int64_t at = 0;
    size_t bytes = 0;
    for (int k = 0; k < n; k++) {
        inst->row_at[k] = at;
        at += inst->batch[k]->rows;
    }
    for (int i = 0; i < m->n_in_pub; i++)
        bytes += (size_t)rows * m->in[i].row_bytes;
    bool parallel = m->copy_pool && bytes >= PARALLEL_GATHER_BYTES;
    inst->gather_n = n;
    inst->gather_chunk = parallel ? GATHER_CHUNK_BYTES : SIZE_MAX;
    inst->gather_first[0] = 0;
    for (int i = 0; i < m->n_in_pub; i++) {
        size_t in_bytes = (size_t)rows * m->in[i].row_bytes;
        int64_t chunks = parallel
                             ? (int64_t)((in_bytes + GATHER_CHUNK_BYTES - 1) / GATHER_CHUNK_BYTES)
                             : in_bytes > 0;
        inst->gather_first[i + 1] = inst->gather_first[i] + chunks;
    }
    int64_t tasks = inst->gather_first[m->n_in_pub];
    if (parallel)
        infd_pool_parallel_for(m->copy_pool, tasks, gather_chunk, inst);
    else
        for (int64_t t = 0; t < tasks; t++)
            gather_chunk(inst, t);
}

/* Whether input i of the batch should reach the GPU from where its
 * pieces lie: some piece is in the pinned memory pool or in device memory,
 * and the instance has room to list them (each such piece, and at most one
 * run of the staging before each and after the last). A request's input in
 * device memory is one piece, and only models whose every instance lists
 * pieces take them (model.c, device_inputs), so such a batch always does. */
static bool wants_pieces(const rt_instance *inst, int n, int i)
{
    if (!inst->pieces[i])
        return false;
    int pinned = 0;
    for (int k = 0; k < n; k++) {
        const infd_request *r = inst->batch[k];
        if (r->in[i].on_device) {
            pinned++;
            continue;
        }
        for (int g = 0; g < r->in[i].n_segs; g++)
            pinned += infd_pinned_contains(r->in[i].segs[g].data, r->in[i].segs[g].nbytes);
    }
    return pinned > 0 && 2 * pinned + 1 <= inst->pieces_cap;
}

/* Whether some request of the batch has input i in device memory. */
static bool any_on_device(const rt_instance *inst, int n, int i)
{
    for (int k = 0; k < n; k++)
        if (inst->batch[k]->in[i].on_device)
            return true;
    return false;
}

/* Lists the pieces the device copy of input i reads, in batch order: the
 * requests' pieces in the pinned pool where they lie, the others from the
 * staging `base` the gather put them in (adjacent ones as one). */
static int pinned_pieces(const infd_model *m, rt_instance *inst, int n, int i, char *base)
{
    infd_data_segment *out = inst->pieces[i];
    int np = 0;
    for (int k = 0; k < n; k++) {
        const infd_request *r = inst->batch[k];
        size_t at = (size_t)inst->row_at[k] * m->in[i].row_bytes;
        for (int g = 0; g < r->in[i].n_segs; g++) {
            const infd_data_segment *s = &r->in[i].segs[g];
            if (!s->nbytes)
                continue;
            bool pinned = r->in[i].on_device || infd_pinned_contains(s->data, s->nbytes);
            const char *src = pinned ? s->data : base + at;
            if (np > 0 && (const char *)out[np - 1].data + out[np - 1].nbytes == src)
                out[np - 1].nbytes += s->nbytes;
            else
                out[np++] = (infd_data_segment){ src, s->nbytes };
            at += s->nbytes;
        }
    }
    return np;
}

/* Fills the runtime's own inputs of the batch (rows [0, plan rows)): each
 * control's value for its row's request (READY true for a request, every
 * control false on padding rows), a state's row from the request's
 * sequence slot, or zeros when the request starts its sequence (and on
 * padding rows). */
static void fill_hidden(const infd_model *m, rt_instance *inst, int n, int64_t plan_rows,
                        char *const *base)
{
    for (int i = m->n_in_pub; i < m->n_in; i++) {
        const rt_hidden *h = &m->hidden[i - m->n_in_pub];
        size_t rb = m->in[i].row_bytes;
        char *dst = base[i];
        int64_t row = 0;
        for (int k = 0; k < n; k++, row++) {
            const infd_request *r = inst->batch[k];
            char *at = dst + (size_t)row * rb;
            switch (h->kind) {
            case RT_HIDDEN_START:
                memcpy(at, r->seq_flags & INFD_SEQUENCE_START ? h->on : h->off, rb);
                break;
            case RT_HIDDEN_END:
                memcpy(at, r->seq_flags & INFD_SEQUENCE_END ? h->on : h->off, rb);
                break;
            case RT_HIDDEN_READY:
                memcpy(at, h->on, rb);
                break;
            case RT_HIDDEN_CORRID: {
                uint64_t id = r->seq_is_string ? 0 : r->seq_id; /* little-endian */
                memcpy(at, &id, rb < 8 ? rb : 8);
                break;
            }
            case RT_HIDDEN_STATE:
                if (r->seq_flags & INFD_SEQUENCE_START)
                    memset(at, 0, rb);
                else
                    memcpy(at, m->seq->state + (size_t)r->seq_slot * m->state_bytes + h->state_at,
                           rb);
                break;
            }
        }
        for (; row < plan_rows; row++) {
            char *at = dst + (size_t)row * rb;
            if (h->kind == RT_HIDDEN_START || h->kind == RT_HIDDEN_END ||
                h->kind == RT_HIDDEN_READY)
                memcpy(at, h->off, rb);
            else
                memset(at, 0, rb);
        }
    }
}

/* Keeps each request's new state (the states' output rows) in its slot. */
static void keep_state(const infd_model *m, rt_instance *inst, int n, const char *const *out_base)
{
    for (int i = m->n_in_pub; i < m->n_in; i++) {
        const rt_hidden *h = &m->hidden[i - m->n_in_pub];
        if (h->kind != RT_HIDDEN_STATE)
            continue;
        size_t rb = m->in[i].row_bytes;
        for (int k = 0; k < n; k++) {
            const infd_request *r = inst->batch[k];
            memcpy(m->seq->state + (size_t)r->seq_slot * m->state_bytes + h->state_at,
                   out_base[h->state_out] + (size_t)k * rb, rb);
        }
    }
}

infd_status rt_onnx_run_batch(infd_model *m, rt_instance *inst, int n, int64_t rows,
                              uint64_t when[2], infd_error *err)
{
    int pi = 0;
    const rt_plan *p = plan_for(m, rows, &pi);
    infd_tensor ins[INFD_MAX_MODEL_IO], outs[INFD_MAX_MODEL_IO];
    int lead = m->max_batch > 0 ? 1 : 0;
    /* Inputs: a lone request that fills the plan is passed through when
     * each input is one piece of aligned memory (kernels may use aligned
     * vector loads; binary HTTP bodies put tensors at any offset and in
     * pieces), otherwise gathered. */
    bool direct_in = n == 1 && rows == p->batch && m->n_in == m->n_in_pub;
    bool any_pieces = false;
    for (int i = 0; i < m->n_in_pub; i++) {
        inst->gather_skip_pinned[i] = wants_pieces(inst, n, i);
        any_pieces |= inst->gather_skip_pinned[i];
        /* Device memory cannot be gathered by the host. */
        if (!inst->gather_skip_pinned[i] && any_on_device(inst, n, i))
            return infd_error_set(err, INFD_STATUS_INTERNAL,
                                  "input '%s': a batch of %d requests has more pieces than the "
                                  "instance lists (%d), and some are in device memory",
                                  m->in[i].name, n, inst->pieces_cap);
    }
    direct_in &= !any_pieces;
    for (int i = 0; direct_in && i < m->n_in_pub; i++)
        direct_in = inst->batch[0]->in[i].n_segs == 1 &&
                    ((uintptr_t)inst->batch[0]->in[i].segs[0].data % INFD_ALIGNMENT) == 0;
    for (int i = 0; i < m->n_in; i++) {
        const infd_model_io *io = &m->in[i];
        infd_tensor *t = &ins[p->in_map[i]];
        t->dtype = io->dtype;
        t->shape.rank = io->rank + lead;
        if (lead)
            t->shape.dims[0] = p->batch;
        for (int d = 0; d < io->rank; d++)
            t->shape.dims[d + lead] = io->dims[d];
        t->nbytes = (size_t)p->batch * io->row_bytes;
        t->owns_data = false;
        if (direct_in) {
            t->data = (void *)inst->batch[0]->in[i].segs[0].data;
            continue;
        }
        /* A GPU plan's context has page-locked staging that its
         * host-to-device copy reads: gathering straight into it saves the
         * engine's copy out of in_buf. */
        char *base = infd_context_input_buffer(inst->ctxs[pi], p->in_map[i]);
        if (!base)
            base = inst->in_buf[i];
        inst->gather_dst[i] = base;
        t->data = base;
    }
    if (!direct_in)
        gather(m, inst, n, rows);
    if (m->n_in > m->n_in_pub)
        fill_hidden(m, inst, n, p->batch, inst->gather_dst);
    for (int i = 0; i < m->n_in_pub && any_pieces; i++) {
        if (!inst->gather_skip_pinned[i])
            continue;
        int np = pinned_pieces(m, inst, n, i, inst->gather_dst[i]);
        infd_error perr = { 0 };
        if (infd_context_set_input_pieces(inst->ctxs[pi], p->in_map[i], inst->pieces[i], np,
                                          &perr) != INFD_STATUS_OK) {
            /* Not expected (the pieces fit the input): gather it all. */
            if (any_on_device(inst, n, i))
                return infd_error_set(err, INFD_STATUS_INTERNAL, "model '%s': %s", m->name,
                                      perr.msg);
            infd_log(INFD_LOG_LEVEL_WARN, "model '%s': %s; gathering input '%s' instead", m->name,
                     perr.msg, m->in[i].name);
            inst->gather_skip_pinned[i] = false;
            gather(m, inst, n, rows);
        } else if (!inst->logged_pinned) {
            inst->logged_pinned = true;
            INFD_LOG_DEBUG("model '%s' instance %d: input '%s' of a batch of %d copied to the "
                           "device from %d pieces, in pinned request memory where it lay",
                           m->name, inst->index, m->in[i].name, n, np);
        }
    }
    /* Outputs: straight into a lone request's memory when it takes them
     * all and that memory is aligned. */
    bool direct_out = n == 1 && rows == p->batch && wants_all_outputs(inst->batch[0]);
    for (int k = 0; direct_out && k < inst->batch[0]->n_out; k++)
        direct_out = ((uintptr_t)inst->batch[0]->out[k].data % INFD_ALIGNMENT) == 0;
    const char *out_base[INFD_MAX_MODEL_IO]; /* where each output's rows are scattered from */
    for (int j = 0; j < m->n_out; j++) {
        infd_tensor *t = &outs[p->out_map[j]];
        memset(t, 0, sizeof(*t));
        t->nbytes = (size_t)p->batch * m->out[j].row_bytes;
        /* GPU plans: scatter straight from the staging the device-to-host
         * copy wrote (valid until this context's next run). */
        t->data = direct_out ? NULL : infd_context_output_buffer(inst->ctxs[pi], p->out_map[j]);
        if (!t->data)
            t->data = inst->out_buf[j];
        out_base[j] = t->data;
        if (direct_out)
            for (int k = 0; k < inst->batch[0]->n_out; k++)
                if (inst->batch[0]->out_index[k] == j)
                    t->data = inst->batch[0]->out[k].data;
    }
    when[0] = infd_clock_ns();
    infd_plan *plan = rt_instance_plan(inst, pi);
    infd_status st =
        infd_plan_run(plan, inst->ctxs[pi], ins, m->n_in, outs, infd_plan_n_outputs(plan), err);
    when[1] = infd_clock_ns();
    if (st == INFD_STATUS_OK && !direct_out) {
        size_t off[INFD_MAX_MODEL_IO] = { 0 };
        for (int k = 0; k < n; k++) {
            infd_request *r = inst->batch[k];
            for (int o = 0; o < r->n_out; o++) {
                int j = r->out_index[o];
                size_t bytes = (size_t)r->rows * m->out[j].row_bytes;
                memcpy(r->out[o].data, out_base[j] + off[j], bytes);
            }
            for (int j = 0; j < m->n_out; j++)
                off[j] += (size_t)r->rows * m->out[j].row_bytes;
        }
    }
    if (st == INFD_STATUS_OK && m->n_out > m->n_out_pub)
        keep_state(m, inst, n, out_base);
    return st;
}

/* ------------------------------------------------------------------------- */
/* Warmup                                                                    */
/* ------------------------------------------------------------------------- */

static void fill_random(infd_dtype dtype, void *data, size_t nbytes, uint64_t *seed)
{
    size_t es = infd_dtype_size(dtype);
    size_t n = es ? nbytes / es : 0;
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
        float f = (float)(*seed >> 40) / (float)(1u << 24);
        char *p = (char *)data + i * es;
        switch (dtype) {
        case INFD_DTYPE_FP32:
            memcpy(p, &f, 4);
            break;
        case INFD_DTYPE_FP64: {
            double d = f;
            memcpy(p, &d, 8);
            break;
        }
        case INFD_DTYPE_FP16: {
            uint16_t h = infd_fp16_from_fp32(f);
            memcpy(p, &h, 2);
            break;
        }
        case INFD_DTYPE_BF16: {
            uint16_t h = infd_bf16_from_fp32(f);
            memcpy(p, &h, 2);
            break;
        }
        default:
            memset(p, 0, es);
            break; /* integers: zero keeps indices in range */
        }
    }
}

/* One warmup sample: `count` runs of plan `pi` on every instance, with
 * zeros, or random data for the inputs `w` asks it for. `own_out`: host
 * plans write to buffers of the sample's own rather than the instances'
 * (samples running in parallel, rt_model_warmup). */
static infd_status warm_sample(infd_model *m, const Inference__ModelWarmup *w, int pi, int count,
                               bool own_out, uint64_t *seed, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    void *in[INFD_MAX_MODEL_IO] = { 0 };
    void *out[INFD_MAX_MODEL_IO] = { 0 };
    int lead = m->max_batch > 0 ? 1 : 0;
    const rt_plan *p = &m->plans[pi];
    infd_tensor ins[INFD_MAX_MODEL_IO], outs[INFD_MAX_MODEL_IO];
    for (int i = 0; i < m->n_in; i++) {
        size_t bytes = (size_t)p->batch * m->in[i].row_bytes;
        in[i] = infd_aligned_alloc(INFD_ALIGNMENT, bytes ? bytes : 1);
        if (!in[i]) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for warmup");
            goto out;
        }
        memset(in[i], 0, bytes);
        bool random = false;
        for (size_t k = 0; w && k < w->n_inputs; k++)
            if (w->inputs[k]->key && strcmp(w->inputs[k]->key, m->in[i].name) == 0 &&
                w->inputs[k]->value &&
                w->inputs[k]->value->input_data_type_case ==
                    INFERENCE__MODEL_WARMUP__INPUT__INPUT_DATA_TYPE_RANDOM_DATA)
                random = true;
        if (random)
            fill_random(m->in[i].dtype, in[i], bytes, seed);
        infd_tensor *t = &ins[p->in_map[i]];
        memset(t, 0, sizeof(*t));
        t->dtype = m->in[i].dtype;
        t->shape.rank = m->in[i].rank + lead;
        if (lead)
            t->shape.dims[0] = p->batch;
        for (int d = 0; d < m->in[i].rank; d++)
            t->shape.dims[d + lead] = m->in[i].dims[d];
        t->data = in[i];
        t->nbytes = bytes;
    }
    for (int j = 0; own_out && j < m->n_out; j++) {
        size_t bytes = (size_t)p->batch * m->out[j].row_bytes;
        out[j] = infd_aligned_alloc(INFD_ALIGNMENT, bytes ? bytes : 1);
        if (!out[j]) {
            st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for warmup");
            goto out;
        }
    }
    for (int k = 0; k < m->n_inst && st == INFD_STATUS_OK; k++) {
        rt_instance *inst = &m->inst[k];
        for (int j = 0; j < m->n_out; j++) {
            infd_tensor *t = &outs[p->out_map[j]];
            memset(t, 0, sizeof(*t));
            t->data = infd_context_output_buffer(inst->ctxs[pi], p->out_map[j]);
            if (!t->data) /* host plans: the instance's batch buffer, or the sample's */
                t->data = own_out ? out[j] : inst->out_buf[j];
            t->nbytes = (size_t)p->batch * m->out[j].row_bytes;
        }
        infd_plan *plan = rt_instance_plan(inst, pi);
        for (int r = 0; r < count && st == INFD_STATUS_OK; r++)
            st = infd_plan_run(plan, inst->ctxs[pi], ins, m->n_in, outs, infd_plan_n_outputs(plan),
                               err);
    }
out:
    for (int i = 0; i < m->n_in; i++)
        infd_free(in[i]);
    for (int j = 0; j < m->n_out; j++)
        infd_free(out[j]);
    return st;
}

/* A thread of the default warmup: runs plans from a shared countdown,
 * the largest batch first, until none is left or one fails. */
typedef struct warm_worker {
    infd_model *m;
    atomic_int *next; /* the next plan to take; < 0: none left */
    infd_status st;
    infd_error err;
    pthread_t thread;
    bool threaded;
} warm_worker;

static void *warm_worker_main(void *arg)
{
    warm_worker *w = arg;
    uint64_t seed = 42;
    int pi;
    while (w->st == INFD_STATUS_OK && (pi = atomic_fetch_sub(w->next, 1)) >= 0)
        w->st = warm_sample(w->m, NULL, pi, 1, true, &seed, &w->err);
    return NULL;
}

/* Warmup: before the workers start, every instance runs every plan once
 * (with zeros), or the config's model_warmup samples (zero or random data,
 * `count` times, on the plan that a batch of batch_size rows would use), so
 * the first real request finds primitives created and memory touched on
 * whichever instance takes it. Runs straight on the contexts: the queue's
 * delay and timeouts do not apply. The default warmup of a model served
 * on the CPU alone runs its plans in parallel, largest batch first, as many
 * at once as the machine's cores hold at the instances' engine threads
 * each (each plan's contexts, and their threads, are their own): ResNet-50
 * served with 3 plans on the 2-core machine was ready in 0.73 s instead of
 * 0.89 s, PaddleOCR det at 640x640 in 0.54 s instead of 0.88 s. */
infd_status rt_model_warmup(infd_model *m, infd_error *err)
{
    infd_status st = INFD_STATUS_OK;
    uint64_t seed = 42;
    const Inference__ModelConfig *c = m->config;
    int lead = m->max_batch > 0 ? 1 : 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int width = (int)(cores / (m->n_threads > 0 ? m->n_threads : 1)); /* plans at once */
    if (c->n_model_warmup == 0 && m->n_dev == 1 && m->dev[0].kind == INFD_DEVICE_CPU && width > 1 &&
        m->n_plans > 1) {
        warm_worker ws[RT_MAX_PLANS];
        atomic_int next = m->n_plans - 1;
        int n = INFD_MIN(width, m->n_plans);
        for (int k = 0; k < n; k++) {
            memset(&ws[k], 0, sizeof(ws[k]));
            ws[k].m = m;
            ws[k].next = &next;
            ws[k].threaded = pthread_create(&ws[k].thread, NULL, warm_worker_main, &ws[k]) == 0;
            if (!ws[k].threaded)
                warm_worker_main(&ws[k]);
        }
        for (int k = 0; k < n; k++) {
            if (ws[k].threaded)
                pthread_join(ws[k].thread, NULL);
            if (st == INFD_STATUS_OK && ws[k].st != INFD_STATUS_OK) {
                st = ws[k].st;
                if (err)
                    *err = ws[k].err;
            }
        }
    } else {
        int n_samples = c->n_model_warmup > 0 ? (int)c->n_model_warmup : m->n_plans;
        for (int s = 0; s < n_samples && st == INFD_STATUS_OK; s++) {
            const Inference__ModelWarmup *w = c->n_model_warmup > 0 ? c->model_warmup[s] : NULL;
            int pi = s % m->n_plans;
            int count = 1;
            if (w) {
                int64_t rows = lead ? (w->batch_size ? w->batch_size : 1) : 1;
                if (lead && rows > m->max_batch) {
                    st = infd_error_set(
                        err, INFD_STATUS_INVALID_ARGUMENT,
                        "model_warmup '%s': batch_size %lld exceeds max_batch_size %d", w->name,
                        (long long)rows, m->max_batch);
                    break;
                }
                plan_for(m, rows, &pi);
                count = w->count ? (int)w->count : 1;
            }
            st = warm_sample(m, w, pi, count, false, &seed, err);
        }
    }
    if (st != INFD_STATUS_OK)
        infd_error_prefix(err, "warmup");
    return st;
}
