"""Planted: o allocated with torch.empty and its last element never written."""

import importlib.util
from pathlib import Path

import torch

# Candidates may not import kdatui: the plain-torch candidate travels beside this file
# (tests/planting.py plants each of these as a folder with kernel.py and torch_chunked.py).
_spec = importlib.util.spec_from_file_location(
    "planted_torch_chunked", Path(__file__).resolve().parent / "torch_chunked.py")
_good = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_good)


def kda_forward(*args, **kwargs):
    ref, final = _good.kda_forward(*args, **kwargs)
    o = torch.empty(ref.shape, dtype=ref.dtype, device=ref.device)
    o.view(-1)[:-1] = ref.view(-1)[:-1]
    return o, final
