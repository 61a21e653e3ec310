"""Paired timing: baseline and candidate alternate, trial by trial, as the field times GPU code.

One trial: for each side a batch of calls enqueued back to back, each on a fresh input set
(drawn for that call, never seen by the candidate before), with the L2 flushed before each
call and CUDA events around each, and one synchronization for the whole batch — the scheme
of `triton.testing.do_bench`, so host launch cost is not in the figure (it is measured on
its own: `host_ms`, the time to enqueue one call with the GPU idle). On the CPU the host
clock around each call. A trial's figure per side is the median of its calls; the speedup
is the median over trials of the per-trial ratio baseline / candidate, its noise the spread
(max - min) / median of those ratios. The order of the two sides alternates by trial.

In the judge (`engine/judge.py`) the two sides run in two executors, the candidate's
sandboxed and stopped whenever it is not asked to work; what its runner reports is bounded
by the judge's own clock (`bound_by_wall`), and any sign of a bent timer is a flag.

This module holds the records and the statistics (no torch at import: the store and the
TUI read timing records without it), and `paired_timing`, the same scheme in one process
for trusted code (bench scripts).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

L2_FLUSH_BYTES = 256 << 20  # > 60 MB L2 of an H100/H200, with room for larger parts
TIMER_GPU = "cuda_event_batch"  # events per call, calls back to back, one sync per batch
TIMER_CPU = "perf_counter"
# A candidate batch whose events fall short of the judge's wall time by more than this share
# (beyond the per-call overhead the baseline's batches show) is credited with the wall time.
WALL_SLACK = 0.10
WALL_SLACK_MS = 2.0
# On the CPU a batch of millisecond calls shares two cores with the judge and the other
# executor: an honest batch was seen 4.7 ms over its events (of 14.6 ms) under a test suite's
# load. A clock that stops is still caught there by the cover rule, which needs only 1 ms.
WALL_SLACK_MS_CPU = 10.0
WALL_COVER_BUSY_MS = 1.0
WALL_COVER_MIN = 0.25
FLOOR_MARGIN = 0.9  # a time below 0.9 x the shape's byte floor is SUSPECT


@dataclass
class SideTiming:
    median_ms: float
    spread: float  # (max - min) / median over trials
    trial_ms: list[float] = field(default_factory=list)
    host_ms: float | None = None  # host time to enqueue one call, the GPU idle (median)


@dataclass
class PairedTiming:
    baseline: SideTiming
    candidate: SideTiming
    speedup: float  # baseline / candidate
    trials: int
    repeats: int
    timer: str  # "cuda_event_batch", "perf_counter" (and "cuda_event" in records of the first wave)
    flush_l2: bool
    # per trial: baseline / candidate on the same inputs, and (max - min) / median of those
    trial_speedups: list[float] = field(default_factory=list)
    ratio_spread: float | None = None
    flags: list[str] = field(default_factory=list)  # what the judge found odd, each with its reason
    suspect: str = ""  # why this timing cannot be admitted (a bent timer, below the physical floor)
    floor_ms: float | None = None  # bytes moved / measured bandwidth at this shape (GPU)
    audited: int = 0  # timed calls whose outputs the judge checked after the fact
    sets_per_batch: int = 0  # distinct fresh input sets per batch (= calls per batch)
    raced: str = ""  # why timing stopped before its last trial (the figure is partial: never admitted)

    @property
    def noise(self) -> float:
        """How far a speedup moves between trials: a speedup within 1 +- noise is not a
        difference. The spread of the per-trial paired ratios (a drift of the chip's clock
        between trials moves both sides and cancels there); records from before it existed
        give the larger spread of the two sides."""
        return _noise(self.ratio_spread, self.baseline.spread, self.candidate.spread)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PairedTiming":
        known = {f.name for f in fields(cls)}
        side = {f.name for f in fields(SideTiming)}
        d = {k: v for k, v in d.items() if k in known}
        return cls(**{**d, "baseline": SideTiming(**{k: v for k, v in d["baseline"].items() if k in side}),
                      "candidate": SideTiming(**{k: v for k, v in d["candidate"].items() if k in side})})


def _noise(ratio_spread: float | None, baseline_spread: float, candidate_spread: float) -> float:
    return ratio_spread if ratio_spread is not None else max(baseline_spread, candidate_spread)


def noise_of(timing: dict | None) -> float | None:
    """`PairedTiming.noise` of a stored timing record (its dict)."""
    if not timing:
        return None
    return _noise(timing.get("ratio_spread"), (timing.get("baseline") or {}).get("spread") or 0.0,
                  (timing.get("candidate") or {}).get("spread") or 0.0)


def _side(trial_ms: list[float], host_ms: float | None = None) -> SideTiming:
    med = statistics.median(trial_ms)
    spread = (max(trial_ms) - min(trial_ms)) / med if med > 0 else 0.0
    return SideTiming(median_ms=med, spread=spread, trial_ms=list(trial_ms), host_ms=host_ms)


def summarize(base_ms: list[float], cand_ms: list[float], *, repeats: int, timer: str, flush_l2: bool,
              host: tuple[float | None, float | None] = (None, None), **extra) -> PairedTiming:
    """Per-trial figures of both sides -> the paired record."""
    b, c = _side(base_ms, host[0]), _side(cand_ms, host[1])
    ratios = paired_ratios(base_ms, cand_ms)
    speedup = statistics.median(ratios)  # the paired estimate: each trial's two sides saw one chip state
    spread = (max(ratios) - min(ratios)) / speedup if speedup > 0 else 0.0
    return PairedTiming(baseline=b, candidate=c, speedup=speedup, trials=len(base_ms), repeats=repeats,
                        timer=timer, flush_l2=flush_l2, trial_speedups=ratios, ratio_spread=spread, **extra)


def batch_overhead(events_ms: list[float], wall_ms: float, lead: bool) -> float:
    """What a (trusted) batch cost per call beyond its calls' events; an untimed lead-in call
    is taken to cost what the median timed call does."""
    extra = statistics.median(events_ms) if lead else 0.0
    return (wall_ms - sum(events_ms) - extra) / len(events_ms)


def bound_by_wall(events_ms: list[float], wall_ms: float, overhead_per_call_ms: float,
                  lead: bool = False, slack_ms: float = WALL_SLACK_MS) -> tuple[float, str]:
    """The candidate's per-call figure for one batch, bounded by the judge's wall clock.

    `events_ms`: what the executor reported for each call; `wall_ms`: what the judge measured
    from its side for the whole batch (request to answer, the device synchronized at the end);
    `overhead_per_call_ms`: what a batch costs per call beyond its calls' events (flush,
    copy-out, launch gaps), as the trusted baseline's batches show it. Returns (median per
    call to credit, a flag or ""). Work hidden on a side stream, deferred past the end event,
    or a clock that stops while the candidate runs all leave the wall time standing."""
    med = statistics.median(events_ms)
    n = len(events_ms)
    if lead:  # the untimed lead-in call: credited what the candidate's own calls say (a bent figure buys nothing)
        wall_ms -= med
    busy = wall_ms - n * max(overhead_per_call_ms, 0.0)  # what the calls themselves took, by the judge's clock
    unexplained = busy - sum(events_ms)
    # beyond a tenth of the wall and `slack_ms`; or, however short the batch, events covering
    # under a quarter of what the calls took (a clock that stops reads ~0 at any size)
    if unexplained <= WALL_SLACK * wall_ms + slack_ms and not (
            busy > WALL_COVER_BUSY_MS and sum(events_ms) < WALL_COVER_MIN * busy):
        return med, ""
    credited = max(med, busy / n)
    flag = (f"wall-bound: the batch's events cover {sum(events_ms):.3g} ms of the {wall_ms:.3g} ms the judge "
            f"measured ({n} calls; {overhead_per_call_ms:.3g} ms a call of overhead allowed); credited "
            f"{credited:.4g} ms a call instead of {med:.4g}")
    return credited, flag


def floor_check(candidate_ms: float, floor_ms: float | None) -> str:
    if floor_ms and candidate_ms < FLOOR_MARGIN * floor_ms:
        return (f"below the physical floor: {candidate_ms:.4g} ms a call where moving the shape's bytes once "
                f"takes {floor_ms:.4g} ms at the measured bandwidth")
    return ""


def bytes_moved(dims: dict) -> int:
    """Inputs read once and outputs written once (KDA.md §6): q, k, g, v, beta, o in bf16,
    the initial and final states in fp32."""
    B, T, H, K, V = (dims[k] for k in "BTHKV")
    return 2 * (3 * B * T * H * K + 2 * B * T * H * V + B * T * H) + 2 * 4 * B * H * V * K


# --------------------------------------------------------------------------- one process (trusted code)

class BatchTimer:
    """Times a batch of calls the do_bench way (events per call, back to back, one sync);
    the host clock per call on the CPU."""

    def __init__(self, device: str, flush_l2: bool = True):
        import torch  # here, not at import: see the module docstring

        self.torch = torch
        self.cuda = device.startswith("cuda")
        self.name = TIMER_GPU if self.cuda else TIMER_CPU
        self.flush_l2 = flush_l2 and self.cuda
        self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device) if self.flush_l2 else None

    def batch(self, calls: list[Callable[[], Any]]) -> tuple[list[float], Any]:
        """(each call's ms, the last call's output): outputs are dropped as the next call
        starts, so the caching allocator reuses their blocks (see runner.Runner.batch)."""
        import time

        torch = self.torch
        out = None
        if not self.cuda:
            ms = []
            for c in calls:
                t0 = time.perf_counter()
                out = c()
                ms.append((time.perf_counter() - t0) * 1e3)
            return ms, out
        starts = [torch.cuda.Event(enable_timing=True) for _ in calls]
        ends = [torch.cuda.Event(enable_timing=True) for _ in calls]
        torch.cuda.synchronize()
        for s, e, c in zip(starts, ends, calls):
            if self._flush is not None:
                self._flush.zero_()
            out = None
            s.record()
            out = c()
            e.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)], out

    def host_ms(self, call: Callable[[], Any], n: int = 3) -> float:
        import time

        sync = self.torch.cuda.synchronize if self.cuda else (lambda: None)
        ms = []
        for _ in range(n):
            sync()
            t0 = time.perf_counter()
            call()
            ms.append((time.perf_counter() - t0) * 1e3)
            sync()
        return statistics.median(ms)


def paired_timing(baseline: Callable[[Any], Any], candidate: Callable[[Any], Any],
                  make_inputs: Callable[[int], Any], *, device: str, trials: int = 5,
                  warmup: int = 3, repeats: int = 10, flush_l2: bool = True,
                  progress: Callable[[int, int, str], None] | None = None,
                  keep_last: Callable[[Any, Any], None] | None = None) -> PairedTiming:
    """Time `candidate(inputs)` against `baseline(inputs)` in this process (trusted code
    only: bench scripts). `make_inputs(i)` returns the i-th fresh input set (one per timed
    call: `trials * repeats` of them, and one for the warm-up); `keep_last(inputs, output)`
    receives the candidate's last timed output."""
    timer = BatchTimer(device, flush_l2)
    fns = {"baseline": baseline, "candidate": candidate}
    x0 = make_inputs(-1)
    for side in fns:
        for _ in range(warmup):
            fns[side](x0)
    host = tuple(timer.host_ms(lambda f=fns[s]: f(x0)) for s in fns)
    del x0
    per_trial: dict[str, list[float]] = {"baseline": [], "candidate": []}
    for trial in range(trials):
        if progress:
            progress(trial, trials, f"trial {trial + 1}/{trials}")
        xs = [make_inputs(trial * repeats + r) for r in range(repeats)]
        order = ("baseline", "candidate") if trial % 2 == 0 else ("candidate", "baseline")
        last = None
        for side in order:
            ms, got = timer.batch([lambda f=fns[side], x=x: f(x) for x in xs])
            per_trial[side].append(statistics.median(ms))
            if side == "candidate":
                last = got
        if keep_last is not None and trial == trials - 1:
            keep_last(xs[-1], last)
        xs = last = got = None  # free this trial's inputs before the next are drawn
    if progress:
        progress(trials, trials, "timed")
    return summarize(per_trial["baseline"], per_trial["candidate"], repeats=repeats, timer=timer.name,
                     flush_l2=timer.flush_l2, host=host, sets_per_batch=repeats)


def paired_ratios(base_ms: list[float], cand_ms: list[float]) -> list[float]:
    """Each trial's baseline / candidate (0 where the candidate read 0)."""
    return [tb / tc if tc > 0 else 0.0 for tb, tc in zip(base_ms, cand_ms)]


def race_out(trial_speedups: list[float], bar: float | None, trials_left: int) -> str:
    """Why timing can stop now, or "": with trials still to come, even the best trial so far
    (baseline / candidate, paired) is below `bar`, the least speedup that could be admitted."""
    if not bar or not trial_speedups or trials_left <= 0:
        return ""
    best = max(trial_speedups)
    if best >= bar:
        return ""
    n = len(trial_speedups)
    return (f"raced out after {n} trial{'s' if n > 1 else ''}: at best {best:.3g}x, below the {bar:.3g}x "
            f"its family's member sets; {trials_left} trial{'s' if trials_left > 1 else ''} not run")
