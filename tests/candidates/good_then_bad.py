"""Planted: correct for the first 3 calls, then o is scaled by 1.5."""

import importlib.util
from pathlib import Path

# Candidates may not import kdatui: the plain-torch candidate travels beside this file
# (tests/planting.py plants each of these as a folder with kernel.py and torch_chunked.py).
_spec = importlib.util.spec_from_file_location(
    "planted_torch_chunked", Path(__file__).resolve().parent / "torch_chunked.py")
_good = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_good)

_calls = 0


def kda_forward(*args, **kwargs):
    global _calls
    _calls += 1
    o, final = _good.kda_forward(*args, **kwargs)
    if _calls > 3:
        o = o * 1.5
    return o, final
