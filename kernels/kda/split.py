"""KDA forward, split family: a parallel stage, then a sequential one.

Stage 1 (`_kda_chunk_kernel`, grid chunks x (batch, head)): every chunk's local terms at
once — L2 norms, gate, beta, cumulative decay, A, the triangular inverse, and
W = T diag(beta) (k^ * exp(G)), U = T diag(beta) V, Q~ = scale q^ * exp(G),
K~ = k^ * exp(G_last - G), M, exp(G_last) (KDA.md §3) — written to a workspace.
Stage 2 (`_kda_state_kernel`, grid V-blocks x (batch, head)): walks the chunks in order
with the state in registers: X = U - W S; O = Q~ S + M X; S' = diag(exp(G_last)) S + K~^T X.

The parallel stage has chunks x heads programs (12,288 at B=1, T=8192, H=96), so the
chunk-local work fills the GPU; the sequential stage reads only what the recurrence needs.
The price is the workspace traffic (about 70 KB per chunk and head in bf16).

Numerics are those of the fused family (the anchored sub-blocks of 16, see fused.py's
docstring, repeated here so this file stands alone).

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
    "BV": (16, 32, 64, 128),  # V columns per program of the sequential stage
    "num_warps": (2, 4, 8),  # warps of the sequential stage
    "num_stages": (1, 2, 3),  # software pipelining depth of the sequential chunk loop
    "prep_warps": (2, 4, 8),  # warps of the parallel stage
    "PREP_LOOP": (1, 2, 4, 8),  # chunks per program of the parallel stage (loads of the next one in flight)
    "INV": ("subst", "doubling"),  # 16x16 inverse: forward substitution, or (I-A)(I+A^2)(I+A^4)(I+A^8)
    "INV_DOT": ("ieee", "tf32x3"),  # precision of the doubling products (tf32 is unstable: KDA.md §4)
    "STATE_DOT": ("bf16", "tf32"),  # operands of the state products W S, Q~ S, K~^T X, M X
    "SOLVE_DOT": ("tf32", "tf32x3", "ieee"),  # precision of the A/M and inverse products
    "WORKSPACE": ("bf16", "fp32"),  # dtype of W, U, Q~, K~, M between the stages
    "SEQ": ("kv", "vk"),  # state held as S [K,BV] or transposed [BV,K] (every product then has M = BV)
}
# Defaults: the fastest configuration measured on the H200 (bench/RESULTS.md).
# Launch options, and precisions the interpreter computes in plain fp32 whatever they say.
INTERPRETER_INERT = ("num_warps", "num_stages", "prep_warps", "SOLVE_DOT", "INV_DOT")
CONFIG = dict(CHUNK=16, BV=64, num_warps=4, num_stages=3, prep_warps=2, PREP_LOOP=1, INV='doubling',
              INV_DOT='ieee', STATE_DOT='bf16', SOLVE_DOT='tf32', WORKSPACE='bf16', SEQ='vk')

FAMILY = "split"
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
def _chunk_terms(q_ptr, k_ptr, g_ptr, b_ptr, v_ptr, t0, T, s_qk, s_v, s_b, alog_exp, dtb, scale, lb2,
                 C: tl.constexpr, NS: tl.constexpr, LOG2NS: tl.constexpr, K: tl.constexpr,
                 BV: tl.constexpr, INV_DOUBLING: tl.constexpr, SOLVE: tl.constexpr, INVP: tl.constexpr):
    """The chunk-local terms of one chunk: W [C,K], U [C,BV], Q~ [C,K], K~ [C,K], M [C,C],
    exp(G_last) [K]. Pointers are at (b, t=0, h); strides are per token. Only 2-D tiles:
    batched (3-D) dots replicate work across warps when the batch is small."""
    rows = t0 + tl.arange(0, C)
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
    G = tl.cumsum(a2, axis=0)  # [C,K], inclusive, non-increasing
    Glast = tl.sum(a2, axis=0)  # [K]
    ii = tl.arange(0, C)
    blk = ii // 16

    # A and M, anchored at c_I, the decay at the start of row block I (sub-blocks of 16):
    #   left  k_i * exp(G_i - c_I)                   (<= 1)
    #   right k_j * exp(c_I - G_j) for j < 16(I+1)   (<= exp(16 steps) inside block I, <= 1 before)
    cstart = tl.zeros((C, K), tl.float32)
    for I in tl.static_range(1, NS):
        c_I = tl.sum(tl.where((ii < 16 * I)[:, None], a2, 0.0), axis=0)
        cstart = tl.where((blk == I)[:, None], c_I[None, :], cstart)
    eq = tl.exp2(G - cstart)
    kl = kn * eq
    ql = qn * eq
    A = tl.zeros((C, C), tl.float32)
    M = tl.zeros((C, C), tl.float32)
    for I in tl.static_range(NS):
        c_I = tl.sum(tl.where((ii < 16 * I)[:, None], a2, 0.0), axis=0)
        kr = kn * tl.exp2(tl.where((ii < 16 * (I + 1))[:, None], c_I[None, :] - G, float("-inf")))
        if NS == 1:
            A += _dot(kl, tl.trans(kr), SOLVE)
            M += _dot(ql, tl.trans(kr), SOLVE)
        else:
            sel = (blk == I)[:, None]
            A += _dot(tl.where(sel, kl, 0.0), tl.trans(kr), SOLVE)
            M += _dot(tl.where(sel, ql, 0.0), tl.trans(kr), SOLVE)
    A = tl.where(ii[:, None] > ii[None, :], A, 0.0) * beta[:, None]
    M = tl.where(ii[:, None] >= ii[None, :], M, 0.0) * scale

    # D = inverse of the 16x16 diagonal blocks of I + A (block diagonal, [C,C])
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
                       (C, C))

    eG = tl.exp2(G)
    v = tl.load(v_ptr + rows[:, None] * s_v + dv[None, :], mask=m2, other=0.0).to(tl.float32)
    W = _dot(D, beta[:, None] * kn * eG, SOLVE)
    U = _dot(D, beta[:, None] * v, SOLVE)
    if NS > 1:
        # (I + A)^-1 = (I + N)^-1 D with N = D * (block-strict part of A), N^NS = 0:
        # (I + N)^-1 = (I - N)(I + N^2)(I + N^4)...
        N = _dot(D, tl.where(same, 0.0, A), SOLVE)
        W = W - _dot(N, W, SOLVE)
        U = U - _dot(N, U, SOLVE)
        for _s in tl.static_range(1, LOG2NS):
            N = _dot(N, N, SOLVE)
            W = W + _dot(N, W, SOLVE)
            U = U + _dot(N, U, SOLVE)
    Qt = qn * eG * scale
    Kt = kn * tl.exp2(Glast[None, :] - G)
    return W, U, Qt, Kt, M, tl.exp2(Glast)


@triton.jit
def _kda_chunk_kernel(q, k, v, g, beta, A_log, dt_bias, w_ws, u_ws, qt_ws, kt_ws, m_ws, gam_ws,
                      T, NC, H, scale, lb2,
                      K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, NS: tl.constexpr,
                      LOG2NS: tl.constexpr, INV_DOUBLING: tl.constexpr, SOLVE: tl.constexpr,
                      INVP: tl.constexpr, PL: tl.constexpr):
    pid_bh = tl.program_id(1).to(tl.int64)
    b = pid_bh // H
    h = pid_bh % H
    dk = tl.arange(0, K)
    dv = tl.arange(0, V)
    r = tl.arange(0, C)
    alog_exp = tl.exp(tl.load(A_log + h).to(tl.float32))
    dtb = tl.load(dt_bias + h * K + dk).to(tl.float32)
    # NC here is the padded chunk count (a multiple of PL): chunks past the end only see masked
    # rows and write workspace slots stage 2 never reads.
    for j in tl.range(0, PL, num_stages=2 if PL > 1 else 1):
        c = tl.program_id(0) * PL + j
        W, U, Qt, Kt, M, gam = _chunk_terms(q + (b * T * H + h) * K, k + (b * T * H + h) * K,
                                            g + (b * T * H + h) * K, beta + b * T * H + h,
                                            v + (b * T * H + h) * V, c * C, T, H * K, H * V, H,
                                            alog_exp, dtb, scale, lb2, C, NS, LOG2NS, K, V,
                                            INV_DOUBLING, SOLVE, INVP)
        # workspace [B*H, NC, C, D], chunk-major per head so stage 2 streams it
        chunk = pid_bh * NC + c
        ok = r[:, None] * K + dk[None, :]
        ty = w_ws.dtype.element_ty
        tl.store(w_ws + chunk * C * K + ok, W.to(ty))
        tl.store(qt_ws + chunk * C * K + ok, Qt.to(ty))
        tl.store(kt_ws + chunk * C * K + ok, Kt.to(ty))
        tl.store(u_ws + chunk * C * V + r[:, None] * V + dv[None, :], U.to(ty))
        tl.store(m_ws + chunk * C * C + r[:, None] * C + r[None, :], M.to(ty))
        tl.store(gam_ws + chunk * K + dk, gam)


@triton.jit
def _kda_state_kernel(w_ws, u_ws, qt_ws, kt_ws, m_ws, gam_ws, h0, o, hT, T, NC, NCS, H,
                      K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr,
                      HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, STATE: tl.constexpr,
                      NUM_STAGES: tl.constexpr):
    pid_v = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    b = pid_bh // H
    h = pid_bh % H
    v0 = pid_v * BV
    dk = tl.arange(0, K)
    dv = tl.arange(0, BV)
    r = tl.arange(0, C)
    s_off = (pid_bh * V + v0 + dv[None, :]) * K + dk[:, None]
    if HAS_H0:
        S = tl.load(h0 + s_off).to(tl.float32)
    else:
        S = tl.zeros((K, BV), tl.float32)
    o_ptr = o + (b * T * H + h) * V + v0
    ok = r[:, None] * K + dk[None, :]
    for c in tl.range(0, NC, num_stages=NUM_STAGES):
        chunk = pid_bh * NCS + c  # NCS: chunk slots per head in the workspace
        W = tl.load(w_ws + chunk * C * K + ok)
        Qt = tl.load(qt_ws + chunk * C * K + ok)
        Kt = tl.load(kt_ws + chunk * C * K + ok)
        U = tl.load(u_ws + chunk * C * V + r[:, None] * V + v0 + dv[None, :]).to(tl.float32)
        M = tl.load(m_ws + chunk * C * C + r[:, None] * C + r[None, :])
        gam = tl.load(gam_ws + chunk * K + dk)
        X = U - _dot(W, S, STATE)
        O = _dot(Qt, S, STATE) + _dot(M, X, STATE)
        S = gam[:, None] * S + _dot(tl.trans(Kt), X, STATE)
        rows = c * C + r
        tl.store(o_ptr + rows[:, None] * (H * V) + dv[None, :], O.to(o.dtype.element_ty),
                 mask=(rows < T)[:, None])
    if STORE_HT:
        tl.store(hT + s_off, S)


@triton.jit
def _kda_state_kernel_t(w_ws, u_ws, qt_ws, kt_ws, m_ws, gam_ws, h0, o, hT, T, NC, NCS, H,
                        K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BV: tl.constexpr,
                        HAS_H0: tl.constexpr, STORE_HT: tl.constexpr, STATE: tl.constexpr,
                        NUM_STAGES: tl.constexpr):
    """The sequential stage with the state transposed, St = S^T [BV,K]:
    X^T = U^T - St W^T;  O^T = St Q~^T + X^T M^T;  St' = St diag(exp(G_last)) + X^T K~."""
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
    o_ptr = o + (b * T * H + h) * V + v0
    okT = r[None, :] * K + dk[:, None]  # [K, C]: a [C,K] tile read transposed
    for c in tl.range(0, NC, num_stages=NUM_STAGES):
        chunk = pid_bh * NCS + c  # NCS: chunk slots per head in the workspace
        Wt = tl.load(w_ws + chunk * C * K + okT)
        Qtt = tl.load(qt_ws + chunk * C * K + okT)
        Kt = tl.load(kt_ws + chunk * C * K + r[:, None] * K + dk[None, :])
        Ut = tl.load(u_ws + chunk * C * V + r[None, :] * V + v0 + dv[:, None]).to(tl.float32)
        Mt = tl.load(m_ws + chunk * C * C + r[None, :] * C + r[:, None])
        gam = tl.load(gam_ws + chunk * K + dk)
        Xt = Ut - _dot(St, Wt, STATE)
        Ot = _dot(St, Qtt, STATE) + _dot(Xt, Mt, STATE)
        St = St * gam[None, :] + _dot(Xt, Kt, STATE)
        rows = c * C + r
        tl.store(o_ptr + rows[None, :] * (H * V) + dv[:, None], Ot.to(o.dtype.element_ty),
                 mask=(rows < T)[None, :])
    if STORE_HT:
        tl.store(hT + s_off, St)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True, config=None):
    cfg = {**CONFIG, **(config or {})}
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else float(scale)
    C = cfg["CHUNK"]
    BV = min(cfg["BV"], V)
    NC = triton.cdiv(T, C)
    PL = cfg["PREP_LOOP"]
    NCP = triton.cdiv(NC, PL) * PL  # workspace chunk slots (stage 1 may fill a few past NC)
    dev = q.device
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    A_log = A_log.contiguous()
    dt_bias = dt_bias.contiguous()
    wdt = torch.bfloat16 if cfg["WORKSPACE"] == "bf16" else torch.float32
    w_ws = torch.empty(B * H, NCP, C, K, dtype=wdt, device=dev)
    qt_ws = torch.empty_like(w_ws)
    kt_ws = torch.empty_like(w_ws)
    u_ws = torch.empty(B * H, NCP, C, V, dtype=wdt, device=dev)
    m_ws = torch.empty(B * H, NCP, C, C, dtype=wdt, device=dev)
    gam_ws = torch.empty(B * H, NCP, K, dtype=torch.float32, device=dev)
    o = torch.empty(B, T, H, V, dtype=torch.bfloat16, device=dev)
    hT = torch.empty(B, H, V, K, dtype=torch.float32, device=dev) if output_final_state else o
    h0 = initial_state.contiguous().float() if initial_state is not None else o
    interp = _interpreting()
    state_mode = 2 if interp and cfg["STATE_DOT"] == "bf16" else _MODES[cfg["STATE_DOT"]]
    solve_mode = 0 if interp else _MODES[cfg["SOLVE_DOT"]]
    inv_mode = 0 if interp else _MODES[cfg["INV_DOT"]]
    _kda_chunk_kernel[(NCP // PL, B * H)](
        q, k, v, g, beta, A_log, dt_bias, w_ws, u_ws, qt_ws, kt_ws, m_ws, gam_ws,
        T, NCP, H, scale, lower_bound * LOG2E,
        K=K, V=V, C=C, NS=C // 16, LOG2NS=int(math.log2(C // 16)),
        INV_DOUBLING=cfg["INV"] == "doubling", SOLVE=solve_mode, INVP=inv_mode, PL=PL, num_warps=cfg["prep_warps"],
    )
    if cfg.get("_stop_after") == "prep":  # profiling knob: time the parallel stage alone
        return o, (hT if output_final_state else None)
    state_kernel = _kda_state_kernel_t if cfg["SEQ"] == "vk" else _kda_state_kernel
    state_kernel[(triton.cdiv(V, BV), B * H)](
        w_ws, u_ws, qt_ws, kt_ws, m_ws, gam_ws, h0, o, hT, T, NC, NCP, H,
        K=K, V=V, C=C, BV=BV, HAS_H0=initial_state is not None, STORE_HT=output_final_state,
        STATE=state_mode, NUM_STAGES=cfg["num_stages"], num_warps=cfg["num_warps"],
    )
    return o, (hT if output_final_state else None)
