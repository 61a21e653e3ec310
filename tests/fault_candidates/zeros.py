"""Not a fault but a wrong answer: the right structure, all zeros. Must be FAIL, not ERROR."""

import torch


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = torch.zeros(B, T, H, V, dtype=torch.bfloat16, device=q.device)
    final = torch.zeros(B, H, V, K, dtype=torch.float32, device=q.device)
    return o, final if output_final_state else None
