"""Planted fault: raises an exception from inside the call."""


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    raise ValueError("planted fault: this kernel always raises")
