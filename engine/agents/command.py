"""Command agents: any coding-agent CLI (claude, codex, gemini, aider, ...) run as a
subprocess in the attempt's worktree, from a command template in the config.

Configuration (`.frontier/config.toml` of the repo, or the user's
`~/.config/kdatui/config.toml`, `$KDATUI_CONFIG_DIR/config.toml` when that is set; the
repo's file wins for a name both define)::

    [agents.claude]
    command = "claude -p 'Read PROMPT.md and do what it says.' --output-format stream-json --verbose"
    timeout_s = 1800          # optional; the run's turn limit otherwise
    network = true            # optional; false: no network in the turn (a CLI needs its API)
    sandbox = true            # optional; the turn in bubblewrap (worktree writable, store,
                              # salt, other worktrees hidden, no frontier ref can move)
    env = { MAX_THINKING_TOKENS = "8000" }   # optional, added to the environment

    [agents.codex]
    command = "codex exec --json --full-auto {prompt}"

Headless CLIs need their own flags to edit files and run commands unattended (claude's
--permission-mode / --allowedTools, codex's --full-auto, ...): put them in the template.
The template is split like a shell line (shlex, no shell runs), then these fields are
filled in each argument: {prompt_file} (PROMPT.md's path), {prompt} (its text),
{worktree}, {candidate_dir}, {task} (the task's name), {task_file}. Other braces are
left alone; an unknown `{field}` is a configuration error.

A turn: render PROMPT.md, run the command (cwd = the worktree, its own process group,
in the sandbox of engine/sandbox.py where bubblewrap works, KDATUI_ENGINE_SOCKET set to the
engine's agent socket so `kdatui check/bench` inside reach the run's judge and nothing else),
stream its output into the event log line by line (stream-json parsed into readable
lines), kill the whole group at the turn's timeout. The turn fails on a non-zero exit, a
timeout, or no new kernel.py; otherwise IDEA.md gives the family, a name and the idea.
Several configured agents take turns in order.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import threading
import time
import tomllib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..paths import config_dir
from .base import Agent, AgentContext, MemberView, Plan, TurnResult
from .prompt import render_prompt

PLACEHOLDERS = ("prompt_file", "prompt", "worktree", "candidate_dir", "task", "task_file")
KEYS = ("command", "timeout_s", "env", "network", "sandbox")
PROMPT_FILE = "PROMPT.md"
TASK_FILE = "TASK.toml"  # written into the worktree only when the task has no file of its own
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class AgentConfigError(ValueError):
    """An [agents.NAME] table is malformed; the message names the file and the key."""


@dataclass(frozen=True)
class AgentConfig:
    name: str
    command: str
    timeout_s: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    source: str = ""  # the file (or "<caller>") it came from
    network: bool = True  # a coding CLI needs its API; false: the turn has no network at all
    sandbox: bool = True  # the turn runs in the sandbox (engine/sandbox.py agent_launch) where one works

    def argv(self, values: Mapping[str, str]) -> list[str]:
        """The command line with the fields filled in, one argument per shlex token."""
        return [_FIELD.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), tok)
                for tok in shlex.split(self.command)]


# --------------------------------------------------------------------------- configuration

def user_config_path() -> Path:
    return config_dir() / "config.toml"


def repo_config_path(repo: str | Path | None = None) -> Path:
    """`.frontier/config.toml` of `repo`, or of the repo around the current directory."""
    if repo is not None:
        return Path(repo) / ".frontier" / "config.toml"
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / ".frontier").is_dir() or (d / ".git").exists():
            return d / ".frontier" / "config.toml"
    return here / ".frontier" / "config.toml"


def _fail(where: str, key: str, value: Any, expected: str) -> AgentConfigError:
    return AgentConfigError(f"{where}: {key} = {value!r}: expected {expected}")


def parse_agents(data: Mapping, where: str) -> dict[str, AgentConfig]:
    """The [agents.NAME] tables of one parsed config file."""
    agents = data.get("agents", {})
    if not isinstance(agents, Mapping):
        raise _fail(where, "agents", agents, 'a table of agents ([agents.NAME] with command = "...")')
    out = {}
    for name, table in agents.items():
        prefix = f"agents.{name}"
        if name == "builtin":
            raise AgentConfigError(f"{where}: [{prefix}]: 'builtin' is the built-in agent's name; choose another")
        if not _NAME.match(name):
            raise AgentConfigError(f"{where}: [{prefix}]: an agent name is letters, digits, '_', '-', '.'")
        if not isinstance(table, Mapping):
            raise _fail(where, prefix, table, 'a table with command = "..." (and optionally timeout_s, env)')
        for k in table:
            if k not in KEYS:
                raise AgentConfigError(f"{where}: unknown key '{prefix}.{k}'; allowed here: {', '.join(KEYS)}")
        if "command" not in table:
            raise AgentConfigError(f"{where}: missing key '{prefix}.command' (a command template, e.g. "
                                   f"\"claude -p {{prompt}} --output-format stream-json --verbose\")")
        command = table["command"]
        if not isinstance(command, str) or not command.strip():
            raise _fail(where, f"{prefix}.command", command, "a non-empty command template string")
        try:
            tokens = shlex.split(command)
        except ValueError as e:
            raise _fail(where, f"{prefix}.command", command, f"a command line shlex can split ({e})") from None
        for tok in tokens:
            for m in _FIELD.finditer(tok):
                if m.group(1) not in PLACEHOLDERS:
                    raise _fail(where, f"{prefix}.command", command,
                                f"only the fields {', '.join('{' + p + '}' for p in PLACEHOLDERS)} "
                                f"(found {{{m.group(1)}}})")
        timeout = table.get("timeout_s")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout > 0):
            raise _fail(where, f"{prefix}.timeout_s", timeout, "a positive number of seconds")
        env = table.get("env", {})
        if not isinstance(env, Mapping):
            raise _fail(where, f"{prefix}.env", env, 'a table of environment variables (env = { NAME = "value" })')
        clean = {}
        for k, v in env.items():
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise _fail(where, f"{prefix}.env.{k}", v, "a string (or a number)")
            clean[str(k)] = str(v)
        flags = {}
        for key in ("network", "sandbox"):
            if key in table and not isinstance(table[key], bool):
                raise _fail(where, f"{prefix}.{key}", table[key], "true or false")
            flags[key] = table.get(key, True)
        out[name] = AgentConfig(name=name, command=command, timeout_s=float(timeout) if timeout else None,
                                env=clean, source=where, **flags)
    return out


def _read_config(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise AgentConfigError(f"{path}: cannot read: {e.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise AgentConfigError(f"{path}: not valid TOML: {e}") from None


def load_agent_configs(config: Mapping | None = None, *, repo: str | Path | None = None) -> dict[str, AgentConfig]:
    """Every configured command agent by name: the user config, then the repo's
    `.frontier/config.toml`, then `config` from the caller (a dict shaped like the files,
    `{"agents": {NAME: {...}}}`, or just the agents table); a later source replaces a
    name an earlier one defined."""
    configs: dict[str, AgentConfig] = {}
    for path in (user_config_path(), repo_config_path(repo)):
        configs.update(parse_agents(_read_config(path), str(path)))
    if config:
        if "agents" in config and isinstance(config["agents"], Mapping):
            data = config
        else:
            data = {"agents": config}
        configs.update(parse_agents(data, "the agent configuration given to the run"))
    return configs


# --------------------------------------------------------------------------- output -> readable lines

def _clip(s: str, width: int) -> str:
    s = " ".join(s.split()) if "\n" not in s else s.strip()
    return s if len(s) <= width else s[: width - 1].rstrip() + "…"


def _first_line(s: Any, width: int = 160) -> str:
    if isinstance(s, list):  # tool results as content blocks
        s = " ".join(b.get("text", "") for b in s if isinstance(b, dict))
    s = str(s or "").strip()
    first = next((ln.strip() for ln in s.splitlines() if ln.strip()), "")
    more = len([ln for ln in s.splitlines() if ln.strip()]) - 1
    return _clip(first, width) + (f" (+{more} lines)" if more > 0 else "")


def _summary(inp: Any, width: int = 160) -> str:
    """A tool call's input in a few words: the command, the file, the pattern, ..."""
    if isinstance(inp, Mapping):
        for k in ("command", "cmd", "file_path", "path", "absolute_path", "pattern", "url", "query",
                  "description", "prompt"):
            v = inp.get(k)
            if isinstance(v, list):
                v = " ".join(map(str, v))
            if isinstance(v, str) and v.strip():
                return _clip(v, width)
        if isinstance(inp.get("todos"), list):
            return f"{len(inp['todos'])} to-dos"
        return _clip(json.dumps(inp, default=str), width)
    return _clip(str(inp), width)


class StreamParser:
    """Turns a coding agent's output lines into short readable lines: claude's stream-json
    (assistant text and tool calls, tool results, the final result), codex's `exec --json`
    events, gemini's stream-json (streamed text is joined into lines), any JSON line with
    a text field; plain text passes through."""

    QUIET = {"stream_event", "turn.started", "item.updated", "content_block_delta", "content_block_start",
             "content_block_stop", "message_start", "message_delta", "message_stop", "ping", "token_count"}

    def __init__(self, width: int = 300, max_lines: int = 15):
        self.width = width
        self.max_lines = max_lines
        self._partial = ""  # streamed assistant text not yet ended by a newline

    def feed(self, line: str) -> list[str]:
        s = line.rstrip("\r\n")
        if not s.strip():
            return []
        if s.lstrip().startswith("{"):
            try:
                obj = json.loads(s)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                if obj.get("type") == "message" and obj.get("delta"):
                    return self._delta(obj)
                return self.flush() + self._event(obj)
        return self.flush() + [_clip(s, self.width)]

    def flush(self) -> list[str]:
        text, self._partial = self._partial, ""
        return self._text(text) if text.strip() else []

    def _delta(self, obj: dict) -> list[str]:
        if obj.get("role", "assistant") != "assistant":
            return []
        self._partial += str(obj.get("content") or "")
        if "\n" not in self._partial:
            return []
        done, self._partial = self._partial.rsplit("\n", 1)
        return self._text(done)

    def _text(self, text: str, prefix: str = "") -> list[str]:
        lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
        out = [_clip(prefix + ln, self.width) for ln in lines[: self.max_lines]]
        if len(lines) > self.max_lines:
            out.append(f"… ({len(lines) - self.max_lines} more lines)")
        return out

    def _event(self, o: dict) -> list[str]:
        t = o.get("type")
        if t in self.QUIET:
            return []
        # claude -p --output-format stream-json
        if t == "system":
            if o.get("subtype") == "init":
                return [f"session started (model {o.get('model', '?')})"]
            return []
        if t in ("assistant", "user") and isinstance(o.get("message"), Mapping):
            return self._claude_message(t, o["message"])
        if t == "result" and ("subtype" in o or "num_turns" in o or "duration_ms" in o or "is_error" in o):
            return [self._claude_result(o)]
        # codex exec --json
        if t in ("item.started", "item.completed") and isinstance(o.get("item"), Mapping):
            return self._codex_item(t, o["item"])
        if t == "thread.started":
            return ["session started"]
        if t == "turn.completed":
            u = o.get("usage") or {}
            return [f"turn completed ({u.get('input_tokens', '?')} tokens in, {u.get('output_tokens', '?')} out)"]
        if t == "turn.failed":
            return [f"turn failed: {_first_line((o.get('error') or {}).get('message'))}"]
        if t == "error":
            return [f"error: {_first_line(o.get('message') or o.get('error'))}"]
        # gemini --output-format stream-json
        if t == "init":
            return [f"session started (model {o.get('model', '?')})"]
        if t == "message":
            return self._text(o.get("content", "")) if o.get("role") == "assistant" else []
        if t == "tool_use" and ("tool_name" in o or "name" in o):
            return [f"tool {o.get('tool_name') or o.get('name')}: {_summary(o.get('parameters') or o.get('input'))}"]
        if t == "tool_result":
            status = o.get("status", "done")
            return [f"  -> {status}: {_first_line(o.get('output') or o.get('content') or o.get('error'))}"]
        if t == "result":
            stats = o.get("stats") or {}
            ms = stats.get("duration_ms")
            return [f"result: {o.get('status', 'done')}" + (f" in {ms / 1000:.0f} s" if isinstance(ms, (int, float))
                                                            else "")]
        # older codex: {"msg": {"type": "agent_message", "message": ...}}
        if isinstance(o.get("msg"), Mapping):
            m = o["msg"]
            if m.get("type") == "exec_command_begin":
                cmd = m.get("command")
                return [f"$ {' '.join(cmd) if isinstance(cmd, list) else cmd}"]
            if m.get("type") in ("agent_message", "agent_reasoning", "task_complete", "error"):
                return self._event({k: v for k, v in m.items() if k != "type"})
            return []
        for k in ("text", "message", "content", "result"):  # any JSON line with a text field
            if isinstance(o.get(k), str) and o[k].strip():
                return self._text(o[k])
        return [f"[{t}]"] if t else [_clip(json.dumps(o, default=str), self.width)]

    def _claude_message(self, role: str, msg: Mapping) -> list[str]:
        content = msg.get("content")
        if isinstance(content, str):
            return self._text(content) if role == "assistant" else []
        out: list[str] = []
        for block in content or []:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text" and role == "assistant":
                out += self._text(block.get("text", ""))
            elif kind == "thinking":
                out += [_clip("thinking: " + _first_line(block.get("thinking"), self.width), self.width)]
            elif kind == "tool_use":
                out.append(f"tool {block.get('name', '?')}: {_summary(block.get('input'))}")
            elif kind == "tool_result":
                err = " (error)" if block.get("is_error") else ""
                out.append(f"  ->{err} {_first_line(block.get('content'))}".rstrip())
        return out

    def _claude_result(self, o: Mapping) -> str:
        parts = [str(o.get("subtype") or ("error" if o.get("is_error") else "done"))]
        if isinstance(o.get("duration_ms"), (int, float)):
            parts.append(f"in {o['duration_ms'] / 1000:.0f} s")
        if o.get("num_turns") is not None:
            parts.append(f"{o['num_turns']} turns")
        if isinstance(o.get("total_cost_usd"), (int, float)):
            parts.append(f"${o['total_cost_usd']:.2f}")
        text = _first_line(o.get("result"), 200) if o.get("result") else ""
        return "result: " + " ".join(parts) + (f": {text}" if text else "")

    def _codex_item(self, t: str, item: Mapping) -> list[str]:
        kind = item.get("type") or item.get("item_type")
        if kind in ("agent_message", "assistant_message"):
            return self._text(item.get("text", "")) if t == "item.completed" else []
        if kind == "reasoning":
            return [_clip("thinking: " + _first_line(item.get("text"), self.width), self.width)] \
                if t == "item.completed" else []
        if kind == "command_execution":
            if t == "item.started":
                return [f"$ {_clip(str(item.get('command', '')), 200)}"]
            code = item.get("exit_code")
            out = _first_line(item.get("aggregated_output"))
            return [f"  -> exit {code}" + (f": {out}" if out else "")]
        if kind == "file_change" and t == "item.completed":
            changes = item.get("changes") or []
            files = ", ".join(f"{c.get('path')} ({c.get('kind')})" for c in changes if isinstance(c, Mapping))
            return [f"edited {files}" if files else "edited files"]
        if kind == "mcp_tool_call" and t == "item.started":
            return [f"tool {item.get('server', '')}.{item.get('tool', '')}"]
        if kind == "web_search" and t == "item.started":
            return [f"search: {item.get('query', '')}"]
        if kind == "error":
            return [f"error: {_first_line(item.get('message'))}"]
        return []


# --------------------------------------------------------------------------- IDEA.md

_IDEA_FIELD = re.compile(r"^[\s*_>-]*(family|name|parent)[\s*_]*:[\s*_]*(.*?)[\s*_]*$", re.I)


def parse_idea(text: str) -> tuple[str | None, str | None, str]:
    """(family, name, idea) from IDEA.md: the first `family:` and `name:` lines, and the
    first paragraph that is neither a field line nor a heading."""
    family = name = None
    paragraphs: list[list[str]] = []
    cur: list[str] = []
    for raw in text.splitlines():
        s = raw.strip()
        m = _IDEA_FIELD.match(s)
        if m or not s or s.startswith("#"):
            if cur:
                paragraphs.append(cur)
                cur = []
            if m:
                key, val = m.group(1).lower(), m.group(2).strip().strip("`'\"")
                if key == "family" and family is None and val:
                    family = re.sub(r"[^a-z0-9_.-]+", "-", val.split()[0].lower()).strip("-") or None
                elif key == "name" and name is None and val:
                    name = val.split()[0]
            continue
        cur.append(s)
    if cur:
        paragraphs.append(cur)
    idea = " ".join(paragraphs[0]) if paragraphs else ""
    return family, name, idea


# --------------------------------------------------------------------------- the agent

def _speed(m: MemberView, shape: str) -> float:
    c = m.cells.get(shape) or {}
    return float(c["speedup"]) if c.get("verdict") == "PASS" and c.get("speedup") else 0.0


class CommandAgent(Agent):
    """One or more configured CLIs, taking turns in order. `consecutive_failures` counts
    failed turns in a row (the loop pauses the run at three)."""

    def __init__(self, configs: list[AgentConfig], *, kill_grace_s: float = 3.0):
        if not configs:
            raise ValueError("a command agent needs at least one configured agent")
        self.configs = list(configs)
        self.name = ",".join(c.name for c in self.configs)
        self.kill_grace_s = kill_grace_s
        self.turn = 0  # turns taken; the next is configs[turn % len(configs)]
        self.consecutive_failures = 0
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._closing = False

    @property
    def current(self) -> AgentConfig:
        return self.configs[self.turn % len(self.configs)]

    # ---------------------------------------------------------------- plan

    def plan(self, ctx: AgentContext) -> Plan | None:
        """The parent: the families take turns (fastest family first), each represented
        by its best member on the primary shape; the base commit while the frontier is empty."""
        cfg = self.current
        n = max((a.id for a in ctx.history), default=0) + 1
        if not ctx.members:
            return Plan(family="agent", name=f"{cfg.name}-{n}", parent=None,
                        idea=f"{cfg.name}: a coding-agent turn from the base commit")
        best_of: dict[str, MemberView] = {}
        for m in sorted(ctx.members, key=lambda m: (-_speed(m, ctx.primary), not m.best, m.name)):
            best_of.setdefault(m.family, m)
        order = list(best_of.values())  # fastest family first: turn 0 starts from the best member
        parent = order[self.turn % len(order)]
        return Plan(family=parent.family, name=f"{cfg.name}-{n}", parent=parent.name,
                    idea=f"{cfg.name}: a coding-agent turn from {parent.name} ({parent.family})")

    # ---------------------------------------------------------------- work

    def work(self, ctx: AgentContext, plan: Plan, worktree: Path, candidate_dir: Path) -> TurnResult:
        cfg = self.current
        self.turn += 1
        with self._lock:
            self._closing = False  # close() cancels the turn in flight, not the ones after it
        result = self._turn(cfg, ctx, plan, Path(worktree), Path(candidate_dir))
        self.consecutive_failures = 0 if result.ok else self.consecutive_failures + 1
        if not result.ok:
            ctx.log(f"{cfg.name}: turn failed: {result.reason}")
        return result

    def _turn(self, cfg: AgentConfig, ctx: AgentContext, plan: Plan, worktree: Path, cdir: Path) -> TurnResult:
        cdir.mkdir(parents=True, exist_ok=True)
        kernel, idea_md = cdir / "kernel.py", cdir / "IDEA.md"
        before = {p: p.read_bytes() if p.exists() else None for p in (kernel, idea_md)}
        try:
            rel = cdir.resolve().relative_to(worktree.resolve()).as_posix()
        except ValueError:
            rel = str(cdir)
        task_file = self._task_file(ctx, worktree)
        timeout = cfg.timeout_s or ctx.timeout_s
        text = render_prompt(ctx, plan, agent=cfg.name, cdir=rel, task_file=task_file, timeout_s=timeout)
        prompt_file = worktree / PROMPT_FILE
        prompt_file.write_text(text)
        values = {"prompt_file": str(prompt_file), "prompt": text, "worktree": str(worktree),
                  "candidate_dir": str(cdir), "task": ctx.task.name, "task_file": task_file}
        argv = cfg.argv(values)
        env = {**os.environ, **cfg.env, "KDATUI_PROMPT_FILE": str(prompt_file), "KDATUI_CANDIDATE_DIR": str(cdir),
               "KDATUI_TASK_FILE": task_file}
        env.pop("KDATUI_ENGINE_SOCKET", None)
        if ctx.engine_socket is not None:
            env["KDATUI_ENGINE_SOCKET"] = str(ctx.engine_socket)

        shown = " ".join(shlex.quote(a) if a != text else "{prompt}" for a in argv)
        ctx.log(f"{cfg.name}: $ {_clip(shown, 300)}")
        if cfg.sandbox:
            from .. import sandbox

            sock = [str(ctx.engine_socket)] if ctx.engine_socket is not None and Path(ctx.engine_socket).exists() else []
            launch = sandbox.agent_launch(argv, worktree=worktree, env=env, network=cfg.network, extra_binds=sock)
            if not launch.info.kind == "bwrap":
                ctx.log(f"{cfg.name}: warning: the turn is not sandboxed ({launch.info.reason or launch.info.kind})")
            argv, env = launch.argv, launch.env
        status, detail = self._run(cfg, argv, worktree, env, timeout, ctx.log)
        if status != "ok":
            return TurnResult(ok=False, reason=detail)

        if not kernel.exists():
            return TurnResult(ok=False, reason=f"{cfg.name} left no {rel}/kernel.py")
        if before[kernel] is not None and kernel.read_bytes() == before[kernel]:
            return TurnResult(ok=False, reason=f"{cfg.name} left {rel}/kernel.py as it was (its parent's): "
                                               "nothing new to evaluate")
        family = name = None
        idea = ""
        if idea_md.exists():
            fresh = idea_md.read_bytes() != before[idea_md]
            family, name, idea = parse_idea(idea_md.read_text(errors="replace"))
            if not fresh:
                ctx.log(f"{cfg.name}: warning: IDEA.md is the parent's, unchanged; its idea is not this attempt's")
                idea, name = "", None
        else:
            ctx.log(f"{cfg.name}: warning: no {rel}/IDEA.md (family and idea unknown)")
        if family is None:
            family = plan.family
            ctx.log(f"{cfg.name}: warning: IDEA.md has no 'family:' line; taking {family!r}")
        taken = {m.name for m in ctx.members} | {a.name for a in ctx.history}
        if name is not None and name in taken:
            name = f"{name}-{plan.name.rsplit('-', 1)[-1]}"
        return TurnResult(ok=True, family=family, name=name or plan.name, idea=idea or None)

    def _task_file(self, ctx: AgentContext, worktree: Path) -> str:
        """The task's own file when it has one; else a copy written next to PROMPT.md."""
        path = ctx.task.path
        if path is not None and Path(path).exists():
            return str(Path(path).resolve())
        out = worktree / TASK_FILE
        out.write_text(ctx.task.dumps())
        return str(out)

    def _run(self, cfg: AgentConfig, argv: list[str], cwd: Path, env: dict, timeout: float,
             log) -> tuple[str, str]:
        """Run the command, streaming its readable output into `log`. ("ok", "") or
        (failure kind, reason)."""
        with self._lock:
            if self._closing:
                return "stopped", "the run is stopping"
            try:
                proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True)
            except OSError as e:
                return "error", f"{cfg.name}: cannot run {argv[0]!r}: {e.strerror or e}"
            self._proc = proc
        lines: queue.Queue = queue.Queue()
        readers = [threading.Thread(target=_reader, args=(stream, kind, lines), daemon=True)
                   for stream, kind in ((proc.stdout, "out"), (proc.stderr, "err"))]
        for r in readers:
            r.start()
        parser = StreamParser()
        tail: deque[str] = deque(maxlen=3)
        start = time.monotonic()
        deadline = start + timeout
        open_streams, exited_at, timed_out = 2, None, False

        def emit(kind: str, text: str) -> None:
            if kind == "out":
                out = parser.feed(text)
            else:
                out = [f"stderr: {_clip(text.rstrip(), 300)}"] if text.strip() else []
            for line in out:
                tail.append(line)
                log(f"{cfg.name}: {line}")

        while open_streams:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if self._closing:
                break
            if exited_at is None and _exited(proc):
                exited_at = now
            if exited_at is not None and now - exited_at > 2.0:
                break  # the command is gone; what holds its pipes open is a stray child
            try:
                kind, text = lines.get(timeout=min(0.1, deadline - now))
            except queue.Empty:
                continue
            if kind == "eof":
                open_streams -= 1
            else:
                emit(kind, text)
        # Whatever is left of the command's process group dies with the turn.
        self._kill(proc, graceful=timed_out)
        rc = proc.wait()
        with self._lock:
            self._proc = None
        for r in readers:
            r.join(timeout=1.0)
        while True:
            try:
                kind, text = lines.get_nowait()
            except queue.Empty:
                break
            if kind != "eof":
                emit(kind, text)
        for line in parser.flush():
            log(f"{cfg.name}: {line}")
        took = time.monotonic() - start
        if timed_out:
            return "timeout", f"{cfg.name} ran past the turn's timeout of {timeout:g} s and was killed"
        if self._closing:
            return "stopped", f"{cfg.name} was stopped: the run is stopping"
        log(f"{cfg.name}: exited with status {rc} after {took:.1f} s")
        if rc != 0:
            last = f": {tail[-1]}" if tail else ""
            return "exit", f"{cfg.name} exited with status {rc}{last}"
        return "ok", ""

    def _kill(self, proc: subprocess.Popen, *, graceful: bool) -> None:
        """Signal the command's whole process group (it leads its own session). The group id
        stays reserved until the leader is reaped, so this never hits a stranger."""
        if graceful:
            _killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=self.kill_grace_s)
            except subprocess.TimeoutExpired:
                pass
        _killpg(proc.pid, signal.SIGKILL)

    def close(self) -> None:
        with self._lock:
            self._closing = True
            proc = self._proc
            if proc is not None and proc.returncode is None:
                _killpg(proc.pid, signal.SIGKILL)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(proc: subprocess.Popen) -> bool:
    """Has the command exited? Without reaping it, so its group id stays reserved."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    except AttributeError:  # no waitid on this platform
        return proc.poll() is not None
    return info is not None


def _reader(stream, kind: str, out: queue.Queue) -> None:
    try:
        for raw in iter(stream.readline, b""):
            out.put((kind, raw.decode("utf-8", errors="replace")))
    except (OSError, ValueError):
        pass
    finally:
        out.put(("eof", kind))
