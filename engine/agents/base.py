"""The agent interface the run loop drives.

One attempt is two calls:

    plan = agent.plan(ctx)                      # what to try, and from which member
    ... the loop creates the attempt's worktree on a scratch branch from plan.parent ...
    result = agent.work(ctx, plan, worktree, candidate_dir)   # write kernel.py + IDEA.md there

`plan` must be cheap and must not touch the repo; `work` writes only inside `worktree`
(the candidate folder is `candidate_dir`, i.e. `<worktree>/candidates/<task>/`). The loop
then evaluates the candidate folder on the task's shapes and applies the admission policy.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..task import Task


@dataclass
class MemberView:
    """A frontier member as an agent sees it."""

    name: str
    family: str
    idea: str
    config: dict | None  # the kernel family's CONFIG read from its kernel.py (None if not a rendered family)
    cells: dict[str, dict]  # shape -> {"verdict", "speedup", "ms", "baseline_ms", "noise"}
    best: bool = False
    kernel_path: Path | None = None  # its kernel.py on disk (the member's commit, checked out or exported)


@dataclass
class AttemptView:
    """A past attempt of this task (any run), newest last."""

    id: int
    family: str
    name: str
    parent: str
    status: str  # proposed / evaluating / passed / failed / error / admitted / archived / pruned
    verdict: str | None
    idea: str
    reason: str
    config: dict | None
    cells: dict[str, dict] = field(default_factory=dict)


@dataclass
class AgentContext:
    task: Task
    run_id: str
    members: list[MemberView]
    history: list[AttemptView]
    notes: list[str]  # operator notes since the agent's last turn (the loop marks them delivered)
    feedback: list[str]  # the last evaluations, one readable line each
    log: Callable[[str], None]  # stream a line into the event log (kind agent-output)
    rng: random.Random
    engine_socket: Path | None = None  # set in the agent's environment as KDATUI_ENGINE_SOCKET
    timeout_s: float = 1800.0  # a turn's limit (command agents)
    device: str = "cuda"  # where candidates run: "cpu" is the Triton interpreter (launch options do nothing there)

    @property
    def primary(self) -> str:
        return self.task.primary_shape


@dataclass
class Plan:
    family: str  # kernel family ("fused", "split", ...) or what a coding agent says it wrote
    name: str  # stable and descriptive: family + distinguishing idea, e.g. "split-bv32-c16"
    parent: str | None  # member name to branch from; None: the run's base commit (a seed)
    idea: str  # one line: why this attempt ("split: BV 64->32 to double the recurrence programs")
    config: dict | None = None  # the family config a built-in attempt renders


@dataclass
class TurnResult:
    ok: bool
    reason: str = ""  # why the turn failed, one line
    family: str | None = None  # a coding agent may only know these after its turn
    name: str | None = None
    idea: str | None = None


class Agent(ABC):
    name = "agent"

    @abstractmethod
    def plan(self, ctx: AgentContext) -> Plan | None:
        """What to try next; None when there is nothing left to try."""

    @abstractmethod
    def work(self, ctx: AgentContext, plan: Plan, worktree: Path, candidate_dir: Path) -> TurnResult:
        """Write the attempt into `candidate_dir` (kernel.py and IDEA.md)."""

    def close(self) -> None:
        """Stop anything still running (a CLI subprocess): the run is stopping."""


def make_agent(spec: str, task: Task, config: dict | None = None, *, repo: Path | None = None) -> Agent:
    """`builtin`, or the name of a command agent configured in the task or user config
    (`[agents.NAME] command = "claude -p {prompt_file} --output-format stream-json"`);
    several names separated by commas take turns. `repo`: whose `.frontier/config.toml`
    to read (default: the repo around the current directory)."""
    if spec == "builtin":
        from .builtin import BuiltinAgent

        return BuiltinAgent()
    if spec.startswith("python:"):
        # A Python agent class: python:path/to/file.py:ClassName (tests, custom searches)
        import importlib.util

        _, path, cls_name = spec.split(":", 2)
        mod_spec = importlib.util.spec_from_file_location(f"kdatui_agent_{abs(hash(path))}", path)
        if mod_spec is None:
            raise ValueError(f"agent {spec!r}: cannot load {path}")
        mod = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(mod)
        return getattr(mod, cls_name)()
    from .command import CommandAgent, load_agent_configs

    configs = load_agent_configs(config, repo=repo)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    missing = [n for n in names if n not in configs]
    if missing:
        known = ", ".join(sorted(configs)) or "none configured"
        raise ValueError(f"unknown agent {', '.join(missing)!r}: use 'builtin' or a configured command agent "
                         f"({known}); configure one under [agents.NAME] in .frontier/config.toml")
    return CommandAgent([configs[n] for n in names])
