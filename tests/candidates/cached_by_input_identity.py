"""Planted: caches results by the identity of the input tensors, so inputs changed
in place get a stale answer. Only the input-dependence check can catch it."""

import importlib.util
from pathlib import Path

# Candidates may not import kdatui: the plain-torch candidate travels beside this file
# (tests/planting.py plants each of these as a folder with kernel.py and torch_chunked.py).
_spec = importlib.util.spec_from_file_location(
    "planted_torch_chunked", Path(__file__).resolve().parent / "torch_chunked.py")
_good = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_good)

_cache = {}


def kda_forward(q, *args, **kwargs):
    key = (id(q), kwargs.get("output_final_state", True))
    if key not in _cache:
        # keep q alive, so its id cannot be reused by another tensor
        _cache[key] = (q, _good.kda_forward(q, *args, **kwargs))
    o, final = _cache[key][1]
    return o.clone(), (None if final is None else final.clone())
