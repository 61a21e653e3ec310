"""Paired timing: baseline and candidate alternate in one process, trial by trial.

Each trial draws fresh inputs, warms both up, then times `repeats` calls of each,
interleaved call by call in alternating order (B C C B B C ...), with the L2 cache flushed
before every call (a write of a buffer larger than L2), on device events (GPU) or the
host clock (CPU). A trial's figure per side is the median of its calls; the speedup is the
median over trials of baseline / candidate, and its spread (max - min) / median of those
per-trial ratios. Each side's own median and spread over trials are kept beside it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

L2_FLUSH_BYTES = 256 << 20  # > 60 MB L2 of an H100/H200, with room for larger parts


@dataclass
class SideTiming:
    median_ms: float
    spread: float  # (max - min) / median over trials
    trial_ms: list[float] = field(default_factory=list)


@dataclass
class PairedTiming:
    baseline: SideTiming
    candidate: SideTiming
    speedup: float  # baseline / candidate
    trials: int
    repeats: int
    timer: str  # "cuda_event" or "perf_counter"
    flush_l2: bool
    # per trial: baseline / candidate on the same inputs, and (max - min) / median of those
    trial_speedups: list[float] = field(default_factory=list)
    ratio_spread: float | None = None

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
        return cls(**{**d, "baseline": SideTiming(**d["baseline"]), "candidate": SideTiming(**d["candidate"])})


def _noise(ratio_spread: float | None, baseline_spread: float, candidate_spread: float) -> float:
    return ratio_spread if ratio_spread is not None else max(baseline_spread, candidate_spread)


def noise_of(timing: dict | None) -> float | None:
    """`PairedTiming.noise` of a stored timing record (its dict)."""
    if not timing:
        return None
    return _noise(timing.get("ratio_spread"), (timing.get("baseline") or {}).get("spread") or 0.0,
                  (timing.get("candidate") or {}).get("spread") or 0.0)


class Timer:
    """Times one call with the L2 flushed first; `cuda_event` on a GPU, else the host clock."""

    def __init__(self, device: str, flush_l2: bool = True):
        self.cuda = device.startswith("cuda")
        self.flush_l2 = flush_l2 and self.cuda
        self.name = "cuda_event" if self.cuda else "perf_counter"
        import torch  # here, not at import: the store and the TUI read timing records without torch

        self._torch = torch
        self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device) if self.flush_l2 else None

    def __call__(self, fn: Callable[[], Any]) -> float:
        if self._flush is not None:
            self._flush.zero_()
        if self.cuda:
            start = self._torch.cuda.Event(enable_timing=True)
            end = self._torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def _side(trial_ms: list[float]) -> SideTiming:
    med = statistics.median(trial_ms)
    spread = (max(trial_ms) - min(trial_ms)) / med if med > 0 else 0.0
    return SideTiming(median_ms=med, spread=spread, trial_ms=trial_ms)


def paired_timing(baseline: Callable[[Any], Any], candidate: Callable[[Any], Any],
                  make_inputs: Callable[[int], Any], *, device: str, trials: int = 5,
                  warmup: int = 3, repeats: int = 10, flush_l2: bool = True,
                  progress: Callable[[int, int, str], None] | None = None,
                  keep_last: Callable[[Any, Any], None] | None = None) -> PairedTiming:
    """Time `candidate(inputs)` against `baseline(inputs)`. `make_inputs(trial)` returns
    fresh inputs; `keep_last(inputs, output)` receives the candidate's last timed output
    (for the post-timing check)."""
    timer = Timer(device, flush_l2)
    times: dict[str, list[float]] = {"baseline": [], "candidate": []}
    fns = {"baseline": baseline, "candidate": candidate}
    for trial in range(trials):
        if progress:
            progress(trial, trials, f"trial {trial + 1}/{trials}")
        x = make_inputs(trial)
        for side in ("baseline", "candidate"):
            for _ in range(warmup):
                fns[side](x)
        samples: dict[str, list[float]] = {"baseline": [], "candidate": []}
        outs: dict = {}
        for r in range(repeats):
            # Call by call, in alternating order: a drift of the chip's clock or temperature
            # during the trial lands on both sides alike instead of on whichever ran second.
            order = ("baseline", "candidate") if (r + trial) % 2 == 0 else ("candidate", "baseline")
            for side in order:
                def call(side=side):
                    outs[side] = fns[side](x)
                samples[side].append(timer(call))
        for side in ("baseline", "candidate"):
            times[side].append(statistics.median(samples[side]))
        if keep_last is not None and trial == trials - 1:
            keep_last(x, outs.get("candidate"))
        x = outs = None  # free this trial's inputs before the next are drawn
    if progress:
        progress(trials, trials, "timed")
    b, c = _side(times["baseline"]), _side(times["candidate"])
    ratios = [tb / tc if tc > 0 else 0.0 for tb, tc in zip(times["baseline"], times["candidate"])]
    speedup = statistics.median(ratios)  # the paired estimate: each trial's two sides saw one chip state
    spread = (max(ratios) - min(ratios)) / speedup if speedup > 0 else 0.0
    return PairedTiming(baseline=b, candidate=c, speedup=speedup, trials=trials, repeats=repeats,
                        timer=timer.name, flush_l2=timer.flush_l2, trial_speedups=ratios, ratio_spread=spread)
