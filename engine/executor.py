"""The judge's side of an executor: one sandboxed process that runs one candidate.

`Executor` starts `engine/runner.py` as a script under the sandbox (engine/sandbox.py),
with a Unix socket pair as its only channel, and talks to it with deadlines: a runner that
dies (segfault, os._exit, the OOM killer) is an end of file named by its exit status; one
that hangs is killed with its whole process group (and, under bubblewrap, its PID
namespace) at the deadline. Between requests the executor is stopped (SIGSTOP), so nothing
a candidate started can run while the judge prepares inputs or the baseline is timed.

`ExecutorPool` keeps one spare started, so the next candidate finds an interpreter with
torch imported (and a CUDA context) waiting for it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import sandbox
from .paths import cache_dir

RUNNER = Path(__file__).with_name("runner.py")
STARTUP_TIMEOUT_S = 300.0  # importing torch and creating a CUDA context, on a loaded machine
MAX_MESSAGE = 4 << 20  # an executor's line longer than this is a fault, not a message
LOG_TAIL_CHARS = 3000
CANDIDATE_MAX_BYTES = 32 << 20
SIGNAL_MEANING = {
    "SIGSEGV": "segmentation fault",
    "SIGBUS": "bus error",
    "SIGABRT": "aborted",
    "SIGFPE": "arithmetic fault",
    "SIGILL": "illegal instruction",
    "SIGKILL": "killed, possibly by the kernel's out-of-memory killer",
}


class ExecutorFault(Exception):
    """The executor failed as a process: died, hung, sent garbage. `reason` names it."""

    def __init__(self, reason: str, log: str = "", kind: str = "process"):
        super().__init__(reason)
        self.reason, self.log, self.kind = reason, log, kind


def candidate_digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name] + b"\0")
    return h.hexdigest()[:20]


def read_candidate(path: str | Path) -> tuple[dict[str, bytes], str]:
    """The candidate's files as bytes ({relative path: content}) and the module to load:
    a folder gives every file in it (kernel.py loads), a lone file gives itself."""
    from .candidate import locate

    loc = locate(path)
    files: dict[str, bytes] = {}
    total = 0
    if loc.folder:
        for p in sorted(loc.root.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                data = p.read_bytes()
                total += len(data)
                if total > CANDIDATE_MAX_BYTES:
                    raise ExecutorFault(f"{loc.root}: the candidate folder holds more than "
                                        f"{CANDIDATE_MAX_BYTES >> 20} MiB", kind="structure")
                files[str(p.relative_to(loc.root))] = data
        return files, "kernel.py"
    files[loc.kernel.name] = loc.kernel.read_bytes()
    return files, loc.kernel.name


class Executor:
    def __init__(self, device: str, workdir: Path, *, name: str, env: dict, repos: list[Path] | None = None,
                 memory_limit: int = 0, info: sandbox.SandboxInfo | None = None, trusted: bool = False):
        """`trusted`: the baseline's executor (fla or a project kernel, the user's own code):
        not sandboxed, and it keeps Triton's and fla's caches in their usual places."""
        self.device, self.name = device, name
        self.dir = Path(workdir) / name
        self.cand_dir = self.dir / "candidate"
        self.scratch = self.dir / "scratch"
        for d in (self.cand_dir, self.scratch):
            d.mkdir(parents=True, exist_ok=True)
        self.log_path = self.dir / "executor.log"
        self.sandbox = sandbox.SandboxInfo("none", "the baseline's executor (trusted code)") if trusted else \
            (info or sandbox.detect())
        self._judge_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        cmd = [sys.executable, "-P", "-s", str(RUNNER), "--device", device, "--channel", str(runner_end.fileno())]
        if device == "cpu" and memory_limit:
            cmd += ["--memory-limit", str(memory_limit)]
        if trusted:
            launch = sandbox.Launch(cmd, _trusted_env(env, device), None, self.sandbox,
                                    str(self.cand_dir), str(self.scratch))
        else:
            launch = sandbox.executor_launch(cmd, candidate_dir=self.cand_dir, scratch_dir=self.scratch, device=device,
                                             env=env, repos=repos, readable=[RUNNER], info=self.sandbox)
        self.candidate_at = launch.candidate_at
        self.scratch_at = launch.scratch_at
        pre = launch.preexec

        def preexec():  # between fork and exec, in the child
            if pre is not None:
                pre()
            _die_with_parent()  # after any uid change, which clears it
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(launch.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         cwd=self.scratch, env=launch.env, start_new_session=True,
                                         pass_fds=(runner_end.fileno(),), preexec_fn=preexec)
        runner_end.close()
        self.pid = self.proc.pid
        self.info: dict | None = None
        self.loaded = ""  # digest of the candidate it holds
        self.digest = ""
        self._buf = b""
        self._killed = False
        self._stopped = False
        self.lock = threading.Lock()

    # -- the channel

    def _send(self, msg: dict, fds: list[int] | None = None) -> None:
        data = (json.dumps(msg) + "\n").encode()
        try:
            if fds:
                socket.send_fds(self._judge_end, [data], fds)
            else:
                self._judge_end.sendall(data)
        except OSError:
            pass  # it died: the read that follows sees the end of file and says how

    def _read(self, deadline: float) -> dict | None:
        fd = self._judge_end.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
            if ready:
                try:
                    chunk = self._judge_end.recv(1 << 16)
                except OSError:
                    chunk = b""
                if not chunk:
                    return None
                self._buf += chunk
                if len(self._buf) > MAX_MESSAGE and b"\n" not in self._buf:
                    raise ExecutorFault(f"the executor sent a message longer than {MAX_MESSAGE >> 20} MiB",
                                        self.log_tail())
            elif self.proc.poll() is not None:
                return None
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            raise ExecutorFault(f"the executor sent a line that is not JSON: {line[:80]!r}", self.log_tail()) from None
        if not isinstance(msg, dict):
            raise ExecutorFault("the executor sent a message that is not an object", self.log_tail())
        return msg

    def request(self, msg: dict, timeout_s: float, where: str, fds: list[int] | None = None) -> dict:
        """Send one request and return the answer; an ExecutorFault if the process dies,
        hangs past `timeout_s` (then it is killed) or answers with something else."""
        self.thaw()
        self._send(msg, fds)
        try:
            ans = self._read(time.monotonic() + timeout_s)
        except TimeoutError:
            self.kill()
            raise ExecutorFault(f"timed out after {timeout_s:g} s {where}", self.log_tail(), kind="timeout") from None
        except ExecutorFault:
            self.kill()
            raise
        if ans is None:
            reason = f"{self.describe_exit()} {where}"
            self.kill()
            raise ExecutorFault(reason, self.log_tail())
        self.freeze()
        return ans

    def ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> dict:
        if self.info is not None:
            return self.info
        try:
            msg = self._read(time.monotonic() + timeout_s)
        except TimeoutError:
            self.kill()
            raise ExecutorFault(f"the executor did not start within {timeout_s:g} s", self.log_tail()) from None
        if msg is None or msg.get("event") != "ready":
            why = self.describe_exit() if msg is None else (msg.get("reason") or f"sent {msg.get('event')!r} first")
            log = self.log_tail()
            self.kill()
            raise ExecutorFault(f"the executor failed to start: {why}" + (f": {_last_line(log)}" if msg is None else ""),
                                log)
        self.info = msg
        self.freeze()
        return msg

    # -- the candidate

    def load(self, files: dict[str, bytes], module: str, timeout_s: float) -> dict:
        """Put the candidate's files where the sandbox shows them (read-only there), with its
        own Triton cache from earlier evaluations of the same bytes, and import it."""
        self.digest = candidate_digest(files)
        for rel, data in files.items():
            dst = self.cand_dir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
        cached = cache_dir() / "triton" / self.digest
        if cached.is_dir():
            shutil.copytree(cached, self.scratch / "triton-cache", dirs_exist_ok=True)
        if self.sandbox.kind == "uid":
            sandbox._chown_tree(self.dir, sandbox.NOBODY)
        ans = self.request({"op": "load", "path": f"{self.candidate_at}/{module}", "folder": self.candidate_at},
                           timeout_s, "while importing the candidate")
        if ans.get("event") == "loaded":
            self.loaded = self.digest
        return ans

    def load_trusted(self, path: str, timeout_s: float) -> dict:
        ans = self.request({"op": "load", "path": str(path), "folder": ""}, timeout_s, "while importing the baseline")
        if ans.get("event") == "loaded":
            self.loaded = str(path)
        return ans

    def keep_cache(self) -> None:
        """After an evaluation: the Triton kernels this candidate compiled, kept under its own
        digest (a candidate can only ever reach the cache of its own bytes)."""
        src = self.scratch / "triton-cache"
        if not self.digest or not src.is_dir():
            return
        dst = cache_dir() / "triton" / self.digest
        try:
            shutil.copytree(src, dst, dirs_exist_ok=True, symlinks=False,
                            ignore=lambda d, names: [n for n in names if os.path.islink(os.path.join(d, n))])
        except OSError:
            pass

    def send_arena(self, arena, timeout_s: float) -> dict:
        fds = [arena.fd] if arena.fd is not None else None
        return self.request(arena.message(), timeout_s, "while mapping the shared inputs", fds=fds)

    # -- life and death

    def freeze(self) -> None:
        """Stop every process of the executor (its group): nothing of the candidate runs
        while the judge is not asking it to."""
        if not self._killed and not self._stopped:
            try:
                os.killpg(self.pid, signal.SIGSTOP)
                self._stopped = True
            except (ProcessLookupError, PermissionError):
                pass

    def thaw(self) -> None:
        if self._stopped and not self._killed:
            try:
                os.killpg(self.pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
            self._stopped = False

    def alive(self) -> bool:
        return self.proc.poll() is None and not self._killed

    def close(self, grace_s: float = 2.0) -> None:
        if self._killed:
            return
        if self.alive():
            self.thaw()
            self._send({"op": "exit"})
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL the whole process group (bubblewrap's PID namespace goes with it)."""
        if self._killed:
            return
        self._killed = True
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass  # unkillable (D state): leave it to the kernel, never block the judge on it
        try:
            self._judge_end.close()
        except OSError:
            pass

    def describe_exit(self) -> str:
        try:
            rc = self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            rc = None
        return describe_status(rc, "executor", bwrap=self.sandbox.kind == "bwrap")

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - chars))
                return f.read().decode(errors="replace")
        except OSError:
            return ""


def keep_log(e: Executor, logs: Path) -> None:
    """An executor's log outlives its folder (what a crashed or lying candidate printed is
    evidence): kept as logs/<name>.log beside the judge's own, when it says anything."""
    try:
        if e.log_path.stat().st_size:
            logs.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(e.log_path, logs / f"{e.name}.log")
    except OSError:
        pass


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the judge's death kills us
    except Exception:  # noqa: BLE001
        pass


def _trusted_env(env: dict, device: str) -> dict:
    return sandbox.device_env({**env, "PYTHONUNBUFFERED": "1"}, device)


def describe_status(rc: int | None, what: str, bwrap: bool = False) -> str:
    """A process's end in words: "<what> killed by signal SIGSEGV (segmentation fault)"."""
    if rc is None:
        return f"{what} closed its channel but did not exit"
    if bwrap and rc > 128:
        rc = -(rc - 128)  # bubblewrap's init passes a child's death by signal on as 128 + signal
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        meaning = SIGNAL_MEANING.get(name)
        return f"{what} killed by signal {name}" + (f" ({meaning})" if meaning else "")
    return f"{what} exited with status {rc}"


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip()[:200] if lines else ""


class ExecutorPool:
    """Fresh executors for candidates, one spare always starting; one trusted executor for
    the baseline, kept across candidates (fla's autotuning is done once)."""

    def __init__(self, device: str, workdir: Path, *, env: dict, repos: list[Path] | None = None,
                 memory_limit: int = 0, spare: bool = True):
        """`spare`: start one executor now (the first candidate's); `want_spare`: keep one
        more starting behind each candidate taken."""
        self.device, self.workdir, self.env = device, Path(workdir), dict(env)
        self.logs = self.workdir / "logs"  # executors' logs, kept after they end
        self.repos, self.memory_limit = repos or [], memory_limit
        self.info = sandbox.detect()
        self._serial = itertools.count()
        self._spare: Executor | None = None
        self.want_spare = spare
        self.baseline: Executor | None = None
        self.baseline_path = ""
        self._live: set[Executor] = set()
        if spare:
            self._spare = self._start()

    def _start(self, trusted: bool = False) -> Executor:
        e = Executor(self.device, self.workdir, name=f"{'baseline' if trusted else 'exec'}-{next(self._serial)}",
                     env=self.env, repos=self.repos, memory_limit=self.memory_limit, info=self.info, trusted=trusted)
        self._live.add(e)
        return e

    def take(self) -> Executor:
        """A started executor for the next candidate (and a new spare starting)."""
        e = self._spare if self._spare is not None and self._spare.alive() else self._start()
        self._spare = self._start() if self.want_spare else None
        return e

    def retire(self, e: Executor) -> None:
        e.keep_cache()
        e.close()
        self._live.discard(e)
        keep_log(e, self.logs)
        shutil.rmtree(e.dir, ignore_errors=True)

    def baseline_executor(self, path: str, timeout_s: float) -> Executor:
        if self.baseline is not None and self.baseline.alive() and self.baseline_path == path:
            return self.baseline
        if self.baseline is not None:
            self.retire(self.baseline)
        self.baseline = self._start(trusted=True)
        self.baseline.ready()
        ans = self.baseline.load_trusted(path, timeout_s)
        if ans.get("event") != "loaded":
            reason = ans.get("reason", ans)
            self.retire(self.baseline)
            self.baseline = None
            raise ExecutorFault(f"the baseline {path} did not load: {reason}")
        self.baseline_path = path
        return self.baseline

    def close(self) -> None:
        for e in list(self._live):
            e.close(grace_s=0.5)
            keep_log(e, self.logs)
            shutil.rmtree(e.dir, ignore_errors=True)
        self._live.clear()
        self._spare = self.baseline = None
