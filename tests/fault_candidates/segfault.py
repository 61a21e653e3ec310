"""Planted fault: reads address 0, so the worker dies of SIGSEGV inside the call."""

import ctypes


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    ctypes.string_at(0)
    raise AssertionError("unreachable: reading address 0 must crash")
