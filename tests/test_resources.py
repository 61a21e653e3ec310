"""bench/resources.py: a family variant compiled for sm_90 on a machine without a GPU, with
the launches of its own kda_forward, and its registers, spills and instruction mix read off.
Run as a subprocess: the script compiles for the GPU, so it drops TRITON_INTERPRET."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, str(ROOT / "bench" / "resources.py"), *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_split_compiles_both_stages_for_hopper_and_reports_them():
    r = _run("split", '{"prep_warps": 2}', "--shape", "1,64,2,32,32", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    kernels = {k["kernel"]: k for k in json.loads(r.stdout)["kernels"]}
    assert set(kernels) == {"_kda_chunk_kernel", "_kda_state_kernel_t"}
    prep = kernels["_kda_chunk_kernel"]
    assert prep["num_warps"] == 2 and 0 < prep["registers"] <= 255 and prep["spill_bytes"] >= 0
    assert prep["instructions"] > 100 and prep["mix"]["BAR"] > 0 and prep["mix"]["LDG"] > 0


def test_an_unknown_tunable_is_refused_before_compiling():
    r = _run("fused", '{"WARPS": 4}')
    assert r.returncode != 0 and "unknown tunable 'WARPS'" in r.stderr


def test_wide_compiles_its_tma_walk_and_keeps_the_prep_under_its_register_cap():
    """The default walk takes TMA descriptors (a `tensordesc` argument to the compiler) and
    the parallel stage is capped at 128 registers (four programs an SM at 4 warps)."""
    r = _run("wide", "{}", "--shape", "1,64,2,32,32", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    kernels = {k["kernel"]: k for k in json.loads(r.stdout)["kernels"]}
    assert set(kernels) == {"_wide_prep_kernel", "_wide_state_kernel"}
    assert kernels["_wide_prep_kernel"]["maxnreg"] == 128 and kernels["_wide_prep_kernel"]["registers"] <= 128
