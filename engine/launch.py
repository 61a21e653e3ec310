"""Start the engine of a repo as a background process (its own session, so it outlives
the terminal) and wait until it answers on its control socket. The CLI's `kdatui run` and
the TUI's task picker (when no engine runs) both start it here."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from .store import FrontierError

START_TIMEOUT_S = 120.0


class LaunchError(FrontierError):
    """The engine could not be started; the message says why and where its log is."""


def start_engine(task_path: str | Path, *, agent: str = "builtin", budget: str | None = None,
                 resume: str | None = None, idle_stop: str | None = None, cwd: str | Path | None = None,
                 timeout: float = START_TIMEOUT_S) -> dict:
    """Start the engine for the repo around `cwd` on the task file and return its status."""
    from .daemon import read_lock
    from .gitrepo import GitRepo, ensure_frontier_dir
    from .protocol import Client, EngineUnavailable, socket_path
    from .task import load_task

    task = load_task(task_path)
    repo = GitRepo.open(Path(cwd or Path.cwd()))
    try:
        fdir = ensure_frontier_dir(repo.root)
    finally:
        repo.close()
    live = read_lock(fdir)
    if live:
        raise LaunchError(f"a run is live in this repo: {live.get('run')} on {live.get('task')} "
                          f"(engine pid {live.get('pid')}); `kdatui attach` to watch it, `kdatui stop` to stop it")
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{task.name}"
    log_dir = fdir / "runs" / run_id
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / "engine.log", "ab")
    cmd = [sys.executable, "-m", "kdatui.engine.daemon", "--repo", str(fdir.parent), "--task",
           str(Path(task.path).resolve()), "--agent", agent, "--run-id", run_id]
    for flag, value in (("--budget", budget), ("--resume", resume), ("--idle-stop", idle_stop)):
        if value:
            cmd += [flag, value]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=fdir.parent)
    log.close()
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            tail = (log_dir / "engine.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise LaunchError("the engine did not start: " + (" | ".join(tail) or f"exit status {proc.returncode}"))
        try:
            with Client(socket_path(fdir), timeout=5) as c:
                return c.request("status")
        except (EngineUnavailable, OSError):
            time.sleep(0.2)
    raise LaunchError(f"the engine did not answer within {timeout:.0f} s; see {log_dir / 'engine.log'}")


__all__ = ["LaunchError", "start_engine", "START_TIMEOUT_S"]
