"""Planted fault: allocates torch tensors without bound (1 GiB at a time, never freed).
torch's CPU allocator reports exhaustion as a RuntimeError ("can't allocate memory"), not
a MemoryError; the evaluator must still call it running out of memory."""

import torch


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    hoard = []
    while True:
        hoard.append(torch.empty(1 << 30, dtype=torch.uint8, device=q.device))
