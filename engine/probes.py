"""Seeded inputs for every probe of the correctness contract (KDA.md §5).

Each probe stresses one way a KDA kernel can go wrong (decay pinned at the floor,
overflowing exponent spans, a nearly singular I + A, ...). A probe is fully determined
by its name, the shape, the contract seed and (for the holdout probes) a secret salt
kept in the user's config dir, so a candidate can neither see nor tune to them.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import secrets
from dataclasses import dataclass, field, replace

import torch

from .paths import config_dir
from .task import Contract, Shape

HOLDOUT_DISTRIBUTIONS = ("normal", "uniform", "rademacher", "laplace")
HOLDOUT_DECAYS = ("none", "channels", "bands", "all", "random")
# Probes that start from no initial state; every other probe passes a random one.
NO_INITIAL_STATE = {"strong", "boundary", "fp64_correlated"}
# Probes that pass a scale other than the default, so an ignored `scale` argument shows.
ODD_SCALE = {"strong": 0.75, "random_depth": 1.5, "fp64_random_depth": 1.5}


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol_rms: float
    rms: float


@dataclass
class ProbeInputs:
    name: str
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    A_log: torch.Tensor
    dt_bias: torch.Tensor
    initial_state: torch.Tensor | None
    scale: float
    lower_bound: float
    tolerance: Tolerance
    reference: str = "chunked"  # or "token_loop" for the fp64 probes
    meta: dict = field(default_factory=dict)

    def tensors(self) -> dict[str, torch.Tensor]:
        d = {n: getattr(self, n) for n in ("q", "k", "v", "g", "beta", "A_log", "dt_bias")}
        if self.initial_state is not None:
            d["initial_state"] = self.initial_state
        return d

    def args(self):
        return (self.q, self.k, self.v, self.g, self.beta, self.A_log, self.dt_bias)

    def cut(self, b: int, h: int, t_end: int | None = None) -> "ProbeInputs":
        """The probe cut to batch row b, head h and tokens [:t_end] (every dimension kept, of
        size 1): a head is an independent recurrence and a token depends on no later one, so
        the reference of the cut is the matching part of the whole one."""
        def cut(x):
            return x[b:b + 1, :t_end, h:h + 1].contiguous()

        init = None if self.initial_state is None else self.initial_state[b:b + 1, h:h + 1].contiguous()
        return replace(self, q=cut(self.q), k=cut(self.k), v=cut(self.v), g=cut(self.g), beta=cut(self.beta),
                       A_log=self.A_log[h:h + 1].contiguous(), dt_bias=self.dt_bias[h:h + 1].contiguous(),
                       initial_state=init)

    def kwargs(self, output_final_state: bool = True) -> dict:
        return dict(scale=self.scale, lower_bound=self.lower_bound,
                    initial_state=self.initial_state, output_final_state=output_final_state)

    def clone(self) -> "ProbeInputs":
        c = ProbeInputs(**{**self.__dict__})
        for n, t in self.tensors().items():
            setattr(c, n, t.clone())
        return c


def tolerance_for(probe: str, contract: Contract) -> Tolerance:
    if "correlated" in probe:
        return Tolerance(contract.correlated_rtol, contract.correlated_atol_rms, contract.correlated_rms)
    return Tolerance(contract.rtol, contract.atol_rms, contract.rms)


def probe_names(contract: Contract) -> list[str]:
    return list(contract.probes) + [f"holdout_{i}" for i in range(contract.holdout)]


def _seed(*parts) -> int:
    h = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


# --------------------------------------------------------------------------- holdout salt

def holdout_salt() -> bytes:
    """The secret behind the holdout probes: created on first use, mode 0600, in the
    user's config dir (never in a repo or a worktree, where a candidate could read it)."""
    path = config_dir() / "holdout_salt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return bytes.fromhex(path.read_text().strip())


def holdout_seed(salt: bytes, shape: Shape, index: int) -> int:
    msg = f"{shape.B},{shape.T},{shape.H},{shape.K},{shape.V}|{index}".encode()
    return int.from_bytes(hmac.new(salt, msg, hashlib.sha256).digest()[:8], "little") & ((1 << 63) - 1)


# --------------------------------------------------------------------------- generators

class _Gen:
    """Draws on the probe's device (a CPU draw of 10^8 numbers costs seconds), so a probe
    is deterministic per device type: the same on every CPU, the same on every GPU."""

    def __init__(self, seed: int, device: str):
        self.g = torch.Generator(device=device).manual_seed(seed)
        self.device = device

    def to(self, x, dtype):
        return x.to(device=self.device, dtype=dtype)

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.g, dtype=torch.float32, device=self.device)

    def rand(self, *shape):
        return torch.rand(*shape, generator=self.g, dtype=torch.float32, device=self.device)

    def sample(self, dist: str, *shape):
        """Unit-variance samples of a named distribution."""
        if dist == "normal":
            return self.randn(*shape)
        if dist == "uniform":
            return (self.rand(*shape) * 2 - 1) * math.sqrt(3)
        if dist == "rademacher":
            return (self.rand(*shape) < 0.5).float() * 2 - 1
        if dist == "laplace":
            u = self.rand(*shape).clamp(1e-7, 1 - 1e-7) - 0.5
            return -torch.sign(u) * torch.log1p(-2 * u.abs()) / math.sqrt(2)
        raise ValueError(dist)


def _logit(p):
    return math.log(p / (1 - p)) if isinstance(p, float) else torch.log(p / (1 - p))


def _gate_realistic(r: _Gen, B, T, H, K):
    A_log = torch.log(1 + 15 * r.rand(H))
    dt_bias = 0.1 * r.randn(H, K)
    g = r.randn(B, T, H, K)
    return g, A_log, dt_bias


def _saturate(g, sel):
    """Pin the log decay of the selected entries at the floor: a huge positive gate."""
    return torch.where(sel, 20.0 + g.abs(), g)


def _weaken(g, sel):
    """Make the selected entries decay (almost) nothing: a huge negative gate."""
    return torch.where(sel, -30.0 - g.abs(), g)


def make_probe(name: str, shape: Shape, contract: Contract, device: str = "cpu",
               salt: bytes | None = None, variant: str = "") -> ProbeInputs:
    """The inputs of probe `name` at `shape`. Deterministic given (name, shape, seed, salt);
    `variant` draws another instance of the same kind (for preflight, timing trials, ...)."""
    B, T, H, K, V = shape.B, shape.T, shape.H, shape.K, shape.V
    lb = contract.lower_bound
    scale = K ** -0.5 * ODD_SCALE.get(name, 1.0)
    meta: dict = {}
    base = name.removeprefix("fp64_")
    if name.startswith("holdout_"):
        index = int(name.split("_")[1])
        salt = salt if salt is not None else holdout_salt()
        seed = holdout_seed(salt, shape, index)
    else:
        seed = _seed(contract.seed, name, variant, shape.B, shape.T, shape.H, shape.K, shape.V)
    r = _Gen(seed, device)
    with torch.device(device):  # factories below (full, zeros, arange, randperm) too
        dist = "normal"
        if name.startswith("holdout_"):
            # One salt-derived rotation shared by all holdout probes (not each probe's own seed),
            # so any 4 consecutive holdout probes cover all 4 distributions.
            rotation = holdout_seed(salt, shape, -1)
            dist = HOLDOUT_DISTRIBUTIONS[(index + rotation) % len(HOLDOUT_DISTRIBUTIONS)]
            base = "holdout_" + HOLDOUT_DECAYS[index % len(HOLDOUT_DECAYS)]
            lb = -(1.0 + 4.0 * r.rand(1).item())
            meta.update(distribution=dist, decay=base.removeprefix("holdout_"))

        q = r.sample(dist, B, T, H, K)
        k = r.sample(dist, B, T, H, K)
        v = r.sample(dist, B, T, H, V)
        beta = r.sample(dist, B, T, H)
        g, A_log, dt_bias = _gate_realistic(r, B, T, H, K)

        if base == "random":
            pass
        elif base in ("saturated", "holdout_all"):
            A_log = torch.full((H,), math.log(16.0))
            dt_bias = torch.zeros(H, K)
            g = 4.0 + g.abs()
        elif base == "strong":
            A_log = torch.zeros(H)
            dt_bias = torch.zeros(H, K)
        elif base in ("mixed_depth", "holdout_channels"):
            # half the channels of each head pinned at the floor, the other half barely decaying
            chan = torch.stack([torch.randperm(K, generator=r.g) < K // 2 for _ in range(H)])  # [H, K]
            sel = chan[None, None].expand(B, T, H, K)
            g = _weaken(_saturate(g, sel), ~sel)
        elif base in ("switch", "holdout_bands"):
            width = 128 if base == "switch" else int(16 + r.rand(1).item() * 112)
            band = ((torch.arange(T) // width) % 2 == 0)[None, :, None, None].expand(B, T, H, K)
            g = _saturate(g, band)
            meta["band"] = width
        elif base == "boundary":
            A_log = torch.zeros(H)
            dt_bias = torch.full((H, K), _logit(1.9 / -lb))
            g = torch.zeros(B, T, H, K)
        elif base == "correlated":
            u = r.randn(H, K)
            u = u / u.norm(dim=-1, keepdim=True)
            k = u[None, None].expand(B, T, H, K).clone()
            q = k.clone()
            beta = torch.full((B, T, H), 3.0)
            A_log = torch.zeros(H)
            dt_bias = torch.zeros(H, K)
            g = torch.full((B, T, H, K), -20.0)
        elif base in ("random_depth", "holdout_random"):
            A_log = torch.zeros(H)
            dt_bias = _logit(0.0005 + 0.999 * r.rand(H, K))
            g = 0.25 * r.randn(B, T, H, K)
        elif base == "holdout_none":
            g = _weaken(g, torch.ones_like(g, dtype=torch.bool))
        else:
            raise ValueError(f"unknown probe {name!r}")

        init = None if name in NO_INITIAL_STATE else r.randn(B, H, V, K)
        bf = torch.bfloat16
        return ProbeInputs(
            name=name,
            q=r.to(q, bf), k=r.to(k, bf), v=r.to(v, bf), g=r.to(g, bf), beta=r.to(beta, bf),
            A_log=r.to(A_log, torch.float32), dt_bias=r.to(dt_bias, torch.float32),
            initial_state=None if init is None else r.to(init, torch.float32),
            scale=scale, lower_bound=lb, tolerance=tolerance_for(name, contract),
            reference="token_loop" if name.startswith("fp64_") else "chunked", meta=meta,
        )


def perturb_(p: ProbeInputs, seed: int, amount: float = 0.25) -> None:
    """Move every input in place by `amount` of its own standard deviation (input dependence)."""
    r = torch.Generator(device=p.q.device).manual_seed(seed)
    for n, t in p.tensors().items():
        noise = torch.randn(t.shape, generator=r, dtype=torch.float32, device=t.device)
        sd = t.float().std().item() if t.numel() > 1 else 1.0
        t.add_((amount * max(sd, 1e-3) * noise).to(t.dtype))


def log_decay(p: ProbeInputs) -> torch.Tensor:
    """a = lower_bound * sigmoid(exp(A_log) * (g + dt_bias)), float64 [B, T, H, K]: what
    the probe asks of the gate, for tests that a probe produces what it claims."""
    gate = torch.exp(p.A_log.double())[None, None, :, None] * (p.g.double() + p.dt_bias.double()[None, None])
    return p.lower_bound * torch.sigmoid(gate)
