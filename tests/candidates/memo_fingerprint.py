"""Planted: remembers its output under a fingerprint of 64 sampled input elements (plus
shapes and pointers), as a candidate rewarded for speed would to answer repeated timed calls
from memory. It passes every probe (each changes all elements, so the fingerprint changes);
only a change the sample misses shows it, and fresh inputs for every timed call leave it
nothing to remember."""

import importlib.util
from pathlib import Path

import torch

# Candidates may not import kdatui: the plain-torch candidate travels beside this file
# (tests/planting.py plants each of these as a folder with kernel.py and torch_chunked.py).
_spec = importlib.util.spec_from_file_location(
    "planted_torch_chunked", Path(__file__).resolve().parent / "torch_chunked.py")
_good = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_good)

_memo = {}
HITS = [0]


def _fingerprint(tensors, scale, lower_bound, ofs):
    parts = [scale, lower_bound, ofs]
    for t in tensors:
        if t is None:
            parts.append(None)
            continue
        flat = t.reshape(-1)
        idx = torch.linspace(0, flat.numel() - 1, 16, device=flat.device).long()
        parts += [tuple(t.shape), t.data_ptr(), tuple(flat[idx].float().tolist())]
    return tuple(parts)


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    key = _fingerprint((q, k, v, g, initial_state), scale, lower_bound, output_final_state)
    if key in _memo:
        HITS[0] += 1
        o, final = _memo[key]
        return o.clone(), (None if final is None else final.clone())
    out = _good.kda_forward(q, k, v, g, beta, A_log, dt_bias, scale=scale, lower_bound=lower_bound,
                            initial_state=initial_state, output_final_state=output_final_state)
    _memo[key] = out
    return out[0].clone(), (None if out[1] is None else out[1].clone())
