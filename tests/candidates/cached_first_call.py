"""Planted: computes once, then returns the first call's outputs whatever the inputs."""

import importlib.util
from pathlib import Path

# Candidates may not import kdatui: the plain-torch candidate travels beside this file
# (tests/planting.py plants each of these as a folder with kernel.py and torch_chunked.py).
_spec = importlib.util.spec_from_file_location(
    "planted_torch_chunked", Path(__file__).resolve().parent / "torch_chunked.py")
_good = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_good)

_first = None


def kda_forward(*args, **kwargs):
    global _first
    if _first is None:
        kwargs["output_final_state"] = True
        _first = _good.kda_forward(*args, **kwargs)
    return _first[0].clone(), _first[1].clone()
