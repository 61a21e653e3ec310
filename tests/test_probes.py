"""Each probe produces the inputs it claims to (KDA.md §5), deterministically, and the
holdout probes derive from a secret salt kept (mode 0600) in the user's config dir."""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

import pytest
import torch

from kdatui.engine import probes
from kdatui.engine.probes import log_decay, make_probe
from kdatui.engine.task import PROBES, Shape

# Long enough for two 128-token switch bands and more, small enough to stay fast.
SHAPE = Shape(name="probe_shape", B=2, T=300, H=2, K=32, V=32)
TOL = 1e-6


def probe(name, contract, shape=SHAPE, salt=bytes(range(32)), **kw):
    return make_probe(name, shape, contract, salt=salt, **kw)


def _is_floor(a, lb):
    return (a - lb).abs() <= TOL


def _is_zero(a):
    return a.abs() <= TOL


def test_saturated_probe_pins_every_log_decay_at_the_floor(cpu_task):
    p = probe("saturated", cpu_task.contract)
    a = log_decay(p)
    assert p.lower_bound == cpu_task.contract.lower_bound == -5.0
    assert _is_floor(a, p.lower_bound).all()


def test_strong_probe_decays_about_half_the_floor_on_every_channel(cpu_task):
    p = probe("strong", cpu_task.contract)
    assert torch.equal(p.A_log, torch.zeros_like(p.A_log))
    assert torch.equal(p.dt_bias, torch.zeros_like(p.dt_bias))
    frac = log_decay(p) / p.lower_bound
    assert abs(float(frac.mean()) - 0.5) < 0.02
    per_channel = frac.mean(dim=(0, 1))  # [H, K]
    assert ((per_channel - 0.5).abs() < 0.1).all()
    assert not _is_floor(log_decay(p), p.lower_bound).any()


def test_mixed_depth_probe_saturates_half_the_channels_of_each_head_and_weakens_the_rest(cpu_task):
    p = probe("mixed_depth", cpu_task.contract)
    a = log_decay(p)
    floor = _is_floor(a, p.lower_bound).all(dim=(0, 1))  # [H, K]: at the floor at every (b, t)
    zero = _is_zero(a).all(dim=(0, 1))  # [H, K]: (almost) no decay at every (b, t)
    K = SHAPE.K
    for h in range(SHAPE.H):
        assert int(floor[h].sum()) == K // 2
        assert int(zero[h].sum()) == K // 2
        assert not (floor[h] & zero[h]).any()
    # the saturated channels differ between heads (not one fixed mask)
    assert not torch.equal(floor[0], floor[1])


def test_switch_probe_alternates_saturated_and_realistic_bands_of_128_tokens(cpu_task):
    p = probe("switch", cpu_task.contract)
    a = log_decay(p)
    assert p.meta["band"] == 128
    at_floor = _is_floor(a, p.lower_bound)  # [B, T, H, K]
    bands = [(0, 128, True), (128, 256, False), (256, 300, True)]
    for t0, t1, saturated in bands:
        share = float(at_floor[:, t0:t1].double().mean())
        if saturated:
            assert share == 1.0, (t0, t1)
        else:
            assert share < 0.1, (t0, t1)
            depth = float((a[:, t0:t1] / p.lower_bound).mean())
            assert 0.2 < depth < 0.8, (t0, t1)


def test_boundary_probe_decays_a_constant_1_9_nats_per_token(cpu_task):
    p = probe("boundary", cpu_task.contract)
    a = log_decay(p)
    assert ((a + 1.9).abs() < 1e-5).all()
    # 64 tokens of it: about 120 nats, past fp32's exp range (~88)
    assert float(a[:, :64].sum(dim=1).min()) < -88


def test_correlated_probe_repeats_one_unit_key_as_query_with_beta_logit_3_and_no_decay(cpu_task):
    p = probe("correlated", cpu_task.contract)
    k = p.k.double()
    assert torch.equal(p.k, p.k[:1, :1].expand_as(p.k))  # one key per head, at every (b, t)
    assert not torch.equal(p.k[0, 0, 0], p.k[0, 0, 1])  # ... a different one per head
    assert torch.equal(p.q, p.k)
    assert torch.allclose(k.norm(dim=-1), torch.ones(()).double(), atol=1e-2)
    assert torch.equal(p.beta, torch.full_like(p.beta, 3.0))
    assert _is_zero(log_decay(p)).all()
    assert p.tolerance.rtol == cpu_task.contract.correlated_rtol
    assert p.tolerance.atol_rms == cpu_task.contract.correlated_atol_rms
    assert p.tolerance.rms == cpu_task.contract.correlated_rms


def test_random_depth_probe_spreads_channel_depths_across_the_whole_range(cpu_task):
    p = probe("random_depth", cpu_task.contract)
    a = log_decay(p)
    assert (a < 0).all() and (a > p.lower_bound).all()
    depth = (a / p.lower_bound).mean(dim=(0, 1)).flatten()  # one depth per channel, in (0, 1)
    counts = torch.histc(depth.float(), bins=5, min=0.0, max=1.0)
    assert (counts > 0).all(), counts  # every fifth of (lower_bound, 0) is used
    assert float(depth.min()) < 0.1 and float(depth.max()) > 0.9


def test_random_probe_is_realistic_gate_and_normal_inputs(cpu_task):
    p = probe("random", cpu_task.contract)
    A = torch.exp(p.A_log)
    assert (A >= 1).all() and (A <= 16).all()
    assert float(p.dt_bias.std()) < 0.2
    for t in (p.q, p.k, p.v, p.g, p.beta):
        x = t.double()
        assert abs(float(x.mean())) < 0.1 and abs(float(x.std()) - 1) < 0.1


def test_fp64_probes_are_checked_against_the_token_loop(cpu_task):
    for name in ("fp64_random_depth", "fp64_correlated"):
        assert probe(name, cpu_task.contract).reference == "token_loop"
    for name in ("random_depth", "correlated", "random"):
        assert probe(name, cpu_task.contract).reference == "chunked"


def test_probe_inputs_have_the_interface_dtypes_and_shapes(cpu_task):
    B, T, H, K, V = SHAPE.B, SHAPE.T, SHAPE.H, SHAPE.K, SHAPE.V
    for name in probes.probe_names(cpu_task.contract):
        p = probe(name, cpu_task.contract)
        for t, shape in ((p.q, (B, T, H, K)), (p.k, (B, T, H, K)), (p.v, (B, T, H, V)),
                         (p.g, (B, T, H, K)), (p.beta, (B, T, H))):
            assert t.dtype == torch.bfloat16 and tuple(t.shape) == shape, name
        assert p.A_log.dtype == p.dt_bias.dtype == torch.float32, name
        assert tuple(p.A_log.shape) == (H,) and tuple(p.dt_bias.shape) == (H, K), name
        if p.initial_state is not None:
            assert p.initial_state.dtype == torch.float32, name
            assert tuple(p.initial_state.shape) == (B, H, V, K), name
        assert p.lower_bound < 0 and p.scale > 0, name


def test_probes_are_deterministic(cpu_task):
    for name in probes.probe_names(cpu_task.contract):
        a, b = probe(name, cpu_task.contract), probe(name, cpu_task.contract)
        for n, t in a.tensors().items():
            assert torch.equal(t, b.tensors()[n]), (name, n)
        assert (a.scale, a.lower_bound, a.meta) == (b.scale, b.lower_bound, b.meta)


def test_probe_variants_and_contract_seeds_draw_different_inputs(cpu_task):
    from dataclasses import replace

    base = probe("random", cpu_task.contract)
    other_variant = probe("random", cpu_task.contract, variant="preflight")
    other_seed = probe("random", replace(cpu_task.contract, seed=1))
    assert not torch.equal(base.q, other_variant.q)
    assert not torch.equal(base.q, other_seed.q)


def test_most_probes_carry_a_nonzero_initial_state_and_some_none(cpu_task):
    names = probes.probe_names(cpu_task.contract)
    with_state = [n for n in names if probe(n, cpu_task.contract).initial_state is not None]
    without = [n for n in names if n not in with_state]
    assert len(with_state) > len(names) / 2
    assert without, "no probe exercises initial_state=None"
    assert set(without) == probes.NO_INITIAL_STATE
    for n in with_state:
        assert float(probe(n, cpu_task.contract).initial_state.abs().max()) > 0, n


def test_some_probes_pass_a_scale_other_than_the_default(cpu_task):
    default = SHAPE.K ** -0.5
    scales = {n: probe(n, cpu_task.contract).scale for n in cpu_task.contract.probes}
    assert any(not math.isclose(s, default) for s in scales.values())
    assert math.isclose(scales["random"], default)


# --------------------------------------------------------------------------- holdout

def test_holdout_probes_differ_between_salts_and_repeat_for_the_same_salt(cpu_task):
    salt_a, salt_b = b"a" * 32, b"b" * 32
    for i in range(cpu_task.contract.holdout):
        name = f"holdout_{i}"
        a1 = probe(name, cpu_task.contract, salt=salt_a)
        a2 = probe(name, cpu_task.contract, salt=salt_a)
        b = probe(name, cpu_task.contract, salt=salt_b)
        for n, t in a1.tensors().items():
            assert torch.equal(t, a2.tensors()[n]), (name, n)
        assert not torch.equal(a1.q, b.q), name
        assert not torch.equal(a1.v, b.v), name


def test_holdout_inputs_are_not_any_public_probe(cpu_task):
    public = [probe(n, cpu_task.contract).q for n in cpu_task.contract.probes]
    for i in range(cpu_task.contract.holdout):
        h = probe(f"holdout_{i}", cpu_task.contract).q
        assert not any(torch.equal(h, q) for q in public)


@pytest.mark.parametrize("salt", [bytes([s]) * 32 for s in range(6)], ids=lambda s: f"salt{s[0]}")
def test_holdout_probes_cover_every_distribution_and_decay_mode(cpu_task, salt):
    metas = [probe(f"holdout_{i}", cpu_task.contract, salt=salt).meta for i in range(5)]
    assert {m["distribution"] for m in metas} == set(probes.HOLDOUT_DISTRIBUTIONS)
    assert [m["decay"] for m in metas] == list(probes.HOLDOUT_DECAYS)
    assert set(probes.HOLDOUT_DISTRIBUTIONS) == {"normal", "uniform", "rademacher", "laplace"}
    assert set(probes.HOLDOUT_DECAYS) == {"none", "channels", "bands", "all", "random"}


@pytest.fixture(scope="module")
def holdout_pool():
    """The 5 holdout probes for each of 6 salts: every distribution and decay mode, drawn once."""
    from kdatui.engine.task import load_task

    contract = load_task(Path(__file__).resolve().parents[1] / "tasks" / "kda_fwd_cpu.toml").contract
    return [probe(f"holdout_{i}", contract, salt=bytes([s]) * 32) for s in range(6) for i in range(5)]


def _holdouts_by(pool, key, value):
    """The holdout probes of the pool whose meta[key] == value."""
    out = [p for p in pool if p.meta[key] == value]
    assert out, (key, value)
    return out


def _kurtosis(x: torch.Tensor) -> float:
    x = x.double().flatten()
    x = x - x.mean()
    return float((x ** 4).mean() / (x ** 2).mean() ** 2)


def test_holdout_distributions_are_what_they_claim(holdout_pool):
    for p in _holdouts_by(holdout_pool, "distribution", "rademacher"):
        assert torch.equal(p.q.abs(), torch.ones_like(p.q))
    for p in _holdouts_by(holdout_pool, "distribution", "uniform"):
        assert float(p.q.double().abs().max()) <= math.sqrt(3) + 1e-2
        assert abs(_kurtosis(p.q) - 1.8) < 0.2
    for p in _holdouts_by(holdout_pool, "distribution", "laplace"):
        assert abs(_kurtosis(p.q) - 6.0) < 1.5
    for p in _holdouts_by(holdout_pool, "distribution", "normal"):
        assert abs(_kurtosis(p.q) - 3.0) < 0.4
    for dist in probes.HOLDOUT_DISTRIBUTIONS:
        for p in _holdouts_by(holdout_pool, "distribution", dist)[:2]:
            assert abs(float(p.v.double().std()) - 1) < 0.1, dist  # unit variance


def test_holdout_decay_modes_are_what_they_claim(holdout_pool):
    for p in _holdouts_by(holdout_pool, "decay", "none"):
        assert _is_zero(log_decay(p)).all()
    for p in _holdouts_by(holdout_pool, "decay", "all"):
        assert _is_floor(log_decay(p), p.lower_bound).all()
    for p in _holdouts_by(holdout_pool, "decay", "channels"):
        a = log_decay(p)
        floor = _is_floor(a, p.lower_bound).all(dim=(0, 1))
        zero = _is_zero(a).all(dim=(0, 1))
        assert (floor.sum(-1) == SHAPE.K // 2).all() and (zero.sum(-1) == SHAPE.K // 2).all()
    for p in _holdouts_by(holdout_pool, "decay", "bands"):
        w = p.meta["band"]
        assert 16 <= w <= 128
        tok_floor = _is_floor(log_decay(p), p.lower_bound).all(dim=(0, 2, 3))  # [T]
        want = (torch.arange(SHAPE.T) // w) % 2 == 0
        assert torch.equal(tok_floor, want)
    for p in _holdouts_by(holdout_pool, "decay", "random"):
        depth = (log_decay(p) / p.lower_bound).mean(dim=(0, 1)).flatten()
        assert float(depth.min()) < 0.15 and float(depth.max()) > 0.85


def test_holdout_lower_bounds_vary_within_the_allowed_range(cpu_task):
    lbs = {probe(f"holdout_{i}", cpu_task.contract, salt=bytes([s]) * 32).lower_bound
           for s in range(4) for i in range(5)}
    assert all(-5 <= lb < 0 for lb in lbs)
    assert len(lbs) > 10


def test_holdout_salt_is_created_mode_0600_in_the_config_dir(isolated_env, cpu_task):
    path = isolated_env / "holdout_salt"
    assert not path.exists()
    p = make_probe("holdout_0", SHAPE, cpu_task.contract)  # no salt given: the secret one
    assert path.exists()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    salt = probes.holdout_salt()
    assert len(salt) == 32
    assert probes.holdout_salt() == salt  # created once, then reused
    assert torch.equal(p.q, probe("holdout_0", cpu_task.contract, salt=salt).q)


def test_holdout_salt_follows_kdatui_config_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("KDATUI_CONFIG_DIR", str(tmp_path / "one"))
    one = probes.holdout_salt()
    monkeypatch.setenv("KDATUI_CONFIG_DIR", str(tmp_path / "two"))
    two = probes.holdout_salt()
    assert one != two
    assert (tmp_path / "one" / "holdout_salt").exists() and (tmp_path / "two" / "holdout_salt").exists()


# --------------------------------------------------------------------------- helpers

def test_perturb_moves_every_input_in_place_by_a_fraction_of_its_spread(cpu_task):
    p = probe("random", cpu_task.contract)
    before = {n: t.clone() for n, t in p.tensors().items()}
    ids = {n: t.data_ptr() for n, t in p.tensors().items()}
    probes.perturb_(p, seed=1)
    for n, t in p.tensors().items():
        assert t.data_ptr() == ids[n], n  # in place: a cached pointer sees the change
        d = (t.double() - before[n].double())
        assert float(d.abs().max()) > 0, n
        sd = float(before[n].double().std())
        assert float(d.std()) < 0.5 * sd, n


def test_every_task_probe_name_has_a_generator(cpu_task):
    for name in PROBES:
        assert probe(name, cpu_task.contract).name == name
    with pytest.raises(ValueError):
        probe("no_such_probe", cpu_task.contract)
