"""GPU tests (the `gpu` marker; skipped without CUDA): both kernel families pass the whole
contract at every shape of the general task, and the evaluator times them against the
task's baseline. Run on the device machine: `python -m pytest -m gpu -q`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kdatui.engine.checks import run_checks
from kdatui.engine.task import load_task
from kdatui.kernels.kda import families

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[1]
GENERAL = load_task(ROOT / "tasks" / "kda_fwd_general.toml")


@pytest.fixture(scope="module")
def references():
    return {}  # shape -> the probes' fp64 references, shared by the two families


@pytest.mark.parametrize("shape", list(GENERAL.shapes))
@pytest.mark.parametrize("family", ["split", "fused"])
def test_family_passes_the_whole_contract_on_the_gpu(family, shape, references):
    refs = references.setdefault(shape, {})
    if len(references) > 1:  # keep one shape's references in GPU memory at a time
        for other in [s for s in references if s != shape]:
            del references[other]
    report = run_checks(GENERAL, GENERAL.shape(shape), str(families.FAMILIES[family]), device="cuda",
                        references=refs)
    bad = report.first_problem()
    assert report.passed, f"{bad.probe}: {bad.reason}" if bad else report.verdict


def test_the_evaluator_times_split_against_the_baseline_at_the_primary_shape():
    from kdatui.engine.evaluator import make_evaluator

    task = load_task(ROOT / "tasks" / "kda_fwd_b1_t8192_h96.toml")
    with make_evaluator() as ev:
        [e] = ev.evaluate(task, families.FAMILIES["split"])
    assert e.verdict == "PASS", e.reason
    assert e.timing.timer == "cuda_event" and e.speedup > 0 and e.device != "cpu"
