"""The TDT loss of tdt.py as three CUDA kernels (numba), for training on
the GPU machine.

tdt.tdt_loss runs the recursion a frame at a time in torch: some 25 small
kernels a frame forward and more backward, so a batch of 150-frame
utterances costs thousands of launches, and the loss outweighs the model.
Here one block per utterance walks the frames itself:

- alpha: frame by frame, the block's threads compute alpha(t, u) for every
  u from the moves of earlier frames (durations >= 1) in parallel, then one
  thread adds the duration-0 token moves along u, in order (they chain
  within the frame);
- beta: the same recursion backwards from the final blank moves that land
  exactly on T, so that beta(0, 0) = log P(y | x);
- the gradient: each move's posterior, exp(alpha(src) + move + beta(dst) -
  log P), summed into the log-probabilities the move used (its token or
  blank, and its duration). A loss of -log 0 (no path) gets a gradient of
  zero.

The inputs are what the moves read, gathered in torch beforehand (so that
torch differentiates the gathers and the log-softmax): lp_blank [B, T, U1],
lp_y [B, T, U1] (the next target token's log-probability at u; column U1-1
unused), the duration log-probabilities for token moves and for blank moves
[B, T, U1, D]. float32, on one CUDA device, on torch's current stream.

check() compares loss and gradients with tdt.tdt_loss on random inputs;
train.py runs it before training and uses tdt.tdt_loss when it disagrees
or numba is missing. With NUMBA_ENABLE_CUDASIM=1 numba simulates the
kernels on the CPU (slowly), which is how tests/e2e/test_train_asr.py runs
them without a GPU.
"""

import math
import os

import torch

NEG = -1e30
SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
# Threads per utterance; the simulator's are Python threads, and 4 of them
# also walk the strided loops over u.
THREADS = 4 if SIM else 128

cuda = None  # numba.cuda, imported on first use: numba is optional


def available():
    """Whether the kernels can run: numba imports, and it has a GPU or
    simulates one. tdt.tdt_loss is the fallback."""
    global cuda
    if cuda is None:
        import numpy as np

        if not hasattr(np, "row_stack"):  # numba-cuda 0.2x still names it; numpy 2.4 dropped it
            np.row_stack = np.vstack
        try:
            from numba import cuda as numba_cuda
        except ImportError:
            return False
        cuda = numba_cuda
    return SIM or cuda.is_available()


_kernels = None


def _build():
    """Compiles the kernels on first use."""

    @cuda.jit(device=True, inline=True)
    def lae(a, b):
        if a < b:
            a, b = b, a
        return a + math.log1p(math.exp(b - a))

    @cuda.jit
    def alpha_k(lp_blank, lp_y, dur_t, dur_b, durs, zero, t_lens, u_lens, alpha, loss):
        b = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        T = t_lens[b]
        U = u_lens[b]
        D = durs.shape[0]
        for t in range(T):
            u = tid
            while u <= U:
                acc = NEG
                if t == 0 and u == 0:
                    acc = 0.0
                for i in range(D):
                    d = durs[i]
                    if d >= 1 and t - d >= 0:
                        s = t - d
                        acc = lae(acc, alpha[b, s, u] + lp_blank[b, s, u] + dur_b[b, s, u, i])
                        if u >= 1:
                            acc = lae(acc, alpha[b, s, u - 1] + lp_y[b, s, u - 1]
                                      + dur_t[b, s, u - 1, i])
                alpha[b, t, u] = acc
                u += cuda.blockDim.x
            cuda.syncthreads()
            if zero >= 0 and tid == 0:
                run = alpha[b, t, 0]
                for v in range(1, U + 1):
                    run = lae(alpha[b, t, v], run + lp_y[b, t, v - 1] + dur_t[b, t, v - 1, zero])
                    alpha[b, t, v] = run
            cuda.syncthreads()
        if tid == 0:
            acc = NEG
            for i in range(D):
                d = durs[i]
                if d >= 1 and T - d >= 0:
                    s = T - d
                    acc = lae(acc, alpha[b, s, U] + lp_blank[b, s, U] + dur_b[b, s, U, i])
            loss[b] = -acc

    @cuda.jit
    def beta_k(lp_blank, lp_y, dur_t, dur_b, durs, zero, t_lens, u_lens, beta):
        b = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        T = t_lens[b]
        U = u_lens[b]
        D = durs.shape[0]
        for t in range(T - 1, -1, -1):
            u = tid
            while u <= U:
                acc = NEG
                for i in range(D):
                    d = durs[i]
                    if d >= 1:
                        if t + d < T:
                            acc = lae(acc, lp_blank[b, t, u] + dur_b[b, t, u, i] + beta[b, t + d, u])
                        elif t + d == T and u == U:
                            acc = lae(acc, lp_blank[b, t, u] + dur_b[b, t, u, i])
                        if u < U and t + d < T:
                            acc = lae(acc, lp_y[b, t, u] + dur_t[b, t, u, i] + beta[b, t + d, u + 1])
                beta[b, t, u] = acc
                u += cuda.blockDim.x
            cuda.syncthreads()
            if zero >= 0 and tid == 0:
                run = beta[b, t, U]
                for v in range(U - 1, -1, -1):
                    run = lae(beta[b, t, v], lp_y[b, t, v] + dur_t[b, t, v, zero] + run)
                    beta[b, t, v] = run
            cuda.syncthreads()

    @cuda.jit
    def grad_k(lp_blank, lp_y, dur_t, dur_b, durs, t_lens, u_lens, alpha, beta, loss, scale,
               g_blank, g_y, g_dt, g_db):
        b = cuda.blockIdx.x
        t = cuda.blockIdx.y
        T = t_lens[b]
        U = u_lens[b]
        D = durs.shape[0]
        if t >= T or loss[b] > 1e29:
            return
        sc = scale[b]
        u = cuda.threadIdx.x
        while u <= U:
            a = alpha[b, t, u] + loss[b]  # alpha - log P
            gb = 0.0
            gy = 0.0
            for i in range(D):
                d = durs[i]
                ob = 0.0
                if d >= 1:
                    if t + d < T:
                        ob = math.exp(a + lp_blank[b, t, u] + dur_b[b, t, u, i] + beta[b, t + d, u])
                    elif t + d == T and u == U:
                        ob = math.exp(a + lp_blank[b, t, u] + dur_b[b, t, u, i])
                g_db[b, t, u, i] = -ob * sc
                gb += ob
                oy = 0.0
                if u < U and t + d < T:
                    oy = math.exp(a + lp_y[b, t, u] + dur_t[b, t, u, i] + beta[b, t + d, u + 1])
                g_dt[b, t, u, i] = -oy * sc
                gy += oy
            g_blank[b, t, u] = -gb * sc
            g_y[b, t, u] = -gy * sc
            u += cuda.blockDim.x

    return alpha_k, beta_k, grad_k


def _arrays(tensors):
    if SIM:
        return [t.detach().numpy() for t in tensors]
    return [cuda.as_cuda_array(t.detach(), sync=False) for t in tensors]


def _stream():
    if SIM:
        return 0
    return cuda.external_stream(torch.cuda.current_stream().cuda_stream)


class _TDT(torch.autograd.Function):
    @staticmethod
    def forward(ctx, lp_blank, lp_y, dur_t, dur_b, t_lens, u_lens, durations):
        global _kernels
        if _kernels is None:
            if not available():
                raise RuntimeError("tdt_cuda: numba's CUDA target is not available")
            _kernels = _build()
        alpha_k = _kernels[0]
        B, T, U1 = lp_blank.shape
        dev = lp_blank.device
        ins = [x.float().contiguous() for x in (lp_blank, lp_y, dur_t, dur_b)]
        durs = torch.tensor(durations, dtype=torch.int32, device=dev)
        tl = t_lens.to(dev, torch.int32).contiguous()
        ul = u_lens.to(dev, torch.int32).contiguous()
        zero = durations.index(0) if 0 in durations else -1
        alpha = torch.full((B, T, U1), NEG, dtype=torch.float32, device=dev)
        loss = torch.empty(B, dtype=torch.float32, device=dev)
        a = _arrays(ins + [durs, tl, ul, alpha, loss])
        alpha_k[B, THREADS, _stream()](a[0], a[1], a[2], a[3], a[4], zero, a[5], a[6], a[7], a[8])
        ctx.save_for_backward(*ins, durs, tl, ul, alpha, loss)
        ctx.zero = zero
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        _, beta_k, grad_k = _kernels
        lp_blank, lp_y, dur_t, dur_b, durs, tl, ul, alpha, loss = ctx.saved_tensors
        B, T, U1 = lp_blank.shape
        beta = torch.full_like(alpha, NEG)
        grads = [torch.zeros_like(lp_blank), torch.zeros_like(lp_y), torch.zeros_like(dur_t),
                 torch.zeros_like(dur_b)]
        scale = grad_loss.float().contiguous()
        a = _arrays([lp_blank, lp_y, dur_t, dur_b, durs, tl, ul, alpha, beta, loss, scale] + grads)
        stream = _stream()
        beta_k[B, THREADS, stream](a[0], a[1], a[2], a[3], a[4], ctx.zero, a[5], a[6], a[8])
        grad_k[(B, T), THREADS, stream](a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                                         a[9], a[10], a[11], a[12], a[13], a[14])
        return grads[0], grads[1], grads[2], grads[3], None, None, None


def tdt_loss(logp_tok, logp_dur_tok, logp_dur_blank, targets, t_lens, u_lens, durations, blank):
    """tdt.tdt_loss's interface and result, computed by the kernels."""
    B, T, U1, _ = logp_tok.shape
    lp_blank = logp_tok[..., blank]
    tg = targets.long().clamp(min=0, max=logp_tok.shape[3] - 1)
    if U1 > 1:
        lp_y = torch.gather(logp_tok[:, :, :-1, :], 3,
                            tg[:, :U1 - 1].unsqueeze(1).unsqueeze(3).expand(B, T, U1 - 1, 1))
        lp_y = torch.cat([lp_y.squeeze(3), logp_tok.new_full((B, T, 1), NEG)], dim=2)
    else:
        lp_y = logp_tok.new_full((B, T, 1), NEG)
    return _TDT.apply(lp_blank, lp_y, logp_dur_tok, logp_dur_blank, t_lens, u_lens,
                      list(durations))


def check(device="cuda", seed=0, verbose=True):
    """The kernels against tdt.tdt_loss on a random padded batch with
    durations [0, 1, 2, 3, 4]: the largest loss and gradient differences."""
    import tdt

    g = torch.Generator().manual_seed(seed)
    B, T, U, V, durs = 5, 37, 11, 9, [0, 1, 2, 3, 4]
    z = torch.randn(B, T, U + 1, V + 1 + len(durs), generator=g).to(device)
    targets = torch.randint(0, V, (B, U), generator=g).to(device)
    t_lens = torch.tensor([37, 30, 12, 5, 37], device=device)
    u_lens = torch.tensor([11, 9, 11, 2, 0], device=device)
    out = []
    for fn in (tdt.tdt_loss, tdt_loss):
        x = z.clone().requires_grad_()
        lp = torch.log_softmax(x[..., :V + 1], -1)
        ld = torch.log_softmax(x[..., V + 1:], -1)
        loss = fn(lp, ld, ld, targets, t_lens, u_lens, durs, V)
        (grad,) = torch.autograd.grad((loss * torch.arange(1, B + 1, device=device)).sum(), x)
        out.append((loss.detach(), grad))
    dl = (out[0][0] - out[1][0]).abs().max().item()
    dg = (out[0][1] - out[1][1]).abs().max().item()
    if verbose:
        print(f"tdt_cuda: against tdt.tdt_loss: max |loss diff| {dl:.2e}, "
              f"max |grad diff| {dg:.2e}")
    return dl, dg


if __name__ == "__main__":
    check("cpu" if SIM else "cuda")
