"""Planted: corrupts one element of o on a random third of its calls (a race)."""

import importlib.util
import random
from pathlib import Path

# Candidates may not import kdatui: the plain-torch candidate travels beside this file
# (tests/planting.py plants each of these as a folder with kernel.py and torch_chunked.py).
_spec = importlib.util.spec_from_file_location(
    "planted_torch_chunked", Path(__file__).resolve().parent / "torch_chunked.py")
_good = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_good)

_coin = random.Random(1234)


def kda_forward(*args, **kwargs):
    o, final = _good.kda_forward(*args, **kwargs)
    if _coin.random() < 1 / 3:
        o[0, 0, 0, 0] = 1000.0
    return o, final
