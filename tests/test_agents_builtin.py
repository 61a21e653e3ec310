"""The built-in agent: seeds first, a bandit that keeps every family in play, mutations of
frontier members with a reason per change, never the same config twice, and real rendered
candidates."""

from __future__ import annotations

import collections
import importlib.util
import random
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kdatui.engine.agents.base import AgentContext, AttemptView, MemberView, Plan
from kdatui.engine.agents.builtin import (BuiltinAgent, change_text, config_from_name, config_name, default_config,
                                          diff, family_params, neighbours, render)
from kdatui.kernels.kda import families, torch_chunked


def ctx_of(task, members=(), history=(), seed=0, rng=None, device="cuda") -> AgentContext:
    return AgentContext(task=task, run_id="run-1", members=list(members), history=list(history), notes=[],
                        feedback=[], log=lambda line: None, rng=rng or random.Random(seed), device=device)


def key(family: str, config: dict) -> tuple:
    return family, tuple(sorted({**default_config(family), **config}.items()))


class Simulation:
    """Plans fed back with synthetic results: `speed(family, config)` is the primary-shape
    speedup (None: the attempt fails its checks); the frontier keeps the fastest member
    per family, named as the plan named it."""

    def __init__(self, task, speed, agent=None, seed=0, device="cuda"):
        self.task, self.speed, self.device = task, speed, device
        self.agent = agent or BuiltinAgent()
        self.rng = random.Random(seed)
        self.history: list[AttemptView] = []
        self.members: dict[str, MemberView] = {}
        self.plans: list[Plan] = []

    def step(self) -> Plan | None:
        plan = self.agent.plan(ctx_of(self.task, self.members.values(), self.history, rng=self.rng,
                                      device=self.device))
        if plan is None:
            return None
        self.plans.append(plan)
        full = {**default_config(plan.family), **plan.config}
        cells = {}
        for shape in self.task.shapes:
            sp = self.speed(plan.family, full, shape)
            cells[shape] = ({"verdict": "PASS", "speedup": sp, "ms": 1.0 / sp, "baseline_ms": 1.0, "noise": 0.01}
                            if sp is not None else {"verdict": "FAIL"})
        ok = all(c["verdict"] == "PASS" for c in cells.values())
        parent = f"frontier/{self.task.name}/{plan.parent}" if plan.parent else "base"
        self.history.append(AttemptView(id=len(self.history) + 1, family=plan.family, name=plan.name,
                                        parent=parent, status="passed" if ok else "failed",
                                        verdict="passed" if ok else "failed", idea=plan.idea, reason="",
                                        config=full, cells=cells))
        primary = self.task.primary_shape
        m = self.members.get(plan.family)
        if ok and (m is None or cells[primary]["speedup"] > m.cells[primary]["speedup"]):
            self.members[plan.family] = MemberView(name=plan.name, family=plan.family, idea=plan.idea,
                                                   config=full, cells=cells)
        return plan

    def run(self, n: int) -> list[Plan]:
        for _ in range(n):
            if self.step() is None:
                break
        return self.plans


def tuned_speed(family, config, shape=None):
    """A smooth landscape: split around 1.6x, fused around 0.8x; some precision choices fail."""
    if config["INV_DOT"] == "tf32x3" and config["INV"] == "doubling":
        return None
    base = 1.6 if family == "split" else 0.8
    bonus = {16: 0.0, 32: 0.05, 64: -0.1}[config["CHUNK"]] + {16: -0.1, 32: 0.03, 64: 0.0, 128: -0.05}[config["BV"]]
    bonus += 0.02 * (config["num_warps"] == 8) + 0.01 * config["num_stages"]
    return base * (1 + bonus)


# --------------------------------------------------------------------------- seeds and families

def test_seed_families_are_tried_first_with_their_default_config_from_the_base_commit(cpu_task):
    sim = Simulation(cpu_task, tuned_speed)
    first, second = sim.run(2)
    assert [(p.family, p.name, p.parent) for p in (first, second)] == [
        ("fused", "fused-default", None), ("split", "split-default", None)]
    assert first.idea == "fused: the family's measured default configuration (seed)"
    assert first.config == families.default_config("fused")


def test_both_families_get_attempts_and_no_config_repeats_over_200_plans(cpu_task):
    plans = Simulation(cpu_task, tuned_speed).run(200)
    assert len(plans) == 200
    keys = [key(p.family, p.config) for p in plans]
    assert len(set(keys)) == len(keys), "a configuration was planned twice"
    counts = collections.Counter(p.family for p in plans)
    assert counts["fused"] >= 40 and counts["split"] >= 40, counts


def test_a_slower_family_that_stops_improving_keeps_a_share_of_the_budget(cpu_task):
    # split keeps finding faster configs; fused is flat at 0.5x: never better than its seed
    def speed(family, config, shape=None):
        if family == "fused":
            return 0.5
        return 1.5 * (1 + 0.01 * (config["num_stages"] + config["BV"] / 16 + config["PREP_LOOP"]))
    plans = Simulation(cpu_task, speed).run(120)
    share = sum(p.family == "fused" for p in plans) / len(plans)
    assert share >= 0.2, f"the slower family got {share:.0%} of the attempts"


def test_a_family_with_no_passing_member_still_gets_tries(cpu_task):
    plans = Simulation(cpu_task, lambda f, c, s=None: None if f == "fused" else 1.5).run(100)
    fused = [p for p in plans if p.family == "fused"]
    assert len(fused) >= 20
    assert all(p.parent is None for p in fused), "no member to branch from: the base commit"
    assert any("no member yet" in p.idea for p in fused)


def test_plans_are_deterministic_given_the_rng(cpu_task):
    a = [p.name for p in Simulation(cpu_task, tuned_speed, seed=7).run(40)]
    b = [p.name for p in Simulation(cpu_task, tuned_speed, seed=7).run(40)]
    c = [p.name for p in Simulation(cpu_task, tuned_speed, seed=8).run(40)]
    assert a == b
    assert a != c


def test_a_task_can_start_a_family_from_a_detuned_seed(cpu_task):
    """`search.seed_configs`: the family's first attempt is the task's configuration over its
    default (bench/search_efficiency.py starts from one); a bad tunable names the key."""
    task = replace(cpu_task, search=replace(cpu_task.search, seeds=["split"],
                                            seed_configs={"split": {"prep_warps": 4, "num_stages": 2}}))
    [first] = Simulation(task, tuned_speed).run(1)
    assert first.config == {**default_config("split"), "prep_warps": 4, "num_stages": 2}
    assert first.name == config_name("split", first.config) and first.parent is None
    assert first.idea.endswith("(seed)") and "prep_warps" in first.idea
    bad = replace(task, search=replace(task.search, seed_configs={"split": {"prep_warp": 4}}))
    with pytest.raises(ValueError, match=r"search\.seed_configs\.split: split: unknown tunable 'prep_warp'"):
        Simulation(bad, tuned_speed).run(1)


def test_an_unknown_seed_family_is_a_clear_error(cpu_task):
    task = replace(cpu_task, search=replace(cpu_task.search, seeds=["fused", "splt"]))
    with pytest.raises(ValueError, match="'splt' is not a kernel family"):
        BuiltinAgent().plan(ctx_of(task))


def test_only_the_task_seed_families_are_searched(cpu_task):
    task = replace(cpu_task, search=replace(cpu_task.search, seeds=["split"]))
    plans = Simulation(task, tuned_speed).run(20)
    assert {p.family for p in plans} == {"split"}


# --------------------------------------------------------------------------- mutations and jumps

def test_mutations_change_one_or_two_tunables_of_a_member_and_say_why(cpu_task):
    sim = Simulation(cpu_task, tuned_speed)
    plans = sim.run(80)
    configs = {p.name: {**default_config(p.family), **p.config} for p in plans}
    mutations = [p for p in plans[2:] if p.parent and "jump" not in p.idea]
    assert len(mutations) >= 30
    for p in mutations:
        changes = diff(configs[p.parent], configs[p.name])
        assert 1 <= len(changes) <= 2, (p.name, changes)
        assert p.idea.startswith(f"{p.family}: ")
        for k, old, new in changes:
            assert f"{k} {old}->{new} " in p.idea
            vals = family_params(p.family)[k]
            assert new in neighbours(vals, old), f"{k}: {old}->{new} is not a neighbouring value"


def test_jumps_happen_and_branch_from_the_family_best(cpu_task):
    plans = Simulation(cpu_task, tuned_speed).run(100)
    jumps = [p for p in plans if "jump from" in p.idea]
    assert jumps, "the search never jumped"
    assert all(p.parent for p in jumps)


def test_every_tunable_change_has_a_reason_of_its_own():
    for family in families.FAMILIES:
        params = family_params(family)
        for k, values in params.items():
            for old in values:
                for new in neighbours(values, old):
                    text = change_text(family, k, old, new)
                    assert text.startswith(f"{k} {old}->{new} ")
                    assert "to see how it moves the time" not in text, (family, k, old, new)


@pytest.mark.parametrize("family", sorted(families.FAMILIES))
def test_on_the_cpu_no_plan_changes_a_tunable_the_interpreter_ignores(family, cpu_task):
    """num_warps, num_stages and the like change nothing the interpreter computes: a CPU
    search that moved them would evaluate the same kernel under another name."""
    from kdatui.engine.agents.builtin import interpreter_inert

    inert = interpreter_inert(family)
    task = replace(cpu_task, search=replace(cpu_task.search, seeds=[family]))
    default = default_config(family)
    cpu = Simulation(task, lambda f, c, s=None: 1.0 + 0.01 * len(diff(default, c)), device="cpu").run(60)
    assert cpu and all(p.config.get(k, default[k]) == default[k] for p in cpu for k in inert)
    if inert:  # on a GPU they are searched
        gpu = Simulation(task, lambda f, c, s=None: 1.0 + 0.01 * len(diff(default, c)), device="cuda").run(60)
        assert any(p.config.get(k, default[k]) != default[k] for p in gpu for k in inert)


def test_the_bv_reason_reads_like_the_design():
    assert change_text("split", "BV", 64, 32).startswith("BV 64->32 to double the recurrence programs")
    assert change_text("fused", "BV", 64, 128).startswith("BV 64->128 to halve the recurrence programs")


def test_with_several_shapes_it_sometimes_mutates_the_member_fastest_on_another_shape(cpu_task):
    primary = cpu_task.primary_shape
    other = next(s for s in cpu_task.shapes if s != primary)
    cells = lambda p, o: {s: {"verdict": "PASS", "speedup": p if s == primary else o}  # noqa: E731
                          for s in cpu_task.shapes}
    fast_here = MemberView("split-c32", "split", "", {**default_config("split"), "CHUNK": 32}, cells(2.0, 1.0))
    fast_there = MemberView("split-bv32", "split", "", {**default_config("split"), "BV": 32}, cells(1.5, 3.0))
    seeds = [AttemptView(i, f, f"{f}-default", "base", "passed", "passed", "", "", default_config(f),
                         cells(1.0, 1.0)) for i, f in enumerate(families.FAMILIES, 1)]
    agent = BuiltinAgent(jump_p=0.0)
    rng = random.Random(3)
    parents, other_shape = collections.Counter(), []
    for _ in range(60):
        p = agent.plan(ctx_of(cpu_task, [fast_here, fast_there], seeds, rng=rng))
        parents[p.parent] += 1
        if "the family's fastest at" in p.idea:
            other_shape.append(p)
    assert parents["split-c32"] > 0 and parents["split-bv32"] > 0
    assert other_shape and all(p.parent == "split-bv32" for p in other_shape)


def test_one_shape_scores_only_the_primary_shape(cpu_task, tiny_shape):
    one = replace(cpu_task, shapes={tiny_shape.name: tiny_shape}, primary_shape=tiny_shape.name)
    plans = Simulation(one, tuned_speed).run(60)
    assert all("fastest at" not in p.idea for p in plans)


# --------------------------------------------------------------------------- never twice

def test_configs_in_the_history_and_frontier_are_never_planned_again(cpu_task):
    space = {"split": {"BV": (32, 64), "num_warps": (4, 8)}, "fused": {"BV": (32, 128)}}
    # an earlier run evaluated split BV=32 (written partially, keys in another order) and
    # fused's default; a member holds split num_warps=8
    history = [
        AttemptView(1, "split", "split-bv32", "base", "failed", "failed", "", "", {"BV": 32}),
        AttemptView(2, "fused", "fused-default", "base", "passed", "passed", "", "",
                    dict(reversed(list(default_config("fused").items())))),
    ]
    member = MemberView("split-w8", "split", "", {**default_config("split"), "num_warps": 8}, {})
    agent = BuiltinAgent(space=space)
    rng = random.Random(0)
    planned = []
    while (p := agent.plan(ctx_of(cpu_task, [member], history, rng=rng))) is not None:
        planned.append(key(p.family, p.config))
        assert len(planned) < 10
    expected = {key("split", {}), key("split", {"BV": 32, "num_warps": 8}), key("fused", {"BV": 32})}
    assert set(planned) == expected and len(planned) == len(expected)


def test_when_every_family_is_exhausted_plan_returns_none(cpu_task):
    space = {"split": {"BV": (32, 64)}, "fused": {"num_warps": (4, 8)}}
    sim = Simulation(cpu_task, tuned_speed, agent=BuiltinAgent(space=space))
    plans = sim.run(50)
    assert sorted(p.name for p in plans) == ["fused-default", "fused-w4", "split-bv32", "split-default"]
    assert sim.step() is None


def test_an_exhausted_neighbourhood_leads_to_a_jump(cpu_task):
    space = {"split": {"BV": (16, 32, 64, 128), "CHUNK": (16, 32, 64)}, "fused": {"BV": (32, 64)}}
    plans = Simulation(cpu_task, tuned_speed, agent=BuiltinAgent(space=space, jump_p=0.0)).run(30)
    split = [p for p in plans if p.family == "split"]
    assert len(split) == 12, "every config of the 4 x 3 space, each once"
    assert any("jump from" in p.idea for p in split)


# --------------------------------------------------------------------------- names

def test_names_are_the_family_and_the_settings_that_differ_from_its_default():
    d = default_config("split")
    assert config_name("split", d) == "split-default"
    assert config_name("split", {**d, "BV": 32}) == "split-bv32"
    assert config_name("split", {**d, "CHUNK": 32, "BV": 32}) == "split-c32-bv32"
    shuffled = dict(reversed(list({**d, "BV": 32, "CHUNK": 32}.items())))
    assert config_name("split", shuffled) == "split-c32-bv32"
    assert config_name("fused", {**default_config("fused"), "num_warps": 4, "num_stages": 2}) == "fused-w4-s2"


def test_a_name_gives_its_config_back_so_archived_attempts_are_not_repeated(cpu_task):
    rng = random.Random(4)
    for family in families.FAMILIES:
        read_back = 0
        for _ in range(200):
            c = {k: v for k, v in default_config(family).items()}
            for k in rng.sample(sorted(c), rng.randint(1, 4)):
                c[k] = rng.choice(family_params(family)[k])
            n = config_name(family, c)
            back = config_from_name(family, n)
            if back is None:
                assert re.search(r"-h[0-9a-f]{6}$", n), n  # only a hashed long name cannot be read
            else:
                assert back == c, n
                read_back += 1
        assert read_back > 150
        assert config_from_name(family, f"{family}-default") == default_config(family)
    assert config_from_name("split", "split-claude-3") is None
    space = {"split": {"BV": (32, 64)}, "fused": {"BV": (32, 128)}}
    history = [AttemptView(i, f, n, "base", "passed", "passed", "", "", None)  # kernel.py archived: config None
               for i, (f, n) in enumerate([("fused", "fused-default"), ("split", "split-default"),
                                           ("split", "split-bv32")], 1)]
    plans = []
    agent = BuiltinAgent(space=space)
    while (p := agent.plan(ctx_of(cpu_task, history=history))) is not None:
        plans.append(p.name)
    assert plans == ["fused-bv32"]


def test_long_names_stay_short_and_distinct():
    rng = random.Random(1)
    names = {}
    for _ in range(300):
        c = {k: rng.choice(v) for k, v in family_params("split").items()}
        n = config_name("split", c)
        assert len(n) <= 48
        assert names.setdefault(n, c) == c, f"two configs named {n}"


# --------------------------------------------------------------------------- work: real candidates

def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"kdatui_candidate_builtin_{path.parent.name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("family,change", [("fused", {"CHUNK": 32, "BV": 32}), ("split", {"BV": 16, "SEQ": "kv"})])
def test_work_writes_a_self_contained_kernel_with_the_plans_config_and_an_idea(cpu_task, tmp_path, family, change):
    config = {**default_config(family), **change}
    plan = Plan(family=family, name=config_name(family, config), parent=f"{family}-default", config=config,
                idea=f"{family}: " + "; ".join(change_text(family, k, a, b)
                                               for k, a, b in diff(default_config(family), config)))
    cdir = tmp_path / family / "candidates" / cpu_task.name
    cdir.mkdir(parents=True)
    (cdir / "helper.py").write_text("raise ImportError('stale file of the parent')\n")
    (cdir / "timings.json").write_text("{}")
    lines = []
    ctx = replace(ctx_of(cpu_task), log=lines.append)
    result = BuiltinAgent().work(ctx, plan, tmp_path / family, cdir)
    assert result.ok and result.family == family and result.name == plan.name and result.idea == plan.idea
    assert sorted(p.name for p in cdir.iterdir()) == ["IDEA.md", "kernel.py"], "the parent's files are replaced"
    src = (cdir / "kernel.py").read_text()
    assert src == families.render(family, config)
    assert families.config_of(src) == config
    assert "kdatui" not in "".join(ln for ln in src.splitlines() if ln.startswith(("import", "from")))
    idea = (cdir / "IDEA.md").read_text().splitlines()
    assert idea[:3] == [f"family: {family}", f"parent: {family}-default", plan.idea]
    assert all(f"  {k} = {v!r}" in idea for k, v in config.items())
    assert lines and plan.name in lines[0]

    mod = _load(cdir / "kernel.py")  # loads alone, by path, and computes KDA
    g = torch.Generator().manual_seed(0)
    B, T, H, K, V = 1, 40, 1, 32, 32
    q, k, gate = (torch.randn(B, T, H, K, generator=g).bfloat16() for _ in range(3))
    v = torch.randn(B, T, H, V, generator=g).bfloat16()
    beta = torch.randn(B, T, H, generator=g).bfloat16()
    A_log = torch.log(torch.rand(H, generator=g) * 15 + 1)
    dt_bias = torch.randn(H, K, generator=g) * 0.1
    args = (q, k, v, gate, beta, A_log, dt_bias)
    o, s = mod.kda_forward(*args, scale=K ** -0.5, lower_bound=-5.0)
    o_ref, s_ref = torch_chunked.kda_forward(*args, scale=K ** -0.5, lower_bound=-5.0)
    assert (o.float() - o_ref.float()).norm() / o_ref.float().norm() < 0.03
    assert (s - s_ref).norm() / s_ref.norm() < 0.03


def test_render_without_importing_the_family_equals_families_render():
    rng = random.Random(2)
    for family in families.FAMILIES:
        assert family_params(family) == {k: tuple(v) for k, v in families.params(family).items()}
        assert default_config(family) == families.default_config(family)
        for _ in range(5):
            c = {k: rng.choice(v) for k, v in family_params(family).items()}
            assert render(family, c) == families.render(family, c)
    with pytest.raises(ValueError, match="not allowed"):
        render("split", {"BV": 48})


def test_a_plan_with_a_bad_config_is_a_failed_turn(cpu_task, tmp_path):
    plan = Plan(family="split", name="split-bv48", parent=None, idea="split: BV 48", config={"BV": 48})
    result = BuiltinAgent().work(ctx_of(cpu_task), plan, tmp_path, tmp_path / "c")
    assert not result.ok and "BV = 48 not allowed" in result.reason


def test_plan_is_cheap(cpu_task):
    import time

    sim = Simulation(cpu_task, tuned_speed)
    sim.run(150)
    t0 = time.perf_counter()
    sim.run(10)
    assert (time.perf_counter() - t0) / 10 < 0.05, "a plan with 150 attempts of history took over 50 ms"

