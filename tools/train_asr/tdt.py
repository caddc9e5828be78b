"""The TDT (token-and-duration transducer) loss, and greedy TDT decoding, in
torch.

The loss is written from the definition in Xu et al., "Efficient Sequence
Transduction by Jointly Predicting Tokens and Durations" (ICML 2023). The
joint gives, at encoder frame t after u target tokens, a distribution over
the V tokens and the blank, P(v | t, u), and an independent one over the
durations D, P(d | t, u). A path is a sequence of (symbol, duration)
emissions: a token y_{u+1} with duration d moves from (t, u) to
(t + d, u + 1), any d in D (0 included: several tokens from one frame); a
blank with duration d moves from (t, u) to (t + d, u), d >= 1 only. With
alpha(0, 0) = 1:

    alpha(t, u) = sum_{d in D, d >= 1} alpha(t - d, u) P(blank | t - d, u) P(d | t - d, u)
                + sum_{d in D}         alpha(t - d, u - 1) P(y_u | t - d, u - 1) P(d | t - d, u - 1)

and a whole utterance of T frames and U tokens ends with a blank that lands
exactly on T:

    P(y | x) = sum_{d in D, d >= 1} alpha(T - d, U) P(blank | T - d, U) P(d | T - d, U)

(as NeMo's TDT loss ends, without its logit under-normalisation "sigma").

Computed in log space, a frame at a time, vectorised over the batch and u.
Within frame t the d = 0 token moves make a first-order linear recurrence
along u, alpha(t, u) = beta(t, u) + alpha(t, u - 1) c(t, u - 1), where
beta gathers the moves from earlier frames; it is solved with prefix sums:
with L(u) = sum_{j < u} log c(t, j),
log alpha(t, u) = L(u) + logcumsumexp_{k <= u}(log beta(t, k) - L(k)).

The duration log-probabilities are taken twice, for token moves and for
blank moves. A TDT model passes the same tensor both times. Passing
durations [0, 1] with tokens always taking 0 and blanks always 1 makes the
recursion RNN-T's exactly: check_against_rnnt() does that and compares the
loss and its gradient with torchaudio.functional.rnnt_loss on random
logits (how the loss was checked: run `python3 tdt.py`; train.py runs it
before training and stops if they differ).
"""

import torch

NEG = -1e30


def tdt_loss(logp_tok, logp_dur_tok, logp_dur_blank, targets, t_lens, u_lens, durations, blank):
    """-log P(y | x) per utterance, [B].

    logp_tok [B, T, U + 1, V + 1]: log P(v | t, u) (log-softmax over tokens
    and blank); logp_dur_tok, logp_dur_blank [B, T, U + 1, len(durations)]:
    log P(d | t, u) for token and for blank moves; targets [B, U] (padded
    anywhere past u_lens); t_lens, u_lens [B]; durations: ints, ascending,
    distinct, each >= 0; blank: the blank's index in logp_tok."""
    B, T, U1, _ = logp_tok.shape
    dev = logp_tok.device
    lp_blank = logp_tok[..., blank]  # [B, T, U1]
    tg = targets.long().clamp(min=0, max=logp_tok.shape[3] - 1)
    if U1 > 1:
        lp_y = torch.gather(logp_tok[:, :, :-1, :], 3,
                            tg.unsqueeze(1).unsqueeze(3).expand(B, T, U1 - 1, 1)).squeeze(3)
    else:
        lp_y = logp_tok.new_zeros(B, T, 0)
    neg = logp_tok.new_full((B, 1), NEG)
    # Moves from earlier frames, one per duration d >= 1: the blank's from
    # (t - d, u) and the token's from (t - d, u - 1), the latter stored at
    # u (shifted by one) so that both add to alpha(t - d) at the same place.
    # Time is padded in front with dmax frames of log 0, so that every
    # frame reads the same number of rows: [dmax + T, n, B, U1].
    moves = [(i, d) for i, d in enumerate(durations) if d >= 1]
    ks = torch.tensor([i for i, _ in moves], device=dev)
    ds = torch.tensor([d for _, d in moves], device=dev)
    dmax = max(d for _, d in moves)
    eb = (lp_blank.unsqueeze(3) + logp_dur_blank.index_select(3, ks)).permute(1, 3, 0, 2)
    ey = lp_y.unsqueeze(3) + logp_dur_tok[:, :, :-1].index_select(3, ks)  # [B, T, U, n]
    ey = torch.cat([logp_tok.new_full((B, T, 1, len(moves)), NEG), ey], dim=2).permute(1, 3, 0, 2)
    pad = logp_tok.new_full((dmax, len(moves), B, U1), NEG)
    eb, ey = torch.cat([pad, eb]), torch.cat([pad, ey])
    rows = torch.arange(T, device=dev).unsqueeze(1) + dmax - ds.unsqueeze(0)  # [T, n]
    cols = torch.arange(len(moves), device=dev)
    # The first-order recurrence within a frame: a token with duration 0,
    # its prefix sums for every frame at once.
    zero = durations.index(0) if 0 in durations and U1 > 1 else None
    if zero is not None:
        c = lp_y + logp_dur_tok[:, :, :-1, zero]  # [B, T, U]
        L = torch.cat([logp_tok.new_zeros(B, T, 1), torch.cumsum(c, dim=2)], dim=2)
    start = logp_tok.new_full((B, U1), NEG)
    start[:, 0] = 0.0
    empty = logp_tok.new_full((B, U1), NEG)
    alphas = [empty] * dmax  # alpha(t) at dmax + t; log 0 before the start
    shifted = [empty] * dmax  # alpha(t, u - 1) at u
    for t in range(T):
        back = [dmax + t - d for _, d in moves]
        a = torch.stack([alphas[j] for j in back])  # [n, B, U1]
        s = torch.stack([shifted[j] for j in back])
        terms = torch.cat([a + eb[rows[t], cols], s + ey[rows[t], cols]])
        beta = torch.logsumexp(terms, dim=0)
        if t == 0:
            beta = torch.logaddexp(beta, start)
        if zero is not None:
            lt = L[:, t]
            beta = lt + torch.logcumsumexp(beta - lt, dim=1)
        alphas.append(beta)
        shifted.append(torch.cat([neg, beta[:, :-1]], dim=1))
    alphas = alphas[dmax:]
    alpha = torch.stack(alphas, dim=1)  # [B, T, U1]
    b = torch.arange(B, device=dev)
    finals = []
    for i, d in enumerate(durations):
        if d < 1:
            continue
        t = t_lens.long() - d
        ok = t >= 0
        tc = t.clamp(min=0)
        u = u_lens.long()
        v = alpha[b, tc, u] + lp_blank[b, tc, u] + logp_dur_blank[b, tc, u, i]
        finals.append(torch.where(ok, v, torch.full_like(v, NEG)))
    return -torch.logsumexp(torch.stack(finals), dim=0)


def check_against_rnnt(device="cpu", seed=0, verbose=True):
    """The RNN-T special case against torchaudio.functional.rnnt_loss: the
    largest difference in loss and in gradient (both should be ~1e-5)."""
    import torchaudio.functional as AF

    g = torch.Generator().manual_seed(seed)
    B, T, U, V = 4, 23, 9, 12
    logits = torch.randn(B, T, U + 1, V + 1, generator=g).to(device).requires_grad_()
    targets = torch.randint(0, V, (B, U), generator=g, dtype=torch.int32).to(device)
    t_lens = torch.tensor([23, 20, 17, 9], dtype=torch.int32, device=device)
    u_lens = torch.tensor([9, 7, 9, 3], dtype=torch.int32, device=device)
    ref = AF.rnnt_loss(logits, targets, t_lens, u_lens, blank=V, reduction="none")
    (g_ref,) = torch.autograd.grad(ref.sum(), logits)
    lp = torch.log_softmax(logits, dim=-1)
    inf = torch.tensor(NEG, device=device)
    zero = torch.tensor(0.0, device=device)
    dur_tok = torch.stack([zero, inf]).expand(B, T, U + 1, 2)    # tokens: duration 0
    dur_blank = torch.stack([inf, zero]).expand(B, T, U + 1, 2)  # blanks: duration 1
    ours = tdt_loss(lp, dur_tok, dur_blank, targets, t_lens, u_lens, [0, 1], V)
    (g_ours,) = torch.autograd.grad(ours.sum(), logits)
    dl = (ours - ref).abs().max().item()
    dg = (g_ours - g_ref).abs().max().item()
    if verbose:
        print(f"tdt: RNN-T case against torchaudio.functional.rnnt_loss: losses {ref.tolist()}, "
              f"max |loss diff| {dl:.2e}, max |grad diff| {dg:.2e}")
    return dl, dg


def brute_force(logp_tok, logp_dur, targets, T, U, durations, blank):
    """-log P(y | x) of one utterance by enumerating every path (tiny sizes
    only): the definition itself, for the tests of tdt_loss with durations
    other than RNN-T's."""
    import math

    total = []

    def walk(t, u, lp):  # at frame t < T after u tokens
        for i, d in enumerate(durations):
            dur = logp_dur[t, u, i].item()
            if u < U and t + d < T:  # a token landing on T could not end with a blank
                walk(t + d, u + 1, lp + logp_tok[t, u, targets[u]].item() + dur)
            if d >= 1:
                lb = lp + logp_tok[t, u, blank].item() + dur
                if t + d == T and u == U:
                    total.append(lb)
                elif t + d < T:
                    walk(t + d, u, lb)

    walk(0, 0, 0.0)
    m = max(total)
    return -(m + math.log(sum(math.exp(x - m) for x in total)))


def check_brute_force(seed=0):
    """tdt_loss against path enumeration with durations [0, 1, 2, 3]."""
    g = torch.Generator().manual_seed(seed)
    T, U, V, durs = 6, 3, 4, [0, 1, 2, 3]
    logits = torch.randn(1, T, U + 1, V + 1, generator=g)
    dl = torch.randn(1, T, U + 1, len(durs), generator=g)
    lp, ld = torch.log_softmax(logits, -1), torch.log_softmax(dl, -1)
    targets = torch.randint(0, V, (1, U), generator=g)
    ours = tdt_loss(lp, ld, ld, targets, torch.tensor([T]), torch.tensor([U]), durs, V).item()
    ref = brute_force(lp[0], ld[0], targets[0].tolist(), T, U, durs, V)
    return abs(ours - ref), ours, ref


@torch.no_grad()
def greedy_decode(enc_proj, predictor, joint, durations, blank, max_symbols=10):
    """NeMo's label-looping greedy TDT decode of one utterance (the team's
    reference notes, section 1), as infd's runtime does it.

    enc_proj [T, H]: the joint's encoder projection of every frame;
    predictor(token, state) -> (g [H], state) (token None: the start, the
    blank); joint(f [H], g [H]) -> raw logits [V + 1 + len(durations)].
    Returns the tokens."""
    T = enc_proj.shape[0]
    g, state = predictor(None, None)
    out, t = [], 0
    n_vocab = blank + 1
    emitted_at, count = -1, 0
    while t < T:
        z = joint(enc_proj[t], g)
        k = int(torch.argmax(z[:n_vocab]))
        d = durations[int(torch.argmax(z[n_vocab:]))]
        if k == blank and d == 0:
            d = 1
        t_lab = t
        t += d
        while k == blank and t < T:
            t_lab = t
            z = joint(enc_proj[t], g)
            k = int(torch.argmax(z[:n_vocab]))
            d = durations[int(torch.argmax(z[n_vocab:]))]
            if k == blank and d == 0:
                d = 1
            t += d
        if k != blank:
            out.append(k)
            g, state = predictor(k, state)
            count = count + 1 if t_lab == emitted_at else 1
            emitted_at = t_lab
            if count >= max_symbols and t == t_lab:
                t += 1
    return out


if __name__ == "__main__":
    print("tdt: against path enumeration, durations [0,1,2,3]: |diff| %.2e (%.5f, %.5f)"
          % check_brute_force())
    check_against_rnnt()
