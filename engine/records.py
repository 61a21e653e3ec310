"""Plain records that cross module and process boundaries (JSON round trip)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .checks import CheckReport, worst
from .timing import PairedTiming


@dataclass
class Evaluation:
    """One candidate at one shape: every check verdict and the paired timing."""

    candidate: str
    task: str
    shape: str
    dims: dict
    verdict: str  # PASS / FAIL / FLAKY / ERROR over checks, timing and the post-timing check
    reason: str = ""  # one line: why not PASS (empty when PASS)
    checks: CheckReport | None = None
    timing: PairedTiming | None = None
    post_timing: str = ""  # verdict of the check of the last timed output ("" if not timed)
    baseline: str = ""  # "fla", "torch", or a kernel path
    device: str = ""
    harness: str = ""
    seconds: dict = field(default_factory=dict)  # {"checks": s, "timing": s, "total": s}
    log: str = ""  # the worker's last stderr lines when it died or the harness failed (diagnostics)

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup if self.timing else None

    @property
    def candidate_ms(self) -> float | None:
        return self.timing.candidate.median_ms if self.timing else None

    @property
    def baseline_ms(self) -> float | None:
        return self.timing.baseline.median_ms if self.timing else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["checks"] = self.checks.to_dict() if self.checks else None
        d["timing"] = self.timing.to_dict() if self.timing else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Evaluation":
        d = dict(d)
        d["checks"] = CheckReport.from_dict(d["checks"]) if d.get("checks") else None
        d["timing"] = PairedTiming.from_dict(d["timing"]) if d.get("timing") else None
        return cls(**d)

    @classmethod
    def error(cls, candidate: str, task: str, shape, reason: str, **kw) -> "Evaluation":
        return cls(candidate=candidate, task=task, shape=shape.name, dims=shape.dims(), verdict="ERROR",
                   reason=reason, **kw)


def overall(evaluations: list[Evaluation]) -> str:
    return worst([e.verdict for e in evaluations]) if evaluations else "ERROR"
