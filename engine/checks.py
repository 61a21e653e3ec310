"""The correctness contract (KDA.md §5) as code: static check, preflight, every probe run
twice, input dependence. Each step gives a verdict PASS / FAIL / FLAKY / ERROR with the
error figures and a one-line reason; the report is plain data (JSON-serializable).

Verdicts:
  PASS   every element within tolerance, both outputs, every run
  FAIL   a wrong answer: out of tolerance, non-finite, unwritten, input-independent, ...
  FLAKY  identical inputs gave results that disagree between runs (a race)
  ERROR  the candidate could not be run as the contract says: it raised, returned the
         wrong structure, shape or dtype, or imports what it may not
  SUSPECT (an evaluation's, from its timing) the checks passed but the timing cannot be
         trusted: a bent timer, or a time below the shape's physical floor; never admitted
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from . import candidate as cand
from .probes import ProbeInputs, Tolerance, make_probe, perturb_, probe_names
from .records import HARNESS_VERSION, VERDICTS, CheckReport, CheckResult, worst  # noqa: F401 (re-exported)
from .task import Shape, Task

# Two runs on identical inputs may differ by rounding (atomics); beyond this share of the
# reference's RMS the difference is a race, not rounding.
FLAKY_RMS = 1e-2

Progress = Callable[[int, int, str], None]


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
    finite = torch.isfinite(x)
    if not bool(finite.all()):
        nonfinite = ~finite
        n = int(nonfinite.sum())
        first = _index(int(nonfinite.flatten().nonzero()[0]), x.shape)
        return Comparison(False, math.inf, math.inf, math.inf,
                          f"{what}: {n:,} non-finite element{'s' * (n > 1)} (first at {first}; "
                          f"unwritten output or overflow)")
    del finite
    if x.numel() == 0:
        return Comparison(True, 0.0, 0.0, 0.0, output=what)
    # one pass per quantity and one synchronization for all of them (this runs after every
    # candidate call of the checks and of the timing audit: 100M elements at the primary shape)
    x = x.to(torch.float64)
    d = torch.sub(x, y).abs_()
    ay = y.abs()
    ynorm_t = y.norm()
    atol_t = ynorm_t * (tol.atol_rms / math.sqrt(y.numel()))
    bad = (d > atol_t) & (d > tol.rtol * ay)
    big = ay > atol_t
    rel_t = torch.where(big, d / ay.clamp_min(1e-300), 0.0).max()
    ynorm, max_abs, dnorm, max_rel, nbad_f = torch.stack(
        [t.to(torch.float64) for t in (ynorm_t, d.max(), d.norm(), rel_t, bad.sum())]).tolist()
    rms_ratio = dnorm / ynorm if ynorm > 0 else (0.0 if max_abs == 0 else math.inf)
    nbad = int(nbad_f)
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

class CandidateCalls(Protocol):
    """How the checks reach a candidate: never in this process. The judge's implementation
    (`engine/judge.py` CandidateSession) copies a probe's inputs into the arena shared with
    the candidate's executor, has it call `kda_forward` there, and returns the judge's own
    copies of the outputs. `call` raises CandidateFault when the candidate broke the
    interface (raised, wrong structure); `changed_inputs` names an input the last call
    modified in place ("" if none)."""

    where: str  # where the evaluation is, for a fault's reason ("during check 3/17 'saturated'")
    step: str  # the check being run

    def call(self, p: ProbeInputs, output_final_state: bool = True, poison: bool = False): ...

    def changed_inputs(self, p: ProbeInputs) -> str: ...


def call_candidate(cand: CandidateCalls, p: ProbeInputs, shape: Shape, device: str, output_final_state: bool = True):
    """One call of the candidate on a probe: (o, final_state), shapes as the contract says
    (the arena's slots have them), or CandidateFault naming the fault."""
    o, final = cand.call(p, output_final_state)
    if output_final_state and final is None:
        raise CandidateFault("final_state is None although output_final_state=True")
    return o, final


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


def preflight(fn: CandidateCalls, shape: Shape, task: Task, device: str, references: dict | None = None) -> CheckResult:
    """One call under poisoned allocations: structure, every element written and finite,
    no aliasing, inputs left untouched; then output_final_state=False."""
    p = make_probe("random", shape, task.contract, device, variant="preflight")
    p.name = "preflight"
    o, final = fn.call(p, True, poison=True)
    changed = fn.changed_inputs(p)
    if changed:
        return CheckResult("preflight", "FAIL", f"the candidate modified its input {changed} in place")
    ref = reference_outputs(p, references)
    c = _judge(o, final, ref, p.tolerance)
    if not c.ok:
        return _result("preflight", c)
    o2, _ = call_candidate(fn, p, shape, device, output_final_state=False)
    c2 = compare(o2, ref[0], p.tolerance, "o (output_final_state=False)")
    if not c2.ok:
        return _result("preflight", c2)
    return _result("preflight", c)


def input_dependence(fn: CandidateCalls, shape: Shape, task: Task, device: str,
                     references: dict | None = None) -> CheckResult:
    """After a call, perturb the inputs in place; the next call must follow them. Then one
    element of q, at a position drawn in secret, is changed in place, twice: a cache keyed on
    a sample of the inputs (a fingerprint) misses it and answers with the old output.

    The perturbation is a function of the contract's seed, so its reference is cached with
    the probes'; after a one-element change only that token's output row moves, and only it
    is computed again (`_row_changed`)."""
    p = make_probe("random", shape, task.contract, device, variant="input_dependence")
    p.name = "input_dependence"
    call_candidate(fn, p, shape, device)
    perturb_(p, seed=task.contract.seed + 1)
    p.name = "input_dependence/perturbed"
    o, final = call_candidate(fn, p, shape, device)
    ref = reference_outputs(p, references)
    c = _judge(o, final, ref, p.tolerance)
    if not c.ok:
        return _result("input_dependence", c,
                       reason=f"after the inputs changed in place: {c.reason} (stale or cached result?)")
    for _ in range(2):  # twice, at independent positions: a sample that happens to hold one misses the other
        where = perturb_one_(p)
        ref = _row_changed(p, ref, where)
        o, final = call_candidate(fn, p, shape, device)
        c1 = _judge(o, final, ref, p.tolerance)
        if not c1.ok:
            return _result("input_dependence", c1,
                           reason=f"after one input element changed in place (q{where}): {c1.reason} "
                                  f"(a result cached on a sample of the inputs?)")
    return _result("input_dependence", c)


def _row_changed(p: ProbeInputs, ref, idx: list[int]):
    """The reference of `p` after q[idx] changed, from `ref` (the reference before): a query
    reads the state and never writes it, so of everything only o[b, t, h] depends on
    q[b, t, h]. That row is computed on head h's prefix [:t+1]; the rest is `ref`'s."""
    b, t, h = idx[0], idx[1], idx[2]
    row, _ = reference_outputs(p.cut(b, h, t + 1))
    o = ref[0].clone()
    o[b, t, h] = row[0, t, 0]
    return (o, ref[1])


def perturb_one_(p: ProbeInputs) -> list[int]:
    """Set one element of q, drawn with the OS's randomness (not the contract's seed: a
    candidate cannot know it), far from its neighbours: the normalized query of that token
    and head, and so its output row, change entirely."""
    import secrets

    idx = [secrets.randbelow(n) for n in p.q.shape]
    p.q[tuple(idx)] = 8.0 if float(p.q[tuple(idx)]) < 0 else -8.0
    return idx


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_steps(task: Task) -> list[str]:
    steps = ["static", "preflight", *probe_names(task.contract)]
    if task.contract.input_dependence:
        steps.append("input_dependence")
    return steps


def run_checks(task: Task, shape: Shape, candidate: str, *, device: str | None = None,
               progress: Progress | None = None, fail_fast: bool = False,
               salt: bytes | None = None, references: dict | None = None,
               calls: CandidateCalls | None = None) -> CheckReport:
    """Every check of the contract for one candidate at one shape. The candidate runs in an
    executor, never here: `calls` is one loaded by the judge; without it a one-off executor
    is started for `candidate` (and stopped after). Pass the same `references` dict to
    several calls at one shape to compute each reference once."""
    device = device or default_device()
    report = CheckReport(candidate=str(candidate), task=task.name, shape=shape.name,
                         dims=shape.dims(), device=_device_name(device))
    steps = check_steps(task)
    t_start = time.perf_counter()
    fn = calls

    def step(i, label, f):
        if progress:
            progress(i, len(steps), label)
        if fn is not None:
            fn.where, fn.step = f"during check {i + 1}/{len(steps)} '{label}'", label
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
    own = None
    if fn is None:
        from .judge import one_off_session

        own = one_off_session(candidate, device, shape, timeout_s=task.bench.timeout_s)
        fn = own
    try:
        if own is not None or not getattr(fn, "loaded", True):
            problem = fn.load_problem()
            if problem:
                report.results[-1] = CheckResult("static", "ERROR", problem)
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
            step(len(steps) - 1, "input_dependence", lambda: input_dependence(fn, shape, task, device, references))
        return _finish(report, t_start, progress, steps)
    finally:
        if own is not None:
            own.close()


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
