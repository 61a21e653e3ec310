"""The runner's staging set (engine/runner.py): on a GPU every call's inputs are copied from
the arena into the executor's own memory first. Driven here on the CPU, with staging forced
on, in this process: the candidate reads the staging set, its in-place changes reach the
arena the judge reads, and an output in the staging memory is refused as aliasing."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from kdatui.engine import runner as runner_mod
from kdatui.engine.arena import Arena
from kdatui.engine.probes import make_probe
from kdatui.engine.task import Shape

SHAPE = Shape("s", 1, 20, 2, 16, 16)

CANDIDATE = '''
import torch
from kdatui.engine import baselines


def kda_forward(q, k, v, g, beta, A_log, dt_bias, **kw):
    kda_forward.seen.append((q.data_ptr(), q.clone()))
    o, final = baselines.torch_kda_forward(q, k, v, g, beta, A_log, dt_bias, **kw)
    if kda_forward.mutate:
        q.add_(1.0)
    return (v if kda_forward.alias else o.to(torch.bfloat16)), final


kda_forward.seen, kda_forward.mutate, kda_forward.alias = [], False, False
'''


@pytest.fixture
def staged(tmp_path, cpu_task):
    (tmp_path / "kernel.py").write_text(CANDIDATE)
    arena = Arena("cpu", SHAPE.dims(), 2)
    p = make_probe("random", SHAPE, cpu_task.contract, "cpu")
    arena.put(1, p)
    r = runner_mod.Runner("cpu", channel=None)
    r.stage_inputs = True
    r.open_arena(arena.message(), [os.dup(arena.fd)])
    r.load(str(tmp_path / "kernel.py"), str(tmp_path))
    try:
        yield r, arena, p
    finally:  # the runner loaded the candidate into this process: nothing of it may stay (test_trust looks)
        r.close_arena()
        arena.close()
        sys.modules.pop("kdatui_candidate", None)
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))


def _msg(**kw):
    return {"set": 1, "init": True, "scale": SHAPE.K ** -0.5, "lower_bound": -5.0, "ofs": True, **kw}


def test_the_candidate_reads_the_staging_set_filled_from_its_arena_set(staged):
    r, arena, p = staged
    assert r.call(_msg())["event"] == "done"
    ptr, q = r.fn.seen[-1]
    assert ptr == r.stage["q"].data_ptr() and ptr != arena.inputs[1]["q"].data_ptr()
    assert torch.equal(q, p.q)
    o, final = arena.take(1)
    assert torch.isfinite(o.float()).all() and final is not None


def test_an_in_place_change_to_the_staging_set_reaches_the_arena(staged):
    r, arena, p = staged
    r.fn.mutate = True
    r.call(_msg())
    assert torch.equal(arena.inputs[1]["q"], p.q + 1.0)  # what the judge's changed_inputs compares


def test_an_output_in_the_staging_memory_is_refused_as_aliasing_an_input(staged):
    r, arena, p = staged
    r.fn.alias = True
    with pytest.raises(runner_mod.Fault, match="shares memory with the input v"):
        r.call(_msg())


def test_a_batch_with_staging_calls_each_set_on_its_own_inputs(staged, cpu_task):
    r, arena, p = staged
    arena.put(0, make_probe("saturated", SHAPE, cpu_task.contract, "cpu"))
    ans = r.batch({**_msg(), "sets": [0, 1]})
    assert len(ans["ms"]) == 2 and ans["tamper"] == []
    assert torch.equal(r.fn.seen[-2][1], arena.inputs[0]["q"]) and torch.equal(r.fn.seen[-1][1], p.q)
