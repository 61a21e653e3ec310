"""KDA forward, fused family: one launch.

Each program owns one (batch, head, V-block) and walks the chunks of the sequence in
order. For every chunk it computes the chunk-local terms inline (L2 norms, gate, beta,
cumulative decay, A, the triangular inverse, W, U, M; KDA.md §3) and then advances the
state it carries in registers:

    X  = U - W S                       (C x BV, the effective updates)
    O  = Q~ S + M X                    (Q~ = scale * q^ * exp(G))
    S' = diag(exp(G_last)) S + K~^T X  (K~ = k^ * exp(G_last - G))

Numerics (KDA.md §4): a chunk of C tokens is cut into sub-blocks of 16. Every pair
(row block I, column j <= end of I) is anchored at the start of block I, so that
exp(G_i - G_j) = exp(G_i - c_I) * exp(c_I - G_j) with both exponents at most 16 decay
steps (<= 80 nats at lower_bound -5) above zero: no overflow, no 0 * inf. The inverse
(I + A)^-1 is built from the 16x16 diagonal blocks (forward substitution or doubling)
and a block-Neumann series for the rest (the block-strict part is nilpotent).

GROUP > 1 (the default: 8) computes the local terms of GROUP chunks per step as one batch
(3-D products over 16-token chunks, or one 2-D tile with the cross-chunk pairs masked), stages
them through a scratch in L2 (two slots, a barrier between the stores and the loads), and then
walks the state through them one chunk at a time with the state held transposed [BV,K]. The
batch gives each instruction 8 chunks of independent work where one chunk's chain of small
products is all latency (bench/RESULTS.md: 0.77x fla at GROUP 1, 1.1-1.2x at GROUP 8).

SHARE='auto' (GROUP > 1): where the grid is small enough that every program is resident at
once (heads x V-blocks <= SMs, e.g. H = 32 or 64 on an H200), the V-block programs of one
head split each group's local terms between them (GROUP/SHARE chunks each), publish them in
one scratch per head and wait at a counter in global memory before walking the state. That
turns the SMs a small grid leaves idle into local-term throughput (H=32: 0.6x -> 0.86-1.0x
fla). Elsewhere, and always in the interpreter (which runs programs one after another), each
program computes all of its local terms itself. The residency it counts on is the GPU's alone:
two such launches at once on one GPU (two streams, or processes under MPS) could each hold
SMs that the other's waiting programs need. kdatui's evaluator runs one worker per GPU, and a
candidate that hangs there is stopped at the task's time limit.

Self-contained: copied alone into a folder as `kernel.py`, it runs. Every tunable is in
PARAMS / CONFIG below; a variant of this family is this file with another CONFIG.
"""

import math
import os

import torch
import triton
import triton.language as tl

# Allowed values of every tunable. The search instantiates variants by rewriting CONFIG.
PARAMS = {
    "CHUNK": (16, 32, 64),  # tokens per chunk (sub-blocks of 16 inside)
    "BV": (16, 32, 64, 128),  # V columns per program (more programs vs more repeated work)
    "num_warps": (2, 4, 8, 16),
    "num_stages": (1, 2, 3),  # software pipelining depth of the chunk loop (GROUP = 1)
    "GROUP": (1, 2, 4, 8),  # chunks whose local terms are computed together per step (<= 128 tokens)
    "X_FORM": ("wu", "direct"),  # X = U - W S, or (I+A)^-1 diag(beta) (V - K S): one product less (GROUP 1)
    "GROUP_DOT": ("2d", "3d"),  # a group as one tile, cross-chunk pairs masked, or batched dots (CHUNK 16)
    "SHARE": ("off", "auto"),  # GROUP > 1, 3d: a head's V-block programs split its local terms, if all fit at once
    "INV": ("subst", "doubling"),  # 16x16 inverse: forward substitution, or (I-A)(I+A^2)(I+A^4)(I+A^8)
    "INV_DOT": ("ieee", "tf32x3"),  # precision of the doubling products (tf32 is unstable: KDA.md §4)
    "STATE_DOT": ("bf16", "tf32"),  # operands of the state products W S, Q~ S, K~^T X, M X
    "SOLVE_DOT": ("tf32", "tf32x3", "ieee"),  # precision of the A/M and inverse products
}
# Defaults: the fastest configuration measured on the H200 (bench/RESULTS.md).
# Launch options, precisions the interpreter computes in plain fp32 whatever they say, and the
# sharing of local terms between programs (never in the interpreter, which runs them in turn).
INTERPRETER_INERT = ("num_warps", "num_stages", "SOLVE_DOT", "INV_DOT", "SHARE")
CONFIG = dict(CHUNK=16, BV=128, num_warps=8, num_stages=1, GROUP=8, X_FORM='wu', GROUP_DOT='3d', SHARE='auto', INV='doubling', INV_DOT='ieee',
              STATE_DOT='bf16', SOLVE_DOT='tf32')

FAMILY = "fused"
LOG2E = 1.4426950408889634

# dot modes: 0 fp32 operands (tf32 on GPU), 1 bf16 operands, 2 bf16 rounding emulated in
# fp32 (the Triton interpreter cannot multiply bf16), 3 ieee fp32, 4 tf32x3
_MODES = {"tf32": 0, "bf16": 1, "ieee": 3, "tf32x3": 4}


@triton.jit
def _dot(a, b, MODE: tl.constexpr):
    if MODE == 1:
        r = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    elif MODE == 2:
        r = tl.dot(a.to(tl.bfloat16).to(tl.float32), b.to(tl.bfloat16).to(tl.float32))
    elif MODE == 3:
        r = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif MODE == 4:
        r = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="tf32x3")
    else:  # fp32 operands (a bf16 workspace tile is widened first)
        r = tl.dot(a.to(tl.float32), b.to(tl.float32))
    return r


@triton.jit
def _terms(q_ptr, k_ptr, g_ptr, b_ptr, v_ptr, t0, T, s_qk, s_v, s_b, alog_exp, dtb, scale, lb2,
           R: tl.constexpr, NS: tl.constexpr, CB: tl.constexpr, LOG2CB: tl.constexpr, K: tl.constexpr,
           BV: tl.constexpr, INV_DOUBLING: tl.constexpr, SOLVE: tl.constexpr, INVP: tl.constexpr,
           XD: tl.constexpr):
    """The chunk-local terms of R = G*C tokens from t0: G chunks of C = 16*CB tokens, each
    chunk on its own (no term couples two chunks). Returns W [R,K], U [R,BV], Q~ [R,K],
    K~ [R,K], M [R,R] (zero outside the diagonal chunk blocks), per row the log2 decay
    from the start of its chunk to its end [R,K] (exp2 of it on a chunk's row is exp(G_last)),
    and, last, the log2 decay over all R rows [K] (the chunk's total when G = 1).
    With XD, W and U are not formed: the first two are k^ * exp(G) and V, and a seventh is
    (I + A)^-1 diag(beta) (see the caller); without it the seventh is M again (unused).
    Pointers are at (b, t=0, h); strides are per token. Only 2-D tiles: batched (3-D) dots
    replicate work across warps when the batch is small."""
    rows = t0 + tl.arange(0, R)
    valid = rows < T
    m2 = valid[:, None]
    dk = tl.arange(0, K)
    dv = tl.arange(0, BV)
    off = rows[:, None] * s_qk + dk[None, :]
    q = tl.load(q_ptr + off, mask=m2, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + off, mask=m2, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + off, mask=m2, other=0.0).to(tl.float32)
    braw = tl.load(b_ptr + rows * s_b, mask=valid, other=0.0).to(tl.float32)
    beta = tl.where(valid, tl.sigmoid(braw), 0.0)
    qn = q / tl.sqrt(tl.sum(q * q, axis=1) + 1e-6)[:, None]
    kn = k / tl.sqrt(tl.sum(k * k, axis=1) + 1e-6)[:, None]
    # log2 decay per token and channel, zero on padding rows so G stays flat past T
    a2 = tl.where(m2, lb2 * tl.sigmoid(alog_exp * (g + dtb[None, :])), 0.0)
    G = tl.cumsum(a2, axis=0)  # [R,K], inclusive from t0, non-increasing
    ii = tl.arange(0, R)
    blk = ii // 16
    chk = ii // (16 * CB)
    # per row: the decay at the start of its 16-block (cs), of its chunk (c0), at the end of
    # its chunk (ce); all exclusive prefix sums of a2 at block boundaries
    cs = tl.zeros((R, K), tl.float32)
    c0 = tl.zeros((R, K), tl.float32)
    tot = tl.sum(a2, axis=0)  # [K]: the log2 decay over all R rows (one chunk's total when R = C)
    ce = tl.zeros((R, K), tl.float32) + tot[None, :]
    for I in tl.static_range(1, NS):
        c_I = tl.sum(tl.where((ii < 16 * I)[:, None], a2, 0.0), axis=0)
        cs = tl.where((blk == I)[:, None], c_I[None, :], cs)
        if I % CB == 0:
            c0 = tl.where((blk >= I)[:, None], c_I[None, :], c0)
            ce = tl.where((blk < I)[:, None] & (blk >= I - CB)[:, None], c_I[None, :], ce)

    # A and M, anchored at c_I, the decay at the start of row block I (sub-blocks of 16):
    #   left  k_i * exp(G_i - c_I)                   (<= 1)
    #   right k_j * exp(c_I - G_j) for j < 16(I+1)   (<= exp(16 steps) inside block I, <= 1 before)
    eq = tl.exp2(G - cs)
    kl = kn * eq
    ql = qn * eq
    if CB == 1:
        # one chunk per 16-block: every kept entry pairs rows of one block, anchored at its start
        kr = kn * tl.exp2(cs - G)
        A = _dot(kl, tl.trans(kr), SOLVE)
        M = _dot(ql, tl.trans(kr), SOLVE)
    else:
        A = tl.zeros((R, R), tl.float32)
        M = tl.zeros((R, R), tl.float32)
        for I in tl.static_range(NS):
            c_I = tl.sum(tl.where((ii < 16 * I)[:, None], a2, 0.0), axis=0)
            cols = (ii < 16 * (I + 1)) & (ii >= 16 * CB * (I // CB))  # columns of I's chunk up to block I
            kr = kn * tl.exp2(tl.where(cols[:, None], c_I[None, :] - G, float("-inf")))
            sel = (blk == I)[:, None]
            A += _dot(tl.where(sel, kl, 0.0), tl.trans(kr), SOLVE)
            M += _dot(tl.where(sel, ql, 0.0), tl.trans(kr), SOLVE)
    same_c = chk[:, None] == chk[None, :]
    A = tl.where(same_c & (ii[:, None] > ii[None, :]), A, 0.0) * beta[:, None]
    M = tl.where(same_c & (ii[:, None] >= ii[None, :]), M, 0.0) * scale

    # D = inverse of the 16x16 diagonal blocks of I + A (block diagonal, [R,R])
    same = blk[:, None] == blk[None, :]
    eye = (ii[:, None] == ii[None, :]).to(tl.float32)
    if INV_DOUBLING:
        # (I + A_d)^-1 = (I - A_d)(I + A_d^2)(I + A_d^4)(I + A_d^8): A_d is nilpotent of index 16
        P = -tl.where(same, A, 0.0)
        D = eye + P
        for _s in tl.static_range(3):
            P = _dot(P, P, INVP)
            D = D + _dot(D, P, INVP)
    elif NS == 1:
        D = eye
        for i in tl.static_range(1, 16):
            row = (ii == i)[:, None]
            a_i = tl.sum(tl.where(row, A, 0.0), axis=0)  # row i of A, along columns
            D = tl.where(row, D - tl.sum(a_i[:, None] * D, axis=0)[None, :], D)
    else:
        # forward substitution on all diagonal blocks at once, as [NS,16,16]
        bi = tl.arange(0, NS)
        r16 = tl.arange(0, 16)
        Ad = tl.sum(tl.where((bi[:, None, None, None] == bi[None, None, :, None]),
                             tl.reshape(A, (NS, 16, NS, 16)), 0.0), axis=2)
        D3 = tl.zeros((NS, 16, 16), tl.float32) + (r16[:, None] == r16[None, :]).to(tl.float32)[None, :, :]
        for i in tl.static_range(1, 16):
            row = (r16 == i)[None, :, None]
            a_i = tl.sum(tl.where(row, Ad, 0.0), axis=1)  # [NS,16]: row i of each block
            D3 = tl.where(row, D3 - tl.sum(a_i[:, :, None] * D3, axis=1)[:, None, :], D3)
        D = tl.reshape(tl.where((bi[:, None, None, None] == bi[None, None, :, None]), D3[:, :, None, :], 0.0),
                       (R, R))

    eG = tl.exp2(G - c0)  # decay since the start of the row's chunk
    v = tl.load(v_ptr + rows[:, None] * s_v + dv[None, :], mask=m2, other=0.0).to(tl.float32)
    Qt = qn * eG * scale
    Kt = kn * tl.exp2(ce - G)
    if XD:
        # X = (I + A)^-1 diag(beta) (V - (k^ * exp(G)) S): return the inverse with beta folded
        # into its columns, k^ * exp(G) and V; the caller forms X in the state chain
        Ti = D
        if CB > 1:  # (I + A)^-1 = (I + N)^-1 D, the series below applied to D itself
            N = _dot(D, tl.where(same, 0.0, A), SOLVE)
            Ti = Ti - _dot(N, Ti, SOLVE)
            for _s in tl.static_range(1, LOG2CB):
                N = _dot(N, N, SOLVE)
                Ti = Ti + _dot(N, Ti, SOLVE)
        return kn * eG, v, Qt, Kt, M, ce - c0, Ti * beta[None, :], tot
    W = _dot(D, beta[:, None] * kn * eG, SOLVE)
    U = _dot(D, beta[:, None] * v, SOLVE)
    if CB > 1:
        # (I + A)^-1 = (I + N)^-1 D with N = D * (block-strict part of A), N^CB = 0:
        # (I + N)^-1 = (I - N)(I + N^2)(I + N^4)...
        N = _dot(D, tl.where(same, 0.0, A), SOLVE)
        W = W - _dot(N, W, SOLVE)
        U = U - _dot(N, U, SOLVE)
        for _s in tl.static_range(1, LOG2CB):
            N = _dot(N, N, SOLVE)
            W = W + _dot(N, W, SOLVE)
            U = U + _dot(N, U, SOLVE)
    return W, U, Qt, Kt, M, ce - c0, M, tot


@triton.jit
def _terms3(q_ptr, k_ptr, g_ptr, b_ptr, v_ptr, t0, T, s_qk, s_v, s_b, alog_exp, dtb, scale, lb2,
            w_p, qt_p, kt_p, u_p, m_p, gam_p, R: tl.constexpr,
            G: tl.constexpr, K: tl.constexpr, BV: tl.constexpr, INV_DOUBLING: tl.constexpr,
            SOLVE: tl.constexpr, INVP: tl.constexpr):
    """`_terms` for G chunks of 16 tokens as a batch: [G,16,*] tiles and batched dots, so no
    product spends work on pairs of tokens from two chunks. Each term is stored to the
    scratch slot (w_p ... gam_p, rows of R) as soon as it is formed, so that few [G,16,K]
    tiles are alive at once: W, Q~, K~ [G,16,K], U [G,16,BV] (fp32), M [G,16,16] as the
    diagonal blocks of [R,R] rows, exp(G_last) per chunk [G,K] (fp32)."""
    ty = w_p.dtype.element_ty
    bi = tl.arange(0, G)
    r16 = tl.arange(0, 16)
    dk = tl.arange(0, K)
    dv = tl.arange(0, BV)
    rows = t0 + bi[:, None] * 16 + r16[None, :]  # [G,16]
    srow = bi[:, None, None] * 16 + r16[None, :, None]  # [G,16,1]: rows of the slot
    valid = rows < T
    m3 = valid[:, :, None]
    off = rows[:, :, None] * s_qk + dk[None, None, :]
    g = tl.load(g_ptr + off, mask=m3, other=0.0).to(tl.float32)
    a2 = tl.where(m3, lb2 * tl.sigmoid(alog_exp * (g + dtb[None, None, :])), 0.0)
    Gc = tl.cumsum(a2, axis=1)  # log2 decay from the chunk's start, inclusive: >= -115.5
    tot = tl.sum(a2, axis=1)  # [G,K]
    tl.store(gam_p + bi[:, None] * K + dk[None, :], tl.exp2(tot))
    k = tl.load(k_ptr + off, mask=m3, other=0.0).to(tl.float32)
    kn = k / tl.sqrt(tl.sum(k * k, axis=2) + 1e-6)[:, :, None]
    tl.store(kt_p + srow * K + dk[None, None, :], (kn * tl.exp2(tot[:, None, :] - Gc)).to(ty))
    eq = tl.exp2(Gc)  # >= 2^-115.5: a normal fp32 number, never 0
    kr = kn * tl.exp2(-Gc)
    kl = kn * eq
    q = tl.load(q_ptr + off, mask=m3, other=0.0).to(tl.float32)
    ql = q / tl.sqrt(tl.sum(q * q, axis=2) + 1e-6)[:, :, None] * eq
    tl.store(qt_p + srow * K + dk[None, None, :], (ql * scale).to(ty))
    braw = tl.load(b_ptr + rows * s_b, mask=valid, other=0.0).to(tl.float32)
    beta = tl.where(valid, tl.sigmoid(braw), 0.0)
    krT = tl.permute(kr, (0, 2, 1))
    lower = r16[:, None] > r16[None, :]
    M = tl.where((r16[:, None] >= r16[None, :])[None, :, :], _dot(ql, krT, SOLVE), 0.0) * scale
    tl.store(m_p + srow * R + bi[:, None, None] * 16 + r16[None, None, :], M.to(ty))
    A = tl.where(lower[None, :, :], _dot(kl, krT, SOLVE), 0.0) * beta[:, :, None]
    eye = (r16[:, None] == r16[None, :]).to(tl.float32)[None, :, :]
    if INV_DOUBLING:
        P = -A
        D = eye + P
        for _s in tl.static_range(3):
            P = _dot(P, P, INVP)
            D = D + _dot(D, P, INVP)
    else:
        D = tl.zeros((G, 16, 16), tl.float32) + eye
        for i in tl.static_range(1, 16):
            row = (r16 == i)[None, :, None]
            a_i = tl.sum(tl.where(row, A, 0.0), axis=1)  # [G,16]: row i of each block
            D = tl.where(row, D - tl.sum(a_i[:, :, None] * D, axis=1)[:, None, :], D)
    Db = D * beta[:, None, :]  # diag(beta) folded into the inverse's columns
    tl.store(w_p + srow * K + dk[None, None, :], _dot(Db, kl, SOLVE).to(ty))
    v = tl.load(v_ptr + rows[:, :, None] * s_v + dv[None, None, :], mask=m3, other=0.0).to(tl.float32)
    tl.store(u_p + srow * BV + dv[None, None, :], _dot(Db, v, SOLVE))


@triton.jit
def _kda_fused_kernel(q, k, v, g, beta, A_log, dt_bias, h0, o, hT, w_s, u_s, qt_s, kt_s, m_s, gam_s, cnt,
                      T, NC, H, scale, lb2,
                      K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, NS: tl.constexpr,
                      LOG2NS: tl.constexpr, BV: tl.constexpr, GROUP: tl.constexpr, R: tl.constexpr,
                      BATCHED: tl.constexpr, XD: tl.constexpr, HAS_H0: tl.constexpr,
                      STORE_HT: tl.constexpr, INV_DOUBLING: tl.constexpr, STATE: tl.constexpr,
                      SOLVE: tl.constexpr, INVP: tl.constexpr, NUM_STAGES: tl.constexpr,
                      SHARE: tl.constexpr, NO_STATE: tl.constexpr):
    pid_v = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    b = pid_bh // H
    h = pid_bh % H
    v0 = pid_v * BV
    dk = tl.arange(0, K)
    dv = tl.arange(0, BV)
    # token-major inputs [B, T, H, D]: pointer at (b, t=0, h)
    q_ptr = q + (b * T * H + h) * K
    k_ptr = k + (b * T * H + h) * K
    g_ptr = g + (b * T * H + h) * K
    v_ptr = v + (b * T * H + h) * V + v0
    o_ptr = o + (b * T * H + h) * V + v0
    b_ptr = beta + b * T * H + h
    alog_exp = tl.exp(tl.load(A_log + h).to(tl.float32))
    dtb = tl.load(dt_bias + h * K + dk).to(tl.float32)
    if GROUP == 1:
        # state S[k, v] (the [B,H,V,K] layout read transposed)
        s_off = (pid_bh * V + v0 + dv[None, :]) * K + dk[:, None]
        if HAS_H0:
            S = tl.load(h0 + s_off).to(tl.float32)
        else:
            S = tl.zeros((K, BV), tl.float32)
        for c in tl.range(0, NC, num_stages=NUM_STAGES):
            t0 = c * C
            W, U, Qt, Kt, M, _, Ti, tot = _terms(q_ptr, k_ptr, g_ptr, b_ptr, v_ptr, t0, T, H * K, H * V, H,
                                                alog_exp, dtb, scale, lb2, C, NS, NS, LOG2NS, K, BV,
                                                INV_DOUBLING, SOLVE, INVP, XD)
            gam = tl.exp2(tot)  # exp(G_last): the chunk's total decay, per channel
            if NO_STATE:  # profiling: the chunk-local work alone (output is meaningless)
                O = U + tl.sum(W + Qt + Kt, axis=1)[:, None] + tl.sum(M + Ti, axis=1)[:, None] + tl.sum(gam)
            else:
                if XD:  # X = (I + A)^-1 diag(beta) (V - K S): one inverse product per chunk, not two
                    X = _dot(Ti, U - _dot(W, S, STATE), SOLVE)
                else:
                    X = U - _dot(W, S, STATE)
                O = _dot(Qt, S, STATE) + _dot(M, X, STATE)
                S = gam[:, None] * S + _dot(tl.trans(Kt), X, STATE)
            rows = t0 + tl.arange(0, C)
            tl.store(o_ptr + rows[:, None] * (H * V) + dv[None, :], O.to(o.dtype.element_ty),
                     mask=(rows < T)[:, None])
        if STORE_HT:
            tl.store(hT + s_off, S)
    else:
        # GROUP chunks per step: their local terms computed together (R rows: G times the
        # parallelism of one chunk), staged through this program's scratch (double-buffered,
        # in L2), then the state walks them one chunk at a time, held transposed St = S^T
        # [BV,K] so every state product has M = BV:
        #   X^T = U^T - St W^T;  O^T = St Q~^T + X^T M^T;  St' = St diag(exp(G_last)) + X^T K~
        prog = tl.program_id(1).to(tl.int64) * tl.num_programs(0) + pid_v
        # SHARE > 1: the SHARE V-block programs of one head split each group's local terms (GP
        # chunks each) into one scratch per head, meet at a counter in global memory, and then
        # each walks its own V-block through all of them. U is stored whole (V columns).
        GP: tl.constexpr = GROUP // SHARE
        UW: tl.constexpr = V if SHARE > 1 else BV
        sub = pid_v * (GP * C) if SHARE > 1 else 0  # this program's first row of a group
        uoff = v0 if SHARE > 1 else 0  # this program's first column of the stored U
        ii = tl.arange(0, R)
        r = tl.arange(0, C)
        s_off = (pid_bh * V + v0 + dv[:, None]) * K + dk[None, :]
        if HAS_H0:
            St = tl.load(h0 + s_off).to(tl.float32)
        else:
            St = tl.zeros((BV, K), tl.float32)
        for grp in range(0, tl.cdiv(NC, GROUP)):
            t0 = grp * R
            slot = (pid_bh if SHARE > 1 else prog) * 2 + grp % 2
            ty = w_s.dtype.element_ty
            if BATCHED:  # chunks of 16 as a batch: M is stored as [G,16,16] blocks, rows of R
                row0 = slot * R + sub
                _terms3(q_ptr, k_ptr, g_ptr, b_ptr, v_ptr - uoff, t0 + sub, T, H * K, H * V, H, alog_exp, dtb,
                        scale, lb2, w_s + row0 * K, qt_s + row0 * K, kt_s + row0 * K, u_s + row0 * UW,
                        m_s + row0 * R + sub, gam_s + (slot * GROUP + sub // C) * K, R, GP, K, UW,
                        INV_DOUBLING, SOLVE, INVP)
            else:
                W, U, Qt, Kt, M, glast, _, _ = _terms(q_ptr, k_ptr, g_ptr, b_ptr, v_ptr, t0, T, H * K, H * V, H,
                                                   alog_exp, dtb, scale, lb2, R, R // 16, NS, LOG2NS, K, BV,
                                                   INV_DOUBLING, SOLVE, INVP, False)
                rk = ii[:, None] * K + dk[None, :]
                tl.store(w_s + slot * R * K + rk, W.to(ty))
                tl.store(qt_s + slot * R * K + rk, Qt.to(ty))
                tl.store(kt_s + slot * R * K + rk, Kt.to(ty))
                tl.store(u_s + slot * R * BV + ii[:, None] * BV + dv[None, :], U)
                tl.store(m_s + slot * R * R + ii[:, None] * R + ii[None, :], M.to(ty))
                tl.store(gam_s + slot * GROUP * K + (ii // C)[:, None] * K + dk[None, :], tl.exp2(glast),
                         mask=(ii % C == 0)[:, None])
            tl.debug_barrier()  # the whole program's stores land before any thread reads them
            if SHARE > 1:
                # release this program's share; wait until all SHARE programs of the head have
                # released this group. No deadlock: the host enables SHARE only when the whole
                # grid is resident at once (no more programs than SMs).
                tl.atomic_add(cnt + pid_bh, 1, sem="release", scope="gpu")
                seen = tl.atomic_add(cnt + pid_bh, 0, sem="acquire", scope="gpu")
                while seen < SHARE * (grp + 1):
                    seen = tl.atomic_add(cnt + pid_bh, 0, sem="acquire", scope="gpu")
                tl.debug_barrier()
            # a loop, not unrolled: unrolled, the compiler hoists every chunk's loads and spills
            for j in range(0, tl.minimum(GROUP, tl.cdiv(T - t0, C))):
                base = slot * R + j * C  # row of chunk j in the scratch
                Wt = tl.load(w_s + base * K + r[None, :] * K + dk[:, None], cache_modifier=".cg")
                Qtt = tl.load(qt_s + base * K + r[None, :] * K + dk[:, None], cache_modifier=".cg")
                Ktj = tl.load(kt_s + base * K + r[:, None] * K + dk[None, :], cache_modifier=".cg")
                Ut = tl.load(u_s + base * UW + r[None, :] * UW + uoff + dv[:, None], cache_modifier=".cg")
                Mt = tl.load(m_s + (base + r[None, :]) * R + j * C + r[:, None], cache_modifier=".cg")
                gj = tl.load(gam_s + (slot * GROUP + j) * K + dk, cache_modifier=".cg")
                if NO_STATE:  # profiling: local work and the scratch round trip alone
                    Ot = Ut + tl.sum(Mt.to(tl.float32), axis=0)[None, :] + tl.sum(gj)
                    Ot += tl.sum(Wt.to(tl.float32) + Qtt.to(tl.float32), axis=0)[None, :]
                    Ot += tl.sum(Ktj.to(tl.float32), axis=1)[None, :]
                else:
                    Xt = Ut - _dot(St, Wt, STATE)
                    Ot = _dot(St, Qtt, STATE) + _dot(Xt, Mt, STATE)
                    St = St * gj[None, :] + _dot(Xt, Ktj, STATE)
                rows = t0 + j * C + r
                tl.store(o_ptr + rows[None, :] * (H * V) + dv[:, None], Ot.to(o.dtype.element_ty),
                         mask=(rows < T)[None, :])
        if STORE_HT:
            tl.store(hT + s_off, St)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _share(heads: int, V: int, group: int, n_sm: int) -> int:
    """How many V-block programs of one head split its local terms (SHARE='auto'): the most
    that divides the group and V (V-blocks of at least 16) while the whole grid, heads x
    share programs, still fits one program per SM. Only then are all programs resident at
    once, which their wait on each other needs (a wait on a program not yet started would
    never end). 1 (no sharing) when even 2 do not fit."""
    for p in (8, 4, 2):
        if _share_divides(p, V, group) and heads * p <= n_sm:
            return p
    return 1


def _share_divides(p: int, V: int, group: int) -> bool:
    """p programs can split a head: p divides the group and V, leaving V-blocks of >= 16."""
    return group % p == 0 and V % p == 0 and V // p >= 16


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True, config=None):
    cfg = {**CONFIG, **(config or {})}
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else float(scale)
    C = cfg["CHUNK"]
    BV = min(cfg["BV"], V)
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    A_log = A_log.contiguous()
    dt_bias = dt_bias.contiguous()
    o = torch.empty(B, T, H, V, dtype=torch.bfloat16, device=q.device)
    hT = torch.empty(B, H, V, K, dtype=torch.float32, device=q.device) if output_final_state else o
    h0 = initial_state.contiguous().float() if initial_state is not None else o
    interp = _interpreting()
    state_mode = 2 if interp and cfg["STATE_DOT"] == "bf16" else _MODES[cfg["STATE_DOT"]]
    solve_mode = 0 if interp else _MODES[cfg["SOLVE_DOT"]]
    inv_mode = 0 if interp else _MODES[cfg["INV_DOT"]]
    group = max(1, min(cfg["GROUP"], 128 // C))  # at most 128 tokens of local work per step
    batched = group > 1 and C == 16 and cfg["GROUP_DOT"] == "3d"
    share = 1
    if cfg["SHARE"] == "auto" and batched and q.is_cuda and not interp:
        share = _share(B * H, V, group, torch.cuda.get_device_properties(q.device).multi_processor_count)
    if cfg.get("_share"):  # forced (offline compiles, tests on a GPU); never in the interpreter,
        share = int(cfg["_share"])  # which runs programs one after another: a wait would never end
        if interp or not batched or not _share_divides(share, V, group):
            raise ValueError(f"_share={share} needs a GPU, GROUP_DOT='3d', CHUNK 16, and a divisor of "
                             f"GROUP ({group}) and of V ({V}) leaving V-blocks of at least 16")
    if share > 1:
        BV = V // share
    grid = (triton.cdiv(V, BV), B * H)
    cnt = torch.zeros(B * H, dtype=torch.int32, device=q.device) if share > 1 else o
    if group > 1:  # scratch for the staged terms, two slots (double buffer) per program or head
        n = (grid[1] if share > 1 else grid[0] * grid[1]) * 2 * group * C
        # the state products' operand type (bf16 loses nothing there); U stays fp32: X = U - W S
        sdt = torch.bfloat16 if cfg["STATE_DOT"] == "bf16" else torch.float32
        w_s, qt_s, kt_s = (torch.empty(n, K, dtype=sdt, device=q.device) for _ in range(3))
        u_s = torch.empty(n, V if share > 1 else BV, dtype=torch.float32, device=q.device)
        m_s = torch.empty(n, group * C, dtype=sdt, device=q.device)
        gam_s = torch.empty(n // C, K, dtype=torch.float32, device=q.device)
    else:
        w_s = qt_s = kt_s = u_s = m_s = gam_s = o
    _kda_fused_kernel[grid](
        q, k, v, g, beta, A_log, dt_bias, h0, o, hT, w_s, u_s, qt_s, kt_s, m_s, gam_s, cnt,
        T, triton.cdiv(T, C), H, scale, lower_bound * LOG2E,
        K=K, V=V, C=C, NS=C // 16, LOG2NS=int(math.log2(C // 16)), BV=BV, GROUP=group, R=group * C,
        BATCHED=batched, XD=group == 1 and cfg["X_FORM"] == "direct",
        HAS_H0=initial_state is not None, STORE_HT=output_final_state,
        INV_DOUBLING=cfg["INV"] == "doubling", STATE=state_mode, SOLVE=solve_mode, INVP=inv_mode,
        NUM_STAGES=cfg["num_stages"], SHARE=share, num_warps=cfg["num_warps"],
        NO_STATE=cfg.get("_stop_after") == "prep",  # profiling knob: chunk-local work only
    )
    return o, (hT if output_final_state else None)
