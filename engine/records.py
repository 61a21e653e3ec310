"""Plain records that cross module and process boundaries (JSON round trip): the checks'
verdicts and an evaluation. No torch here: the CLI, the store and the TUI read them cheaply."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .timing import PairedTiming

HARNESS_VERSION = "2"  # 2: judge and sandboxed executor; batch timing on fresh inputs (2026-12-01)
# RACED (an evaluation's): the checks passed, and timing stopped early because the candidate
# could not be admitted (judge.time_pair); its partial figure stays, it is never admitted
VERDICTS = ("PASS", "RACED", "FAIL", "FLAKY", "SUSPECT", "ERROR")


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
    for v in ("ERROR", "FAIL", "SUSPECT", "FLAKY", "RACED"):
        if v in verdicts:
            return v
    return "PASS"


@dataclass
class Evaluation:
    """One candidate at one shape: every check verdict and the paired timing."""

    candidate: str
    task: str
    shape: str
    dims: dict
    verdict: str  # PASS / FAIL / FLAKY / SUSPECT / ERROR over checks, timing and the post-timing audit
    reason: str = ""  # one line: why not PASS (empty when PASS)
    checks: CheckReport | None = None
    timing: PairedTiming | None = None
    post_timing: str = ""  # verdict of the audit of timed outputs picked after the fact ("" if not timed)
    baseline: str = ""  # "fla", "torch", or a kernel path
    device: str = ""
    harness: str = ""
    seconds: dict = field(default_factory=dict)  # {"checks": s, "timing": s, "total": s}
    log: str = ""  # the executor's (or judge's) last stderr lines when it died or the harness failed

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
