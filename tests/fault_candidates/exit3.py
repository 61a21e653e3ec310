"""Planted fault: leaves the process at once with status 3 (no exception, no cleanup)."""

import os


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    os._exit(3)
