"""Baselines a candidate is timed against (KDA.md §6, DESIGN.md "The evaluator").

`fla`: fla-core's Triton `chunk_kda` with FlashKDA dispatch off, the gate, L2 norm and
beta sigmoid computed in-kernel, V-first state, final state written — the same work the
candidate interface asks for. `torch`: the plain-torch candidate. Anything else names a
candidate path (a project kernel) used as the baseline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable


@dataclass
class Baseline:
    name: str  # "fla", "torch", or the candidate path
    fn: Callable
    note: str = ""


def package_version(dist: str, missing: str = "not installed") -> str:
    """An installed distribution's version, read from its metadata without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return missing


def fla_available() -> bool:
    try:
        import fla.ops.kda  # noqa: F401
    except Exception:
        return False
    return True


def fla_kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                    initial_state=None, output_final_state=True):
    os.environ.setdefault("FLA_FLASH_KDA", "0")
    import torch
    from fla.ops.kda import chunk_kda

    with torch.inference_mode():
        return chunk_kda(
            q, k, v, g, beta, scale=scale, initial_state=initial_state,
            output_final_state=output_final_state, use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, safe_gate=True,
            lower_bound=lower_bound, state_v_first=True, A_log=A_log, dt_bias=dt_bias.reshape(-1),
        )


def torch_kda_forward(*args, **kwargs):
    from kdatui.kernels.kda import torch_chunked

    return torch_chunked.kda_forward(*args, **kwargs)


def resolve(requested: str, device: str) -> Baseline:
    """The baseline to time against: `fla` when requested and importable on a GPU;
    otherwise the named kernel; on the CPU (or without fla) the torch candidate."""
    if requested == "fla" and device.startswith("cuda") and fla_available():
        return Baseline("fla", fla_kda_forward, "fla-core chunk_kda (Triton, FLA_FLASH_KDA=0)")
    if requested not in ("fla", "torch"):
        from . import candidate

        return Baseline(requested, candidate.load(requested).kda_forward, "project kernel")
    note = "torch candidate (fla-core not importable)" if requested == "fla" else "torch candidate"
    if requested == "fla" and not device.startswith("cuda"):
        note = "torch candidate (CPU run)"
    return Baseline("torch", torch_kda_forward, note)
