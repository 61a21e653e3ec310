"""Planted GPU fault: a Triton kernel that stores far outside any allocation, so the GPU
raises "an illegal memory access was encountered". That error is sticky: the CUDA context
of the process is unusable afterwards, and the evaluator must replace the worker.

The outputs are allocated (right shapes and dtypes) before the wild store, so the fault is
the only thing wrong with this candidate. GPU only: the Triton interpreter on the CPU
would fault on the host instead.
"""

import torch
import triton
import triton.language as tl

# 2**40 elements past the output: terabytes beyond any allocation on any current GPU.
WILD_OFFSET = 1 << 40


@triton.jit
def _wild_store(out_ptr, offset, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK).to(tl.int64)
    tl.store(out_ptr + offset + i, tl.zeros([BLOCK], dtype=tl.float32))


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = torch.zeros(B, T, H, V, dtype=torch.bfloat16, device=q.device)
    final = torch.zeros(B, H, V, K, dtype=torch.float32, device=q.device)
    _wild_store[(1,)](final, WILD_OFFSET, BLOCK=128)
    return o, (final if output_final_state else None)
