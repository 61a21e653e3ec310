"""The curve of a search: the best speedup on the task's primary shape over time, and
every attempt as a point (passed, failed, error, raced out), from the store. What the
TUI's chart draws and `kdatui curve [--json|--csv|--png FILE]` exports.

Time is seconds since the task's first attempt. A point's speedup is its own on the
primary shape (None when it has none: a failed check, an error); `best` is the step
function of the best passing speedup so far.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, field

KINDS = ("passed", "failed", "error", "raced")  # raced: timed once, stopped (it could not be admitted)


@dataclass
class Point:
    attempt: int
    t: float  # seconds since the task's first attempt
    ts: float  # when it was evaluated (epoch)
    name: str
    family: str
    kind: str  # one of KINDS
    speedup: float | None
    noise: float | None
    best: bool = False  # it raised the best so far


@dataclass
class Curve:
    task: str
    shape: str  # the primary shape
    baseline: str = ""
    device: str = ""
    points: list[Point] = field(default_factory=list)

    @property
    def best(self) -> list[tuple[float, float]]:
        """(t, best speedup so far) at each point that raised it."""
        return [(p.t, p.speedup) for p in self.points if p.best and p.speedup is not None]

    def to_dict(self, last: int | None = None) -> dict:
        points = self.points[-last:] if last else self.points
        return {"task": self.task, "shape": self.shape, "baseline": self.baseline, "device": self.device,
                "points": [asdict(p) for p in points], "best": [list(b) for b in self.best]}

    def csv(self) -> str:
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["attempt", "t_s", "ts", "name", "family", "kind", "speedup", "noise", "best_so_far"])
        best = None
        for p in self.points:
            if p.best:
                best = p.speedup
            w.writerow([p.attempt, f"{p.t:.1f}", f"{p.ts:.1f}", p.name, p.family, p.kind,
                        "" if p.speedup is None else f"{p.speedup:.4f}",
                        "" if p.noise is None else f"{p.noise:.4f}", "" if best is None else f"{best:.4f}"])
        return out.getvalue()


def kind_of(status: str, verdict: str | None, cell) -> str:
    data = getattr(cell, "data", None) or {}
    if data.get("raced") or (data.get("timing") or {}).get("raced"):
        return "raced"
    if verdict == "error" or status == "error" or (cell is not None and cell.verdict == "ERROR"):
        return "error"
    if verdict == "passed" or status in ("passed", "admitted", "admitting"):
        return "passed"
    return "failed"


def curve_of(store, task_name: str, *, baseline: str = "") -> Curve:
    """The curve of a task from the store (every evaluated attempt of every run of it)."""
    info = store.task(task_name)
    if info is None:
        return Curve(task=task_name, shape="", baseline=baseline)
    shape = info.primary_shape
    c = Curve(task=task_name, shape=shape, baseline=baseline)
    attempts = [a for a in store.attempts(task=task_name) if a.verdict is not None and a.status != "evaluating"]
    t0 = min((a.created for a in attempts), default=0.0)
    best = None
    for a in attempts:
        cells = {e.shape: e for e in store.evaluations(a.id, task_name)}
        cell = cells.get(shape)
        kind = kind_of(a.status, a.verdict, cell)
        sp = cell.speedup if cell is not None and cell.verdict == "PASS" else None
        ts = cell.created if cell is not None else a.updated
        if not c.device and cell is not None:
            c.device = str(cell.data.get("device") or "")
        raised = kind == "passed" and sp is not None and (best is None or sp > best)
        if raised:
            best = sp
        c.points.append(Point(attempt=a.id, t=max(0.0, ts - t0), ts=ts, name=a.name, family=a.family, kind=kind,
                              speedup=sp, noise=cell.noise if cell is not None else None, best=raised))
    return c


def save_png(curve: Curve, path) -> None:
    """A PNG of the curve with matplotlib (`pip install kdatui[plot]`); ImportError without it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    style = {"passed": ("o", "tab:green"), "failed": ("x", "tab:red"), "error": ("x", "tab:purple"),
             "raced": (".", "tab:gray")}
    floor = min([p.speedup for p in curve.points if p.speedup is not None] or [1.0])
    for kind, (marker, color) in style.items():
        pts = [p for p in curve.points if p.kind == kind]
        if pts:
            ax.scatter([p.t / 60 for p in pts], [p.speedup if p.speedup is not None else floor for p in pts],
                       marker=marker, color=color, label=f"{kind} ({len(pts)})", zorder=3)
    if curve.best:
        xs = [t / 60 for t, _ in curve.best] + [max(p.t for p in curve.points) / 60]
        ys = [s for _, s in curve.best] + [curve.best[-1][1]]
        ax.step(xs, ys, where="post", color="tab:orange", label="best so far", zorder=2)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel("minutes since the first attempt")
    ax.set_ylabel(f"speedup over {curve.baseline or 'the baseline'} on {curve.shape}")
    title = f"{curve.task}: the search" + (" (CPU: interpreter timings, not performance figures)"
                                           if curve.device.startswith("cpu") else "")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


__all__ = ["Curve", "Point", "KINDS", "curve_of", "save_png"]
