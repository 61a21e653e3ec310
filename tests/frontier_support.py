"""Helpers of the frontier, store, archive and generalize tests: a temporary git repo, a
small task, synthetic Evaluation records, and a fake evaluator that reads the speedups a
test planted in a candidate's kernel.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from kdatui.engine.task import Search, Shape, Task

SHAPES = {
    "p": Shape("p", B=1, T=64, H=2, K=32, V=32),
    "q": Shape("q", B=2, T=64, H=2, K=32, V=32),
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A git repo with one commit, like a user's project: `files` (relative path -> text),
    by default a README."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test User")
    git(path, "config", "user.email", "test@example.com")
    for name, text in (files or {"README.md": "a user's project\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "first commit")
    return path


def make_task(shapes=("p", "q"), *, name: str = "kt", max_per_family: int = 3, path: Path | None = None) -> Task:
    task = Task(name=name, shapes={s: SHAPES[s] for s in shapes}, primary_shape=shapes[0],
                search=Search(max_members_per_family=max_per_family))
    if path is not None:
        task.save(path)
    return task


def evaluation(shape: Shape, speedup: float | None, *, verdict: str = "PASS", noise: float = 0.02,
               task: str = "kt", candidate: str = "cand", baseline_ms: float = 2.0):
    """A synthetic Evaluation: checks that pass (or one that fails) and a paired timing."""
    # imported here: they pull in torch, which the crash tests' child processes do not need
    from kdatui.engine.checks import CheckReport, CheckResult
    from kdatui.engine.records import Evaluation
    from kdatui.engine.timing import PairedTiming, SideTiming

    first = CheckResult("preflight", "PASS", max_abs=1e-3, max_rel=1e-3, rms_ratio=1e-3)
    probe = CheckResult("random", verdict, reason="" if verdict == "PASS" else "o: 12 of 4096 elements out of tolerance",
                        max_abs=2e-3, max_rel=2e-3, rms_ratio=2e-3 if verdict == "PASS" else 0.2)
    checks = CheckReport(candidate=candidate, task=task, shape=shape.name, dims=shape.dims(), device="cpu",
                         results=[first, probe])
    timing = None
    if verdict == "PASS" and speedup is not None:
        cand_ms = baseline_ms / speedup
        timing = PairedTiming(baseline=SideTiming(baseline_ms, noise, [baseline_ms] * 3),
                              candidate=SideTiming(cand_ms, noise, [cand_ms] * 3), speedup=speedup,
                              trials=3, repeats=2, timer="perf_counter", flush_l2=False)
    return Evaluation(candidate=candidate, task=task, shape=shape.name, dims=shape.dims(), verdict=verdict,
                      reason="" if verdict == "PASS" else probe.reason, checks=checks, timing=timing,
                      post_timing="PASS" if timing else "", baseline="torch", device="cpu", harness="1")


def kernel_source(speeds: dict[str, float], fail: tuple[str, ...] = (), note: str = "") -> str:
    planted = " ".join(f"{s}={v}" for s, v in speeds.items())
    fails = f"\n# fake-fail: {' '.join(fail)}" if fail else ""
    return (f'"""A planted candidate for the frontier tests. {note}"""\n\n# fake: {planted}{fails}\n\n'
            f"def kda_forward(q, k, v, g, beta, **kw):\n    raise NotImplementedError\n")


class FakeEvaluator:
    """Evaluates by reading `# fake: p=1.5 q=1.2` (speedups) and `# fake-fail: q` from the
    candidate's kernel.py; records every call."""

    def __init__(self, noise: float = 0.02):
        self.noise = noise
        self.calls: list[tuple[str, str, list[str]]] = []
        self.races: list[dict] = []  # the racing bars each call was given

    def evaluate(self, task, candidate_path, shapes=None, *, progress=None, timing=True, race=None):
        text = (Path(candidate_path) / "kernel.py").read_text()
        speeds = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", re.search(r"# fake: (.*)", text).group(1))}
        m = re.search(r"# fake-fail: (.*)", text)
        fails = set(m.group(1).split()) if m else set()
        names = [s if isinstance(s, str) else s.name for s in (shapes or task.shapes)]
        self.calls.append((task.name, str(candidate_path), names))
        out = []
        for i, name in enumerate(names):
            if progress:
                progress({"event": "progress", "shape": name, "done": i, "total": len(names), "label": "fake"})
            shape = task.shapes[name]
            speed = speeds.get(name, speeds.get("default", 1.0))
            ev = evaluation(shape, speed, verdict="FAIL" if name in fails else "PASS", noise=self.noise,
                            task=task.name, candidate=str(candidate_path))
            bar = (race or {}).get(name)
            if ev.verdict == "PASS" and bar and speed < bar:  # as the judge races: one trial, then stop
                ev.verdict, ev.timing.raced = "RACED", f"raced out after 1 trial: at best {speed}x, below {bar:.3g}x"
                ev.reason, ev.timing.trials = f"timing: {ev.timing.raced}", 1
            out.append(ev)
        self.races.append(dict(race or {}))
        return out


def try_candidate(fr, run_id: str, task: Task, family: str, name: str, speeds: dict[str, float], *,
                  fail: tuple[str, ...] = (), parent: str | None = None, idea: str | None = None,
                  evaluator: FakeEvaluator | None = None, consider: bool = True):
    """Propose, evaluate (fake), record and (by default) consider one candidate. Returns
    (attempt, admission or None)."""
    idea = idea or f"{family} kernel, {name}: planted speeds {speeds}."
    att = fr.propose(run_id, task, family=family, name=name, idea=idea, parent=parent,
                     reason=f"try {name}",
                     files={"kernel.py": kernel_source(speeds, fail, note=name),
                            "IDEA.md": f"# {family}-{name}\n\nfamily: {family}\n\n{idea}\n"})
    fr.start_evaluation(att.id)
    evals = (evaluator or FakeEvaluator()).evaluate(task, fr.candidate_path(att))
    att = fr.record_evaluations(att.id, task, evals)
    return att, (fr.consider(task, att.id) if consider else None)
