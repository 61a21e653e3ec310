"""Planted fault: returns o with the head and time axes swapped ([B, H, T, V])."""

import torch


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = torch.zeros(B, H, T, V, dtype=torch.bfloat16, device=q.device)
    final = torch.zeros(B, H, V, K, dtype=torch.float32, device=q.device)
    return o, final
