"""The Triton kernel families (fused, split) through the Triton interpreter: the whole
contract on every CPU-task shape, every tunable's values on a small shape, edge shapes, and
self-containment (a family file copied alone, or rendered with another CONFIG, still runs)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch

from kdatui.engine.checks import run_checks
from kdatui.engine.probes import make_probe
from kdatui.engine.task import Shape, load_task
from kdatui.kernels.kda import families, reference

ROOT = Path(__file__).resolve().parents[1]
CPU_TASK = load_task(ROOT / "tasks" / "kda_fwd_cpu.toml")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"cand_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rms(x, y) -> float:
    return float((x.double() - y).norm() / y.norm())


@pytest.mark.parametrize("family", ["fused", "split"])
@pytest.mark.parametrize("shape", list(CPU_TASK.shapes))
def test_family_passes_the_whole_contract_on_every_cpu_shape(family, shape, tmp_path):
    cand = tmp_path / family / "kernel.py"  # copied alone into a folder, as the search does
    cand.parent.mkdir()
    shutil.copy(families.FAMILIES[family], cand)
    report = run_checks(CPU_TASK, CPU_TASK.shape(shape), str(cand.parent), device="cpu")
    bad = report.first_problem()
    assert report.verdict == "PASS", f"{bad.probe}: {bad.reason}" if bad else report.verdict
    assert [r.probe for r in report.results][-1] == "input_dependence"
    assert any(r.probe == "holdout_4" for r in report.results)


def _variants(family: str):
    """Every allowed value of every tunable, one at a time over the default."""
    for key, values in families.params(family).items():
        for v in values:
            if v != families.default_config(family)[key]:
                yield {key: v}


@pytest.mark.parametrize("family,config", [(f, c) for f in ("fused", "split") for c in _variants(f)],
                         ids=lambda x: x if isinstance(x, str) else "-".join(f"{k}={v}" for k, v in x.items()))
def test_every_tunable_value_computes_kda(family, config):
    shape = Shape("s", 1, 70, 2, 32, 32)  # T not a multiple of any chunk size
    p = make_probe("saturated", shape, CPU_TASK.contract)
    ro, rs = reference.chunked(*p.args(), **p.kwargs())
    o, s = families.module(family).kda_forward(*p.args(), **p.kwargs(), config=config)
    assert _rms(o, ro) < 0.03 and _rms(s, rs) < 0.03


@pytest.mark.parametrize("family", ["fused", "split"])
@pytest.mark.parametrize("dims", [(1, 1, 2, 16, 16), (2, 33, 1, 16, 64), (1, 40, 3, 64, 16), (1, 17, 2, 128, 32)],
                         ids=["T1", "K16-V64", "K64-V16", "K128-V32"])
def test_edge_shapes_and_unequal_k_v(family, dims):
    shape = Shape("s", *dims)
    p = make_probe("random", shape, CPU_TASK.contract)
    ro, rs = reference.chunked(*p.args(), **p.kwargs())
    mod = families.module(family)
    o, s = mod.kda_forward(*p.args(), **p.kwargs())
    assert o.shape == ro.shape and o.dtype == torch.bfloat16 and s.dtype == torch.float32
    assert _rms(o, ro) < 0.03 and _rms(s, rs) < 0.03
    o2, s2 = mod.kda_forward(*p.args(), **{**p.kwargs(), "output_final_state": False})
    assert s2 is None and _rms(o2, ro) < 0.03


@pytest.mark.parametrize("family", ["fused", "split"])
def test_no_initial_state_means_zeros(family):
    shape = Shape("s", 1, 24, 2, 32, 32)
    p = make_probe("strong", shape, CPU_TASK.contract)  # this probe carries no initial state
    assert p.initial_state is None
    ro, rs = reference.token_loop(*p.args(), **p.kwargs())
    o, s = families.module(family).kda_forward(*p.args(), **p.kwargs())
    assert _rms(o, ro) < 0.03 and _rms(s, rs) < 0.03


@pytest.mark.parametrize("family,config", [("fused", {"CHUNK": 32, "BV": 16}), ("split", {"CHUNK": 32, "BV": 16}),
                                           ("wide", {"CHUNK": 64, "BV": 16})])
def test_a_rendered_variant_is_a_self_contained_candidate(family, config, tmp_path):
    path = tmp_path / "kernel.py"
    path.write_text(families.render(family, config))
    assert families.config_of(path.read_text()) == families.validate(family, config)
    mod = _load(path)
    assert mod.CONFIG["CHUNK"] == config["CHUNK"] and callable(mod.kda_forward)
    p = make_probe("boundary", Shape("s", 1, 50, 2, 32, 32), CPU_TASK.contract)
    ro, _ = reference.chunked(*p.args(), **p.kwargs())
    o, _ = mod.kda_forward(*p.args(), **p.kwargs())
    assert _rms(o, ro) < 0.03


def test_rendering_rejects_unknown_tunables_and_values():
    with pytest.raises(ValueError, match="unknown tunable 'BK'"):
        families.render("split", {"BK": 32})
    with pytest.raises(ValueError, match="CHUNK = 48 not allowed"):
        families.render("fused", {"CHUNK": 48})


def test_share_auto_only_where_every_program_fits_at_once():
    fused = families.module("fused")
    assert fused._share(32, 128, 8, 132) == 4  # H=32 on an H200: 32 x 4 = 128 programs <= 132 SMs
    assert fused._share(64, 128, 8, 132) == 2
    assert fused._share(96, 128, 8, 132) == 1  # 192 programs would not all be resident
    assert fused._share(16, 64, 8, 132) == 4  # V-blocks of at least 16 columns
    assert fused._share(32, 128, 2, 132) == 2  # a divisor of the group


def test_a_forced_share_is_refused_in_the_interpreter():
    # the interpreter runs programs one after another: a program waiting for its sibling
    # would never return, so the kernel refuses instead of hanging
    p = make_probe("random", Shape("s", 1, 40, 1, 32, 32), CPU_TASK.contract)
    with pytest.raises(ValueError, match="_share=2 needs a GPU"):
        families.module("fused").kda_forward(*p.args(), **p.kwargs(), config={"_share": 2})
