"""Planted: writes the final state into initial_state and returns that tensor."""

import importlib.util
from pathlib import Path

# Candidates may not import kdatui: the plain-torch candidate travels beside this file
# (tests/planting.py plants each of these as a folder with kernel.py and torch_chunked.py).
_spec = importlib.util.spec_from_file_location(
    "planted_torch_chunked", Path(__file__).resolve().parent / "torch_chunked.py")
_good = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_good)


def kda_forward(*args, initial_state=None, **kwargs):
    o, final = _good.kda_forward(*args, initial_state=initial_state, **kwargs)
    if initial_state is not None and final is not None:
        final = initial_state.copy_(final)
    return o, final
