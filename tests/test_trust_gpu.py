"""A timer the candidate cannot bend, on the GPU (issue 13; marker `gpu`): a candidate that
replaces the CUDA event timing is SUSPECT; one that hides its work on a side stream is
credited the judge's wall time; neither beats the honest split it wraps beyond the noise.
Run on the device machine: `python -m pytest -m gpu tests/test_trust_gpu.py`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kdatui.engine.evaluator import LocalEvaluator, visible_devices
from kdatui.engine.task import Shape, load_task
from planting import attack

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[1]
# Large enough that split is GPU-bound (its host cost, ~0.2 ms a call, stays under its GPU time).
SHAPE = Shape(name="b1_t8192_h32", B=1, T=8192, H=32, K=128, V=128)


@pytest.fixture(scope="module")
def task():
    t = load_task(ROOT / "tasks" / "kda_fwd_b1_t8192_h96.toml")
    contract = replace(t.contract, probes=["random", "saturated"], holdout=0, input_dependence=False)
    bench = replace(t.bench, baseline=str(ROOT / "kernels" / "kda" / "split.py"), trials=3, repeats=10)
    return replace(t, shapes={SHAPE.name: SHAPE}, primary_shape=SHAPE.name, contract=contract, bench=bench,
                   path=None)


@pytest.fixture(scope="module")
def evaluator():
    with LocalEvaluator(devices=visible_devices()[:1], timeout_s=600) as ev:
        yield ev


@pytest.fixture(scope="module")
def honest(evaluator, task):
    [ev] = evaluator.evaluate(task, str(ROOT / "kernels" / "kda" / "split.py"))
    assert ev.verdict == "PASS", ev.reason
    assert not ev.timing.flags, ev.timing.flags
    return ev


def _no_better(ev, honest):
    limit = honest.speedup * (1 + max(honest.timing.noise, ev.timing.noise, 0.05))
    assert ev.speedup <= limit, (ev.speedup, limit)


def test_replaced_cuda_event_timing_is_suspect_and_not_faster(evaluator, task, honest):
    [ev] = evaluator.evaluate(task, attack("patch_cuda_events"))
    assert ev.checks.passed, ev.reason
    assert ev.verdict == "SUSPECT" and "elapsed_time was replaced" in ev.reason, ev.reason
    _no_better(ev, honest)


def test_work_on_a_side_stream_is_credited_the_wall_time(evaluator, task, honest):
    [ev] = evaluator.evaluate(task, attack("side_stream"))
    assert ev.checks.passed, ev.reason
    assert ev.timing is not None
    assert ev.timing.flags and "wall-bound" in ev.timing.flags[0], (ev.verdict, ev.reason, ev.timing.flags)
    _no_better(ev, honest)


def test_honest_split_against_itself_is_even(honest):
    assert abs(honest.speedup - 1.0) <= max(honest.timing.noise, 0.02)
