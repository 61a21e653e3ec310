"""Attack: return at once and compute in a background thread, so the call looks instant and
the work lands after the timer stopped (until the output is read). Fresh outputs are copied
by the runner and judged by the judge; the batch's wall time bounds what the timer missed."""

import threading

import torch

from _honest import honest


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = torch.zeros(B, T, H, V, dtype=torch.bfloat16, device=q.device)
    final = torch.zeros(B, H, V, K, dtype=torch.float32, device=q.device)
    args = [x.clone() for x in (q, k, v, g, beta, A_log, dt_bias)]
    init = None if initial_state is None else initial_state.clone()

    def work():
        ro, rf = honest.kda_forward(*args, scale=scale, lower_bound=lower_bound, initial_state=init,
                                    output_final_state=True)
        o.copy_(ro)
        final.copy_(rf)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    if not hasattr(kda_forward, "calls"):
        kda_forward.calls = 0
    kda_forward.calls += 1
    if kda_forward.calls <= 12:  # right while the checks watch (each call waited for) ...
        t.join()
    return o, (final if output_final_state else None)  # ... then deferred past the timer
