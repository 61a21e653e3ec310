"""The fp64 chunked reference computes exactly what the fp64 token loop (the definition,
KDA.md §2) computes, whatever the chunk size, shape or initial state."""

from __future__ import annotations

import math

import pytest
import torch

from kdatui.kernels.kda import reference

REL = 1e-10


def _inputs(B, T, H, K, V, *, seed=0, initial=True, lower_bound=-5.0, gate_scale=1.0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    args = (r(B, T, H, K), r(B, T, H, K), r(B, T, H, V), gate_scale * r(B, T, H, K), r(B, T, H),
            torch.log(1 + 15 * torch.rand(H, generator=g, dtype=torch.float64)), 0.1 * r(H, K))
    kw = dict(scale=K ** -0.5, lower_bound=lower_bound,
              initial_state=r(B, H, V, K) if initial else None)
    return args, kw


def _rel(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x - y).norm() / y.norm())


SHAPES = [
    # (B, T, H, K, V, initial_state)
    pytest.param(1, 1, 2, 16, 16, True, id="T1"),
    pytest.param(1, 1, 1, 8, 4, False, id="T1-no-state"),
    pytest.param(1, 100, 2, 16, 32, True, id="T100-not-multiple-of-chunk"),
    pytest.param(2, 70, 3, 32, 16, True, id="B2-T70"),
    pytest.param(2, 64, 2, 16, 16, False, id="B2-T64-exact-chunk-no-state"),
    pytest.param(1, 129, 1, 8, 8, False, id="T129-one-past-two-chunks"),
]


@pytest.mark.parametrize("B,T,H,K,V,initial", SHAPES)
def test_chunked_reference_matches_token_loop(B, T, H, K, V, initial):
    args, kw = _inputs(B, T, H, K, V, seed=B * 1000 + T, initial=initial)
    o_ref, s_ref = reference.token_loop(*args, **kw)
    o, s = reference.chunked(*args, **kw)
    assert o.dtype == s.dtype == torch.float64
    assert o.shape == (B, T, H, V) and s.shape == (B, H, V, K)
    assert _rel(o, o_ref) <= REL
    assert _rel(s, s_ref) <= REL


@pytest.mark.parametrize("chunk", [16, 64])
@pytest.mark.parametrize("initial", [True, False], ids=["state", "no-state"])
def test_chunked_reference_matches_token_loop_at_chunk_sizes(chunk, initial):
    args, kw = _inputs(2, 150, 2, 16, 16, seed=chunk, initial=initial)
    o_ref, s_ref = reference.token_loop(*args, **kw)
    o, s = reference.chunked(*args, **kw, chunk=chunk)
    assert _rel(o, o_ref) <= REL
    assert _rel(s, s_ref) <= REL


def test_chunked_reference_is_exact_when_decay_spans_overflow_fp32():
    # Gates mostly at the floor: one 64-token chunk spans far more than fp32's exp limit
    # (~88 nats); exact exponent differences keep the chunked form equal to the loop.
    args, kw = _inputs(1, 128, 2, 16, 16, seed=7, gate_scale=50.0)
    a = reference.prepare(*args, kw["lower_bound"])[3]  # [B, H, T, K]
    assert float(a[:, :, :64].sum(dim=2).min()) < -150  # the trap is really armed
    o_ref, s_ref = reference.token_loop(*args, **kw)
    o, s = reference.chunked(*args, **kw, chunk=64)
    assert torch.isfinite(o).all() and torch.isfinite(s).all()
    assert _rel(o, o_ref) <= REL
    assert _rel(s, s_ref) <= REL


def test_token_loop_follows_the_recurrence_by_hand_for_one_token():
    # One token from a known state: S <- diag(e^a) S; r = v - S^T k; S += b k r^T; o = s S^T q.
    args, kw = _inputs(1, 1, 1, 4, 3, seed=3)
    q, k, v, g, beta, A_log, dt_bias = (x.double() for x in args)
    S0 = kw["initial_state"][0, 0].T  # [K, V]
    qn = q[0, 0, 0] / torch.sqrt((q[0, 0, 0] ** 2).sum() + 1e-6)
    kn = k[0, 0, 0] / torch.sqrt((k[0, 0, 0] ** 2).sum() + 1e-6)
    a = -5.0 * torch.sigmoid(torch.exp(A_log[0]) * (g[0, 0, 0] + dt_bias[0]))
    b = torch.sigmoid(beta[0, 0, 0])
    S = torch.exp(a)[:, None] * S0
    r = v[0, 0, 0] - S.T @ kn
    S = S + b * torch.outer(kn, r)
    o_want = kw["scale"] * S.T @ qn
    o, s = reference.token_loop(*args, **kw)
    assert torch.allclose(o[0, 0, 0], o_want, rtol=1e-12, atol=0)
    assert torch.allclose(s[0, 0], S.T, rtol=1e-12, atol=0)


def test_references_omit_final_state_when_not_asked():
    args, kw = _inputs(1, 10, 1, 8, 8)
    kw["output_final_state"] = False
    assert reference.token_loop(*args, **kw)[1] is None
    assert reference.chunked(*args, **kw)[1] is None


def test_reference_default_scale_is_inverse_sqrt_k():
    args, kw = _inputs(1, 5, 1, 16, 8)
    del kw["scale"]
    o_default, _ = reference.chunked(*args, **kw)
    o_explicit, _ = reference.chunked(*args, **kw, scale=1 / math.sqrt(16))
    assert torch.equal(o_default, o_explicit)
