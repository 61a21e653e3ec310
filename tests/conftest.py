"""Shared fixtures: an isolated config dir (the holdout salt never lands in ~), the
Triton interpreter on, the CPU task, and a tiny task for fast checks."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kdatui.engine.task import Shape, Task, load_task

TASKS = Path(__file__).resolve().parents[1] / "tasks"

# The tests' tensors are tiny: intra-op threads only add overhead, and on a busy 2-core
# machine their spin-waits made the suite ~10x slower (5 s alone, 55 s under load).
torch.set_num_threads(1)

# Without a GPU, Triton kernels run through the interpreter. It must be on before any kernel
# module is imported (also at collection time): triton.jit decides when it decorates.
HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    """Every test gets its own config dir (so the holdout salt is created there, never in
    the user's ~/.config) and runs Triton through the interpreter."""
    config = tmp_path_factory.mktemp("kdatui-config")
    monkeypatch.setenv("KDATUI_CONFIG_DIR", str(config))
    if not HAS_GPU:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # likewise for worker subprocesses
    yield config


@pytest.fixture(autouse=True)
def fresh_candidate_modules():
    """The candidate loader caches modules by path and content; stateful planted candidates
    (caches, call counters, seeded coin flips) must start fresh in every test."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("kdatui_candidate_"):
            del sys.modules[name]


@pytest.fixture
def cpu_task() -> Task:
    return load_task(TASKS / "kda_fwd_cpu.toml")


TINY_PROBES = ["random", "saturated", "strong", "boundary", "correlated"]


@pytest.fixture
def tiny_shape() -> Shape:
    # T > 64 so a 64-token chunk is full (the factored-exponent trap needs ~55 tokens of
    # boundary decay in one chunk), and T not a multiple of the chunk.
    return Shape(name="tiny", B=1, T=80, H=2, K=16, V=16)


@pytest.fixture
def tiny_task(cpu_task, tiny_shape) -> Task:
    """The CPU task cut down to one tiny shape, a few probes and one holdout probe:
    enough to catch each planted fault in well under a second."""
    contract = replace(cpu_task.contract, probes=list(TINY_PROBES), holdout=1)
    return replace(cpu_task, name="kda_fwd_tiny", shapes={tiny_shape.name: tiny_shape},
                   primary_shape=tiny_shape.name, contract=contract, path=None)


@pytest.fixture
def salt() -> bytes:
    return bytes(range(32))
