/*
 * ref_rnn.c - ONNX LSTM in FP32 (a Parakeet predictor is a 2-layer LSTM).
 *
 * The two matrix products per direction go to oneDNN's dnnl_sgemm: the
 * input projection of every time step at once (X W^T, [steps x batch, 4H]),
 * then per step the recurrent one (H R^T, [batch, 4H]). The gates are ours:
 * ONNX order i, o, f, c; f = Sigmoid, g = h = Tanh (the defaults, the only
 * activations accepted); optional biases (Wb + Rb), peepholes P (i, o, f),
 * clip (the pre-activations clamped to [-clip, clip]) and input_forget
 * (f = 1 - i):
 *   i = f(x Wi + h Ri + Wbi + Rbi + Pi c)      o = f(... + Po c_new)
 *   f = f(x Wf + h Rf + Wbf + Rbf + Pf c)      c~ = g(x Wc + h Rc + Wbc + Rbc)
 *   c_new = f c + i c~                         h_new = o h(c_new)
 * Directions forward, reverse and bidirectional; layout 0 ([seq, batch,
 * ...]) and 1 ([batch, seq, ...]); sequence_lens: batch entry b runs its
 * first len_b steps (reverse: from len_b - 1 down), its later Y rows are
 * 0, and Y_h / Y_c hold its state after its last step. The workspace holds
 * the projections and the state, so run() allocates nothing.
 */
#include <math.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "backends/cpu/ref_common.h"
#include "backends/cpu/ref_kernels.h"
#include "graph/node_params.h"

typedef struct lstm_kernel {
    infd_cpu_kernel base;
    int64_t seq, batch, in, hid;
    int dirs;
    bool reverse; /* direction "reverse" (dirs 1) */
    int layout;
    bool input_forget;
    float clip; /* 0: none */
    int n_inputs, n_outputs;
} lstm_kernel;

bool ref_lstm_supports(const infd_kernel_args *a, infd_error *why)
{
    for (int32_t i = 0; i < a->n_inputs; i++) {
        if (!a->inputs[i] || i == 4)
            continue;
        if (a->inputs[i]->dtype != INFD_DTYPE_FP32)
            return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                               "input %d ('%s') is %s: the CPU LSTM runs FP32", (int)i,
                               a->inputs[i]->name, infd_dtype_name(a->inputs[i]->dtype));
    }
    const char *direction = "forward";
    if (infd_ir_attr_string(a->g, a->node, "direction", "forward", &direction, NULL) !=
        INFD_STATUS_OK)
        return ref_decline(a, why, INFD_STATUS_INVALID_ARGUMENT, "bad attribute 'direction'");
    int dirs = strcmp(direction, "bidirectional") == 0 ? 2 : 1;
    if (!infd_lstm_default_activations(a->node, dirs))
        return ref_decline(a, why, INFD_STATUS_UNIMPLEMENTED,
                           "LSTM activations other than the defaults (Sigmoid, Tanh, Tanh) are "
                           "not supported");
    return true;
}

typedef struct lstm_ptrs {
    const float *x, *w, *r, *b, *h0, *c0, *p;
    const int32_t *lens;
    float *y, *yh, *yc;
} lstm_ptrs;

static inline float sigm(float v)
{
    return 1.0f / (1.0f + expf(-v));
}

static inline float clipped(float v, float clip)
{
    if (clip > 0.0f)
        return v < -clip ? -clip : v > clip ? clip : v;
    return v;
}

/* One direction d over all steps. ws: xw [seq * batch, 4H], hr [batch, 4H],
 * h [batch, H], c [batch, H]. */
static void run_direction(const lstm_kernel *k, const lstm_ptrs *p, int d, float *ws)
{
    const int64_t S = k->seq, B = k->batch, I = k->in, H = k->hid, G = 4 * H;
    float *xw = ws, *hr = xw + S * B * G, *h = hr + B * G, *c = h + B * H;
    const float *w = p->w + (int64_t)d * G * I, *r = p->r + (int64_t)d * G * H;
    const float *wb = p->b ? p->b + (int64_t)d * 2 * G : NULL, *rb = wb ? wb + G : NULL;
    const float *pp = p->p ? p->p + (int64_t)d * 3 * H : NULL;
    bool reverse = k->reverse || d == 1;
    /* X rows in memory order: layout 0 row t * B + b, layout 1 row b * S + t. */
    if (S * B > 0)
        dnnl_sgemm('N', 'T', S * B, G, I, 1.0f, p->x, I, w, I, 0.0f, xw, G);
    for (int64_t b = 0; b < B; b++) {
        int64_t si = k->layout ? (b * k->dirs + d) * H : ((int64_t)d * B + b) * H;
        for (int64_t j = 0; j < H; j++) {
            h[b * H + j] = p->h0 ? p->h0[si + j] : 0.0f;
            c[b * H + j] = p->c0 ? p->c0[si + j] : 0.0f;
        }
    }
    for (int64_t s = 0; s < S; s++) {
        if (B > 0)
            dnnl_sgemm('N', 'T', B, G, H, 1.0f, h, H, r, H, 0.0f, hr, G);
        for (int64_t b = 0; b < B; b++) {
            int64_t len = p->lens ? p->lens[b] : S;
            if (len > S)
                len = S;
            if (s >= len)
                continue;
            int64_t t = reverse ? len - 1 - s : s;
            const float *xg = xw + (k->layout ? b * S + t : t * B + b) * G;
            const float *hg = hr + b * G;
            float *hb = h + b * H, *cb = c + b * H;
            float *yb = p->y ? p->y + (k->layout ? ((b * S + t) * k->dirs + d) * H
                                                 : ((t * k->dirs + d) * B + b) * H)
                             : NULL;
            for (int64_t j = 0; j < H; j++) {
                float gi = xg[j] + hg[j], go = xg[H + j] + hg[H + j];
                float gf = xg[2 * H + j] + hg[2 * H + j], gc = xg[3 * H + j] + hg[3 * H + j];
                if (wb) {
                    gi += wb[j] + rb[j];
                    go += wb[H + j] + rb[H + j];
                    gf += wb[2 * H + j] + rb[2 * H + j];
                    gc += wb[3 * H + j] + rb[3 * H + j];
                }
                float cprev = cb[j];
                if (pp) {
                    gi += pp[j] * cprev;
                    gf += pp[2 * H + j] * cprev;
                }
                float ig = sigm(clipped(gi, k->clip));
                float fg = k->input_forget ? 1.0f - ig : sigm(clipped(gf, k->clip));
                float cc = tanhf(clipped(gc, k->clip));
                float cn = fg * cprev + ig * cc;
                if (pp)
                    go += pp[H + j] * cn;
                float og = sigm(clipped(go, k->clip));
                float hn = og * tanhf(cn);
                cb[j] = cn;
                hb[j] = hn;
                if (yb)
                    yb[j] = hn;
            }
        }
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t si = k->layout ? (b * k->dirs + d) * H : ((int64_t)d * B + b) * H;
        if (p->yh)
            memcpy(p->yh + si, h + b * H, sizeof(float) * (size_t)H);
        if (p->yc)
            memcpy(p->yc + si, c + b * H, sizeof(float) * (size_t)H);
    }
}

static void lstm_run(const infd_cpu_kernel *base, const infd_kernel_io *io)
{
    const lstm_kernel *k = (const lstm_kernel *)base;
    /* io->inputs has the node's n_inputs entries (NULL for one left out). */
    const void *in[8] = { 0 };
    void *outs[3] = { 0 };
    for (int i = 0; i < k->n_inputs && i < 8; i++)
        in[i] = io->inputs[i];
    for (int i = 0; i < k->n_outputs && i < 3; i++)
        outs[i] = io->outputs[i];
    lstm_ptrs p = { .x = in[0],
                    .w = in[1],
                    .r = in[2],
                    .b = in[3],
                    .lens = in[4],
                    .h0 = in[5],
                    .c0 = in[6],
                    .p = in[7],
                    .y = outs[0],
                    .yh = outs[1],
                    .yc = outs[2] };
    if (p.y && p.lens) /* rows past a sequence's length are 0 */
        memset(p.y, 0, sizeof(float) * (size_t)(k->seq * k->dirs * k->batch * k->hid));
    for (int d = 0; d < k->dirs; d++)
        run_direction(k, &p, d, io->workspace);
}

infd_status ref_lstm_compile(const infd_kernel_args *a, infd_kernel **out, infd_error *err)
{
    *out = NULL;
    const char *direction = "forward";
    int64_t layout = 0, input_forget = 0;
    float clip = 0.0f;
    infd_status st = infd_ir_attr_string(a->g, a->node, "direction", "forward", &direction, err);
    if (st == INFD_STATUS_OK)
        st = infd_ir_attr_int(a->g, a->node, "layout", 0, &layout, err);
    if (st == INFD_STATUS_OK)
        st = infd_ir_attr_int(a->g, a->node, "input_forget", 0, &input_forget, err);
    if (st == INFD_STATUS_OK)
        st = infd_ir_attr_float(a->g, a->node, "clip", 0.0f, &clip, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (clip < 0.0f)
        return infd_node_error(a, err, INFD_STATUS_INVALID_ARGUMENT,
                               "attribute 'clip' is %g, expected a positive bound", (double)clip);
    lstm_kernel *k = (lstm_kernel *)infd_cpu_kernel_new(sizeof(*k), "ref:lstm", lstm_run, NULL);
    if (!k)
        return infd_node_error(a, err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    const infd_ir_value *x = a->inputs[0], *r = a->inputs[2];
    k->layout = (int)layout;
    k->seq = layout ? x->shape.dims[1].value : x->shape.dims[0].value;
    k->batch = layout ? x->shape.dims[0].value : x->shape.dims[1].value;
    k->in = x->shape.dims[2].value;
    k->hid = r->shape.dims[2].value;
    k->dirs = (int)r->shape.dims[0].value;
    k->reverse = strcmp(direction, "reverse") == 0;
    k->input_forget = input_forget != 0;
    k->clip = clip;
    k->n_inputs = (int)a->n_inputs;
    k->n_outputs = (int)a->n_outputs;
    int64_t G = 4 * k->hid;
    k->base.base.workspace_bytes =
        sizeof(float) * (size_t)(k->seq * k->batch * G + k->batch * G + 2 * k->batch * k->hid);
    *out = &k->base.base;
    return INFD_STATUS_OK;
}
