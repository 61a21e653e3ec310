"""The run loop: choose a parent, ask the agent for an attempt, evaluate it on the task's
shapes, apply the admission policy, record events — until the budget is spent or the
operator stops it. Pause, notes, prune, archive, generalize and recheck arrive from the
control socket through `RunControl`; anything that needs the evaluator (generalize,
recheck) runs here, between attempts, so GPU work never collides.
"""

from __future__ import annotations

import queue
import random
import re
import threading
import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .agents.base import Agent, AgentContext, AttemptView, MemberView, TurnResult
from .events import EventBus
from .gitrepo import candidate_dir
from .store import FrontierError
from .task import Task, load_task

FAILED_TURNS_PAUSE = 3  # failed agent turns in a row that pause the run
CHECKPOINT_S = 10.0  # how often the time spent is written to the store (a kill -9 loses at most this)


# --------------------------------------------------------------------------- budget

_AMOUNT = re.compile(r"(\+)?(\d+(?:\.\d+)?)\s*(h|hours?|m|min|minutes?|s|sec|seconds?|a|attempts?)")


def _amount(text: str, part: str) -> tuple[bool, str, float]:
    """`+2h` -> (True, "hours", 2.0); `50attempts` -> (False, "attempts", 50.0)."""
    m = _AMOUNT.fullmatch(part)
    if not m:
        raise ValueError(f"budget {text!r}: {part!r} is not like 6h, 90m, 30s or 50attempts"
                         f" (+2h or +20attempts to add)")
    plus, n, unit = bool(m.group(1)), float(m.group(2)), m.group(3)
    if unit.startswith("a"):
        return plus, "attempts", n
    return plus, "hours", n / {"h": 1, "m": 60, "s": 3600}[unit[0]]


@dataclass
class Budget:
    hours: float = 0.0  # 0: no limit
    attempts: int = 0  # 0: no limit

    @classmethod
    def parse(cls, text: str | None, task: Task | None = None) -> "Budget":
        """`6h`, `90m`, `45s`, `50attempts` (or `50a`), or both: `2h,50attempts`. None: the
        task's search.budget_hours / budget_attempts."""
        if not text:
            return cls(task.search.budget_hours if task else 0.0, task.search.budget_attempts if task else 0)
        b = cls()
        for part in filter(None, (p.strip() for p in text.replace("+", ",").split(","))):
            _plus, what, n = _amount(text, part)
            if what == "attempts":
                b.attempts = int(n)
            else:
                b.hours = n
        return b

    def changed(self, text: str, elapsed_s: float, attempts: int) -> "Budget":
        """The budget after an operator's change: `+2h` / `+20attempts` add to the limit
        (to what is spent so far when that side had no limit), `8h` / `50attempts` set it;
        several parts separated by commas."""
        b = Budget(self.hours, self.attempts)
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts:
            raise ValueError("budget: say how much, e.g. +2h, +20attempts or 8h")
        for part in parts:
            plus, what, n = _amount(text, part)
            if what == "attempts":
                b.attempts = int((b.attempts or attempts) + n) if plus else int(n)
            else:
                b.hours = ((b.hours or elapsed_s / 3600) + n) if plus else n
        return b

    def spent(self, elapsed_s: float, attempts: int) -> str | None:
        """Why the budget is spent (attempts made, time the run has been running), or None."""
        if self.attempts and attempts >= self.attempts:
            return f"budget spent: {attempts} attempts"
        if self.hours and elapsed_s >= self.hours * 3600:
            return f"budget spent: {self.hours:g} h"
        return None

    def describe(self) -> dict:
        return {"hours": self.hours or None, "attempts": self.attempts or None}

    def text(self) -> str:
        h = self.hours
        time_part = "" if not h else f"{h:g} h" if h >= 1 else f"{h * 60:.3g} min"
        parts = [time_part, f"{self.attempts} attempts" if self.attempts else ""]
        return ", ".join(p for p in parts if p) or "no limit"


def _spent(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


class RunClock:
    """The time a run has spent running: carried over restarts (the store keeps what was
    spent before), stopped while the run is paused or finished."""

    def __init__(self, spent_s: float = 0.0, now: Callable[[], float] = time.time):
        self._now = now
        self._before = float(spent_s or 0.0)
        self._since: float | None = None

    def start(self) -> None:
        if self._since is None:
            self._since = self._now()

    def halt(self) -> None:
        if self._since is not None:
            self._before += self._now() - self._since
            self._since = None

    @property
    def running(self) -> bool:
        return self._since is not None

    def elapsed(self) -> float:
        return self._before + (self._now() - self._since if self._since is not None else 0.0)


# --------------------------------------------------------------------------- control

@dataclass
class Job:
    name: str
    args: dict
    future: Future = field(default_factory=Future)


class RunControl:
    """State shared by the control socket (any thread) and the loop (its own thread)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.state = "running"  # running / paused / stopping / stopped / finished
        self.why = ""
        self.notes: list[str] = []
        self.jobs: queue.Queue[Job] = queue.Queue()

    def set(self, state: str, why: str = "") -> None:
        with self.cond:
            self.state, self.why = state, why
            self.cond.notify_all()

    def pause(self, why: str = "paused by the operator") -> None:
        with self.cond:
            if self.state == "running":
                self.state, self.why = "paused", why
            self.cond.notify_all()

    def resume(self) -> None:
        with self.cond:
            if self.state == "paused":
                self.state, self.why = "running", ""
            self.cond.notify_all()

    def stop(self, why: str = "stopped by the operator") -> None:
        with self.cond:
            if self.state not in ("stopped",):
                self.state, self.why = "stopping", why
            self.cond.notify_all()

    @property
    def stopping(self) -> bool:
        return self.state in ("stopping", "stopped")

    def submit(self, job_name: str, **args) -> Future:
        job = Job(job_name, args)
        self.jobs.put(job)
        with self.cond:
            self.cond.notify_all()
        return job.future

    def wait(self, timeout: float = 1.0) -> None:
        with self.cond:
            self.cond.wait(timeout)


# --------------------------------------------------------------------------- the loop

class RunLoop:
    def __init__(self, fr, evaluator, agent: Agent, bus: EventBus, task: Task, run_id: str, budget: Budget,
                 control: RunControl, *, evaluator_lock: threading.Lock | None = None,
                 engine_socket: Path | None = None, seed: int = 0, on_new_run: Callable | None = None,
                 idle_note: str = "until `kdatui stop`"):
        self.fr = fr
        self.evaluator = evaluator
        self.agent = agent
        self.bus = bus
        self.task = task
        self.run_id = run_id
        self.budget = budget
        self.control = control
        self.eval_lock = evaluator_lock or threading.Lock()
        self.engine_socket = engine_socket
        self.rng = random.Random(seed)
        self.on_new_run = on_new_run or (lambda loop: None)
        self.idle_note = idle_note
        self.started = time.time()  # when this process took the run
        # A resumed run keeps its budget: the attempts it made (the one a crash interrupted
        # counts once: it is evaluated again, not proposed again) and the time it ran.
        run = fr.store.run(run_id)
        self.clock = RunClock(getattr(run, "spent_s", 0.0) if run else 0.0)
        self.attempts_done = len(fr.store.attempts(run=run_id))
        self._checkpointed = 0.0
        self.save_budget()
        self.failed_turns = 0
        self.errors_in_row = 0
        self.current: dict | None = None
        self.configs: dict[int, dict | None] = {}
        self.phase = _phase(task)

    # ------------------------------------------------------------ driving

    def run(self) -> None:
        try:
            self._sync_clock()  # the re-evaluation of an interrupted attempt is time spent too
            self._resume_interrupted()
            while True:
                self._do_jobs()
                self._sync_clock()
                if self.control.stopping:
                    break
                if self.control.state in ("paused", "finished"):
                    self.control.wait(0.5)
                    continue
                spent = self.budget.spent(self.clock.elapsed(), self.attempts_done)
                if spent:
                    self._finish(spent)
                    continue
                self._maybe_cleanup()
                self.step()
                self.checkpoint(force=True)  # each attempt's time is on disk before the next starts
        except Exception as e:  # never die silently: say why in the log and the state
            self.bus.emit("error", f"engine error: {type(e).__name__}: {e}", trace=traceback.format_exc())
            self.control.set("stopping", f"engine error: {type(e).__name__}: {e}")
        finally:
            self.clock.halt()
            self.checkpoint(force=True)
            self.agent.close()

    def _sync_clock(self) -> None:
        """The clock runs while the run does; paused and finished time is not spent."""
        if self.control.state == "running":
            self.clock.start()
        else:
            self.clock.halt()
        self.checkpoint()

    def checkpoint(self, force: bool = False) -> None:
        """Write the time spent to the store, at most every CHECKPOINT_S (any thread)."""
        now = time.time()
        if not force and now - self._checkpointed < CHECKPOINT_S:
            return
        self._checkpointed = now
        try:
            self.fr.store.update_run(self.run_id, spent_s=self.clock.elapsed())
        except FrontierError:
            pass

    def save_budget(self) -> None:
        self.fr.store.update_run(self.run_id, budget_hours=self.budget.hours, budget_attempts=self.budget.attempts)

    def _finish(self, why: str) -> None:
        self.clock.halt()
        self.control.set("finished", why)
        self.fr.set_run_state(self.run_id, "stopped", reason=why)
        self.checkpoint(force=True)
        self.bus.emit("budget", f"run finished: {why}; the engine stays up for the operator "
                                f"(generalize, recheck, archive, `kdatui budget +2h`) {self.idle_note}")

    def change_budget(self, change: str) -> dict:
        """The operator gives the run more (or less) budget, live or finished: `+2h`,
        `+20attempts`, `8h`. A finished run whose budget is no longer spent runs again."""
        elapsed = self.clock.elapsed()
        new = self.budget.changed(change, elapsed, self.attempts_done)
        old, self.budget = self.budget, new
        self.save_budget()
        spent = new.spent(elapsed, self.attempts_done)
        resumed = False
        with self.control.cond:
            if self.control.state == "finished" and self.control.why.startswith("budget spent") and not spent:
                self.control.state, self.control.why = "running", ""
                resumed = True
            self.control.cond.notify_all()
        if resumed:
            self.fr.set_run_state(self.run_id, "running", reason=f"budget now {new.text()}")
        made = f"{self.attempts_done} attempts made, {_spent(elapsed)} spent"
        text = (f"budget {old.text()} -> {new.text()} ({made})"
                + ("; the run goes on" if resumed else f"; still {spent}" if spent else ""))
        self.bus.emit("budget-changed", text, budget=new.describe(), resumed=resumed)
        return {"budget": new.describe(), "resumed": resumed, "spent": spent, "text": text}

    def _maybe_cleanup(self) -> None:
        from . import archive

        if archive.cleanup_due(self.fr, self.run_id, self.task.search.cleanup_every_hours):
            self.archive("cleanup timer")

    # ------------------------------------------------------------ one attempt

    def step(self) -> None:
        ctx = self.context()
        plan = self.agent.plan(ctx)
        if plan is None:
            self._finish("the agent has nothing left to try")
            return
        self.current = {"attempt": None, "stage": "agent", "detail": plan.idea}
        att = self.fr.propose(self.run_id, self.task, family=plan.family, name=plan.name, idea=plan.idea,
                              parent=plan.parent, reason=plan.idea)
        self.current["attempt"] = att.id
        wt = self.fr.worktree_path(att)
        cdir = self.fr.candidate_path(att)
        cdir.mkdir(parents=True, exist_ok=True)
        try:
            result = self.agent.work(ctx, plan, wt, cdir)
        except Exception as e:
            result = TurnResult(False, f"the agent raised {type(e).__name__}: {e}")
        self.attempts_done += 1
        if not result.ok:
            self.current = None
            self._failed_turn(att.id, result.reason)
            return
        self.failed_turns = 0
        updates = {k: v for k, v in (("family", result.family), ("idea", result.idea)) if v}
        if result.name:
            from .frontier import member_name

            updates["name"] = member_name(result.family or att.family, result.name)
        if updates:
            with self.fr.store.transaction():
                self.fr.store.update_attempt(att.id, **updates)
        self.configs[att.id] = _config_of(cdir / "kernel.py")
        self.evaluate_attempt(att.id)

    def _failed_turn(self, attempt_id: int, reason: str) -> None:
        self.failed_turns += 1
        with self.fr.store.transaction():
            self.fr.store.update_attempt(attempt_id, status="error", verdict="error", reason=reason)
            self.fr.store.event(self.run_id, "attempt-error", attempt=attempt_id, reason=reason)
        self.bus.emit("agent-turn", f"#{attempt_id} agent turn failed ({self.failed_turns} in a row): {reason}",
                      attempt=attempt_id, ok=False, reason=reason)
        if self.failed_turns >= FAILED_TURNS_PAUSE:
            why = f"{self.failed_turns} failed agent turns in a row; last: {reason}"
            self.control.pause(why)
            self.fr.set_run_state(self.run_id, "paused", reason=why)
            self.failed_turns = 0

    def evaluate_attempt(self, attempt_id: int) -> None:
        att = self.fr.attempt(attempt_id)
        cdir = self.fr.candidate_path(att)
        self.current = {"attempt": att.id, "stage": "evaluating", "detail": att.name}
        self.fr.start_evaluation(att.id)
        progress = self._progress(att.id)
        race = self.race_bar(att.family)
        with self.eval_lock:
            evaluations = self.evaluator.evaluate(self.task, cdir, None, progress=progress, race=race)
        att = self.fr.record_evaluations(att.id, self.task, evaluations)  # emits attempt-evaluated
        if att.status == "passed":
            self.fr.consider(self.task, att.id)  # emits admission-decision (and admitted, pruned)
        self.current = None

    def race_bar(self, family: str) -> dict[str, float]:
        """The racing bar of a new attempt of `family` ({} when there is none): on the primary
        shape, the fastest member of its family less the task's `race` margin (or twice that
        member's noise, if more). A candidate whose best trial stays below it is stopped after
        that trial, recorded RACED and never admitted; its shapes not started by then are
        checked, not timed (LocalEvaluator)."""
        margin = self.task.bench.race
        if not margin:
            return {}
        p = self.task.primary_shape
        bar = 0.0
        for m in self.fr.members(self.task.name):
            if m.family != family or m.state != "member":
                continue
            c = self.fr.contender(m)
            if c.speed(p) > 0:
                bar = max(bar, c.speed(p) * (1.0 - max(margin, 2.0 * c.noise(p))))
        return {p: bar} if bar > 0 else {}

    def _progress(self, attempt_id: int | None):
        """Forward the evaluator's progress (check i of n, trial j of m) as events, at most
        ~20 a second, so a view shows where an evaluation's time goes."""
        last = [0.0]

        def progress(ev: dict) -> None:
            kind = ev.get("event")
            if kind == "worker":
                self.bus.emit("worker", f"worker {ev.get('worker', '')} {ev.get('action', '')}: {ev.get('why', '')}",
                              attempt=attempt_id, why=ev.get("why", ""))
                return
            if kind != "progress":
                return
            now = time.time()
            if now - last[0] < 0.05 and ev.get("done") != ev.get("total"):
                return
            last[0] = now
            detail = (f"{ev.get('shape', '')} {ev.get('phase', '')} {ev.get('step', '')}/{ev.get('steps', '')} "
                      f"{ev.get('label', '')}").strip()
            self.current = {"attempt": attempt_id, "stage": ev.get("phase", "evaluating"), "detail": detail,
                            "done": ev.get("done"), "total": ev.get("total")}
            who = f"#{attempt_id}" if attempt_id else "operator job:"
            self.bus.emit("eval-progress", f"{who} {detail}", attempt=attempt_id,
                          stage=ev.get("phase"), i=ev.get("done"), n=ev.get("total"),
                          **{k: ev.get(k) for k in ("shape", "phase", "step", "steps", "label", "done", "total")})
        return progress

    def _resume_interrupted(self) -> None:
        """Attempts this run left in flight when its process died (marked error by the
        store's recovery, or still marked proposed/evaluating): evaluate them again when
        their candidate is there, else mark them error with the reason."""
        for att in self.fr.store.attempts(run=self.run_id, status=("error", "proposed", "evaluating")):
            if att.status == "error" and not att.reason.startswith("interrupted"):
                continue
            cdir = self.fr.candidate_path(att)
            if cdir is None or not (cdir / "kernel.py").exists():
                if att.status != "error":
                    with self.fr.store.transaction():
                        self.fr.store.update_attempt(att.id, status="error", verdict="error",
                                                     reason="interrupted before its candidate was written")
                continue
            self.bus.emit("attempt-resumed", f"#{att.id} was interrupted by a restart: evaluating it again",
                          attempt=att.id)
            self.configs[att.id] = _config_of(cdir / "kernel.py")
            self.evaluate_attempt(att.id)

    # ------------------------------------------------------------ context

    def context(self) -> AgentContext:
        with self.control.cond:
            notes, self.control.notes = self.control.notes, []
        if notes:
            self.bus.emit("notes-delivered", f"{len(notes)} operator note(s) passed to the agent", notes=notes)
        return AgentContext(task=self.task, run_id=self.run_id, members=self.member_views(),
                            history=self.history(), notes=notes, feedback=self.feedback(),
                            log=lambda line: self.bus.emit("agent-output", line),
                            rng=self.rng, engine_socket=self.engine_socket,
                            device=getattr(self.evaluator, "device_kind", "cuda"))

    def member_views(self) -> list[MemberView]:
        views = []
        for m in self.fr.members(self.task.name):
            att = self.fr.attempt(m.attempt)
            src = self.fr.repo.show_file(m.sha, f"{candidate_dir(self.task.name)}/kernel.py") if m.sha else None
            views.append(MemberView(name=m.name, family=m.family, idea=att.idea, config=_config_of_text(src),
                                    cells={e.shape: cell_of(e) for e in self.fr.evaluations(m)}, best=m.best))
        return views

    def history(self) -> list[AttemptView]:
        out = []
        for att in self.fr.store.attempts(task=self.task.name):
            if att.id not in self.configs:
                cdir = self.fr.candidate_path(att)
                self.configs[att.id] = _config_of(cdir / "kernel.py") if cdir else None
            out.append(AttemptView(id=att.id, family=att.family, name=att.name, parent=att.parent,
                                   status=att.status, verdict=att.verdict, idea=att.idea, reason=att.reason,
                                   config=self.configs[att.id],
                                   cells={e.shape: cell_of(e) for e in self.fr.store.evaluations(att.id, self.task.name)}))
        return out

    def feedback(self, n: int = 5) -> list[str]:
        lines = []
        for att in self.fr.store.attempts(task=self.task.name)[-n:]:
            evs = self.fr.store.evaluations(att.id, self.task.name)
            lines.append(_evaluated_text(att, evs, self.task))
        return lines

    # ------------------------------------------------------------ operator jobs

    def _do_jobs(self) -> None:
        while True:
            try:
                job = self.control.jobs.get_nowait()
            except queue.Empty:
                return
            try:
                job.future.set_result(getattr(self, f"job_{job.name}")(**job.args))
            except Exception as e:
                job.future.set_exception(e)

    def archive(self, why: str = "operator") -> dict:
        from . import archive

        reports = archive.cleanup(self.fr, self.run_id)
        lines = [line for r in reports for line in r.lines()]
        self.bus.emit("archived", f"archive ({why}): " + ("; ".join(lines) if lines else "nothing to archive"),
                      lines=lines, why=why)
        return {"lines": lines}

    def job_archive(self) -> dict:
        return self.archive("operator")

    def job_recheck(self, name: str) -> dict:
        """Re-check and re-time a member (from its commit) or an attempt (`attempt:<id>`,
        from its worktree) on every shape of the task; the new evaluations are recorded."""
        from .generalize import recheck

        self.current = {"attempt": None, "stage": "recheck", "detail": name}
        try:
            if name.startswith("attempt:"):
                att = self.fr.attempt(int(name.split(":", 1)[1]))
                cdir = self.fr.candidate_path(att)
                if cdir is None or not (cdir / "kernel.py").exists():
                    raise FrontierError(f"attempt {att.id} has no worktree (archived?): "
                                        f"`kdatui archive --restore {att.id}` brings it back")
                with self.eval_lock:
                    evs = self.evaluator.evaluate(self.task, cdir, None, progress=self._progress(att.id))
                with self.fr.store.transaction():
                    self.fr.store.add_evaluations(att.id, self.task.name, [e.to_dict() for e in evs])
            else:
                with self.eval_lock:
                    evs = recheck(self.fr, self.task, name, evaluator=self.evaluator, progress=self._progress(None))
        finally:
            self.current = None
        cells = {e.shape: cell_of(e) for e in evs}
        self.bus.emit("rechecked", f"rechecked {name}: " + ", ".join(
            f"{s} {c['verdict']}" + (f" {c['speedup']:.2f}x" if c["speedup"] else "") for s, c in cells.items()),
            name=name, cells=cells)
        return {"name": name, "cells": cells}

    def job_generalize(self, source: str, shapes: list[str], task_out: str | None = None,
                       continue_search: bool = True) -> dict:
        """Write the generalized task, seed its frontier with `source` (re-checked on every
        shape), then (`continue_search`) continue the search on the new task in a new run."""
        from .generalize import generalize

        self.current = {"attempt": None, "stage": "generalize", "detail": f"{source} -> {', '.join(shapes)}"}
        try:
            with self.eval_lock:
                g = generalize(self.fr, self.task, source, shapes, evaluator=self.evaluator, task_out=task_out,
                               progress=self._progress(None))
        finally:
            self.current = None
        result = {"task": g.task.name, "task_file": str(g.task_path), "member": source, "failures": g.failures,
                  "continued": bool(continue_search), "run": None}
        if not continue_search:
            self.bus.emit("generalized", f"generalized {source} to {g.task.name} ({len(g.task.shapes)} shapes); "
                                         f"the search stays on {self.task.name}", task=g.task.name,
                          task_file=str(g.task_path), source=source, failures=g.failures, continued=False)
            return result
        old = self.run_id
        self.fr.set_run_state(old, "stopped", reason=f"generalized to {g.task.name}")
        task = load_task(g.task_path)
        run = self.fr.start_run(task, agent=getattr(self.agent, "name", "agent"), allow_dirty=True)
        self.clock.halt()
        self.checkpoint(force=True)
        self.task, self.run_id, self.phase = task, run.id, _phase(task)
        self.started, self.attempts_done, self.failed_turns = time.time(), 0, 0
        self.clock, self._checkpointed = RunClock(), 0.0
        self.save_budget()
        if self.control.state == "finished":
            self.control.set("running")
        self.on_new_run(self)
        self.bus.emit("generalized", f"generalized {source} to {task.name} ({len(task.shapes)} shapes); "
                                     f"new run {run.id}", task=task.name, task_file=str(g.task_path),
                      run=run.id, source=source, failures=g.failures, continued=True)
        return {**result, "run": run.id}

    def job_evaluate(self, candidate: str, shapes: list[str] | None = None) -> list[dict]:
        with self.eval_lock:
            evs = self.evaluator.evaluate(self.task, candidate, shapes)
        return [e.to_dict() for e in evs]


# --------------------------------------------------------------------------- helpers

def _phase(task: Task) -> str:
    """Optimizing the task's shapes, or (a task that `generalize` wrote) carrying a member
    to more shapes. A task with several shapes of its own is not "generalized"."""
    n = len(task.shapes)
    if task.generalized_from:
        return f"generalized ({n} shapes)"
    return "one shape" if n == 1 else f"{n} shapes"


def _config_of_text(src: str | None) -> dict | None:
    if not src:
        return None
    from kdatui.kernels.kda.families import config_of

    try:
        return config_of(src)
    except (ValueError, SyntaxError):
        return None


def _config_of(path: Path) -> dict | None:
    try:
        return _config_of_text(Path(path).read_text())
    except OSError:
        return None


def cell_of(e) -> dict:
    """A timing-matrix cell from an Evaluation or a stored ShapeEvaluation."""
    timing = getattr(e, "timing", None)
    noise = getattr(e, "noise", None)
    if noise is None and timing is not None:
        noise = timing.noise
    if timing is not None:
        flags = list(timing.flags)
    else:
        flags = list(((getattr(e, "data", None) or {}).get("timing") or {}).get("flags") or [])
    reason = getattr(e, "reason", None)
    if reason is None:
        reason = (getattr(e, "data", None) or {}).get("reason", "")
    return {"verdict": e.verdict, "speedup": e.speedup, "ms": e.candidate_ms, "baseline_ms": e.baseline_ms,
            "noise": noise, "flags": flags, "reason": reason or ""}


def _evaluated_text(att, evaluations, task: Task) -> str:
    parts = []
    for e in evaluations:
        if e.verdict == "PASS" and e.speedup:
            parts.append(f"{e.shape} {e.speedup:.2f}x ({e.candidate_ms:.3f} ms vs {e.baseline_ms:.3f})")
        else:
            reason = getattr(e, "reason", "") or (e.data.get("reason", "") if hasattr(e, "data") else "")
            parts.append(f"{e.shape} {e.verdict}" + (f": {reason}" if reason else ""))
    return f"#{att.id} {att.name} [{att.verdict or att.status}] " + "; ".join(parts)


__all__ = ["Budget", "RunClock", "RunControl", "RunLoop", "cell_of"]
