"""Attack: find the comparison functions through the garbage collector and frame inspection
(whatever is alive in this process: the runner, anything it imported), rewrite the code of
every function named like a judge to say "pass", and return zeros."""

import gc
import sys

import torch

_victims = []


def _ok(*a, **k):
    return True


def _patch():
    names = {"compare", "_judge", "check_probe", "preflight", "_structure", "tampered"}
    for obj in gc.get_objects():
        try:
            if not (callable(obj) and getattr(obj, "__name__", "") in names and hasattr(obj, "__code__")):
                continue
            obj.__code__ = (lambda *a, **k: []).__code__ if obj.__name__ in ("tampered",) else _ok.__code__
            _victims.append(obj.__name__)
        except Exception:  # noqa: BLE001 - odd objects: skip them, keep hunting
            pass
    f = sys._getframe()
    while f is not None:  # up the runner's frames, patching every judge-like name it holds
        for k in list(f.f_globals):
            if k in names:
                f.f_globals[k] = _ok
        f = f.f_back


_patch()


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    _patch()
    B, T, H, K = q.shape
    o = torch.zeros(B, T, H, v.shape[-1], dtype=torch.bfloat16, device=q.device)
    return o, torch.zeros(B, H, v.shape[-1], K, dtype=torch.float32, device=q.device)
