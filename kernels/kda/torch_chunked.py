"""KDA forward in plain torch (float32): the CPU baseline and the simplest passing candidate.

Self-contained: copied alone into a folder as `kernel.py`, it still runs. The math is the
chunked form of KDA.md §3 with exact exponent differences inside each chunk (so no
exp(G_i) * exp(-G_j) overflow); the chunks are walked in order, vectorized over B and H.
"""

import torch

CHUNK = 32


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else float(scale)
    f32 = torch.float32
    dev = q.device

    def heads_first(x):  # [B, T, H, D] -> [B, H, T, D], float32
        return x.to(f32).transpose(1, 2).contiguous()

    qf, kf, vf, gf = (heads_first(x) for x in (q, k, v, g))
    qn = qf / torch.sqrt((qf * qf).sum(-1, keepdim=True) + 1e-6)
    kn = kf / torch.sqrt((kf * kf).sum(-1, keepdim=True) + 1e-6)
    gate = torch.exp(A_log.to(f32))[None, :, None, None] * (gf + dt_bias.to(f32)[None, :, None, :])
    a = lower_bound * torch.sigmoid(gate)  # [B, H, T, K]
    b = torch.sigmoid(beta.to(f32)).transpose(1, 2)  # [B, H, T]

    if initial_state is None:
        S = torch.zeros(B, H, K, V, dtype=f32, device=dev)
    else:
        S = initial_state.to(f32).transpose(-1, -2).contiguous()  # [B, H, K, V]
    o = torch.empty(B, H, T, V, dtype=f32, device=dev)
    for t0 in range(0, T, CHUNK):
        t1 = min(t0 + CHUNK, T)
        C = t1 - t0
        Qc, Kc, Vc, bc = qn[:, :, t0:t1], kn[:, :, t0:t1], vf[:, :, t0:t1], b[:, :, t0:t1]
        G = torch.cumsum(a[:, :, t0:t1], dim=2)
        lower = torch.tril(torch.ones(C, C, dtype=torch.bool, device=dev))
        E = torch.exp((G[:, :, :, None, :] - G[:, :, None, :, :]).masked_fill(~lower[..., None], float("-inf")))
        KE = Kc[:, :, None, :, :] * E  # [B, H, C(i), C(j), K]: k_j * exp(G_i - G_j)
        A = bc[..., None] * torch.tril((KE * Kc[:, :, :, None, :]).sum(-1), diagonal=-1)
        M = scale * (KE * Qc[:, :, :, None, :]).sum(-1)
        eye = torch.eye(C, dtype=f32, device=dev)
        Tinv = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False, unitriangular=True)
        eG = torch.exp(G)
        U = Tinv @ (bc[..., None] * Vc)
        W = Tinv @ (bc[..., None] * Kc * eG)
        X = U - W @ S
        o[:, :, t0:t1] = scale * (Qc * eG) @ S + M @ X
        Gl = G[:, :, -1]
        S = torch.exp(Gl)[..., None] * S + (Kc * torch.exp(Gl[:, :, None] - G)).transpose(-1, -2) @ X
    o = o.transpose(1, 2).to(torch.bfloat16).contiguous()
    final = S.transpose(-1, -2).contiguous() if output_final_state else None
    return o, final
