"""Planted fault: calls sys.exit(0) (SystemExit is not an Exception: it slips past `except Exception`)."""

import sys


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    sys.exit(0)
