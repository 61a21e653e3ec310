"""Generalize and recheck: carry a frontier member to more shapes, or re-measure it.

`generalize` writes a new task file whose shapes are the old ones plus the new (the
primary shape stays), starts the new task's frontier from the member (a branch
`frontier/<newtask>/<name>` whose first commit is the member's, with the candidate moved to
`candidates/<newtask>/`), and re-checks and times it on every shape through the evaluator
it is given. The evaluations are recorded; nothing is averaged.

The evaluator is any object with `evaluate(task, candidate_path, shapes=None, *,
progress=None) -> list[Evaluation]` (engine/evaluator.py; tests pass a fake).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from .frontier import Admission, Frontier
from .gitrepo import candidate_dir
from .store import FrontierError, ShapeEvaluation
from .task import Shape, Task, TaskError, parse_shape_spec


class Evaluator(Protocol):
    def evaluate(self, task: Task, candidate_path: Any, shapes: Any = None, *,
                 progress: Callable | None = None) -> list: ...


@dataclass
class Generalized:
    task: Task  # the new task
    task_path: Path
    member: str
    branch: str
    attempt: int
    run: str
    evaluations: list[ShapeEvaluation] = field(default_factory=list)
    admission: Admission | None = None

    @property
    def failures(self) -> list[str]:
        return [f"{e.shape}: {e.verdict}" + (f" ({e.data.get('reason')})" if e.data.get("reason") else "")
                for e in self.evaluations if e.verdict != "PASS"]


def parse_extra_shapes(task: Task, specs: list[str]) -> dict[str, Shape]:
    """Shapes from the command line (`B=1,T=4096,H=64`, `name:B=..`, or `b1_t4096_h64`; several
    in one argument may be separated by ';'), each new to the task."""
    parts = [p.strip() for spec in specs for p in spec.split(";") if p.strip()]
    if not parts:
        raise TaskError("generalize: no shapes given; pass e.g. --shapes B=1,T=4096,H=64 b2_t2048_h32")
    extra: dict[str, Shape] = {}
    for spec in parts:
        try:
            s = parse_shape_spec(spec)
        except TaskError as e:
            raise TaskError(str(e) if repr(spec) in str(e) else f"shape {spec!r}: {e}") from None
        known = {**task.shapes, **extra}
        same = next((n for n, t in known.items() if t.dims() == s.dims()), None)
        if same is not None:
            raise TaskError(f"shape {spec!r} ({s.label()}) is already in {task.name} as {same!r}")
        if s.name in known:
            raise TaskError(f"shape {spec!r}: the name {s.name!r} is already used by {known[s.name].label()}; "
                            f"name it with NAME:B=..,T=..,H=..")
        extra[s.name] = s
    return extra


def plan_text(task: Task, member: str, extra: dict[str, Shape], path: Path | str | None, continue_search: bool) -> str:
    """What `generalize` is about to do, in one line, before it waits on anything."""
    where = f" into {path}" if path else ""
    then = "then the search continues on the new task" if continue_search else "the search stays on " + task.name
    return (f"generalize {task.name}/{member} to {len(task.shapes) + len(extra)} shapes (adds "
            f"{', '.join(f'{n} [{s.label()}]' for n, s in extra.items())}): writes the task{where}, re-checks and "
            f"times {member} on every shape, seeds the new frontier with it; {then}")


def task_file_note(fr: Frontier, path: Path | str) -> str:
    """Where the new task file is, and that git does not track it yet (nothing is left
    behind silently): the sentence the CLI and the TUI show."""
    path = Path(path)
    try:
        shown = path.resolve().relative_to(fr.repo.root.resolve())
    except ValueError:
        shown = path
    if fr.repo.is_tracked(path):
        return f"task file {shown}"
    return f"task file {shown} (not tracked by git: `git add {shown}` to keep it with the repo)"


def default_task_path(fr: Frontier, name: str) -> Path:
    return fr.repo.root / "tasks" / f"{name}.toml"


def generalize(fr: Frontier, task: Task, member: str, shape_specs: list[str], *, evaluator: Evaluator,
               task_out: str | Path | None = None, new_name: str | None = None,
               progress: Callable | None = None) -> Generalized:
    m = fr.find(member, task.name)
    extra = parse_extra_shapes(task, shape_specs)
    n_shapes = len(task.shapes) + len(extra)
    name = new_name or (Path(task_out).stem if task_out else f"{task.name}-{n_shapes}shapes")
    if name == task.name:
        raise TaskError(f"generalize: the new task needs a name other than {task.name!r} (--task-out NEW.toml)")
    path = Path(task_out) if task_out else default_task_path(fr, name)
    if path.exists():
        raise TaskError(f"{path}: exists already; pick another --task-out")
    if fr.store.members(name, states=("member", "pruned", "admitting")):
        raise FrontierError(f"task {name} has a frontier already; pick another name (--task-out)")
    new = task.with_shapes(extra, name)
    new.generalized_from = f"{task.name}/{m.name}"
    new.description = (f"{task.name} generalized from its member {m.name} to "
                       f"{', '.join(s.label() for s in extra.values())}. {task.description}").strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    new.save(path)

    run = fr.start_run(new, agent="generalize", allow_dirty=True)
    origin = fr.attempt(m.attempt)
    att = fr.propose(run.id, new, family=m.family, name=m.name, idea=origin.idea, parent=m.branch,
                     reason=f"generalize {task.name}/{m.name} to {', '.join(extra)}",
                     copy_from=candidate_dir(task.name))
    fr.start_evaluation(att.id)
    try:
        evaluations = evaluator.evaluate(new, fr.candidate_path(att), None, progress=progress)
    except Exception as e:
        fr.record_evaluations(att.id, new, [])
        fr.set_run_state(run.id, "stopped", reason=f"evaluation failed: {e}")
        raise FrontierError(f"evaluating {m.name} on {name} failed: {type(e).__name__}: {e} "
                            f"(task file {path} written; no frontier yet)") from e
    fr.record_evaluations(att.id, new, evaluations)
    result = Generalized(task=new, task_path=path, member=m.name, branch="", attempt=att.id, run=run.id,
                         evaluations=fr.store.evaluations(att.id, name))
    why = f"generalized from {task.name}/{m.name} (kept there: {m.why})"
    if result.failures:
        why += "; fails on " + "; ".join(result.failures) + ": a seed to fix, not a passing member"
    result.admission = fr.seed(new, att.id, why)
    result.branch = result.admission.branch
    fr.set_run_state(run.id, "stopped", reason="generalize done")
    fr.store.event(run.id, "generalized", source_task=task.name, member=m.name, task=name, task_file=str(path),
                   shapes=list(new.shapes), branch=result.branch, failures=result.failures)
    return result


def recheck(fr: Frontier, task: Task, member: str, *, evaluator: Evaluator,
            progress: Callable | None = None) -> list[ShapeEvaluation]:
    """Re-check and re-time a member on every shape of its task from its commit (in a
    temporary worktree); record the evaluations, then prune its family by the new figures."""
    m = fr.find(member, task.name)
    wt = fr.worktrees_dir / f"recheck-{m.id}-{int(time.time() * 1000)}"
    fr.repo.add_detached_worktree(wt, m.sha)
    try:
        evaluations = evaluator.evaluate(task, wt / candidate_dir(task.name), None, progress=progress)
    finally:
        fr.repo.remove_worktree(wt)
    with fr.locked():
        fr.store.register_task(task)
        with fr.store.transaction():
            fr.store.add_evaluations(m.attempt, task.name, evaluations)
            evals = fr.store.evaluations(m.attempt, task.name)
            fr.store.event(None, "rechecked", task=task.name, name=m.name,
                           shapes={e.shape: {"verdict": e.verdict, "speedup": e.speedup} for e in evals})
        fr.enforce_family(task.name, m.family, f"after a recheck of {m.name}: ")
        with fr.store.transaction():
            fr.refresh_best(task.name)
        fr.reindex()
    return fr.store.evaluations(m.attempt, task.name)
