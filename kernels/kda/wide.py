"""KDA forward, wide family: chunks of 32 or 64 tokens, a parallel stage, then a sequential one.

IDEA. Split's 16-token programs spend their time on latency (a chain of tiny products and
~35 barriers per 16 tokens) and its sequential stage takes 512 steps per head at
T = 8192. Here a chunk is 32 tokens (the default) or 64, so the sequential stage takes a
half or a quarter of the steps, every state product has 32-64 columns or as deep a
reduction, and a parallel-stage program has 32-64 tokens of independent work. The parallel
stage works in halves of 32 tokens: a half's A and M (KDA.md §3) are ONE product each,
anchored at the half's middle; in a 64-token chunk the pairs across the two halves are one
more product anchored at the boundary between them, so A and M cost [32,K]x[K,32] products
with no wasted block. The inverse is blockwise: the 16x16 diagonal blocks by doubling in
fp32, a half's 32x32 inverse as T = D - (D A_off) D (its off-diagonal part squares to zero),
and the second half's rows of W and U by one block substitution, W_2 = T_22 (B_2 - A_21 W_1).
Every product but the 16x16 inverse takes bf16 operands (bench/wide_numerics.py emulates the
roundings through the contract's probes; the doubling needs fp32: in tf32 the correlated
probe overflows, in bf16x3 the fp64_correlated probe loses one element of 3 million at
B=2 T=4096; bf16x6, three bf16 pieces and six products, matches ieee's error in the
interpreter and is not yet timed on a GPU). Only -W, U, Q~, K~, M (bf16) and exp(G_last) go to the workspace.

What the H200 showed (bench/RESULTS.md), and what the code does about it: the parallel stage
bounds the family, and it is bound by how many programs share an SM, so a 32-token chunk is
computed in an order that keeps few [32,K] fp32 tiles alive (`_lean_chunk32`) and its
registers are capped at 128 (`prep_maxnreg`: four programs an SM instead of two, 1.09 ->
0.97 ms); the sequential stage waits on its loads, so its tiles come by TMA descriptors,
three chunks in flight (`WALK_TMA`, num_stages 3: 0.46 -> 0.35 ms). Whole call at the
primary shape 1.55 -> 1.30 ms (2.03x fla); with INV_DOT='bf16x3' 1.22 ms (2.17x), which the
contract refuses at one shape (above).

Stage 1 (`_wide_prep_kernel`, grid chunks x (batch, head)): L2 norms, gate, beta, the
cumulative decay, A, M, the inverse, W = T diag(beta) (k^ * exp(G)), U = T diag(beta) V,
Q~ = scale q^ * exp(G), K~ = k^ * exp(G_last - G).
Stage 2 (`_wide_state_kernel`, grid V-blocks x (batch, head); its tiles by TMA or pointers):
walks the chunks in order with the state held transposed in registers, St = S^T [BV,K]
(every product then has BV rows):
X^T = U^T - St W^T;  O^T = St Q~^T + X^T M^T;  St' = St diag(exp(G_last)) + X^T K~
(W is stored negated, so each of the three sums is a product accumulated into its addend).
SEGMENT > 0 cuts T into segments and walks segment s on a high-priority stream while the
parallel stage prepares segment s+1 on the caller's stream (which waits for the last walk
before the call returns); measured no faster at the primary shape, so off by default.

Numerics (KDA.md §4): a factor exp(G_i - m) exp(m - G_j) is formed only where both
exponents are at most 16 decay steps above zero (<= 115.5 in log2 units at lower_bound -5,
inside fp32 and bf16 range): a half's middle m for pairs inside the half, the boundary
between the halves (both exponents <= 0) for pairs across them. Entries above the diagonal
may overflow there; they are discarded with `where`, never multiplied by a mask.

BV='auto' picks the widest V-block (64 or 32 columns) whose grid still has about as many
programs as the GPU has SMs (H=96 or 64: 64 columns; H=32: 32 columns); 128-column blocks
want num_warps=8 (two warpgroups of 64 rows).

Self-contained: copied alone into a folder as `kernel.py`, it runs. Every tunable is in
PARAMS / CONFIG below; a variant of this family is this file with another CONFIG. It runs in
the Triton interpreter too (INTERPRETER_OK), with bf16 products emulated in fp32; the
tunables of INTERPRETER_INERT change nothing there. Profiling knobs (not tunables; the
result is wrong with `_skip`): `_stop_after: "prep"`, `_skip: ["scan", "inverse"]`,
`_lean: 0` (the two-half path's first half for a 32-token chunk).
"""

import contextlib
import os

import torch
import triton
import triton.language as tl

# Allowed values of every tunable. The search instantiates variants by rewriting CONFIG.
PARAMS = {
    "CHUNK": (32, 64),  # tokens per chunk: the sequential stage's step (halves of 32 inside)
    "BV": ("auto", 16, 32, 64, 128),  # V columns per program of the sequential stage
    "num_warps": (4, 8),  # warps of the sequential stage (8: two warpgroups, for BV 128)
    "num_stages": (1, 2, 3),  # software pipelining depth of the sequential chunk loop
    "prep_warps": (2, 4, 8),  # warps of the parallel stage
    "WALK_TMA": (False, True),  # the sequential stage's tiles by TMA descriptors (inert in the interpreter)
    "SEGMENT": (0, 512, 1024, 2048),  # tokens per overlapped segment (0: one prep, then one walk)
    "prep_maxnreg": (0, 96, 128, 168),  # register cap of the parallel stage, 0 none (4 warps: 2, 5, 4, 3 programs an SM)
    "INV_DOT": ("ieee", "tf32x3", "bf16x3", "bf16x6"),  # precision of the 16x16 doubling products (tf32 fails: KDA.md §4)
    "SOLVE_DOT": ("bf16", "tf32"),  # operands of the A, M, inverse, W and U products
    "STATE_DOT": ("bf16", "tf32"),  # operands of the state products W S, Q~ S, M X, K~^T X
}
# Launch options and GPU-only paths: they change nothing the Triton interpreter computes.
INTERPRETER_INERT = ("num_warps", "num_stages", "prep_warps", "prep_maxnreg", "WALK_TMA")
# Defaults: the fastest configuration measured on the H200 (bench/RESULTS.md, the wide family).
CONFIG = dict(CHUNK=32, BV='auto', num_warps=4, num_stages=3, WALK_TMA=True, SEGMENT=0, prep_warps=4,
              prep_maxnreg=128, INV_DOT='ieee', SOLVE_DOT='bf16', STATE_DOT='bf16')

FAMILY = "wide"
INTERPRETER_OK = True  # every kernel runs under TRITON_INTERPRET=1 (CPU tests cover the family)
LOG2E = 1.4426950408889634

# dot modes: 0 fp32 operands (tf32 on GPU), 1 bf16 operands, 2 bf16 rounding emulated in
# fp32 (the Triton interpreter cannot multiply bf16), 3 ieee fp32, 4 tf32x3, 5 bf16x3 (6 emulated),
# 7 bf16x6 (8 emulated)
_MODES = {"tf32": 0, "bf16": 1, "ieee": 3, "tf32x3": 4, "bf16x3": 5, "bf16x6": 7}


@triton.jit
def _bf16_rne(x):
    """x rounded to bf16 (nearest, ties to even) and widened back: the GPU's conversion. The
    interpreter's own .to(tl.bfloat16) truncates, a bias that would double the CPU errors."""
    u = x.to(tl.float32).to(tl.int32, bitcast=True)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & -65536
    return u.to(tl.float32, bitcast=True)


@triton.jit
def _exp2(x, FAST: tl.constexpr):
    """2^x; FAST (GPU): one MUFU.EX2 with results below 2^-126 flushed to zero (an underflow
    is a decayed contribution, correctly ~0), where tl.exp2 adds a denormal range fix-up."""
    if FAST:
        r = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32,
                                      is_pure=True, pack=1)
    else:
        r = tl.exp2(x)
    return r


@triton.jit
def _rcp(x, FAST: tl.constexpr):
    """1/x; FAST (GPU): one MUFU.RCP (about 1 ulp) instead of a full-precision division."""
    if FAST:
        r = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32,
                                      is_pure=True, pack=1)
    else:
        r = 1.0 / x
    return r


@triton.jit
def _operand(x, MODE: tl.constexpr):
    """x as the operand type of a MODE product (converted once where it feeds several)."""
    if MODE == 1:
        r = x.to(tl.bfloat16)
    elif MODE == 2:
        r = _bf16_rne(x)
    else:
        r = x
    return r


@triton.jit
def _dot(a, b, MODE: tl.constexpr):
    if MODE == 1:
        r = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    elif MODE == 2:
        r = tl.dot(_bf16_rne(a), _bf16_rne(b))
    elif MODE == 3:
        r = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif MODE == 4:
        r = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="tf32x3")
    elif MODE >= 5:
        # bf16x3 (5; 6 emulated): each fp32 operand as a bf16 head and a bf16 tail, three bf16
        # products (tail x tail dropped), about 16 bits of mantissa on the tensor cores.
        # bf16x6 (7; 8 emulated): a third piece, and the six products down to 2^-24: fp32's
        # accuracy (the correlated probe's error equals ieee's in the interpreter).
        a = a.to(tl.float32)
        b = b.to(tl.float32)
        if MODE == 5 or MODE == 7:
            ah = a.to(tl.bfloat16)
            bh = b.to(tl.bfloat16)
            ra = a - ah.to(tl.float32)
            rb = b - bh.to(tl.float32)
            al = ra.to(tl.bfloat16)
            bl = rb.to(tl.bfloat16)
        else:
            ah = _bf16_rne(a)
            bh = _bf16_rne(b)
            ra = a - ah
            rb = b - bh
            al = _bf16_rne(ra)
            bl = _bf16_rne(rb)
        r = tl.dot(al, bh, tl.dot(ah, bl, tl.dot(ah, bh)))
        if MODE >= 7:
            if MODE == 7:
                am = (ra - al.to(tl.float32)).to(tl.bfloat16)
                bm = (rb - bl.to(tl.float32)).to(tl.bfloat16)
            else:
                am = _bf16_rne(ra - al)
                bm = _bf16_rne(rb - bl)
            r = tl.dot(am, bh, tl.dot(ah, bm, tl.dot(al, bl, r)))
    else:
        r = tl.dot(a.to(tl.float32), b.to(tl.float32))
    return r


@triton.jit
def _dot_acc(a, b, acc, MODE: tl.constexpr):
    """acc + a b, accumulated in place (the tensor cores add into acc)."""
    if MODE == 1:
        r = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)
    elif MODE == 2:
        r = tl.dot(_bf16_rne(a), _bf16_rne(b), acc)
    else:
        r = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    return r


@triton.jit
def _load_half(q_p, k_p, g_p, b_p, v_p, n, s_qk, s_v, s_b, alog_exp, dtb, lb2,
               K: tl.constexpr, V: tl.constexpr, FAST: tl.constexpr):
    """32 tokens from the pointers (at the half's first token; strides per token), of which
    the first n are real: normalized q and k [32,K], v [32,V], beta [32], the log2 decay's
    inclusive cumulative sum from the half's start G [32,K], its total and its value after
    16 tokens (the half's middle) [K]. Rows past n are zero and decay nothing."""
    r = tl.arange(0, 32)
    valid = r < n
    m2 = valid[:, None]
    dk = tl.arange(0, K)
    off = r[:, None] * s_qk + dk[None, :]
    g = tl.load(g_p + off, mask=m2, other=0.0).to(tl.float32)
    # lb2 * sigmoid(z) = lb2 / (1 + 2^(-z log2 e)); 2^(+large) = inf gives 0 (no decay)
    e = _exp2(-1.4426950408889634 * (alog_exp * (g + dtb[None, :])), FAST)
    a2 = tl.where(m2, lb2 * _rcp(1.0 + e, FAST), 0.0)
    G = tl.cumsum(a2, axis=0)
    tot = tl.sum(a2, axis=0)
    mid = tl.sum(tl.where((r < 16)[:, None], a2, 0.0), axis=0)
    q = tl.load(q_p + off, mask=m2, other=0.0).to(tl.float32)
    k = tl.load(k_p + off, mask=m2, other=0.0).to(tl.float32)
    qn = q * tl.math.rsqrt(tl.sum(q * q, axis=1) + 1e-6)[:, None]
    kn = k * tl.math.rsqrt(tl.sum(k * k, axis=1) + 1e-6)[:, None]
    v = tl.load(v_p + r[:, None] * s_v + tl.arange(0, V)[None, :], mask=m2, other=0.0).to(tl.float32)
    beta = tl.where(valid, tl.sigmoid(tl.load(b_p + r * s_b, mask=valid, other=0.0).to(tl.float32)), 0.0)
    return qn, kn, v, beta, G, tot, mid


@triton.jit
def _half_am(qn, kn, G, mid, beta, scale, SOLVE: tl.constexpr, FAST: tl.constexpr):
    """A (strictly lower, rows scaled by beta) and M (lower with the diagonal, times scale)
    of one half, [32,32] each: one product each, both factors anchored at the half's middle
    (exponents within +-16 decay steps). Also the two factors 2^(G - mid) and
    k^ 2^(mid - G) [32,K], from which the caller derives 2^G and K~ by per-channel scaling."""
    r = tl.arange(0, 32)
    el = _exp2(G - mid[None, :], FAST)
    kr = kn * _exp2(mid[None, :] - G, FAST)
    R = tl.trans(_operand(kr, SOLVE))
    A = tl.where(r[:, None] > r[None, :], _dot(kn * el, R, SOLVE), 0.0) * beta[:, None]
    M = tl.where(r[:, None] >= r[None, :], _dot(qn * el, R, SOLVE), 0.0) * scale
    return A, M, el, kr


@triton.jit
def _half_inverse(A, SOLVE: tl.constexpr, INVP: tl.constexpr):
    """(I + A)^-1 for a strictly lower [32,32] A. The two 16x16 diagonal blocks by doubling,
    (I + A_d)^-1 = (I - A_d)(I + A_d^2)(I + A_d^4)(I + A_d^8) (A_d^16 = 0), in INVP precision;
    then with D their block-diagonal inverse and N = D A_off (N^2 = 0):
    (I + A)^-1 = (I + N)^-1 D = D - N D."""
    r = tl.arange(0, 32)
    same = (r[:, None] // 16) == (r[None, :] // 16)
    if INVP == 3:
        # ieee fp32 runs on the FMA units: a [2,16,16] batch does a quarter of the work
        bi = tl.arange(0, 2)
        r16 = tl.arange(0, 16)
        diag = bi[:, None, None, None] == bi[None, None, :, None]  # [2,1,2,1]: block I == block J
        P = -tl.sum(tl.where(diag, tl.reshape(A, (2, 16, 2, 16)), 0.0), axis=2)  # [2,16,16]
        D3 = (r16[:, None] == r16[None, :]).to(tl.float32)[None, :, :] + P
        for _s in tl.static_range(3):
            P = _dot(P, P, INVP)
            D3 = D3 + _dot(D3, P, INVP)
        D = tl.reshape(tl.where(diag, D3[:, :, None, :], 0.0), (32, 32))
    else:
        # on the tensor cores: [32,32] products of block-diagonal matrices (no reshapes)
        P = -tl.where(same, A, 0.0)
        D = (r[:, None] == r[None, :]).to(tl.float32) + P
        for _s in tl.static_range(3):
            P = _dot(P, P, INVP)
            D = D + _dot(D, P, INVP)
    N = _dot(D, tl.where(same, 0.0, A), SOLVE)
    return D - _dot(N, D, SOLVE)


@triton.jit
def _lean_chunk32(q_p, k_p, g_p, b_p, v_p, n, H, alog_exp, dtb, lb2, scale,
                  w_o, u_o, qt_o, kt_o, m_o, gam_o,
                  K: tl.constexpr, V: tl.constexpr, SOLVE: tl.constexpr, INVP: tl.constexpr,
                  FAST: tl.constexpr, SKIP: tl.constexpr):
    """One 32-token chunk, ordered so that few [32,K] fp32 tiles are alive at once (the
    register file bounds how many programs share an SM): the gate first, then k (K~ stored,
    A formed), then q (M and Q~ stored), then the inverse, W and U last, v loaded only there.
    Same math as the two-half path's first half."""
    r = tl.arange(0, 32)
    valid = r < n
    m2 = valid[:, None]
    dk = tl.arange(0, K)
    off = r[:, None] * (H * K) + dk[None, :]
    ty = w_o.dtype.element_ty
    g = tl.load(g_p + off, mask=m2, other=0.0).to(tl.float32)
    e = _exp2(-1.4426950408889634 * (alog_exp * (g + dtb[None, :])), FAST)
    a2 = tl.where(m2, lb2 * _rcp(1.0 + e, FAST), 0.0)
    if SKIP & 1:  # profiling (`_skip`): a stage left out, the result wrong
        G = a2
    else:
        G = tl.cumsum(a2, axis=0)
    tot = tl.sum(a2, axis=0)
    mid = tl.sum(tl.where((r < 16)[:, None], a2, 0.0), axis=0)
    tl.store(gam_o, _exp2(tot, FAST))
    el = _exp2(G - mid[None, :], FAST)  # 2^(G - mid), 2^(mid - G): within 16 decay steps
    er = _exp2(mid[None, :] - G, FAST)
    k = tl.load(k_p + off, mask=m2, other=0.0).to(tl.float32)
    kn = k * tl.math.rsqrt(tl.sum(k * k, axis=1) + 1e-6)[:, None]
    kr = kn * er
    tl.store(kt_o + r[:, None] * K + dk[None, :], (kr * _exp2(tot - mid, FAST)[None, :]).to(ty))
    R = tl.trans(_operand(kr, SOLVE))
    ke = kn * el
    be = tl.where(valid, tl.sigmoid(tl.load(b_p + r * H, mask=valid, other=0.0).to(tl.float32)), 0.0)
    A = tl.where(r[:, None] > r[None, :], _dot(ke, R, SOLVE), 0.0) * be[:, None]
    em = _exp2(mid, FAST)[None, :]
    Bk = _operand(ke * (em * be[:, None]), SOLVE)  # diag(beta) k^ 2^G
    q = tl.load(q_p + off, mask=m2, other=0.0).to(tl.float32)
    qe = q * (tl.math.rsqrt(tl.sum(q * q, axis=1) + 1e-6)[:, None] * el)
    M = tl.where(r[:, None] >= r[None, :], _dot(qe, R, SOLVE), 0.0) * scale
    tl.store(m_o + r[:, None] * 32 + r[None, :], M.to(ty))
    tl.store(qt_o + r[:, None] * K + dk[None, :], (scale * qe * em).to(ty))
    # beta scales the right operands, not T's columns: W and U then share T's one rounding
    # with the state's K~ (folded into T, the correlated probe's error doubled)
    if SKIP & 2:
        Tb = _operand(A, SOLVE)
    else:
        Tb = _operand(_half_inverse(A, SOLVE, INVP), SOLVE)
    W = _dot(Tb, Bk, SOLVE)
    # (through _operand: the interpreter's own bf16 conversion truncates)
    tl.store(w_o + r[:, None] * K + dk[None, :], _operand(-W, SOLVE).to(ty))  # stored negated (see stage 2)
    dv = tl.arange(0, V)
    vb = tl.load(v_p + r[:, None] * (H * V) + dv[None, :], mask=m2, other=0.0)
    U = _dot(Tb, vb.to(tl.float32) * be[:, None], SOLVE)
    tl.store(u_o + r[:, None] * V + dv[None, :], _operand(U, SOLVE).to(ty))


@triton.jit
def _wide_prep_kernel(q, k, v, g, beta, A_log, dt_bias, w_ws, u_ws, qt_ws, kt_ws, m_ws, gam_ws,
                      T, NC, H, scale, lb2, C0,
                      K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, SOLVE: tl.constexpr,
                      INVP: tl.constexpr, FAST: tl.constexpr, LEAN: tl.constexpr, SKIP: tl.constexpr):
    pid_c = tl.program_id(0) + C0
    pid_bh = tl.program_id(1).to(tl.int64)
    b = pid_bh // H
    h = pid_bh % H
    t0 = pid_c * C
    tok = b * T + t0  # the chunk's first token, int64
    q_p = q + (tok * H + h) * K
    k_p = k + (tok * H + h) * K
    g_p = g + (tok * H + h) * K
    v_p = v + (tok * H + h) * V
    b_p = beta + tok * H + h
    dk = tl.arange(0, K)
    dv = tl.arange(0, V)
    r = tl.arange(0, 32)
    alog_exp = tl.exp(tl.load(A_log + h).to(tl.float32))
    dtb = tl.load(dt_bias + h * K + dk).to(tl.float32)
    n = T - t0
    chunk = pid_bh * NC + pid_c
    ty = w_ws.dtype.element_ty
    wq = chunk * C * K + r[:, None] * K + dk[None, :]  # rows of the first half in W, Q~, K~
    uo = chunk * C * V + r[:, None] * V + dv[None, :]
    mo = chunk * C * C + r[:, None] * C + r[None, :]

    if LEAN:
        if C == 32:
            _lean_chunk32(q_p, k_p, g_p, b_p, v_p, n, H, alog_exp, dtb, lb2, scale,
                          w_ws + chunk * C * K, u_ws + chunk * C * V, qt_ws + chunk * C * K,
                          kt_ws + chunk * C * K, m_ws + chunk * C * C, gam_ws + chunk * K + dk,
                          K, V, SOLVE, INVP, FAST, SKIP)
            return
    # first half: its own A, M and inverse; W_1 = T_11 B_1
    qn1, kn1, v1, be1, G1, tot1, mid1 = _load_half(q_p, k_p, g_p, b_p, v_p, n, H * K, H * V, H,
                                                   alog_exp, dtb, lb2, K, V, FAST)
    A11, M11, el1, kr1 = _half_am(qn1, kn1, G1, mid1, be1, scale, SOLVE, FAST)
    tl.store(m_ws + mo, M11.to(ty))
    eG1 = el1 * _exp2(mid1, FAST)[None, :]  # 2^G: the half's middle is >= -115.5, normal
    tl.store(qt_ws + wq, (scale * qn1 * eG1).to(ty))
    T11 = _half_inverse(A11, SOLVE, INVP)
    W1 = _operand(_dot(T11, be1[:, None] * kn1 * eG1, SOLVE), SOLVE)
    tl.store(w_ws + wq, (-W1).to(ty))  # stored negated: stage 2 adds St (-W)^T into U^T
    U1 = _operand(_dot(T11, be1[:, None] * v1, SOLVE), SOLVE)
    tl.store(u_ws + uo, U1.to(ty))
    # k^ 2^(tot - G) <= 1: K~ of a 32-token chunk, and the right factor across the halves
    Kr = kr1 * _exp2(tot1 - mid1, FAST)[None, :]
    if C == 32:
        tl.store(kt_ws + wq, Kr.to(ty))
        tl.store(gam_ws + chunk * K + dk, _exp2(tot1, FAST))
    else:
        # only the operands the second half needs stay alive: Kr, W_1, U_1 (as dot operands)
        Kr = _operand(Kr, SOLVE)
        qn2, kn2, v2, be2, G2, tot2, mid2 = _load_half(q_p + 32 * H * K, k_p + 32 * H * K, g_p + 32 * H * K,
                                                       b_p + 32 * H, v_p + 32 * H * V, n - 32, H * K, H * V,
                                                       H, alog_exp, dtb, lb2, K, V, FAST)
        e1 = _exp2(tot1, FAST)  # decay over the first half (may underflow: correct)
        e2 = _exp2(tot2, FAST)
        tl.store(gam_ws + chunk * K + dk, e1 * e2)
        tl.store(kt_ws + wq, (Kr.to(tl.float32) * e2[None, :]).to(ty))
        A22, M22, el2, kr2 = _half_am(qn2, kn2, G2, mid2, be2, scale, SOLVE, FAST)
        tl.store(m_ws + mo + 32 * C + 32, M22.to(ty))
        tl.store(kt_ws + wq + 32 * K, (kr2 * _exp2(tot2 - mid2, FAST)[None, :]).to(ty))
        eG2 = el2 * _exp2(mid2, FAST)[None, :]  # 2^G2 from the second half's start, <= 1
        # pairs across the halves, anchored at the boundary: both factors <= 1
        RQ = tl.trans(Kr)
        M21 = _dot(qn2 * eG2, RQ, SOLVE) * scale
        tl.store(m_ws + mo + 32 * C, M21.to(ty))
        tl.store(m_ws + mo + 32, tl.zeros((32, 32), ty))
        A21 = _dot(kn2 * eG2, RQ, SOLVE) * be2[:, None]
        eG2 = eG2 * e1[None, :]  # now from the chunk's start
        tl.store(qt_ws + wq + 32 * K, (scale * qn2 * eG2).to(ty))
        T22 = _half_inverse(A22, SOLVE, INVP)
        # second half's rows: T_21 = -T_22 A_21 T_11, so W_2 = T_22 (B_2 - A_21 W_1)
        W2 = _dot(T22, be2[:, None] * kn2 * eG2 - _dot(A21, W1, SOLVE), SOLVE)
        tl.store(w_ws + wq + 32 * K, (-W2).to(ty))
        U2 = _dot(T22, be2[:, None] * v2 - _dot(A21, U1, SOLVE), SOLVE)
        tl.store(u_ws + uo + 32 * V, U2.to(ty))


@triton.jit
def _walk_step(St, Wt, Qtt, Kt, Ut, Mt, gam, STATE: tl.constexpr):
    """One chunk of the walk: (O^T, St') from St and the chunk's terms (see the docstring)."""
    Sb = _operand(St, STATE)
    Xt = _dot_acc(Sb, Wt, Ut, STATE)  # the workspace holds -W: X^T = U^T + St (-W)^T
    Xb = _operand(Xt, STATE)
    Ot = _dot_acc(Xb, Mt, _dot(Sb, Qtt, STATE), STATE)
    St = _dot_acc(Xb, Kt, St * gam[None, :], STATE)
    return Ot, St


@triton.jit
def _wide_state_kernel(w_ws, u_ws, qt_ws, kt_ws, m_ws, gam_ws, h0, o, hT, T, NC, H, C0, C1,
                       K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr,
                       HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, STATE: tl.constexpr,
                       NUM_STAGES: tl.constexpr, TMA: tl.constexpr):
    """TMA: w_ws, u_ws, qt_ws, kt_ws, m_ws are TMA descriptors over the workspace as 2-D row
    tables (a chunk is C rows), else pointers; either way NUM_STAGES chunks in flight."""
    pid_v = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    b = pid_bh // H
    h = pid_bh % H
    v0 = pid_v * BV
    dk = tl.arange(0, K)
    dv = tl.arange(0, BV)
    r = tl.arange(0, C)
    s_off = (pid_bh * V + v0 + dv[:, None]) * K + dk[None, :]
    if HAS_H0:
        St = tl.load(h0 + s_off).to(tl.float32)
    else:
        St = tl.zeros((BV, K), tl.float32)
    o_p = o + ((b * T + C0 * C) * H + h) * V + v0  # advanced by one chunk of tokens per step (64-bit)
    okT = r[None, :] * K + dk[:, None]  # [K,C]: a [C,K] tile read transposed
    for c in tl.range(C0, C1, num_stages=NUM_STAGES):
        chunk = pid_bh * NC + c
        if TMA:
            row = (chunk * C).to(tl.int32)
            Wt = tl.trans(w_ws.load([row, 0]))
            Qtt = tl.trans(qt_ws.load([row, 0]))
            Kt = kt_ws.load([row, 0])
            Ut = tl.trans(u_ws.load([row, v0])).to(tl.float32)
            Mt = tl.trans(m_ws.load([row, 0]))
        else:
            Wt = tl.load(w_ws + chunk * C * K + okT)
            Qtt = tl.load(qt_ws + chunk * C * K + okT)
            Kt = tl.load(kt_ws + chunk * C * K + r[:, None] * K + dk[None, :])
            Ut = tl.load(u_ws + chunk * C * V + r[None, :] * V + v0 + dv[:, None]).to(tl.float32)
            Mt = tl.load(m_ws + chunk * C * C + r[None, :] * C + r[:, None])
        gam = tl.load(gam_ws + chunk * K + dk)
        Ot, St = _walk_step(St, Wt, Qtt, Kt, Ut, Mt, gam, STATE)
        tl.store(o_p + r[None, :] * (H * V) + dv[:, None], Ot.to(o.dtype.element_ty),
                 mask=(c * C + r < T)[None, :])
        o_p += C * H * V
    if STORE_HT:
        tl.store(hT + s_off, St)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _auto_bv(heads: int, V: int, n_sm: int) -> int:
    """The widest V-block of 64 or 32 columns whose grid has at least 0.9 programs per SM,
    else 16. Measured on the H200 at CHUNK 32 (bench/RESULTS.md): H=96 fastest at 64 (192
    programs; 128 columns, 96 programs, 4% slower), H=64 at 64 (128 programs), H=32 at 16
    (256 programs; this rule's 32 is 6% slower there, but a threshold that gave 16 at H=32
    would give 32 at H=64, 5% slower there)."""
    for bv in (64, 32):
        if heads * triton.cdiv(V, bv) >= 0.9 * n_sm:
            return bv
    return 16


def _plan(cfg: dict, B: int, H: int, V: int, device) -> tuple[int, int]:
    """(BV, warps) of the sequential stage for this call."""
    bv = cfg["BV"]
    if bv == "auto":
        n_sm = (torch.cuda.get_device_properties(device).multi_processor_count
                if device.type == "cuda" else 132)
        bv = _auto_bv(B * H, V, n_sm)
    bv = min(bv, V)
    return bv, cfg["num_warps"]


def workspace(B, H, T, K, V, C, device):
    """-W, U, Q~, K~ [B*H, NC, C, D] and M [B*H, NC, C, C] in bf16, exp(G_last) [B*H, NC, K]."""
    NC = triton.cdiv(T, C)
    w = torch.empty(B * H, NC, C, K, dtype=torch.bfloat16, device=device)
    return dict(w_ws=w, u_ws=torch.empty(B * H, NC, C, V, dtype=torch.bfloat16, device=device),
                qt_ws=torch.empty_like(w), kt_ws=torch.empty_like(w),
                m_ws=torch.empty(B * H, NC, C, C, dtype=torch.bfloat16, device=device),
                gam_ws=torch.empty(B * H, NC, K, dtype=torch.float32, device=device))


def prep(q, k, v, g, beta, A_log, dt_bias, ws, *, scale, lower_bound, cfg, chunks=None):
    """Stage 1: the local terms of every chunk (or of chunks [c0, c1)) into the workspace `ws`."""
    B, T, H, K = q.shape
    C = cfg["CHUNK"]
    NC = triton.cdiv(T, C)
    c0, c1 = chunks or (0, NC)
    interp = _interpreting()
    solve = 2 if interp and cfg["SOLVE_DOT"] == "bf16" else (0 if interp else _MODES[cfg["SOLVE_DOT"]])
    inv = _MODES[cfg["INV_DOT"]]  # the interpreter computes both in fp32, each on its own path
    if interp and inv in (5, 7):
        inv += 1  # bf16x3's and bf16x6's roundings emulated
    _wide_prep_kernel[(c1 - c0, B * H)](
        q, k, v, g, beta, A_log, dt_bias, ws["w_ws"], ws["u_ws"], ws["qt_ws"], ws["kt_ws"], ws["m_ws"],
        ws["gam_ws"], T, NC, H, scale, lower_bound * LOG2E, c0,
        K=K, V=v.shape[-1], C=C, SOLVE=solve, INVP=inv, FAST=not interp, LEAN=bool(cfg.get("_lean", True)),
        SKIP=sum(b for name, b in (("scan", 1), ("inverse", 2)) if name in cfg.get("_skip", ())),
        num_warps=cfg["prep_warps"],
        **({"maxnreg": cfg["prep_maxnreg"]} if cfg["prep_maxnreg"] and not interp else {}),
    )


def walk(ws, h0, o, hT, *, B, T, H, K, V, cfg, has_h0, store_ht, chunks=None):
    """Stage 2: the state through every chunk (or chunks [c0, c1)), writing o (and the state
    after the last of them to hT; h0 and hT may be one buffer: each program reads its block
    of the state before it writes it)."""
    C = cfg["CHUNK"]
    NC = triton.cdiv(T, C)
    c0, c1 = chunks or (0, NC)
    BV, warps = _plan(cfg, B, H, V, o.device)
    interp = _interpreting()
    state = 2 if interp and cfg["STATE_DOT"] == "bf16" else _MODES[cfg["STATE_DOT"]]
    tiles = [ws["w_ws"], ws["u_ws"], ws["qt_ws"], ws["kt_ws"], ws["m_ws"]]
    tma = bool(cfg["WALK_TMA"]) and not interp
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        # the workspace as [rows, cols] tables, read a block of one chunk's rows at a time
        tiles = [TensorDescriptor.from_tensor(t.view(-1, cols), [C, width])
                 for t, cols, width in zip(tiles, (K, V, K, K, C), (K, BV, K, K, C))]
    _wide_state_kernel[(triton.cdiv(V, BV), B * H)](
        *tiles, ws["gam_ws"], h0, o, hT,
        T, NC, H, c0, c1,
        K=K, V=V, C=C, BV=BV, HAS_H0=has_h0, STORE_HT=store_ht, STATE=state,
        NUM_STAGES=cfg["num_stages"], TMA=tma, num_warps=warps,
    )


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True, config=None):
    cfg = {**CONFIG, **(config or {})}
    B, T, H, K = q.shape
    V = v.shape[-1]
    if any(d < 16 or d & (d - 1) for d in (K, V)):
        raise ValueError(f"wide: K and V must be powers of two of at least 16 (got K={K}, V={V})")
    scale = K ** -0.5 if scale is None else float(scale)
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    A_log = A_log.contiguous()
    dt_bias = dt_bias.contiguous()
    ws = workspace(B, H, T, K, V, cfg["CHUNK"], q.device)
    o = torch.empty(B, T, H, V, dtype=torch.bfloat16, device=q.device)
    hT = torch.empty(B, H, V, K, dtype=torch.float32, device=q.device) if output_final_state else o
    h0 = initial_state.contiguous().float() if initial_state is not None else o
    C = cfg["CHUNK"]
    NC = triton.cdiv(T, C)
    per = max(1, cfg["SEGMENT"] // C) if cfg["SEGMENT"] else NC
    if cfg.get("_stop_after") == "prep":  # profiling knob: time the parallel stage alone
        prep(q, k, v, g, beta, A_log, dt_bias, ws, scale=scale, lower_bound=lower_bound, cfg=cfg)
        return o, (hT if output_final_state else None)
    if per >= NC:
        prep(q, k, v, g, beta, A_log, dt_bias, ws, scale=scale, lower_bound=lower_bound, cfg=cfg)
        walk(ws, h0, o, hT, B=B, T=T, H=H, K=K, V=V, cfg=cfg, has_h0=initial_state is not None,
             store_ht=output_final_state)
        return o, (hT if output_final_state else None)
    # Segments: the walk through segment s (on a high-priority stream) overlaps the parallel
    # stage of segment s+1 (on the caller's stream); the state passes between the walks
    # through one buffer; the caller's stream waits for the last walk before returning.
    # (On the CPU the same segments run in order, with no streams.)
    gpu = q.device.type == "cuda"
    main = torch.cuda.current_stream(q.device) if gpu else None
    side = _side_stream(q.device) if gpu else None
    state = hT if output_final_state else torch.empty(B, H, V, K, dtype=torch.float32, device=q.device)
    if gpu:
        side.wait_stream(main)  # the inputs and buffers are the caller's stream's until here
    for c0 in range(0, NC, per):
        c1 = min(NC, c0 + per)
        prep(q, k, v, g, beta, A_log, dt_bias, ws, scale=scale, lower_bound=lower_bound, cfg=cfg,
             chunks=(c0, c1))
        if gpu:
            ready = torch.cuda.Event()
            ready.record(main)
            side.wait_event(ready)
        with torch.cuda.stream(side) if gpu else contextlib.nullcontext():
            first = c0 == 0
            walk(ws, h0 if first else state, o, state, B=B, T=T, H=H, K=K, V=V, cfg=cfg,
                 has_h0=not first or initial_state is not None, store_ht=True, chunks=(c0, c1))
    if gpu:
        main.wait_stream(side)
    return o, (hT if output_final_state else None)


_SIDE: dict = {}


def _side_stream(device) -> "torch.cuda.Stream":
    """One high-priority stream per device: its blocks are scheduled ahead of the parallel
    stage's waiting ones, so each walk starts as soon as its segment is prepared."""
    key = torch.device(device).index if torch.device(device).index is not None else torch.cuda.current_device()
    if key not in _SIDE:
        _SIDE[key] = torch.cuda.Stream(device=key, priority=-100)  # mapped to the highest the device has
    return _SIDE[key]
