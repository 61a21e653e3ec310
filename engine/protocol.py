"""The engine's control protocol: newline-delimited JSON over the Unix socket
`.frontier/control.sock` (mode 0600). The TUI and the CLI verbs are its clients.

Requests (client -> engine), one JSON object per line:

    {"id": 7, "cmd": "status"}
    {"id": 8, "cmd": "pause"}            {"cmd": "resume"}       {"cmd": "stop"}
    {"cmd": "note", "text": "try BV=32 on split"}
    {"cmd": "prune", "name": "split-bv32-c16"}                  {"cmd": "restore", "name": ...}
    {"cmd": "archive"}
    {"cmd": "budget", "change": "+2h"}   more budget for the live or finished run ("+20attempts",
                                         "8h" sets it; no change: the budget and what is spent)
    {"cmd": "generalize", "from": "split-bv64-c16", "shapes": ["b1_t4096_h64", "B=2,T=2048,H=32"],
     "continue_search": true, "dry_run": false}   dry_run: validate and say what it would do
    {"cmd": "recheck", "name": "split-bv64-c16"}                 (a member, or "attempt:<id>")
    {"cmd": "evaluate", "candidate": "/path", "shapes": [...], "timing": true}
    {"cmd": "snapshot"}                  everything a view needs at once (see below)
    {"cmd": "curve", "last": 400}        the search's curve (engine/curve.py Curve.to_dict)
    {"cmd": "candidate", "name": "split-bv64-c16"} or {"cmd": "candidate", "attempt": 12}
    {"cmd": "subscribe", "backlog": 500} then stream events

A coding agent's turn gets a second socket, `.frontier/agent.sock`, bound into its sandbox:
it answers `evaluate` and `status` only (its `kdatui check` / `kdatui bench` reach the run's
judge there, and nothing else of the engine).

Replies (engine -> client): {"id": 7, "ok": true, "result": {...}} or
{"id": 7, "ok": false, "error": "one line saying what was wrong"}. The result of an
action (pause, resume, stop, note, prune, restore, archive, generalize, recheck) carries a
one-line `text` saying what was done. After `subscribe`
the engine also sends {"event": {...}} lines, first the backlog, then live events, until
the client disconnects. An event is {"seq", "ts", "run", "kind", ...data}.

`status` result: {"run", "task", "task_path", "state" (running/paused/finished/stopping/stopped),
"why" (reason of the state), "phase" ("one shape", "N shapes", or "generalized (N shapes)" for a
task `generalize` wrote), "agent", "started",
"elapsed_s" (time the run has been running, carried over restarts; paused and finished
time excluded), "budget": {"hours", "attempts"}, "idle_stop_s" (a finished run's engine exits
after this long with no client; null: never), "attempts": {"total", "evaluated", "admitted"},
"members": n, "best": {"name", "speedup", "shape"} | null, "next_cleanup_s", "device",
"current": {"attempt", "stage", "detail"} | null, "pid", "resumed" (this engine took over a run
that had been interrupted)}.

`snapshot` result: {"status": ..., "shapes": [{"name", "dims", "primary"}],
"members": [{"name", "family", "branch", "sha", "best", "why", "idea", "attempt",
"cells": {shape: cell}}], "attempts": [{"id", "family", "name", "status", "verdict",
"parent", "idea", "reason", "cells": {shape: cell}}] (the last 50), "baseline": name,
"notes": [...], "curve": {"task", "shape", "baseline", "device", "points": [{"attempt", "t", "ts",
"name", "family", "kind" (passed/failed/error/raced), "speedup", "noise", "best"}] (the last 400),
"best": [[t, speedup], ...]}} where a cell is {"verdict", "speedup", "ms", "baseline_ms", "noise"}.

`candidate` result: {"name", "attempt", "family", "parent" ("base" or a branch), "status",
"branch", "sha", "why" (members), "idea" (IDEA.md), "checks": [CheckReport dict per shape],
"timings": {shape: PairedTiming dict with each side's trial_ms}, "diff" (unified diff of
kernel.py against the parent), "kernel" (its source), "cells": {shape: cell}}.

Event kinds (the `kind` field) the engine emits; each carries a human `text` field too:
  run-started run-resumed run-paused run-resumed run-stopping run-stopped
  attempt-proposed attempt-evaluating attempt-evaluated attempt-error
  agent-output (line) agent-turn (ok, reason)
  eval-progress (attempt, shape, stage, i, n, label: step i of n of this shape's evaluation;
                 also phase/step/steps within the stage)
  admitted rejected pruned restored archived generalized rechecked
  note cleanup budget (the run finished) budget-changed error
"""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path
from typing import Iterator

SOCKET_NAME = "control.sock"
AGENT_SOCKET_NAME = "agent.sock"
AGENT_COMMANDS = ("evaluate", "status")
COMMANDS = ("status", "pause", "resume", "stop", "note", "budget", "prune", "restore", "archive", "generalize",
            "recheck", "evaluate", "snapshot", "subscribe", "candidate", "curve")
MAX_LINE = 16 << 20


class EngineUnavailable(Exception):
    """No engine is listening for this repo (or it went away)."""


class EngineError(Exception):
    """The engine refused a command; the message says why."""


def socket_path(frontier_dir: Path) -> Path:
    return Path(frontier_dir) / SOCKET_NAME


def agent_socket_path(frontier_dir: Path) -> Path:
    return Path(frontier_dir) / AGENT_SOCKET_NAME


def encode(obj: dict) -> bytes:
    return (json.dumps(obj, default=str) + "\n").encode()


class Client:
    """A blocking client of the control socket. `request` for commands; `events` to
    subscribe (use a second Client for that, the stream takes the connection)."""

    def __init__(self, path: str | Path, timeout: float | None = 30.0):
        self.path = str(path)
        if not os.path.exists(self.path) or not stat.S_ISSOCK(os.stat(self.path).st_mode):
            raise EngineUnavailable(f"no engine running here ({self.path} does not exist)")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(self.path)
        except (ConnectionRefusedError, FileNotFoundError):
            self.sock.close()
            raise EngineUnavailable(f"no engine answers on {self.path} (a stale socket of a stopped run)")
        self._buf = b""
        self._next = 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _readline(self) -> bytes:
        while b"\n" not in self._buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EngineUnavailable("the engine closed the connection")
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                raise EngineError("reply too long")
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def request(self, cmd: str, **args) -> dict:
        self._next += 1
        rid = self._next
        self.sock.sendall(encode({"id": rid, "cmd": cmd, **args}))
        while True:
            msg = json.loads(self._readline())
            if msg.get("id") == rid:
                if not msg.get("ok"):
                    raise EngineError(msg.get("error", "the engine refused the command"))
                return msg.get("result") or {}

    def events(self, backlog: int = 500) -> Iterator[dict]:
        """Subscribe and yield events forever (until the engine goes away)."""
        self.request("subscribe", backlog=backlog)
        self.sock.settimeout(None)
        while True:
            msg = json.loads(self._readline())
            if "event" in msg:
                yield msg["event"]
