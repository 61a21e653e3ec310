"""Planted fault: allocates without bound (256 MiB at a time, never freed).

numpy.empty reserves address space without touching it, so the executor's RLIMIT_AS turns
this into a MemoryError quickly, without pressing on the machine's physical memory."""

import numpy


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    hoard = []
    while True:
        hoard.append(numpy.empty(256 << 20, dtype=numpy.uint8))
