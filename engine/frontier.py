"""The frontier: the kept candidates of a task, each a git branch `frontier/<task>/<name>`,
and the admission policy that decides what is kept.

The policy (`decide`, `prune_family`) is pure: it sees per-shape scores and returns a
decision with its reason, so it is tested without git. `Frontier` owns the store and the
repo and carries decisions out.

Two-phase admission (the store and git must never disagree about a member):
  1. one transaction: the attempt becomes `admitting`, a frontier row `admitting` (no sha)
  2. git: build the commit, publish the branch with one atomic update-ref; the commit
     carries the trailer `Kdatui-Attempt: <id>`
  3. one transaction: the row becomes `member` with the sha, the attempt `admitted`
A process killed between 1 and 2 leaves an intent whose branch does not carry its attempt:
`recover()` (run by `Frontier.open`) rolls it back to `passed`, evaluations kept. Killed
between 2 and 3, the branch carries the trailer: `recover()` completes it. Prune and
restore follow the same pattern (`pruning`/`restoring` intents, one atomic ref move).
Every operation holds `.frontier/frontier.lock` (flock), so recovery never races a live
admission in another process: a lock a dead process held is released by the kernel.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import tomli_w

from .gitrepo import (FRONTIER_DIR, GitRepo, RepoError, candidate_dir, ensure_frontier_dir, frontier_branch,
                      pruned_ref, read_folder, scratch_branch)
from .store import (Attempt, FrontierError, Member, Run, ShapeEvaluation, Store, pid_alive)
from .timing import noise_of

GENERATED_FILES = ("checks.json", "timings.json")


# =========================================================================== policy (pure)

@dataclass(frozen=True)
class ShapeScore:
    verdict: str
    speedup: float | None = None
    noise: float = 0.0  # the larger relative spread of the paired timing
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict == "PASS" and self.speedup is not None and self.speedup > 0


@dataclass(frozen=True)
class Contender:
    """A member or a candidate as the policy sees it: a family and per-shape scores."""

    name: str
    family: str
    scores: Mapping[str, ShapeScore]

    def speed(self, shape: str) -> float:
        """Speedup over the baseline; a shape not passed counts as the slowest possible."""
        s = self.scores.get(shape)
        return s.speedup if s is not None and s.ok else 0.0

    def noise(self, shape: str) -> float:
        s = self.scores.get(shape)
        return s.noise if s is not None and s.ok else 0.0


@dataclass(frozen=True)
class Policy:
    shapes: tuple[str, ...]
    primary: str
    max_per_family: int = 3

    @classmethod
    def of(cls, task) -> "Policy":
        return cls(tuple(task.shapes), task.primary_shape, task.search.max_members_per_family)

    @property
    def others(self) -> tuple[str, ...]:
        return tuple(s for s in self.shapes if s != self.primary)


@dataclass
class Decision:
    admit: bool
    reason: str  # why kept, or why rejected
    prune: list[tuple[str, str]] = field(default_factory=list)  # (member name, reason)


def _x(v: float) -> str:
    return f"{v:.3g}x"


def not_slower(a: Contender, b: Contender, shape: str) -> bool:
    """`a` is no slower than `b` at `shape` beyond the noise of either timing."""
    noise = max(a.noise(shape), b.noise(shape))
    return a.speed(shape) >= b.speed(shape) * (1.0 - noise)


def beats(a: Contender, b: Contender, policy: Policy) -> bool:
    """Faster on the primary shape, and no slower beyond noise on every other shape."""
    p = policy.primary
    return a.speed(p) > b.speed(p) and all(not_slower(a, b, s) for s in policy.others)


def dominates(a: Contender, b: Contender, policy: Policy) -> bool:
    """At least as fast as `b` on every shape (a difference inside the noise is none)."""
    p = policy.primary
    return a.speed(p) >= b.speed(p) and all(not_slower(a, b, s) for s in policy.others)


def fastest(members: list[Contender], shape: str) -> Contender | None:
    """The fastest passing member at `shape`; the earlier one on a tie (the incumbent)."""
    best = None
    for m in members:
        if m.speed(shape) > 0 and (best is None or m.speed(shape) > best.speed(shape)):
            best = m
    return best


def fastest_on(members: list[Contender], shapes: tuple[str, ...]) -> dict[str, Contender]:
    return {s: f for s in shapes if (f := fastest(members, s)) is not None}


def _failure(shape: str, score: ShapeScore | None) -> str:
    if score is None:
        return f"{shape}: not evaluated"
    if score.verdict == "PASS":
        return f"{shape}: passed but not timed"
    return f"{shape}: {score.verdict}" + (f" ({score.reason})" if score.reason else "")


def decide(policy: Policy, cand: Contender, members: list[Contender]) -> Decision:
    """Admit `cand` to a frontier of `members` (all families), or not, and say why. No
    average over shapes is ever taken: each shape is compared on its own."""
    fails = [_failure(s, cand.scores.get(s)) for s in policy.shapes
             if not (cand.scores.get(s) and cand.scores[s].ok)]
    if fails:
        return Decision(False, "does not pass every shape: " + "; ".join(fails))
    p = policy.primary
    family = [m for m in members if m.family == cand.family]
    for m in family:
        if dominates(m, cand, policy):
            return Decision(False, f"no faster than {m.name} of its family: {_x(cand.speed(p))} vs "
                                   f"{_x(m.speed(p))} on {p}" + _elsewhere(policy))
    reasons = []
    best = fastest(members, p)
    if best is None:
        reasons.append(f"first on the frontier: {_x(cand.speed(p))} on {p}")
    elif cand.speed(p) > best.speed(p):
        noise = max(cand.noise(p), best.noise(p))
        if cand.speed(p) > best.speed(p) * (1.0 + noise):
            reasons.append(f"new best on the primary shape {p}: {_x(cand.speed(p))} (was {_x(best.speed(p))} "
                           f"by {best.name})")
        else:  # kept as the fastest, but a difference inside the noise is not news
            reasons.append(f"fastest on the primary shape {p} by less than the noise ({noise:.0%}): "
                           f"{_x(cand.speed(p))} vs {_x(best.speed(p))} by {best.name}")
    if not family:
        reasons.append(f"first member of family {cand.family}")
    for m in family:
        if beats(cand, m, policy):
            reasons.append(f"beats {m.name} of its family: {_x(cand.speed(p))} vs {_x(m.speed(p))} on {p}"
                           + (", no slower beyond noise elsewhere" if policy.others else ""))
    for s in policy.others:
        b = fastest(members, s)
        if members and (b is None or cand.speed(s) > b.speed(s)):
            reasons.append(f"fastest on {s}: {_x(cand.speed(s))}" + (f" (was {_x(b.speed(s))} by {b.name})" if b else ""))
    if not reasons:
        ref = fastest(family, p) or family[0]
        return Decision(False, f"slower than {ref.name} of its family on {p} ({_x(cand.speed(p))} vs "
                               f"{_x(ref.speed(p))}) and not the fastest on any shape")
    victims = prune_family(policy, [*members, cand], cand.family)
    if any(v is cand for v, _ in victims):
        reason = next(r for v, r in victims if v is cand)
        return Decision(False, f"would be pruned at once: {reason}")
    return Decision(True, "; ".join(reasons), [(v.name, r) for v, r in victims])


def _elsewhere(policy: Policy) -> str:
    if not policy.others:
        return ""
    return " and no faster beyond noise on " + ", ".join(policy.others)


def prune_family(policy: Policy, members: list[Contender], family: str) -> list[tuple[Contender, str]]:
    """The members of `family` to prune: those dominated by a kept member of the same family,
    then, above `max_per_family`, the slowest on the primary shape among those that are not
    the fastest of the whole frontier on some shape. Other families are never looked at as
    rivals: a family is not evicted for being slower than another."""
    p = policy.primary
    fam = [m for m in members if m.family == family]
    order = sorted(range(len(fam)), key=lambda i: (-fam[i].speed(p), i))  # faster first; incumbent on ties
    kept: list[Contender] = []
    victims: list[tuple[Contender, str]] = []
    for i in order:
        m = fam[i]
        dom = next((k for k in kept if dominates(k, m, policy)), None)
        if dom is None:
            kept.append(m)
        else:
            victims.append((m, f"dominated by {dom.name} of its family: {_x(dom.speed(p))} vs "
                               f"{_x(m.speed(p))} on {p}" + ("; at least as fast within noise on every other "
                                                            "shape" if policy.others else "")))
    if len(kept) > policy.max_per_family:
        gone = {id(v) for v, _ in victims}
        survivors = [m for m in members if id(m) not in gone]
        holders = {id(c) for c in fastest_on(survivors, policy.shapes).values()}
        evictable = sorted((m for m in kept if id(m) not in holders), key=lambda m: m.speed(p))
        while len(kept) > policy.max_per_family and evictable:
            m = evictable.pop(0)
            kept.remove(m)
            victims.append((m, f"family {family} keeps at most {policy.max_per_family} members; "
                               f"{m.name} is the slowest on {p} ({_x(m.speed(p))}) of those not fastest on any shape"))
    return victims


# =========================================================================== names and texts

_SLUG = re.compile(r"[^a-z0-9._-]+")


def slug(text: str) -> str:
    s = _SLUG.sub("-", text.strip().lower())
    s = re.sub(r"-{2,}", "-", re.sub(r"\.{2,}", ".", s)).strip("-._")
    return s[:60].rstrip("-._")


def member_name(family: str, name: str) -> str:
    """A stable, descriptive member name: the family, then the distinguishing idea
    ('split-bv64-c16'); never a version number."""
    fam, n = slug(family), slug(name)
    if not fam:
        raise FrontierError(f"family {family!r}: expected a name of letters and digits (e.g. 'split')")
    if not n or n == fam:
        return fam
    return n if n.startswith(fam + "-") or n.startswith(fam + "_") else f"{fam}-{n}"


def idea_summary(idea: str, limit: int = 72) -> str:
    """The first sentence of an idea (markdown headings and family lines skipped)."""
    for line in idea.splitlines():
        line = line.strip().lstrip("#").strip()
        if not line or re.match(r"^(family|parent|name)\s*:", line, re.I):
            continue
        first = re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0].rstrip(".")
        return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"
    return ""


def idea_md(att: Attempt) -> str:
    return (f"# {att.name}\n\nfamily: {att.family}\nparent: {att.parent}\n\n"
            f"{att.idea.strip() or '(no idea given)'}\n")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def pct(v: float | None) -> str:
    """A relative spread: 2.0%; a wild one (a cold first trial on a CPU) without decimals."""
    return "-" if v is None else f"{v:.1%}" if v < 1 else f"{v:.0%}"


def timing_lines(primary: str, evals: list[ShapeEvaluation]) -> list[str]:
    rows = [("shape", "verdict", "candidate ms", "baseline ms", "speedup", "noise")]
    for e in evals:
        rows.append((e.shape + (" *" if e.shape == primary else ""), e.verdict, _ms(e.candidate_ms),
                     _ms(e.baseline_ms), "-" if e.speedup is None else _x(e.speedup),
                     pct(e.noise)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def commit_message(task_name: str, primary: str, name: str, att: Attempt, why: str,
                   evals: list[ShapeEvaluation]) -> str:
    summary = idea_summary(att.idea) or f"{att.family} family"
    first = evals[0].data if evals else {}
    lines = [f"{name}: {summary}", "",
             f"Frontier member {frontier_branch(task_name, name)} (family {att.family}).", ""]
    if att.idea.strip():
        lines += [att.idea.strip(), ""]
    lines += [f"Kept because: {why}", f"Parent: {att.parent} ({(att.parent_sha or '')[:12]})",
              f"Attempt: {att.id} (run {att.run})", "",
              f"Per-shape timings (paired against baseline {first.get('baseline') or '?'}, "
              f"device {first.get('device') or '?'}; * = primary shape):", ""]
    lines += ["    " + ln for ln in timing_lines(primary, evals)]
    lines += ["", f"Kdatui-Task: {task_name}", f"Kdatui-Member: {name}", f"Kdatui-Attempt: {att.id}", ""]
    return "\n".join(lines)


def checks_json(task_name: str, name: str, att: Attempt, evals: list[ShapeEvaluation]) -> dict:
    return {
        "task": task_name, "member": name, "attempt": att.id,
        "verdict": "PASS" if evals and all(e.verdict == "PASS" for e in evals) else "FAIL",
        "shapes": {e.shape: {"verdict": e.verdict, "reason": e.data.get("reason", ""),
                             "device": e.data.get("device", ""), "harness": e.data.get("harness", ""),
                             "post_timing": e.data.get("post_timing", ""), "checks": e.data.get("checks")}
                   for e in evals},
    }


def timings_json(task_name: str, primary: str, name: str, evals: list[ShapeEvaluation]) -> dict:
    return {
        "task": task_name, "member": name, "primary_shape": primary,
        "shapes": {e.shape: {"dims": e.data.get("dims", {}), "verdict": e.verdict,
                             "candidate_ms": e.candidate_ms, "baseline_ms": e.baseline_ms,
                             "speedup": e.speedup, "noise": e.noise, "baseline": e.data.get("baseline", ""),
                             "device": e.data.get("device", ""), "timing": e.data.get("timing")}
                   for e in evals},
    }


def scores_of(evals: list[ShapeEvaluation]) -> dict[str, ShapeScore]:
    return {e.shape: ShapeScore(e.verdict, e.speedup, e.noise or 0.0, e.data.get("reason", "")) for e in evals}


# =========================================================================== the frontier

@dataclass
class Admission:
    attempt: int
    admitted: bool
    reason: str
    name: str | None = None
    branch: str | None = None
    sha: str | None = None
    pruned: list[tuple[str, str]] = field(default_factory=list)


Hook = Callable[[str], None]


class Frontier:
    """The run store and the repo of one `.frontier/`: attempts, admission, prune, restore,
    recovery and the index. Open with `Frontier.open(path)`."""

    def __init__(self, repo: GitRepo, store: Store, *, hook: Hook | None = None):
        self.repo = repo
        self.store = store
        self.hook = hook  # called at named points of two-phase operations (crash tests)
        self.dir = repo.root / FRONTIER_DIR
        self.worktrees_dir = self.dir / "worktrees"
        self.index_path = self.dir / "index.toml"
        self._rlock = threading.RLock()
        self._lock_depth = 0
        self._lock_file = None

    @classmethod
    def open(cls, path: str | Path = ".", *, hook: Hook | None = None, recover: bool = True) -> "Frontier":
        repo = GitRepo.open(path)
        store = Store(ensure_frontier_dir(repo.root))
        fr = cls(repo, store, hook=hook)
        if recover:
            fr.recover()
        return fr

    def close(self) -> None:
        self.store.close()
        self.repo.close()

    def __enter__(self) -> "Frontier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def locked(self):
        """Exclusive across processes (flock on .frontier/frontier.lock) and threads."""
        with self._rlock:
            if self._lock_depth == 0:
                f = open(self.dir / "frontier.lock", "a+")
                fcntl.flock(f, fcntl.LOCK_EX)
                self._lock_file = f
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    fcntl.flock(self._lock_file, fcntl.LOCK_UN)
                    self._lock_file.close()
                    self._lock_file = None

    def _step(self, name: str) -> None:
        if self.hook:
            self.hook(name)

    # ------------------------------------------------------------------ runs

    def start_run(self, task, *, agent: str = "builtin", allow_dirty: bool = False,
                  run_id: str | None = None) -> Run:
        """A new run of `task`, branching seeds from the current commit of the main tree."""
        base = self.repo.head_commit()
        if not allow_dirty:
            self.repo.require_clean(f"kdatui branches attempts from the last commit ({base[:12]}), which "
                                    f"does not have them: commit or stash them first")
        self.repo.check_ref_name(frontier_branch(task.name, "x"))
        run_id = run_id or self._new_run_id(task.name)
        self.repo.check_ref_name(scratch_branch(run_id, 1))
        with self.store.transaction():
            self.store.register_task(task)
            run = self.store.add_run(run_id, task.name, task_path=str(task.path) if task.path else None,
                                     agent=agent, base_commit=base, pid=_pid(), host=socket.gethostname())
            self.store.event(run_id, "run-started", task=task.name, agent=agent, base=base)
        return run

    def _new_run_id(self, task_name: str) -> str:
        stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{task_name}"
        run_id, n = stem, 1
        while self.store.run(run_id):
            n += 1
            run_id = f"{stem}-{n}"
        return run_id

    def resume_run(self, run_id: str) -> Run:
        """Take over a run after a restart: this process becomes its owner. Attempts the
        previous process left in flight were marked error by `recover()`."""
        if self.store.run(run_id) is None:
            raise FrontierError(f"no run {run_id!r} in {self.store.path}")
        with self.store.transaction():
            self.store.update_run(run_id, pid=_pid(), host=socket.gethostname(), state="running")
            self.store.event(run_id, "run-resumed", pid=_pid())
        return self.store.run(run_id)

    def set_run_state(self, run_id: str, state: str, reason: str = "") -> None:
        with self.store.transaction():
            self.store.update_run(run_id, state=state)
            self.store.event(run_id, f"run-{state}", reason=reason)

    # ------------------------------------------------------------------ attempts

    def worktree_path(self, att: Attempt) -> Path | None:
        return self.repo.root / att.worktree if att.worktree else None

    def candidate_path(self, att: Attempt) -> Path | None:
        """The candidate folder of an attempt, where the agent writes kernel.py and IDEA.md."""
        wt = self.worktree_path(att)
        return wt / candidate_dir(att.task) if wt else None

    def log_path(self, att: Attempt) -> Path:
        return self.store.runs_dir / (att.run or "operator") / "logs" / f"{att.id}.log"

    def attempt(self, attempt_id: int) -> Attempt:
        att = self.store.attempt(attempt_id)
        if att is None:
            raise FrontierError(f"no attempt {attempt_id} in {self.store.path}")
        return att

    def propose(self, run_id: str, task, *, family: str, name: str, idea: str = "", parent: str | None = None,
                reason: str = "", files: Mapping[str, str | bytes] | None = None,
                copy_from: str | None = None) -> Attempt:
        """A new attempt with its worktree `.frontier/worktrees/<id>` on a scratch branch from
        `parent`: a member name of the task, a branch or commit, or None for the run's base
        commit. `files` (relative to the candidate folder) are written into it; `copy_from`
        copies a folder of the parent commit (another task's candidate) into it."""
        run = self.store.run(run_id)
        if run is None:
            raise FrontierError(f"no run {run_id!r} in {self.store.path}")
        if parent is None:
            start, label = run.base_commit or self.repo.head_commit(), "base"
        else:
            live = self.store.members(task.name, name=parent)
            if live:
                start, label = live[0].sha, live[0].branch
            else:
                start, label = self.repo.sha(parent), parent
                if start is None:
                    raise FrontierError(f"parent {parent!r}: neither a member of {task.name} nor a commit")
        att = self.store.add_attempt(run=run_id, task=task.name, family=slug(family) or family,
                                     name=member_name(family, name), parent=label, parent_sha=start,
                                     idea=idea, reason=reason)
        wt = self.worktrees_dir / str(att.id)
        branch = scratch_branch(run_id, att.id)
        try:
            self.repo.check_ref_name(branch)
            self.repo.add_worktree(wt, branch, start)
        except RepoError as e:
            with self.store.transaction():
                self.store.update_attempt(att.id, status="error", verdict="error", reason=str(e))
                self.store.event(run_id, "attempt-error", attempt=att.id, reason=str(e))
            raise
        rel = wt.relative_to(self.repo.root).as_posix()
        cdir = wt / candidate_dir(task.name)
        if copy_from:
            src = wt / copy_from
            if not src.is_dir():
                raise FrontierError(f"{copy_from}: no such folder at {label}")
            for path, data in read_folder(src, skip=GENERATED_FILES).items():
                (cdir / path).parent.mkdir(parents=True, exist_ok=True)
                (cdir / path).write_bytes(data)
        for path, data in (files or {}).items():
            (cdir / path).parent.mkdir(parents=True, exist_ok=True)
            (cdir / path).write_bytes(data.encode() if isinstance(data, str) else data)
        with self.store.transaction():
            self.store.update_attempt(att.id, worktree=rel, branch=branch)
            self.store.event(run_id, "attempt-proposed", attempt=att.id, family=att.family, name=att.name,
                             parent=label, reason=reason)
        return self.attempt(att.id)

    def start_evaluation(self, attempt_id: int) -> None:
        att = self.attempt(attempt_id)
        with self.store.transaction():
            # verdict None: an attempt evaluated again after a restart is not "evaluated" until it is
            self.store.update_attempt(attempt_id, status="evaluating", verdict=None)
            self.store.event(att.run, "attempt-evaluating", attempt=attempt_id)

    def record_evaluations(self, attempt_id: int, task, evaluations: list) -> Attempt:
        """Store the evaluations of an attempt and its verdict in one transaction: passed
        (every shape of the task PASS), failed (verdict `raced` where the only shapes short of
        PASS were raced out: stopped in timing, never admitted), or error (an ERROR, or a shape
        missing)."""
        att = self.attempt(attempt_id)
        by_shape = {}
        for ev in evaluations:
            d = ev if isinstance(ev, dict) else ev.to_dict()
            by_shape[d["shape"]] = d
        missing = [s for s in task.shapes if s not in by_shape]
        verdicts = [by_shape[s]["verdict"] for s in task.shapes if s in by_shape]
        if missing or "ERROR" in verdicts:
            verdict = "error"
        elif all(v == "PASS" for v in verdicts):
            verdict = "passed"
        else:
            verdict = "raced" if all(v in ("PASS", "RACED") for v in verdicts) else "failed"
        problems = [f"{s}: not evaluated" for s in missing] + [
            f"{s}: {d['verdict']}" + (f" ({d.get('reason')})" if d.get("reason") else "")
            for s, d in by_shape.items() if d["verdict"] != "PASS"]
        with self.store.transaction():
            self.store.add_evaluations(attempt_id, task.name, list(by_shape.values()))
            self.store.update_attempt(attempt_id, status="failed" if verdict == "raced" else verdict, verdict=verdict,
                                      reason="; ".join(problems))
            self.store.event(att.run, "attempt-evaluated", attempt=attempt_id, name=att.name, family=att.family,
                             verdict=verdict, shapes={s: {"verdict": d["verdict"], "speedup": (d.get("timing") or {}).get("speedup"),
                                                          "noise": noise_of(d.get("timing"))}
                                                      for s, d in by_shape.items()}, reason="; ".join(problems))
        return self.attempt(attempt_id)

    # ------------------------------------------------------------------ members

    def members(self, task_name: str) -> list[Member]:
        return self.store.members(task_name)

    def evaluations(self, m: Member) -> list[ShapeEvaluation]:
        return self.store.evaluations(m.attempt, m.task)

    def contender(self, m: Member) -> Contender:
        return Contender(m.name, m.family, scores_of(self.evaluations(m)))

    def find(self, name: str, task: str | None = None, states: tuple[str, ...] = ("member",)) -> Member:
        """The member called `name` (in `task`, or in the one task that has it)."""
        found = self.store.members(task, states=states, name=name)
        what = "member" if states == ("member",) else "/".join(states) + " member"
        if not found:
            where = f"task {task}" if task else "any task"
            known = ", ".join(m.name for m in self.store.members(task, states=states)) or "none"
            raise FrontierError(f"no {what} named {name!r} in {where} (known: {known})")
        tasks = sorted({m.task for m in found})
        if len(tasks) > 1:
            raise FrontierError(f"{name!r} is a {what} of several tasks ({', '.join(tasks)}): say which with --task")
        return found[-1]

    # ------------------------------------------------------------------ admission

    def consider(self, task, attempt_id: int, *, note: str = "") -> Admission:
        """Apply the admission policy to an evaluated attempt; admit it (commit on
        frontier/<task>/<name>) and prune what it dominates, or record why not."""
        with self.locked():
            self.store.register_task(task)
            att = self._evaluated(task, attempt_id)
            policy = Policy.of(task)
            cand = Contender(att.name, att.family, scores_of(self.store.evaluations(att.id, task.name)))
            members = self.store.members(task.name)
            d = decide(policy, cand, [self.contender(m) for m in members])
            self.store.event(att.run, "admission-decision", task=task.name, attempt=att.id, name=att.name,
                             family=att.family, admitted=d.admit, reason=d.reason,
                             prune=[{"name": n, "reason": r} for n, r in d.prune])
            if not d.admit:
                return Admission(att.id, False, d.reason)
            return self._admit(task, att, f"{note}; {d.reason}" if note else d.reason, d.prune)

    def seed(self, task, attempt_id: int, why: str) -> Admission:
        """Put an evaluated attempt on the frontier without the policy (an operator's choice,
        e.g. generalize seeding a new task)."""
        with self.locked():
            self.store.register_task(task)
            att = self._evaluated(task, attempt_id)
            self.store.event(att.run, "admission-decision", task=task.name, attempt=att.id, name=att.name,
                             family=att.family, admitted=True, reason=why, prune=[])
            return self._admit(task, att, why, [])

    def _evaluated(self, task, attempt_id: int) -> Attempt:
        att = self.attempt(attempt_id)
        if att.task != task.name:
            raise FrontierError(f"attempt {att.id} belongs to task {att.task}, not {task.name}")
        if att.status not in ("passed", "failed", "error"):
            raise FrontierError(f"attempt {att.id} is {att.status}: only an evaluated attempt can be "
                                f"considered for the frontier")
        return att

    def _admit(self, task, att: Attempt, why: str, prune: list[tuple[str, str]]) -> Admission:
        name = att.name
        same = self.store.members(task.name, name=name)
        replaced = None
        if same:
            if any(n == name for n, _ in prune):
                # Same idea, better figures: the new commit continues the member's branch,
                # so its history shows both.
                replaced = same[0]
                prune = [(n, r) for n, r in prune if n != name]
            else:
                name = f"{name}-a{att.id}"
        branch = frontier_branch(task.name, name)
        self.repo.check_ref_name(branch)
        old_tip = self.repo.ref_sha(branch)
        if old_tip and not (replaced and old_tip == replaced.sha):
            raise FrontierError(f"branch {branch} exists but is not a frontier member kdatui knows; "
                                f"rename or delete it (git branch -m {branch} NEW)")
        evals = self.store.evaluations(att.id, task.name)
        files = self._member_files(task, att, name, evals)
        head = self._attempt_head(att)
        parents = [head]
        if replaced and not self.repo.is_ancestor(replaced.sha, head):
            parents = [replaced.sha, head]
        message = commit_message(task.name, task.primary_shape, name, att, why, evals)

        # phase 1: the intent
        with self.store.transaction():
            self.store.update_attempt(att.id, status="admitting")
            row = self.store.add_member(task=task.name, name=name, family=att.family, branch=branch,
                                        attempt=att.id, why=why, state="admitting")
            self.store.event(att.run, "admitting", task=task.name, name=name, attempt=att.id, why=why)
        self._step("admission:intent")
        # phase 2: the commit, published atomically
        sha = self.repo.commit_files(parents, files, message, replace_dir=candidate_dir(task.name))
        op = ("update", branch, sha, old_tip) if old_tip else ("create", branch, sha)
        self.repo.update_refs([op], message=f"kdatui: admit {name} (attempt {att.id})")
        self._step("admission:committed")
        # phase 3: the member
        self._complete_admission(row, sha, replaced)
        self._step("admission:done")
        pruned = []
        for victim, reason in prune:
            self._prune(task.name, victim, reason, by="policy", run=att.run)
            pruned.append((victim, reason))
        self.reindex()
        return Admission(att.id, True, why, name=name, branch=branch, sha=sha, pruned=pruned)

    def _complete_admission(self, row: Member, sha: str, replaced: Member | None) -> None:
        att = self.attempt(row.attempt)
        with self.store.transaction():
            if replaced:
                self.store.update_member(replaced.id, state="replaced", best=False)
                self.store.update_attempt(replaced.attempt, status="pruned",
                                          reason=f"replaced on {row.branch} by attempt {row.attempt}")
            self.store.update_member(row.id, state="member", sha=sha, ref=row.branch)
            self.store.update_attempt(row.attempt, status="admitted")
            self.refresh_best(row.task)
            self.store.event(att.run, "admitted", task=row.task, name=row.name, family=row.family,
                             attempt=row.attempt, branch=row.branch, sha=sha, why=row.why,
                             replaced=replaced.name if replaced else None)

    def _attempt_head(self, att: Attempt) -> str:
        wt = self.worktree_path(att)
        if wt and wt.exists():
            return self.repo.worktree_head(wt)
        if att.parent_sha:
            return att.parent_sha
        return self.repo.head_commit()

    def _member_files(self, task, att: Attempt, name: str, evals: list[ShapeEvaluation]) -> dict[str, bytes]:
        wt = self.worktree_path(att)
        if wt is None or not wt.exists():
            raise FrontierError(f"attempt {att.id} has no worktree (archived?): restore it first "
                                f"(kdatui archive --restore {att.id})")
        cdir = candidate_dir(task.name)
        self.repo.require_clean(f"kdatui commits only the candidate folder {cdir}/ of attempt {att.id}, "
                                f"so these changes would not reach the frontier: revert them or move "
                                f"them into {cdir}/", cwd=wt, ignore_prefix=cdir + "/")
        files = read_folder(wt / cdir, skip=GENERATED_FILES)
        if "kernel.py" not in files:
            raise FrontierError(f"attempt {att.id}: no {cdir}/kernel.py in its worktree {wt}")
        files.setdefault("IDEA.md", idea_md(att).encode())
        files["checks.json"] = _json(checks_json(task.name, name, att, evals))
        files["timings.json"] = _json(timings_json(task.name, task.primary_shape, name, evals))
        return {f"{cdir}/{p}": data for p, data in files.items()}

    def refresh_best(self, task_name: str) -> None:
        info = self.store.task(task_name)
        members = self.store.members(task_name)
        if info is None or not members:
            return
        contenders = [self.contender(m) for m in members]
        best = fastest(contenders, info.primary_shape)
        for m, c in zip(members, contenders):
            if m.best != (c is best):
                self.store.update_member(m.id, best=c is best)

    def policy(self, task_name: str) -> Policy | None:
        """The policy of a task as the store last saw it."""
        info = self.store.task(task_name)
        return Policy(tuple(info.shapes), info.primary_shape, info.max_per_family) if info else None

    def enforce_family(self, task_name: str, family: str, why: str = "", run: str | None = None) -> list[tuple[str, str]]:
        """Prune what the policy says a family should lose now (after a recheck or a repair)."""
        policy = self.policy(task_name)
        if policy is None:
            return []
        contenders = [self.contender(m) for m in self.store.members(task_name)]
        pruned = []
        for victim, reason in prune_family(policy, contenders, family):
            self._prune(task_name, victim.name, why + reason, by="policy", run=run)
            pruned.append((victim.name, why + reason))
        return pruned

    # ------------------------------------------------------------------ prune / restore

    def prune(self, task_name: str | None, name: str, reason: str = "pruned by the operator",
              *, by: str = "operator") -> Member:
        with self.locked():
            m = self.find(name, task_name)
            self._prune(m.task, m.name, reason, by=by, run=None)
            self.reindex()
            return self.store.member_by_id(m.id)

    def _prune(self, task_name: str, name: str, reason: str, *, by: str, run: str | None) -> None:
        m = self.store.members(task_name, name=name)[0]
        target = pruned_ref(task_name, name)
        with self.store.transaction():
            self.store.update_member(m.id, state="pruning", ref=target)
            self.store.event(run, "pruning", task=task_name, name=name, reason=reason, by=by)
        self._step("prune:intent")
        self._move_to_pruned(self.store.member_by_id(m.id))
        self._step("prune:moved")
        self._complete_prune(self.store.member_by_id(m.id), reason, by, run)

    def _move_to_pruned(self, m: Member) -> None:
        """Move frontier/<task>/<name> to its pruned ref in one atomic update; a commit an
        earlier prune of the same name left there is kept aside under <name>@<sha8>."""
        tip = self.repo.ref_sha(m.branch)
        if tip is None:
            return  # already moved
        target = m.ref or pruned_ref(m.task, m.name)
        ops: list[tuple] = []
        existing = self.repo.ref_sha(target)
        if existing and existing != tip:
            ops.append(("create", f"{target}@{existing[:8]}", existing))
            ops.append(("update", target, tip, existing))
        elif not existing:
            ops.append(("create", target, tip))
        ops.append(("delete", m.branch, tip))
        self.repo.update_refs(ops, message=f"kdatui: prune {m.task}/{m.name}")

    def _complete_prune(self, m: Member, reason: str, by: str, run: str | None) -> None:
        with self.store.transaction():
            self.store.update_member(m.id, state="pruned", best=False)
            self.store.update_attempt(m.attempt, status="pruned", reason=f"pruned: {reason}")
            self.refresh_best(m.task)
            self.store.event(run, "pruned", task=m.task, name=m.name, family=m.family, sha=m.sha,
                             ref=m.ref, reason=reason, by=by)

    def restore(self, task_name: str | None, name: str) -> Member:
        """Bring a pruned member back to frontier/<task>/<name>."""
        with self.locked():
            m = self.find(name, task_name, states=("pruned",))
            if self.store.members(m.task, name=m.name):
                raise FrontierError(f"{m.task}/{m.name} is on the frontier already; prune that one first")
            if self.repo.ref_sha(m.branch):
                raise FrontierError(f"branch {m.branch} exists already; rename or delete it first")
            with self.store.transaction():
                self.store.update_member(m.id, state="restoring")
                self.store.event(None, "restoring", task=m.task, name=m.name)
            self._step("restore:intent")
            self._move_back(self.store.member_by_id(m.id))
            self._complete_restore(self.store.member_by_id(m.id))
            self.reindex()
            return self.store.member_by_id(m.id)

    def _move_back(self, m: Member) -> None:
        if self.repo.ref_sha(m.branch) == m.sha:
            return
        source = self._pruned_ref_of(m)
        if source is None:
            raise FrontierError(f"{m.task}/{m.name}: its commit {m.sha[:12]} is under no pruned ref")
        self.repo.update_refs([("create", m.branch, m.sha), ("delete", source, m.sha)],
                              message=f"kdatui: restore {m.task}/{m.name}")

    def _pruned_ref_of(self, m: Member) -> str | None:
        for ref, sha in self.repo.refs(f"refs/kdatui/pruned/{m.task}/").items():
            if sha == m.sha and (ref == m.ref or ref.startswith(f"{pruned_ref(m.task, m.name)}@")):
                return ref
        return None

    def _complete_restore(self, m: Member) -> None:
        with self.store.transaction():
            self.store.update_member(m.id, state="member", ref=m.branch)
            self.store.update_attempt(m.attempt, status="admitted")
            self.refresh_best(m.task)
            self.store.event(None, "restored", task=m.task, name=m.name, sha=m.sha, branch=m.branch)

    # ------------------------------------------------------------------ recovery

    def recover(self) -> list[str]:
        """Bring the store and git back into agreement after an unclean stop; returns what
        was repaired (also recorded as `repaired` events)."""
        done: list[str] = []
        with self.locked():
            for row in self.store.members(states=("admitting",)):
                att = self.attempt(row.attempt)
                tip = self.repo.ref_sha(row.branch)
                tr = self.repo.trailers(tip) if tip else {}
                if tip and tr.get("Kdatui-Attempt") == str(row.attempt) and tr.get("Kdatui-Task") == row.task:
                    live = self.store.members(row.task, name=row.name)
                    self._complete_admission(row, tip, live[0] if live else None)
                    done.append(f"completed the admission of {row.task}/{row.name} (commit {tip[:12]} was made)")
                    # the prunes the decision implied were not carried out: apply the policy again
                    for victim, _ in self.enforce_family(row.task, row.family, "after an interrupted admission: "):
                        done.append(f"pruned {row.task}/{victim}, dominated in its family")
                else:
                    with self.store.transaction():
                        self.store.delete_member(row.id)
                        self.store.update_attempt(att.id, status=att.verdict or "passed")
                    done.append(f"rolled back the admission of {row.task}/{row.name} (attempt {att.id}): "
                                f"no commit was made; the attempt is {att.verdict or 'passed'} again")
            for row in self.store.members(states=("pruning",)):
                self._move_to_pruned(row)
                self._complete_prune(row, "pruned (completed after an interruption)", "recovery", None)
                done.append(f"completed the prune of {row.task}/{row.name}")
            for row in self.store.members(states=("restoring",)):
                self._move_back(row)
                self._complete_restore(row)
                done.append(f"completed the restore of {row.task}/{row.name}")
            refs = self.repo.refs("refs/heads/frontier/")
            for m in self.store.members():
                if f"refs/heads/{m.branch}" not in refs and self.repo.sha(m.sha):
                    # deleted by hand: the store still names the commit, so the member stays
                    self.repo.update_refs([("create", m.branch, m.sha)], message="kdatui: recreate a member branch")
                    done.append(f"recreated the branch {m.branch} of a member (it had been deleted)")
            intents = {m.attempt for m in self.store.members(states=("admitting",))}
            for att in self.store.attempts(status=("admitting",)):
                if att.id not in intents:  # cannot happen (one transaction), but never leave it stuck
                    self.store.update_attempt(att.id, status=att.verdict or "passed")
                    done.append(f"attempt {att.id} was admitting without an intent: back to {att.verdict}")
            here = socket.gethostname()
            for run in self.store.runs():
                if run.host == here and run.pid and run.pid != _pid() and not pid_alive(run.pid):
                    for att in self.store.attempts(run=run.id, status=("proposed", "evaluating")):
                        self.store.update_attempt(att.id, status="error", verdict="error",
                                                  reason=f"interrupted: the process of run {run.id} stopped "
                                                         f"while the attempt was {att.status}")
                        done.append(f"attempt {att.id} was {att.status} in a stopped run: marked error")
                    if run.state != "stopped":
                        with self.store.transaction():
                            self.store.update_run(run.id, state="stopped")
                            self.store.event(run.id, "run-stopped", reason=f"its process ({run.pid}) is gone")
                        done.append(f"run {run.id}: its process {run.pid} is gone; marked stopped")
            for line in done:
                self.store.event(None, "repaired", what=line)
            if done or not self.index_path.exists():
                self.reindex()
        return done

    # ------------------------------------------------------------------ index

    def reindex(self) -> Path:
        """Regenerate .frontier/index.toml from the store (a view, never the source of truth)."""
        tasks: dict[str, dict] = {}
        for task_name in self.store.tasks_with_members():
            info = self.store.task(task_name)
            members = self.store.members(task_name)
            contenders = [self.contender(m) for m in members]
            shape_names = tuple(info.shapes) if info else tuple(
                dict.fromkeys(s for c in contenders for s in c.scores))
            holders = fastest_on(contenders, shape_names)
            entry: dict = {"primary_shape": info.primary_shape if info else ""}
            if info and info.path:
                entry["task_file"] = info.path
            best = next((m.name for m in members if m.best), None)
            if best:
                entry["best"] = best
            rows = []
            for m, c in zip(members, contenders):
                att = self.store.attempt(m.attempt)
                row = {"name": m.name, "family": m.family, "branch": m.branch, "commit": m.sha,
                       "attempt": m.attempt, "best": m.best, "why": m.why,
                       "idea": idea_summary(att.idea) if att else "",
                       "fastest_on": [s for s, h in holders.items() if h is c], "shapes": {}}
                for e in self.evaluations(m):
                    row["shapes"][e.shape] = {k: v for k, v in (
                        ("verdict", e.verdict), ("speedup", e.speedup), ("candidate_ms", e.candidate_ms),
                        ("baseline_ms", e.baseline_ms), ("noise", e.noise)) if v is not None}
                rows.append(row)
            entry["members"] = rows
            tasks[task_name] = entry
        doc = {"note": "generated by kdatui from kdatui.db after every frontier change; edits are overwritten",
               "generated": time.strftime("%Y-%m-%dT%H:%M:%S"), "tasks": tasks}
        tmp = self.index_path.with_name("index.toml.tmp")
        tmp.write_text(tomli_w.dumps(doc))
        tmp.replace(self.index_path)
        return self.index_path


def _json(d: dict) -> bytes:
    return (json.dumps(d, indent=2, sort_keys=False, default=str) + "\n").encode()


def _pid() -> int:
    return os.getpid()
