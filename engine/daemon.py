"""The engine process: one per repo. It owns the run (loop thread), the evaluator, the
event bus and the control socket `.frontier/control.sock` (mode 0600) that the TUI and the
CLI verbs talk to (protocol in engine/protocol.py).

    python -m kdatui.engine.daemon --repo . --task tasks/kda_fwd_cpu.toml --run-id R [--agent builtin]
                                   [--budget 6h|50attempts] [--resume RUN] [--idle-stop 24h|never]

`kdatui run TASK --detach` starts it in a new session (it survives the terminal closing)
with its output in .frontier/runs/<run>/engine.log. Killing it (even -9) loses nothing:
the store is transactional and `kdatui run` on the same task resumes the run, with the
attempts it made and the time it ran counted against its budget.

A finished run's engine stays up for the operator (generalize, recheck, archive, more
budget) until `kdatui stop`, or until no client has been attached for `--idle-stop`
(default 24 h: long enough to come back the next morning; `never` to wait for `stop`).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from .events import EventBus
from .gitrepo import candidate_dir
from .loop import Budget, RunControl, RunLoop, _spent, cell_of
from .protocol import AGENT_COMMANDS, COMMANDS, agent_socket_path, encode, socket_path
from .store import FrontierError
from .task import TaskError, load_task

LOCK_NAME = "engine.lock"
IDLE_STOP_S = 24 * 3600.0  # a finished run's engine exits after this long with no client attached


def parse_idle_stop(text: str | None) -> float:
    """`24h`, `90m`, `600s`; `never` or `0`: 0 (no idle limit). None: the default."""
    if text is None:
        return IDLE_STOP_S
    t = text.strip().lower()
    if t in ("never", "0", "off", "none"):
        return 0.0
    b = Budget.parse(t)
    if b.attempts or not b.hours:
        raise ValueError(f"--idle-stop {text!r}: expected a time like 24h, 90m or 600s, or `never`")
    return b.hours * 3600


def idle_note(idle_stop_s: float) -> str:
    if not idle_stop_s:
        return "until `kdatui stop`"
    return f"until `kdatui stop`, or until no client has been attached for {Budget(idle_stop_s / 3600).text()}"


class EngineBusy(Exception):
    """Another engine holds this repo."""


def lock_path(frontier_dir: Path) -> Path:
    return Path(frontier_dir) / LOCK_NAME


def read_lock(frontier_dir: Path) -> dict | None:
    """The live engine of this repo ({pid, run, task, started}) or None."""
    path = lock_path(frontier_dir)
    if not path.exists():
        return None
    try:
        with open(path) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                return json.loads(f.read() or "{}") or {"pid": None}
            fcntl.flock(f, fcntl.LOCK_UN)
            return None  # nobody holds it: a stale file
    except (OSError, json.JSONDecodeError):
        return None


class Engine:
    def __init__(self, repo: str | Path, task_path: str | Path, *, agent: str = "builtin", budget: str | None = None,
                 run_id: str | None = None, resume: str | None = None, seed: int = 0,
                 idle_stop_s: float = IDLE_STOP_S):
        from .frontier import Frontier
        from .gitrepo import GitRepo, ensure_frontier_dir

        g = GitRepo.open(repo)
        self.dir = ensure_frontier_dir(g.root)
        g.close()
        # The engine lock first: once we hold it, any run still marked running here is dead.
        self._lock_file = self._take_lock()
        self.fr = Frontier.open(repo)
        self.task = load_task(task_path)
        self.agent_spec = agent
        self.budget = Budget.parse(budget, self.task)
        self.idle_stop_s = idle_stop_s
        self.control = RunControl()
        self.stop_event = threading.Event()
        self.resumed = False
        run = self._start_or_resume(run_id, resume)
        if self.resumed and budget is None and run.budget_hours is not None:
            # the budget it was started with, not the task's default; an explicit --budget replaces it
            self.budget = Budget(run.budget_hours or 0.0, run.budget_attempts or 0)
        self._write_lock(run.id)
        self.bus = EventBus(self.fr.store, run=lambda: self.loop.run_id if hasattr(self, "loop") else run.id)
        from .agents import make_agent
        from .evaluator import make_evaluator

        self.agent = make_agent(agent, self.task, repo=self.fr.repo.root)
        # the judges' and executors' logs stay with the run (what a crashing candidate printed)
        self.evaluator = make_evaluator(log_dir=self.dir / "runs" / run.id / "evaluator")
        self.sock_path = socket_path(self.dir)
        self.agent_sock_path = agent_socket_path(self.dir)
        # a coding agent's turn reaches the run's judge through the agent socket (evaluate and status only)
        self.loop = RunLoop(self.fr, self.evaluator, self.agent, self.bus, self.task, run.id, self.budget,
                            self.control, engine_socket=self.agent_sock_path, seed=seed,
                            on_new_run=self._on_new_run, idle_note=idle_note(idle_stop_s))
        self.started = time.time()
        self.server = ControlServer(self, self.sock_path)
        self.agent_server = ControlServer(self, self.agent_sock_path, allowed=AGENT_COMMANDS)

    # ------------------------------------------------------------ lifecycle

    def _take_lock(self):
        f = open(lock_path(self.dir), "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            info = f.read()
            f.close()
            raise EngineBusy(f"an engine is already running in this repo: {info.strip() or 'unknown run'}; "
                             f"attach with `kdatui attach` or stop it with `kdatui stop`") from None
        return f

    def _write_lock(self, run_id: str) -> None:
        f = self._lock_file
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "run": run_id, "task": self.task.name,
                            "started": time.time()}))
        f.flush()

    def _start_or_resume(self, run_id: str | None, resume: str | None):
        resume = resume or self.crashed_run(self.fr, self.task.name)
        if resume:
            self.resumed = True
            return self.fr.resume_run(resume)
        return self.fr.start_run(self.task, agent=self.agent_spec, run_id=run_id)

    @staticmethod
    def crashed_run(fr, task_name: str) -> str | None:
        """The latest run of the task if its engine died without stopping it: still marked
        running or paused (we hold the engine lock, so nobody runs it), or stopped by the
        store's recovery because its process was gone. That run is resumed."""
        runs = [r for r in fr.store.runs() if r.task == task_name and r.agent != "generalize"]
        if not runs:
            return None
        last = max(runs, key=lambda r: r.created)
        if last.state in ("running", "paused"):
            return last.id
        stops = fr.store.events(last.id, kinds=("run-stopped",))
        if last.state == "stopped" and stops and str(stops[-1].get("reason", "")).startswith("its process"):
            return last.id
        return None

    def _on_new_run(self, loop: RunLoop) -> None:
        self.task = loop.task
        self._write_lock(loop.run_id)

    def serve(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: self.control.stop("signal"))
        self.server.start()
        self.agent_server.start()
        runner = threading.Thread(target=self.loop.run, name="run-loop", daemon=True)
        runner.start()
        idle_since = None
        while True:
            if self.control.state == "stopping" and not runner.is_alive():
                break
            if self.control.state == "stopping" and runner.is_alive():
                self.agent.close()  # a CLI turn in flight ends now; an evaluation is let finish
            if self.control.state == "finished" and self.idle_stop_s:
                if self.bus.clients == 0:
                    idle_since = idle_since or time.time()
                    if time.time() - idle_since > self.idle_stop_s:
                        self.control.stop(f"run finished; no client attached for {Budget(self.idle_stop_s / 3600).text()}")
                else:
                    idle_since = None
            else:
                idle_since = None
            self.loop.checkpoint()  # the time spent reaches the store during a long evaluation too
            self.stop_event.wait(0.2)
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        why = self.control.why or "stopped"
        try:
            if self.fr.store.run(self.loop.run_id).state != "stopped":
                self.fr.set_run_state(self.loop.run_id, "stopped", reason=why)
        except Exception:
            pass
        self.control.set("stopped", why)
        self.bus.emit("run-stopped", f"engine stopped: {why}")
        self.bus.close()
        self.server.close()
        self.agent_server.close()
        self.evaluator.close()
        try:
            self.fr.close()
        finally:
            self._lock_file.close()

    # ------------------------------------------------------------ commands

    def handle(self, cmd: str, args: dict):
        if cmd not in COMMANDS:
            raise ValueError(f"unknown command {cmd!r}; commands: {', '.join(COMMANDS)}")
        return getattr(self, f"cmd_{cmd}")(**args)

    def cmd_status(self) -> dict:
        loop = self.loop
        run = self.fr.store.run(loop.run_id)
        members = self.fr.members(loop.task.name)
        best = None
        primary = loop.task.primary_shape
        for m in members:
            for e in self.fr.evaluations(m):
                if e.shape == primary and e.verdict == "PASS" and e.speedup and (best is None or e.speedup > best["speedup"]):
                    best = {"name": m.name, "speedup": e.speedup, "shape": primary, "ms": e.candidate_ms}
        atts = self.fr.store.attempts(run=loop.run_id)
        evaluated = sum(a.verdict is not None and a.status != "evaluating" for a in atts)
        elapsed = loop.clock.elapsed()
        from .archive import next_cleanup

        try:
            cleanup_in = max(0.0, next_cleanup(self.fr, loop.run_id, loop.task.search.cleanup_every_hours) - time.time())
        except FrontierError:
            cleanup_in = None
        return {
            "run": loop.run_id, "task": loop.task.name, "task_path": str(loop.task.path or ""),
            "state": self.control.state, "why": self.control.why, "phase": loop.phase,
            "agent": self.agent_spec, "started": loop.started, "elapsed_s": elapsed,
            "budget": loop.budget.describe(), "idle_stop_s": self.idle_stop_s or None,
            "attempts": {"total": len(atts), "evaluated": evaluated,
                         "admitted": sum(a.status == "admitted" for a in atts),
                         "raced": sum(a.verdict == "raced" for a in atts),
                         # evaluated attempts per hour of the run's own time (paused time not counted)
                         "per_hour": evaluated / (elapsed / 3600.0) if elapsed > 60 else None},
            "members": len(members), "best": best, "next_cleanup_s": cleanup_in,
            "device": self._device(), "current": loop.current, "pid": os.getpid(),
            "notes_pending": len(self.control.notes), "run_state": run.state if run else None,
            "sandbox": self.evaluator.sandbox.to_dict(),
            "resumed": self.resumed,
        }

    def _device(self) -> str:
        for att in reversed(self.fr.store.attempts(run=self.loop.run_id)):
            for e in self.fr.store.evaluations(att.id, self.loop.task.name):
                dev = e.data.get("device")
                if dev:
                    return dev
        kind = getattr(self.evaluator, "device_kind", None)
        kind = kind() if callable(kind) else kind
        return {"cpu": "cpu (Triton interpreter)", "cuda": "cuda"}.get(kind, kind or "?")

    def cmd_pause(self) -> dict:
        busy = self.loop.current is not None
        self.control.pause()
        self.fr.set_run_state(self.loop.run_id, "paused", reason="paused by the operator")
        text = "paused" + (" (after the current step)" if busy else "")
        return {"state": self.control.state, "text": text}

    def cmd_resume(self) -> dict:
        self.control.resume()
        self.fr.set_run_state(self.loop.run_id, "running", reason="resumed by the operator")
        return {"state": self.control.state, "text": "resumed"}

    def cmd_stop(self) -> dict:
        self.control.stop("stopped by the operator")
        self.bus.emit("run-stopping", "stopping: by the operator")
        return {"state": self.control.state, "text": "stopping the run; the engine exits"}

    def cmd_budget(self, change: str = "") -> dict:
        """More (or less) budget for the live or finished run: `+2h`, `+20attempts`, `8h`;
        without a change, the budget and what is spent."""
        loop = self.loop
        if not str(change).strip():
            made, spent = loop.attempts_done, loop.clock.elapsed()
            return {"budget": loop.budget.describe(), "text": f"budget {loop.budget.text()}: {made} attempts made, "
                                                               f"{_spent(spent)} spent"}
        return loop.change_budget(str(change))

    def cmd_note(self, text: str = "") -> dict:
        text = text.strip()
        if not text:
            raise ValueError("note: empty text")
        with self.control.cond:
            self.control.notes.append(text)
        self.fr.store.event(self.loop.run_id, "note", text=f"note to the agent: {text}", note=text)
        n = len(self.control.notes)
        return {"pending": n, "text": f"note queued for the agent's next turn ({n} pending)"}

    def cmd_prune(self, name: str) -> dict:
        m = self.fr.prune(self.loop.task.name, name, "pruned by the operator")
        return {"name": m.name, "ref": m.ref, "text": f"pruned {m.name}: moved to {m.ref} (restorable)"}

    def cmd_restore(self, name: str) -> dict:
        m = self.fr.restore(self.loop.task.name, name)
        return {"name": m.name, "branch": m.branch, "text": f"restored {m.name} to {m.branch}"}

    def _job(self, job: str, timeout: float | None = None, **args):
        """Run an operator action in the loop's thread, between attempts (it may need the
        evaluator), and wait for its result."""
        fut = self.control.submit(job, **args)
        return fut.result(timeout=timeout)

    def cmd_archive(self) -> dict:
        res = self._job("archive", timeout=600)
        lines = res.get("lines") or []
        return {**res, "text": f"archived: {lines[0]}" + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else "")
                if lines else "archive: nothing to archive"}

    def cmd_generalize(self, shapes: list[str], task_out: str | None = None, continue_search: bool = True,
                       dry_run: bool = False, **kw) -> dict:
        """Validate first (member, shapes), then do it between attempts. `dry_run`: only
        check and say what it would do (the CLI and the TUI show that before waiting)."""
        source = kw.get("from") or kw.get("source")
        if not source:
            best = self.cmd_status()["best"]
            if not best:
                raise ValueError("generalize: no member to generalize from (name one with 'from')")
            source = best["name"]
        self.fr.find(source, self.loop.task.name)  # a clear error now, not after the queue
        from .generalize import parse_extra_shapes, plan_text, task_file_note

        extra = parse_extra_shapes(self.loop.task, list(shapes))  # bad shapes: an error before any work
        plan = plan_text(self.loop.task, source, extra, task_out, bool(continue_search))
        if dry_run:
            return {"plan": plan, "text": plan, "from": source, "shapes": list(extra)}
        res = self._job("generalize", source=source, shapes=list(shapes), task_out=task_out,
                        continue_search=bool(continue_search))
        note = task_file_note(self.fr, res["task_file"])
        then = (f"the search continues on {res['task']} (run {res['run']})" if res.get("continued")
                else f"the search stays on {self.loop.task.name}; `kdatui run {res['task']}` searches the new task")
        return {**res, "task_file_note": note, "text": f"generalized {source} to {res['task']}: {note}; {then}"}

    def cmd_recheck(self, name: str) -> dict:
        if name.startswith("attempt:"):
            self.fr.attempt(int(name.split(":", 1)[1]))  # a clear error now, not after the queue
        else:
            self.fr.find(name, self.loop.task.name)
        res = self._job("recheck", name=name)
        return {**res, "text": f"rechecked {name}: " + ", ".join(
            f"{s} {c['verdict']}" + (f" {c['speedup']:.2f}x" if c.get("speedup") else "")
            for s, c in res["cells"].items())}

    def cmd_evaluate(self, candidate: str, shapes: list[str] | None = None, timing: bool = True) -> dict:
        """An agent's `kdatui check` (timing false) or `kdatui bench` inside its turn: through
        the run's judge, between attempts (GPU jobs never collide)."""
        with self.loop.eval_lock:
            evs = self.evaluator.evaluate(self.loop.task, candidate, shapes, timing=bool(timing))
        return {"task": self.loop.task.name, "evaluations": [e.to_dict() for e in evs]}

    def cmd_snapshot(self) -> dict:
        loop = self.loop
        task = loop.task
        shapes = [{"name": n, "dims": s.dims(), "primary": n == task.primary_shape} for n, s in task.shapes.items()]
        members = []
        for m in self.fr.members(task.name):
            att = self.fr.attempt(m.attempt)
            members.append({"name": m.name, "family": m.family, "branch": m.branch, "sha": m.sha, "best": m.best,
                            "why": m.why, "idea": att.idea, "attempt": m.attempt,
                            "cells": {e.shape: cell_of(e) for e in self.fr.evaluations(m)}})
        attempts = []
        for att in self.fr.store.attempts(task=task.name)[-50:]:
            attempts.append({"id": att.id, "family": att.family, "name": att.name, "status": att.status,
                             "verdict": att.verdict, "parent": att.parent, "idea": att.idea, "reason": att.reason,
                             "cells": {e.shape: cell_of(e) for e in self.fr.store.evaluations(att.id, task.name)}})
        return {"status": self.cmd_status(), "shapes": shapes, "members": members, "attempts": attempts,
                "baseline": task.bench.baseline, "notes": list(self.control.notes),
                "curve": self.cmd_curve(last=400)}

    def cmd_curve(self, last: int | None = None) -> dict:
        """The search's curve on the primary shape (engine/curve.py): every attempt a point."""
        from .curve import curve_of

        c = curve_of(self.fr.store, self.loop.task.name, baseline=self.loop.task.bench.baseline)
        c.device = c.device or self._device()
        return c.to_dict(last=last)

    def cmd_candidate(self, name: str | None = None, attempt: int | None = None) -> dict:
        """What the TUI's candidate screen shows: idea, parent, checks, per-trial timings,
        the diff against the parent and the source."""
        task = self.loop.task
        rel = candidate_dir(task.name)
        extra: dict = {}
        if name is not None:
            m = self.fr.find(name, task.name)
            att = self.fr.attempt(m.attempt)
            kernel = self.fr.repo.show_file(m.sha, f"{rel}/kernel.py")
            idea = self.fr.repo.show_file(m.sha, f"{rel}/IDEA.md") or att.idea
            evs = self.fr.evaluations(m)
            extra = {"branch": m.branch, "sha": m.sha, "why": m.why, "status": "member"}
            title = m.name
        elif attempt is not None:
            att = self.fr.attempt(int(attempt))
            cdir = self.fr.candidate_path(att)
            kernel = _read(cdir / "kernel.py") if cdir else None
            if kernel is None and att.branch:  # archived: the source is on its archive ref
                kernel = self.fr.repo.show_file(att.branch, f"{rel}/kernel.py")
            idea = (_read(cdir / "IDEA.md") if cdir else None) or att.idea
            evs = self.fr.store.evaluations(att.id, task.name)
            extra = {"branch": att.branch, "status": att.status}
            title = f"#{att.id} {att.name}"
        else:
            raise ValueError("candidate: give a member name or an attempt id")
        parent_src = self.fr.repo.show_file(att.parent_sha, f"{rel}/kernel.py") if att.parent_sha else None
        diff = _unified(parent_src or "", kernel or "", f"{att.parent}:kernel.py", f"{title}:kernel.py")
        return {"name": title, "attempt": att.id, "family": att.family, "parent": att.parent, "idea": idea,
                "reason": att.reason, "verdict": att.verdict, **extra,
                "checks": [e.data["checks"] for e in evs if e.data.get("checks")],
                "timings": {e.shape: e.data.get("timing") for e in evs},
                "seconds": {e.shape: e.data.get("seconds") for e in evs if e.data.get("seconds")},
                "cells": {e.shape: cell_of(e) for e in evs}, "diff": diff, "kernel": kernel or ""}

    def cmd_subscribe(self, backlog: int = 500) -> dict:  # handled by the server (it owns the stream)
        return {}


def _read(path: Path) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _unified(a: str, b: str, name_a: str, name_b: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True), name_a, name_b))


# --------------------------------------------------------------------------- the socket

class ControlServer:
    """Newline-JSON over a Unix socket, a thread per client (few clients; simple and robust)."""

    def __init__(self, engine: Engine, path: Path, allowed: tuple[str, ...] | None = None):
        self.engine = engine
        self.path = Path(path)
        self.allowed = allowed  # None: every command
        self.sock = None
        self._closed = False

    def start(self) -> None:
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()  # stale: we hold the engine lock, so nobody else serves it
        old = os.umask(0o177)
        try:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self.sock.listen(16)
        threading.Thread(target=self._accept, name="control-accept", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.path.unlink()
        except OSError:
            pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn,), name="control-client", daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        f = conn.makefile("rb")
        try:
            for raw in f:
                try:
                    msg = json.loads(raw)
                except json.JSONDecodeError:
                    conn.sendall(encode({"id": None, "ok": False, "error": "not a JSON line"}))
                    continue
                rid, cmd = msg.pop("id", None), msg.pop("cmd", None)
                if self.allowed is not None and cmd not in self.allowed:
                    conn.sendall(encode({"id": rid, "ok": False, "error": f"{cmd!r} is not answered on this socket "
                                         f"(a coding agent's: {', '.join(self.allowed)})"}))
                    continue
                if cmd == "subscribe":
                    conn.sendall(encode({"id": rid, "ok": True, "result": {}}))
                    self._stream(conn, int(msg.get("backlog", 500)))
                    return
                threading.Thread(target=self._answer, args=(conn, rid, cmd, msg), daemon=True).start()
        except (OSError, ValueError):
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _answer(self, conn, rid, cmd, args) -> None:
        try:
            reply = {"id": rid, "ok": True, "result": self.engine.handle(cmd, args)}
        except (ValueError, TypeError, KeyError, FrontierError, TaskError) as e:
            reply = {"id": rid, "ok": False, "error": str(e).strip("'\"")}
        except Exception as e:
            reply = {"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}"}
        try:
            conn.sendall(encode(reply))
        except OSError:
            pass

    def _stream(self, conn: socket.socket, backlog: int) -> None:
        bus = self.engine.bus
        sub = bus.subscribe(backlog)
        try:
            if sub.backlog:
                conn.sendall(b"".join(encode({"event": e}) for e in sub.backlog))
            while not self._closed:
                batch = sub.get_batch(timeout=0.5)
                if batch:
                    conn.sendall(b"".join(encode({"event": e}) for e in batch))
        except OSError:
            pass
        finally:
            bus.unsubscribe(sub)


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdatui.engine.daemon", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default=".")
    ap.add_argument("--task", required=True)
    ap.add_argument("--agent", default="builtin")
    ap.add_argument("--budget")
    ap.add_argument("--run-id")
    ap.add_argument("--resume")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--idle-stop", help="after the run finishes, exit once no client has been attached this "
                                        "long (default 24h; `never`: only `kdatui stop`)")
    args = ap.parse_args(argv)
    try:
        engine = Engine(args.repo, args.task, agent=args.agent, budget=args.budget, run_id=args.run_id,
                        resume=args.resume, seed=args.seed, idle_stop_s=parse_idle_stop(args.idle_stop))
    except (EngineBusy, FrontierError, TaskError, ValueError) as e:
        print(f"kdatui engine: error: {e}", file=sys.stderr)
        return 2
    print(f"kdatui engine {os.getpid()}: run {engine.loop.run_id} on {engine.task.name}, "
          f"socket {engine.sock_path}; budget {engine.budget.text()}"
          + (f" ({engine.loop.attempts_done} attempts made, {engine.loop.clock.elapsed() / 60:.1f} min spent before)"
             if engine.resumed else "")
          + f"; when the run finishes the engine stays up {idle_note(engine.idle_stop_s)}", flush=True)
    return engine.serve()


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["Engine", "EngineBusy", "ControlServer", "read_lock", "lock_path", "IDLE_STOP_S", "parse_idle_stop"]
