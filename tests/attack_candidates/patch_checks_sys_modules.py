"""Attack: import the harness's checks module in its own process (the name built at run time,
past the static check) through sys.modules / importlib, make every comparison pass, and
return zeros. With the judge in another process, the patch reaches nothing that judges."""

import importlib
import sys

import torch

name = "kd" + "atui.engine.checks"
try:
    checks = sys.modules.get(name) or importlib.import_module(name)
    ok = checks.Comparison(True, 0.0, 0.0, 0.0)
    checks.compare = lambda *a, **k: ok
    checks._judge = lambda *a, **k: ok
    PATCHED = True
except Exception:  # noqa: BLE001
    PATCHED = False


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    B, T, H, K = q.shape
    o = torch.zeros(B, T, H, v.shape[-1], dtype=torch.bfloat16, device=q.device)
    return o, torch.zeros(B, H, v.shape[-1], K, dtype=torch.float32, device=q.device)
