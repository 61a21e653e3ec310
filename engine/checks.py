"""The correctness contract (KDA.md §5) as code: static check, preflight, every probe run
twice, input dependence. Each step gives a verdict PASS / FAIL / FLAKY / ERROR with the
error figures and a one-line reason; the report is plain data (JSON-serializable).

Verdicts:
  PASS   every element within tolerance, both outputs, every run
  FAIL   a wrong answer: out of tolerance, non-finite, unwritten, input-independent, ...
  FLAKY  identical inputs gave results that disagree between runs (a race)
  ERROR  the candidate could not be run as the contract says: it raised, returned the
         wrong structure, shape or dtype, or imports what it may not
"""

from __future__ import annotations

import math
import time
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from . import candidate as cand
from .probes import ProbeInputs, Tolerance, make_probe, perturb_, probe_names
from .task import Shape, Task

HARNESS_VERSION = "1"
VERDICTS = ("PASS", "FAIL", "FLAKY", "ERROR")
# Two runs on identical inputs may differ by rounding (atomics); beyond this share of the
# reference's RMS the difference is a race, not rounding.
FLAKY_RMS = 1e-2

Progress = Callable[[int, int, str], None]


@dataclass
class CheckResult:
    probe: str
    verdict: str
    reason: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0
    rms_ratio: float = 0.0
    output: str = ""  # which output the figures describe: the worse of o and final_state
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"


@dataclass
class CheckReport:
    candidate: str
    task: str
    shape: str
    dims: dict
    device: str
    harness: str = HARNESS_VERSION
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def verdict(self) -> str:
        return worst([r.verdict for r in self.results]) if self.results else "ERROR"

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def first_problem(self) -> CheckResult | None:
        return next((r for r in self.results if not r.passed), None)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CheckReport":
        d = {k: v for k, v in d.items() if k != "verdict"}
        d["results"] = [CheckResult(**r) for r in d.get("results", [])]
        return cls(**d)


def worst(verdicts: list[str]) -> str:
    for v in ("ERROR", "FAIL", "FLAKY"):
        if v in verdicts:
            return v
    return "PASS"


class CandidateFault(Exception):
    """The candidate broke the interface (ERROR), as opposed to computing a wrong answer."""


# --------------------------------------------------------------------------- comparing

@dataclass
class Comparison:
    ok: bool
    max_abs: float
    max_rel: float
    rms_ratio: float
    reason: str = ""
    output: str = ""  # which output passed (a failure names it in the reason)


def _index(flat: int, shape) -> list[int]:
    idx = []
    for n in reversed(shape):
        idx.append(flat % n)
        flat //= n
    return idx[::-1]


def compare(x: torch.Tensor, y: torch.Tensor, tol: Tolerance, what: str) -> Comparison:
    """Candidate `x` against reference `y` (float64) by KDA.md §5: an element fails when
    |x-y| > atol AND |x-y| > rtol*|y| (atol = atol_rms * RMS(y)); all must pass, and the
    normalized RMS error must stay under `tol.rms`."""
    nonfinite = ~torch.isfinite(x)
    if nonfinite.any():
        n = int(nonfinite.sum())
        first = _index(int(nonfinite.flatten().nonzero()[0]), x.shape)
        return Comparison(False, math.inf, math.inf, math.inf,
                          f"{what}: {n:,} non-finite element{'s' * (n > 1)} (first at {first}; "
                          f"unwritten output or overflow)")
    x = x.to(torch.float64)
    d = (x - y).abs()
    ynorm = float(y.norm())
    rms_y = ynorm / math.sqrt(max(y.numel(), 1))
    atol = tol.atol_rms * rms_y
    bad = (d > atol) & (d > tol.rtol * y.abs())
    max_abs = float(d.max()) if d.numel() else 0.0
    rms_ratio = float(d.norm()) / ynorm if ynorm > 0 else (0.0 if max_abs == 0 else math.inf)
    big = y.abs() > atol
    max_rel = float((d[big] / y.abs()[big]).max()) if bool(big.any()) else 0.0
    nbad = int(bad.sum())
    if nbad:
        flat = int(bad.flatten().nonzero()[0])
        i = _index(flat, x.shape)
        got, want = float(x.flatten()[flat]), float(y.flatten()[flat])
        return Comparison(False, max_abs, max_rel, rms_ratio,
                          f"{what}: {nbad:,} of {x.numel():,} elements out of tolerance "
                          f"(first at {i}: got {got:.4g}, want {want:.4g})")
    if not rms_ratio < tol.rms:
        return Comparison(False, max_abs, max_rel, rms_ratio,
                          f"{what}: normalized RMS error {rms_ratio:.3g} >= {tol.rms}")
    return Comparison(True, max_abs, max_rel, rms_ratio, output=what)


# --------------------------------------------------------------------------- running

@contextmanager
def poisoned_allocations(device: str):
    """Make every freshly allocated floating-point tensor start as NaN, so an output
    element the candidate never writes shows up as non-finite."""
    if device.startswith("cuda"):
        # Pre-fill the caching allocator with NaN blocks that later allocations reuse: the
        # tensor is freed at once, its block stays cached, NaN-filled.
        free, _ = torch.cuda.mem_get_info()
        torch.full((min(free // 8, 1 << 30) // 4,), float("nan"), device=device)
    names = ("empty", "empty_like", "empty_strided")
    saved = {n: getattr(torch, n) for n in names}
    saved_new_empty = torch.Tensor.new_empty

    def poison(f):
        def wrapped(*a, **kw):
            t = f(*a, **kw)
            if t.is_floating_point():
                t.fill_(float("nan"))
            return t
        return wrapped

    try:
        for n in names:
            setattr(torch, n, poison(saved[n]))
        torch.Tensor.new_empty = poison(saved_new_empty)
        yield
    finally:
        for n in names:
            setattr(torch, n, saved[n])
        torch.Tensor.new_empty = saved_new_empty


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def call_candidate(fn, p: ProbeInputs, shape: Shape, device: str, output_final_state: bool = True):
    """Call `fn` on a probe and check the structure of what comes back. Raises
    CandidateFault naming the fault (the caller turns it into ERROR)."""
    try:
        out = fn(*p.args(), **p.kwargs(output_final_state))
        _sync(device)
    except Exception as e:  # the candidate's own error, reported, never re-raised
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        tb = traceback.extract_tb(e.__traceback__)
        where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
        raise CandidateFault(f"raised {type(e).__name__}{where}: {msg}") from e
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise CandidateFault(f"returned {type(out).__name__}, expected a pair (o, final_state)")
    o, final = out
    B, T, H, K, V = shape.B, shape.T, shape.H, shape.K, shape.V
    _expect_tensor("o", o, (B, T, H, V), torch.bfloat16, p.q.device)
    if output_final_state or final is not None:
        if final is None:
            raise CandidateFault("final_state is None although output_final_state=True")
        _expect_tensor("final_state", final, (B, H, V, K), torch.float32, p.q.device)
    for out_name, t in (("o", o), ("final_state", final)):
        if t is None:
            continue
        for in_name, x in p.tensors().items():
            if t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
                raise CandidateFault(f"{out_name} shares memory with the input {in_name}")
    return o, final


def _expect_tensor(name, t, shape, dtype, device):
    if not isinstance(t, torch.Tensor):
        raise CandidateFault(f"{name} is a {type(t).__name__}, expected a tensor")
    if tuple(t.shape) != shape:
        raise CandidateFault(f"{name} has shape {list(t.shape)}, expected {list(shape)}")
    if t.dtype != dtype:
        raise CandidateFault(f"{name} has dtype {t.dtype}, expected {dtype}")
    if t.device != device:
        raise CandidateFault(f"{name} is on {t.device}, expected {device}")
    if not t.is_contiguous():
        raise CandidateFault(f"{name} is not dense (not contiguous), strides {t.stride()}")


def reference_outputs(p: ProbeInputs, cache: dict | None = None):
    """fp64 reference outputs of a probe. `cache` (a dict the caller owns, one per shape)
    lets several candidates checked on the same shape share one reference per probe."""
    from kdatui.kernels.kda import reference

    key = (p.name, tuple(p.q.shape), tuple(p.v.shape), str(p.q.device))
    if cache is not None and key in cache:
        return cache[key]
    f = reference.token_loop if p.reference == "token_loop" else reference.chunked
    with torch.no_grad():
        out = f(*p.args(), **p.kwargs(True))
    if cache is not None:
        cache[key] = out
    return out


def _judge(o, final, ref, tol) -> Comparison:
    co = compare(o, ref[0], tol, "o")
    cs = compare(final, ref[1], tol, "final_state")
    if not co.ok:
        return co
    if not cs.ok:
        return cs
    # both pass: report the worse of the two by normalized RMS
    return co if co.rms_ratio >= cs.rms_ratio else cs


def _result(probe, c: Comparison, verdict=None, reason=None, output="") -> CheckResult:
    return CheckResult(probe=probe, verdict=verdict or ("PASS" if c.ok else "FAIL"),
                       reason=reason if reason is not None else c.reason,
                       max_abs=c.max_abs, max_rel=c.max_rel, rms_ratio=c.rms_ratio,
                       output=output or c.output or (c.reason.split(":")[0] if c.reason else ""))


def check_probe(fn, p: ProbeInputs, shape: Shape, device: str, runs: int,
                references: dict | None = None) -> CheckResult:
    ref = reference_outputs(p, references)
    outs, judged = [], []
    for _ in range(runs):
        o, final = call_candidate(fn, p, shape, device)
        outs.append((o.clone(), final.clone()))
        judged.append(_judge(o, final, ref, p.tolerance))
    verdicts = ["PASS" if c.ok else "FAIL" for c in judged]
    worst_c = max(judged, key=lambda c: (not c.ok, c.rms_ratio))
    if len(set(verdicts)) > 1:
        i = verdicts.index("FAIL")
        return _result(p.name, worst_c, "FLAKY",
                       f"runs on identical inputs disagree: run {i + 1} failed ({judged[i].reason})")
    if all(c.ok for c in judged) and runs > 1:
        for i, what in enumerate(("o", "final_state")):  # a race may touch only the state
            rms_ref = float(ref[i].norm()) / math.sqrt(max(ref[i].numel(), 1))
            spread = max(float((outs[0][i].double() - out[i].double()).abs().max()) for out in outs[1:])
            if spread > FLAKY_RMS * rms_ref:
                return _result(p.name, worst_c, "FLAKY", f"{what}: runs on identical inputs differ "
                               f"by {spread:.3g} (> {FLAKY_RMS} x RMS)", output=what)
    return _result(p.name, worst_c)


def preflight(fn, shape: Shape, task: Task, device: str, references: dict | None = None) -> CheckResult:
    """One call under poisoned allocations: structure, every element written and finite,
    no aliasing, inputs left untouched; then output_final_state=False."""
    p = make_probe("random", shape, task.contract, device, variant="preflight")
    p.name = "preflight"
    before = {n: t.clone() for n, t in p.tensors().items()}
    with poisoned_allocations(device):
        o, final = call_candidate(fn, p, shape, device)
    for n, t in p.tensors().items():
        if not torch.equal(t, before[n]):
            return CheckResult("preflight", "FAIL", f"the candidate modified its input {n} in place")
    ref = reference_outputs(p, references)
    c = _judge(o, final, ref, p.tolerance)
    if not c.ok:
        return _result("preflight", c)
    o2, _ = call_candidate(fn, p, shape, device, output_final_state=False)
    c2 = compare(o2, ref[0], p.tolerance, "o (output_final_state=False)")
    if not c2.ok:
        return _result("preflight", c2)
    return _result("preflight", c)


def input_dependence(fn, shape: Shape, task: Task, device: str) -> CheckResult:
    """After a call, perturb the inputs in place; the next call must follow them."""
    p = make_probe("random", shape, task.contract, device, variant="input_dependence")
    p.name = "input_dependence"
    call_candidate(fn, p, shape, device)
    perturb_(p, seed=task.contract.seed + 1)
    o, final = call_candidate(fn, p, shape, device)
    c = _judge(o, final, reference_outputs(p), p.tolerance)
    if not c.ok:
        return _result("input_dependence", c,
                       reason=f"after the inputs changed in place: {c.reason} (stale or cached result?)")
    return _result("input_dependence", c)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def prepare_device(device: str) -> None:
    """On the CPU, Triton kernels run through the interpreter; it must be on before any
    candidate module is imported (triton.jit reads it at decoration time)."""
    if device == "cpu":
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")


def check_steps(task: Task) -> list[str]:
    steps = ["static", "preflight", *probe_names(task.contract)]
    if task.contract.input_dependence:
        steps.append("input_dependence")
    return steps


def run_checks(task: Task, shape: Shape, candidate: str, *, device: str | None = None,
               progress: Progress | None = None, fail_fast: bool = False,
               salt: bytes | None = None, references: dict | None = None) -> CheckReport:
    """Every check of the contract for one candidate at one shape. Pass the same
    `references` dict to several calls at one shape to compute each reference once."""
    device = device or default_device()
    prepare_device(device)
    report = CheckReport(candidate=str(candidate), task=task.name, shape=shape.name,
                         dims=shape.dims(), device=_device_name(device))
    steps = check_steps(task)
    t_start = time.perf_counter()

    def step(i, label, f):
        if progress:
            progress(i, len(steps), label)
        t0 = time.perf_counter()
        try:
            r = f()
        except CandidateFault as e:
            r = CheckResult(label, "ERROR", str(e))
        except torch.cuda.OutOfMemoryError as e:
            r = CheckResult(label, "ERROR", f"out of GPU memory: {str(e).splitlines()[0][:160]}")
        r.seconds = time.perf_counter() - t0
        report.results.append(r)
        return r

    problems = cand.static_check(candidate) if _exists(candidate) else [f"{candidate}: no such candidate"]
    step(0, "static", lambda: CheckResult("static", "ERROR" if problems else "PASS", "; ".join(problems)))
    if problems:
        return _finish(report, t_start, progress, steps)
    try:
        fn = cand.load(candidate).kda_forward
    except cand.CandidateError as e:
        report.results[-1] = CheckResult("static", "ERROR", str(e))
        return _finish(report, t_start, progress, steps)

    r = step(1, "preflight", lambda: preflight(fn, shape, task, device, references))
    if r.verdict == "ERROR" or (fail_fast and not r.passed):
        return _finish(report, t_start, progress, steps)
    runs = task.contract.runs_per_probe
    for i, name in enumerate(probe_names(task.contract), start=2):
        def one(name=name):
            return check_probe(fn, make_probe(name, shape, task.contract, device, salt), shape, device, runs,
                               references)
        r = step(i, name, one)
        if fail_fast and not r.passed:
            return _finish(report, t_start, progress, steps)
    if task.contract.input_dependence:
        step(len(steps) - 1, "input_dependence", lambda: input_dependence(fn, shape, task, device))
    return _finish(report, t_start, progress, steps)


def _exists(path) -> bool:
    try:
        cand.locate(path)
        return True
    except cand.CandidateError:
        return False


def _finish(report: CheckReport, t_start: float, progress: Progress | None, steps) -> CheckReport:
    report.seconds = time.perf_counter() - t_start
    if progress:
        progress(len(steps), len(steps), "done")
    return report


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return "cpu"
