"""The TUI's side of the control socket (engine/protocol.py): two connections per app.

- commands: an asyncio connection in the app's event loop. Requests carry ids and a
  reader task routes each reply to its waiting future, so a slow `generalize` never
  holds up a `pause`, and nothing blocks the UI.
- events: a daemon thread subscribes on a second connection and appends events to a
  buffer. It wakes the app once per burst (`on_wake` is called only when the buffer was
  empty, memray style); the app drains the buffer at most ~10 times a second.

Nothing here imports Textual: the app passes plain callables in (post_message is
thread-safe), so this module is testable without a screen.

Besides the commands of engine/protocol.py the TUI asks for one more, for the candidate
screen (the snapshot does not carry it):

    {"id": 9, "cmd": "candidate", "name": "split-bv64-c16"}      a frontier member
    {"id": 9, "cmd": "candidate", "attempt": 12}                  any attempt
    -> {"id": 9, "ok": true, "result": {
          "name": "split-bv64-c16",             how to title it ("#12 fused-c64-w2" for an attempt)
          "family": "split", "parent": "frontier/<task>/split-bv64-c32" | "base",
          "status": "member" | an attempt status, "branch": "...", "sha": "...",
          "why": "why it was kept (members)",           (branch, sha, why: optional)
          "idea": "IDEA.md text (markdown)",
          "checks": [CheckReport.to_dict(), ...],       one per shape of the task
          "timings": {shape: PairedTiming.to_dict() | null},   with trial_ms per side
          "diff": "git diff <parent>..<candidate> -- candidates/<task>/ (unified)",
          "kernel": "kernel.py source"}}
    or {"id": 9, "ok": false, "error": "no member named 'x'"}

The answers to action commands (pause, prune, ...) are shown to the operator: a
one-line `text` in the result is shown as is; otherwise the result's scalar fields.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kdatui.engine.protocol import MAX_LINE, EngineError, EngineUnavailable, encode

__all__ = ["EngineClient", "EngineError", "EngineUnavailable", "EventBatch", "STATE_KINDS"]

# Commands the engine answers only when the work is done (a re-check of every shape, an
# archive pass): no reply timeout, as the CLI does; the event stream shows their progress,
# and a dead engine still ends them (the connection closes).
LONG_COMMANDS = frozenset({"generalize", "recheck", "archive", "evaluate"})

# Events after which the view's picture of the run (members, attempts, cells, state) is
# stale and a fresh `snapshot` is asked for. Agent output and progress are not.
STATE_KINDS = frozenset({
    "run-started", "run-resumed", "run-paused", "run-stopping", "run-stopped",
    "attempt-proposed", "attempt-evaluating", "attempt-evaluated", "attempt-error",
    "agent-turn", "admitted", "rejected", "pruned", "restored", "archived", "generalized",
    "rechecked", "cleanup", "budget", "budget-changed", "note",
})


@dataclass
class EventBatch:
    """What the feed gathered since the last drain."""

    events: list[dict] = field(default_factory=list)  # the newest ones, at most the feed's keep
    received: int = 0  # how many arrived since the last drain (more than len(events) in a flood)
    stale: bool = False  # a state-changing event arrived: refresh the snapshot
    progress: dict | None = None  # the newest eval-progress event
    lost: str | None = None  # the stream ended: why


def check_socket(path: str | Path) -> None:
    """Raise EngineUnavailable with a message a user can act on when no socket is there."""
    p = str(path)
    if not os.path.exists(p):
        raise EngineUnavailable(f"no engine running here ({p} does not exist); start one with `kdatui run TASK`")
    if not stat.S_ISSOCK(os.stat(p).st_mode):
        raise EngineUnavailable(f"{p} is not a socket")


class EventFeed:
    """A thread reading the event stream into a bounded buffer."""

    def __init__(self, path: str, *, backlog: int, keep: int, on_wake: Callable[[], None]):
        self.path = path
        self.backlog = backlog
        self._buf: deque[dict] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._received = 0
        self._stale = False
        self._progress: dict | None = None
        self._lost: str | None = None
        self._signalled = False
        self._on_wake = on_wake
        self._sock: socket.socket | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="kdatui-events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        sock = self._sock
        if sock is not None:
            try:  # shutdown wakes a recv blocked in the thread; close alone does not
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass

    def _wake(self) -> None:
        # caller holds the lock
        if not self._signalled:
            self._signalled = True
            try:
                self._on_wake()
            except RuntimeError:  # the app's loop closed under us: nobody to tell
                pass

    def _run(self) -> None:
        why = "the engine closed the event stream"
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock = sock
            sock.settimeout(10.0)
            sock.connect(self.path)
            sock.sendall(encode({"id": 1, "cmd": "subscribe", "backlog": self.backlog}))
            sock.settimeout(None)
            buf = b""
            subscribed = False
            while not self._stopping:
                chunk = sock.recv(1 << 18)
                if not chunk:
                    break
                buf += chunk
                if b"\n" not in buf:
                    if len(buf) > MAX_LINE:
                        why = "an event line was too long"
                        break
                    continue
                *lines, buf = buf.split(b"\n")
                got: list[dict] = []
                for line in lines:
                    if not line.strip():
                        continue
                    msg = json.loads(line)
                    if "event" in msg:
                        got.append(msg["event"])
                    elif msg.get("id") == 1 and not subscribed:
                        if not msg.get("ok"):
                            raise EngineError(msg.get("error", "the engine refused to stream events"))
                        subscribed = True
                if got:
                    self._add(got)
        except (OSError, ValueError, EngineError) as e:
            why = _why(e)
        if self._stopping:
            return
        with self._lock:
            self._lost = why
            self._wake()

    def _add(self, events: list[dict]) -> None:
        stale = False
        progress = None
        for ev in events:
            kind = ev.get("kind")
            if kind in STATE_KINDS:
                stale = True
            elif kind == "eval-progress":
                progress = ev
        with self._lock:
            self._buf.extend(events)
            self._received += len(events)
            self._stale |= stale
            if progress is not None:
                self._progress = progress
            self._wake()

    def drain(self) -> EventBatch:
        with self._lock:
            batch = EventBatch(events=list(self._buf), received=self._received, stale=self._stale,
                               progress=self._progress, lost=self._lost)
            self._buf.clear()
            self._received = 0
            self._stale = False
            self._progress = None
            self._signalled = False
        return batch


def _why(e: BaseException) -> str:
    if isinstance(e, (ConnectionRefusedError, FileNotFoundError)):
        return f"no engine answers ({e.strerror or e})"
    if isinstance(e, ConnectionError):
        return "the engine closed the connection"
    if isinstance(e, ValueError):
        return f"the engine sent something that is not JSON ({e})"
    return str(e) or type(e).__name__


class EngineClient:
    """Commands over an asyncio connection, events through an `EventFeed` thread.

    `request` raises EngineError when the engine refuses a command (its one-line reason)
    and EngineUnavailable when the engine is gone (connection refused, closed, timed out).
    """

    def __init__(self, path: str | Path, *, timeout: float = 60.0, backlog: int = 500, keep: int = 2000):
        self.path = str(path)
        self.timeout = timeout
        self.backlog = backlog
        self.keep = keep
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._next = 0
        self._read_task: asyncio.Task | None = None
        self._closed_why: str | None = None
        self.feed: EventFeed | None = None

    # ------------------------------------------------------------------ commands

    @property
    def connected(self) -> bool:
        return self._writer is not None and self._closed_why is None

    async def connect(self) -> None:
        check_socket(self.path)
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.path, limit=MAX_LINE), timeout=10.0)
        except (OSError, asyncio.TimeoutError) as e:
            raise EngineUnavailable(f"no engine answers on {self.path} ({_why(e)})") from None
        self._closed_why = None
        self._read_task = asyncio.get_running_loop().create_task(self._read_replies())

    async def _read_replies(self) -> None:
        why = "the engine closed the connection"
        try:
            assert self._reader is not None
            while True:
                line = await self._reader.readline()
                if not line:
                    break
                if not line.endswith(b"\n"):
                    break
                msg = json.loads(line)
                fut = self._pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except asyncio.CancelledError:
            why = "the connection was closed"
        except (OSError, ValueError) as e:
            why = _why(e)
        self._closed_why = why
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(EngineUnavailable(why))
        self._pending.clear()

    async def request(self, cmd: str, **args: Any) -> dict:
        if self._writer is None or self._closed_why is not None:
            raise EngineUnavailable(self._closed_why or "not connected to the engine")
        self._next += 1
        rid = self._next
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            self._writer.write(encode({"id": rid, "cmd": cmd, **args}))
            await self._writer.drain()
            wait = None if cmd in LONG_COMMANDS and not args.get("dry_run") else self.timeout
            msg = await asyncio.wait_for(fut, timeout=wait)
        except asyncio.TimeoutError:
            raise EngineUnavailable(f"the engine did not answer `{cmd}` within {self.timeout:.0f} s") from None
        except OSError as e:
            raise EngineUnavailable(_why(e)) from None
        finally:
            self._pending.pop(rid, None)
        if not msg.get("ok"):
            raise EngineError(msg.get("error") or f"the engine refused `{cmd}`")
        return msg.get("result") or {}

    # ------------------------------------------------------------------ events

    def subscribe(self, on_wake: Callable[[], None]) -> None:
        """Start the event thread; `on_wake()` is called from it once per burst."""
        self.stop_events()
        self.feed = EventFeed(self.path, backlog=self.backlog, keep=self.keep, on_wake=on_wake)
        self.feed.start()

    def drain(self) -> EventBatch:
        return self.feed.drain() if self.feed is not None else EventBatch()

    def stop_events(self) -> None:
        if self.feed is not None:
            self.feed.stop()
            self.feed = None

    async def close(self) -> None:
        self.stop_events()
        if self._read_task is not None:
            self._read_task.cancel()
            self._read_task = None
        if self._writer is not None:
            try:
                self._writer.close()
            except (OSError, RuntimeError):
                pass
            self._writer = None
