"""GPU tests (the `gpu` marker; skipped without CUDA): both kernel families pass the whole
contract at every shape of the general task, and the evaluator times them against the
task's baseline. Run on the device machine: `python -m pytest -m gpu -q`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kdatui.engine.checks import run_checks
from kdatui.engine.probes import make_probe
from kdatui.engine.task import Shape, load_task
from kdatui.kernels.kda import families, reference

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


@pytest.mark.parametrize("share", [2, 4, 8])
@pytest.mark.parametrize("dims", [(1, 300, 3, 128, 128), (2, 77, 2, 64, 128), (1, 1, 1, 32, 64)],
                         ids=["T300", "B2-K64", "T1"])
def test_fused_with_shared_local_terms_matches_the_reference(share, dims):
    """SHARE: the V-block programs of a head split its local terms and wait for each other;
    forced here at shapes whose grid fits the GPU at once, with partial last groups."""
    shape = Shape("s", *dims)
    p = make_probe("random", shape, GENERAL.contract, device="cuda")
    cfg = {"GROUP": 8, "BV": 128, "num_warps": 8, "_share": share}
    if shape.V // share < 16:
        with pytest.raises(ValueError, match=f"_share={share} needs"):
            families.module("fused").kda_forward(*p.args(), **p.kwargs(), config=cfg)
        return
    ro, rs = reference.chunked(*p.args(), **p.kwargs())
    o, s = families.module("fused").kda_forward(*p.args(), **p.kwargs(), config=cfg)
    o1, s1 = families.module("fused").kda_forward(*p.args(), **p.kwargs(), config={**cfg, "_share": 0, "SHARE": "off"})
    rms = lambda x, y: float((x.double() - y.double()).norm() / y.double().norm())  # noqa: E731
    assert rms(o, ro) < 0.03 and rms(s, rs) < 0.03
    assert rms(o, o1) < 1e-2 and rms(s, s1) < 1e-2  # the same terms, computed by other programs
