"""Ground truth for the KDA forward pass (KDA.md §2 and §3), in float64.

`token_loop` is the definition: one token at a time, exactly the recurrence of KDA.md §2.
`chunked` evaluates the same function chunk by chunk (KDA.md §3) with exact exponent
differences, vectorized over batch and heads; it is what the checks use at large shapes,
and it is itself tested against `token_loop`.

Both take the candidate interface's arguments (any dtype, any device) and return
(o [B, T, H, V], final_state [B, H, V, K]) in float64 on the inputs' device.
"""

from __future__ import annotations

import torch

EPS = 1e-6


def prepare(q, k, v, g, beta, A_log, dt_bias, lower_bound, dtype=torch.float64):
    """Normalized q, k; log decay a; update strength b — all [B, H, T, ...] in `dtype`."""
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    qn = q / torch.sqrt((q * q).sum(-1, keepdim=True) + EPS)
    kn = k / torch.sqrt((k * k).sum(-1, keepdim=True) + EPS)
    gate = torch.exp(A_log.to(dtype))[None, None, :, None] * (g + dt_bias.to(dtype)[None, None])
    a = lower_bound * torch.sigmoid(gate)
    b = torch.sigmoid(beta)
    bhtd = lambda x: x.transpose(1, 2).contiguous()  # noqa: E731  [B,T,H,D] -> [B,H,T,D]
    return bhtd(qn), bhtd(kn), bhtd(v), bhtd(a), b.transpose(1, 2).contiguous()


def _initial(initial_state, B, H, K, V, like):
    if initial_state is None:
        return torch.zeros(B, H, K, V, dtype=like.dtype, device=like.device)
    return initial_state.to(like.dtype).transpose(-1, -2).contiguous()  # [B,H,V,K] -> [B,H,K,V]


def token_loop(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
               initial_state=None, output_final_state=True, dtype=torch.float64):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    qn, kn, vv, a, b = prepare(q, k, v, g, beta, A_log, dt_bias, lower_bound, dtype)
    S = _initial(initial_state, B, H, K, V, qn)  # [B, H, K, V]
    o = torch.empty(B, H, T, V, dtype=dtype, device=q.device)
    for t in range(T):
        S = S * torch.exp(a[:, :, t])[..., None]
        r = vv[:, :, t] - torch.einsum("bhkv,bhk->bhv", S, kn[:, :, t])
        S = S + b[:, :, t, None, None] * kn[:, :, t, :, None] * r[:, :, None, :]
        o[:, :, t] = scale * torch.einsum("bhkv,bhk->bhv", S, qn[:, :, t])
    final = S.transpose(-1, -2).contiguous() if output_final_state else None
    return o.transpose(1, 2).contiguous(), final


def chunked(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
            initial_state=None, output_final_state=True, chunk=64, dtype=torch.float64):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    qn, kn, vv, a, b = prepare(q, k, v, g, beta, A_log, dt_bias, lower_bound, dtype)
    S = _initial(initial_state, B, H, K, V, qn)
    o = torch.empty(B, H, T, V, dtype=dtype, device=q.device)
    for t0 in range(0, T, chunk):
        t1 = min(t0 + chunk, T)
        C = t1 - t0
        Qc, Kc, Vc, bc = qn[:, :, t0:t1], kn[:, :, t0:t1], vv[:, :, t0:t1], b[:, :, t0:t1]
        G = torch.cumsum(a[:, :, t0:t1], dim=2)  # [B,H,C,K], inclusive, non-increasing
        # exact exponent differences: D[i, j, d] = G[i, d] - G[j, d], used only for j <= i
        lower = torch.tril(torch.ones(C, C, dtype=torch.bool, device=q.device))
        D = (G[:, :, :, None, :] - G[:, :, None, :, :]).masked_fill(~lower[..., None], float("-inf"))
        E = torch.exp(D)  # [B,H,C,C,K], zero above the diagonal
        KK = torch.einsum("bhid,bhjd,bhijd->bhij", Kc, Kc, E)
        A = bc[..., None] * torch.tril(KK, diagonal=-1)
        M = scale * torch.einsum("bhid,bhjd,bhijd->bhij", Qc, Kc, E)
        eye = torch.eye(C, dtype=dtype, device=q.device)
        Tm = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False, unitriangular=True)
        U = Tm @ (bc[..., None] * Vc)
        W = Tm @ (bc[..., None] * Kc * torch.exp(G))
        X = U - W @ S
        o[:, :, t0:t1] = scale * (Qc * torch.exp(G)) @ S + M @ X
        Gl = G[:, :, -1]  # [B,H,K]
        S = torch.exp(Gl)[..., None] * S + (Kc * torch.exp(Gl[:, :, None] - G)).transpose(-1, -2) @ X
    final = S.transpose(-1, -2).contiguous() if output_final_state else None
    return o.transpose(1, 2).contiguous(), final


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    """The fp64 chunked reference under the candidate interface (outputs in float64)."""
    return chunked(q, k, v, g, beta, A_log, dt_bias, scale=scale, lower_bound=lower_bound,
                   initial_state=initial_state, output_final_state=output_final_state)
