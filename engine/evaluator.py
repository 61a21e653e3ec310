"""The evaluator: checks and paired timing of a candidate, per shape, out of its reach.

`Evaluator` is the interface the search loop, the CLI verbs and the TUI use:

    with make_evaluator() as ev:
        evaluations = ev.evaluate(task, "path/to/candidate", ["b1_t8192_h96"], progress=print)

Backends:
  local  one judge process (`kdatui.engine.judge`) per visible GPU, pinned with
         CUDA_VISIBLE_DEVICES, or one on the CPU when there is no GPU. Each judge runs the
         candidate in a sandboxed executor of its own (engine/executor.py, engine/sandbox.py);
         no candidate code runs in this process or in the judge.
  ray    Ray actors on an existing cluster (a placeholder here: it says what it needs).

Faults: a candidate that crashes, hangs, exhausts memory or breaks CUDA takes down its
executor, not the judge; the judge records an ERROR naming it and starts a fresh executor.
Should a judge itself die or hang, it is seen here (end of file, or no result before the
deadline: its whole process group is killed) and replaced. A candidate that hangs on one
shape is not run on the others of the same call. Nothing here waits without a deadline, so
close() returns promptly even when a candidate is stuck in a loop that ignores signals.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

from . import sandbox
from .executor import describe_status
from .records import HARNESS_VERSION, Evaluation
from .task import Shape, Task

ProgressFn = Callable[[dict], None]

DEFAULT_CPU_MEMORY_LIMIT = 8 << 30  # RLIMIT_AS of a CPU worker: torch + interpreter fit easily
# Device memory per worker for fp64 reference outputs reused across evaluations: one shape's
# references at B=1 T=8192 H=96 take about 14 GB of the H200's 141 GB.
DEFAULT_REFERENCE_CACHE = 16 << 30
STARTUP_TIMEOUT_S = 300.0  # importing torch + triton and creating a CUDA context
JUDGE_SLACK_S = 120.0  # beyond the candidate's time limit, before a silent judge counts as hung
EXIT_GRACE_S = 2.0  # how long close() lets idle workers leave on their own before SIGKILL
RECYCLE_AFTER = 200  # evaluations per worker before a fresh one (loaded candidates accumulate)
LOG_TAIL_CHARS = 3000



class EvaluatorError(Exception):
    """The evaluator cannot be used as asked (a missing backend, a closed evaluator)."""


class Evaluator(ABC):
    """Evaluate a candidate on the shapes of a task: one `Evaluation` per shape."""

    @abstractmethod
    def evaluate(self, task: Task, candidate_path: str | Path, shapes: Iterable[str | Shape] | None = None,
                 *, progress: ProgressFn | None = None, timing: bool = True,
                 race: dict[str, float] | None = None) -> list[Evaluation]:
        """Shapes default to all of the task's. `progress(event)` receives dicts with an
        `event` key ("start", "progress", "result", "worker"), see LocalEvaluator.
        `timing=False`: the checks alone (`kdatui check`). `race`: per shape name, the least
        speedup that could be admitted; a timing whose best trial stays below it stops early
        and is recorded RACED (judge.time_pair)."""

    @property
    def sandbox(self) -> sandbox.SandboxInfo:
        """What keeps candidates in (engine/sandbox.py); its `warning` is shown wherever
        results are."""
        return sandbox.detect()

    @abstractmethod
    def close(self) -> None:
        """Stop every worker; never blocks on a stuck one."""

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_evaluator(backend: str = "local", **kwargs) -> Evaluator:
    if backend == "local":
        return LocalEvaluator(**kwargs)
    if backend == "ray":
        return RayEvaluator(**kwargs)
    raise EvaluatorError(f"unknown evaluator backend {backend!r}; expected 'local' or 'ray'")


def visible_devices() -> list[str]:
    """What each worker gets in CUDA_VISIBLE_DEVICES: the GPUs this process may use (in the
    order CUDA_VISIBLE_DEVICES gives them, ids or UUIDs), or ["cpu"] if there are none."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [d.strip() for d in env.split(",") if d.strip()]
        # A "-1" (or any invalid entry) hides every device after it, as CUDA does.
        ids = list(itertools.takewhile(lambda d: not d.startswith("-"), ids))
        if not ids:
            return ["cpu"]
    if not any(d.startswith("nvidia") for d in _dev_entries()):
        return ["cpu"]  # no NVIDIA device nodes: no need to import torch to know (a fast `kdatui check`)
    try:
        import torch

        n = torch.cuda.device_count()
    except Exception:
        n = 0
    if n == 0:
        return ["cpu"]
    return ids[:n] if env is not None else [str(i) for i in range(n)]


def _dev_entries() -> list[str]:
    try:
        return os.listdir("/dev")
    except OSError:
        return ["nvidia?"]  # cannot tell: ask torch


# --------------------------------------------------------------------------- one process


class WorkerFault(Exception):
    """The worker process failed (died, hung, would not start). `reason` names the fault."""

    def __init__(self, reason: str, log: str = ""):
        super().__init__(reason)
        self.reason, self.log = reason, log


class _Timeout(Exception):
    pass


class WorkerProcess:
    """One judge subprocess (the slot's worker) in its own process group, and the pipes to it."""

    def __init__(self, device: str, *, name: str, memory_limit: int, reference_cache: int, workdir: Path,
                 env: dict, spare: bool = True, log_dir: Path | None = None):
        self.device = device  # "cpu" or the CUDA_VISIBLE_DEVICES entry
        logs = Path(log_dir) if log_dir is not None else workdir
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"judge-{name}.log"
        self.info: dict | None = None  # the "ready" message
        self.jobs = 0
        self._buf = b""
        self._killed = False
        self.workdir = workdir / f"judge-{name}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-P", "-m", "kdatui.engine.judge_main", "--parent-pid", str(os.getpid()),
                "--device", "cpu" if device == "cpu" else "cuda", "--workdir", str(self.workdir),
                "--logdir", str(logs)]
        if device == "cpu" and memory_limit:
            args += ["--memory-limit", str(memory_limit)]
        if not spare:
            args.append("--no-spare")
        if device == "cpu" and memory_limit and reference_cache:
            reference_cache = min(reference_cache, memory_limit // 4)  # far inside the address-space limit
        args += ["--reference-cache", str(reference_cache)]
        env = dict(env)
        env["PYTHONUNBUFFERED"] = "1"
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU worker must not touch a GPU
            env["TRITON_INTERPRET"] = "1"
            # The interpreter runs small numpy tiles: extra BLAS/OpenMP threads only fight each
            # other (and the engine) for the cores; one thread is several times faster.
            env.setdefault("OMP_NUM_THREADS", "1")
        else:
            env["CUDA_VISIBLE_DEVICES"] = device
            env.pop("TRITON_INTERPRET", None)
        with open(self.log_path, "wb") as log:
            # start_new_session: the worker leads its own process group, so a timeout kills
            # everything the candidate spawned, and Ctrl-C in the terminal is ours to handle.
            self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         cwd=workdir, env=env, start_new_session=True, close_fds=True)
        self.pid = self.proc.pid

    # -- messages

    def send(self, msg: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # it died; the read that follows sees the end of file and says how

    def read(self, deadline: float) -> dict | None:
        """The next message, None at end of file (the worker died); _Timeout at the deadline."""
        while True:
            line = self._read_line(deadline)
            if line is None:
                return None
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue  # not ours (the worker's stdout is reserved, but be lenient)
            if isinstance(msg, dict):
                return msg

    def _read_line(self, deadline: float) -> str | None:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Timeout
            # Wake up at least once a second: a dead worker whose pipe is still held open
            # by a grandchild never gives end of file.
            ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self._buf += chunk
            elif self.proc.poll() is not None:
                ready, _, _ = select.select([fd], [], [], 0)
                if not ready:
                    return None
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode(errors="replace")

    # -- life and death

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group; wait briefly for the exit status, never forever."""
        if self._killed:
            return
        self._killed = True
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass  # unkillable (D state): leave it to the kernel, never block the engine on it
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def exit_status(self, wait_s: float = 5.0) -> int | None:
        try:
            return self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return None

    def describe_exit(self) -> str:
        rc = self.exit_status()
        if rc == 70:
            return "judge exited because it lost its evaluator"
        return describe_status(rc, "judge")

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - chars))
                return f.read().decode(errors="replace")
        except OSError:
            return ""


# --------------------------------------------------------------------------- one device


class WorkerSlot:
    """A device and the worker that currently serves it. A failed worker is killed and a
    fresh one started at once, so it is warming up while the failure is reported."""

    def __init__(self, device: str, label: str, *, memory_limit: int, reference_cache: int, workdir: Path,
                 env: dict, live: set, startup_timeout_s: float, recycle_after: int, spare: bool = True,
                 log_dir: Path | None = None):
        self.device = device
        self.label = label  # how events name this worker: "cpu", "cuda:0", ...
        self.device_name = "cpu" if device == "cpu" else ""  # learned from the worker's "ready"
        self._kw = dict(memory_limit=memory_limit, reference_cache=reference_cache, workdir=workdir, env=env,
                        spare=spare, log_dir=log_dir)
        self._live = live
        self._serial = itertools.count()
        self.startup_timeout_s = startup_timeout_s
        self.recycle_after = recycle_after
        self.replaced = 0
        self.sandbox: sandbox.SandboxInfo | None = None  # what the judge reported it uses
        self.closed = False  # set by the evaluator's close(): no worker may start after it
        self.worker: WorkerProcess | None = None
        self.start()

    def start(self) -> None:
        if self.closed:
            self.worker = None
            return
        name = f"{self.label.replace(':', '')}-{next(self._serial)}"
        self.worker = WorkerProcess(self.device, name=name, **self._kw)
        self._live.add(self.worker)

    def stop(self, worker: WorkerProcess | None = None) -> None:
        w = worker or self.worker
        if w is not None:
            w.kill()
            self._live.discard(w)

    def replace(self) -> None:
        self.stop()
        self.replaced += 1
        self.start()

    def ready_worker(self, emit: Callable[[dict], None]) -> WorkerProcess:
        """The worker, started and past its "ready" handshake."""
        if self.closed:
            raise WorkerFault("evaluator closed")
        w = self.worker
        if w is None or not w.alive() or w.jobs >= self.recycle_after:
            self.replace()
            w = self.worker
            if w is None:  # closed meanwhile, from another thread
                raise WorkerFault("evaluator closed")
        if w.info is not None:
            return w
        emit({"event": "progress", "phase": "starting", "label": f"starting worker on {self.label}",
              "done": 0, "total": None})
        try:
            msg = w.read(time.monotonic() + self.startup_timeout_s)
        except _Timeout:
            log = w.log_tail()
            self.stop(w)
            raise WorkerFault(f"worker did not start within {self.startup_timeout_s:g} s", log) from None
        if msg is None or msg.get("event") != "ready":
            why = w.describe_exit() if msg is None else f"worker sent {msg.get('event')!r} before 'ready'"
            log = w.log_tail()
            self.stop(w)
            last = _last_line(log)
            raise WorkerFault(f"worker failed to start: {why}" + (f": {last}" if last else ""), log)
        w.info = msg
        self.device_name = msg.get("device", self.device_name)
        if msg.get("sandbox"):
            self.sandbox = sandbox.SandboxInfo(msg["sandbox"]["kind"], msg["sandbox"].get("reason", ""))
        return w


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip()[:200] if lines else ""


def _where(progress: dict | None) -> str:
    """Where an evaluation was when its worker died, from the last progress event."""
    if not progress:
        return "before the first check"
    phase, step, steps, label = (progress.get(k) for k in ("phase", "step", "steps", "label"))
    if phase == "check":
        if label == "static":
            return f"during check 1/{steps} 'static' (static check or import of the candidate)"
        if label == "done":
            return "after the checks, before timing (loading the baseline)"
        return f"during check {step + 1}/{steps} '{label}'"
    if phase == "timing":
        return f"during timing trial {min(step + 1, steps)}/{steps}"
    if phase == "post_timing":
        return "during the post-timing check"
    return f"during {phase}"


# --------------------------------------------------------------------------- local backend


@dataclass
class _Job:
    task: Task
    task_toml: str
    shape: Shape
    candidate: str  # as the caller gave it (for the record)
    candidate_abs: str  # what the judge reads
    baseline_abs: str | None  # the task's baseline path made absolute (None: a named baseline)
    timeout_s: float
    timing: bool = True
    hung: list | None = None  # shared by the jobs of one call: the first shape that hung
    race_below: float | None = None  # the least speedup worth timing to the end (None: time it all)
    raced: list | None = None  # shared by the jobs of one raced call: the shape raced out first


class LocalEvaluator(Evaluator):
    """Judge subprocesses on this machine: one per visible GPU, or one on the CPU.

    `evaluate` runs the shapes of one call on as many workers as are free (in threads when
    there are several) and is safe to call from several threads at once.

    Progress events (dicts) passed to `progress`, possibly from a worker thread:
      {"event": "start", "shape", "worker", "candidate"}
      {"event": "progress", "shape", "worker", "phase": "starting" | "check" | "timing" |
       "post_timing", "step", "steps", "label", "done", "total", "elapsed_s"}
      {"event": "result", "shape", "worker", "verdict", "reason", "speedup", "seconds"}
      {"event": "worker", "worker", "action": "replaced", "why"}
    `done`/`total` count check steps plus timing trials, for one bar per shape.
    """

    def __init__(self, devices: list[str] | None = None, *, timeout_s: float | None = None,
                 memory_limit: int | None = DEFAULT_CPU_MEMORY_LIMIT,
                 reference_cache: int = DEFAULT_REFERENCE_CACHE,
                 log_dir: str | Path | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S, recycle_after: int = RECYCLE_AFTER,
                 env: dict | None = None, spare: bool = True):
        """`spare=False`: each judge keeps no spare executor starting for a next candidate
        (for one-shot use, `kdatui check` and `bench`: nothing competes with the first)."""
        self.devices = list(devices) if devices else visible_devices()
        self.timeout_s = timeout_s  # overrides every task's bench.timeout_s when set
        # Executors work in a private temporary folder (copies of candidates, their scratch),
        # never inside a repo's .frontier/, which the sandbox hides; what they and the judges
        # print is kept in `log_dir` when one is given (a run's folder), else with the rest.
        self.workdir = Path(tempfile.mkdtemp(prefix="kdatui-eval-"))
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self._live: set[WorkerProcess] = set()
        # If the caller never closes us, the workers still die with this process.
        self._finalizer = weakref.finalize(self, _kill_all, self._live)
        self._closed = False
        self._ids = itertools.count(1)
        self._idle: queue.Queue[WorkerSlot] = queue.Queue()
        self.slots = [WorkerSlot(d, _slot_label(d, i, self.devices), memory_limit=memory_limit or 0,
                                 reference_cache=reference_cache, workdir=self.workdir, env=dict(env if env is not None else os.environ),
                                 live=self._live, startup_timeout_s=startup_timeout_s, recycle_after=recycle_after,
                                 spare=spare, log_dir=self.log_dir)
                      for i, d in enumerate(self.devices)]
        for s in self.slots:
            self._idle.put(s)

    @property
    def device_kind(self) -> str:
        return "cpu" if self.devices == ["cpu"] else "cuda"

    # -- the interface

    def evaluate(self, task: Task, candidate_path: str | Path, shapes: Iterable[str | Shape] | None = None,
                 *, progress: ProgressFn | None = None, timing: bool = True,
                 race: dict[str, float] | None = None) -> list[Evaluation]:
        if self._closed:
            raise EvaluatorError("this evaluator is closed")
        hung: list = []
        race = race or {}
        raced: list | None = [] if race else None
        jobs = [replace(self._job(task, candidate_path, s), timing=timing, hung=hung, race_below=race.get(s.name),
                        raced=raced) for s in self._shapes(task, shapes)]
        # raced shapes first: once one is raced out, the shapes not yet started are checked, not timed
        jobs.sort(key=lambda j: j.race_below is None)
        emit = _safe(progress)
        if len(jobs) == 1 or len(self.slots) == 1:
            return [self._run(job, emit) for job in jobs]
        with ThreadPoolExecutor(max_workers=min(len(jobs), len(self.slots)),
                                thread_name_prefix="kdatui-eval") as pool:
            return list(pool.map(lambda job: self._run(job, emit), jobs))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for slot in self.slots:
            slot.closed = True
        workers = list(self._live)
        for w in workers:
            w.send({"op": "exit"})  # an idle worker leaves on its own ...
        deadline = time.monotonic() + EXIT_GRACE_S
        for w in workers:
            while w.alive() and time.monotonic() < deadline:
                time.sleep(0.02)
        _kill_all(self._live)  # ... a busy or stuck one is killed
        self._finalizer.detach()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- internals

    @staticmethod
    def _shapes(task: Task, shapes) -> list[Shape]:
        if shapes is None:
            return list(task.shapes.values())
        return [s if isinstance(s, Shape) else task.shape(s) for s in shapes]

    def _job(self, task: Task, candidate_path, shape: Shape) -> _Job:
        baseline_abs = None
        requested = task.bench.baseline
        if requested not in ("fla", "torch"):
            # Resolved here, since workers run in their own directory.
            base = Path(requested)
            if not base.is_absolute() and task.path is not None and not base.exists():
                base = Path(task.path).parent / base
            baseline_abs = str(base.resolve())
        sent = task if baseline_abs is None else replace(task, bench=replace(task.bench, baseline=baseline_abs))
        return _Job(task=task, task_toml=sent.dumps(), shape=shape, candidate=str(candidate_path),
                    candidate_abs=str(Path(candidate_path).resolve()), baseline_abs=baseline_abs,
                    timeout_s=self.timeout_s or task.bench.timeout_s)

    def _run(self, job: _Job, emit: ProgressFn) -> Evaluation:
        slot = self._idle.get()
        try:
            return self._run_on(slot, job, emit)
        finally:
            self._idle.put(slot)

    def _run_on(self, slot: WorkerSlot, job: _Job, emit: ProgressFn) -> Evaluation:
        tag = {"shape": job.shape.name, "worker": slot.label}
        emit({"event": "start", "candidate": job.candidate, **tag})
        if job.hung:
            # A candidate that hung on one shape is not run on the others: one time limit, not one per shape.
            ev = Evaluation.error(job.candidate, job.task.name, job.shape,
                                  f"not run: the candidate hung on {job.hung[0]}", device=slot.device_name,
                                  harness=HARNESS_VERSION, seconds={"checks": 0.0, "timing": 0.0, "total": 0.0})
            emit({"event": "result", "verdict": ev.verdict, "reason": ev.reason, "speedup": None,
                  "seconds": ev.seconds, **tag})
            return ev

        def forward(msg: dict) -> None:
            emit({**msg, **tag})

        raced_on = job.raced[0] if job.raced else None
        if raced_on and job.timing:  # the candidate cannot be admitted: its checks still count, a timing would not
            job = replace(job, timing=False)

        t0 = time.monotonic()
        try:
            ev = self._exchange(slot, job, forward)
        except WorkerFault as fault:
            ev = Evaluation.error(job.candidate, job.task.name, job.shape, fault.reason, device=slot.device_name,
                                  harness=HARNESS_VERSION, log=fault.log,
                                  seconds={"checks": 0.0, "timing": 0.0, "total": time.monotonic() - t0})
            if not self._closed:
                slot.replace()
                emit({"event": "worker", "action": "replaced", "why": fault.reason, **tag})
        except BaseException:
            # Interrupted (Ctrl-C) or a bug on our side mid-job: the worker's state is unknown.
            slot.stop()
            slot.worker = None
            raise
        if ev.verdict == "ERROR" and ev.reason.startswith("timed out") and job.hung is not None and not job.hung:
            job.hung.append(f"{job.shape.name} ({ev.reason})")
        if ev.verdict == "RACED" and job.raced is not None and not job.raced:
            job.raced.append(job.shape.name)
        if raced_on and ev.verdict == "PASS":
            ev.verdict, ev.reason = "RACED", f"not timed: raced out on {raced_on}"
        ev.candidate = job.candidate
        if ev.checks is not None:
            ev.checks.candidate = job.candidate
        if job.baseline_abs and ev.baseline == job.baseline_abs:
            ev.baseline = job.task.bench.baseline
        emit({"event": "result", "verdict": ev.verdict, "reason": ev.reason, "speedup": ev.speedup,
              "seconds": ev.seconds, **tag})
        return ev

    def _exchange(self, slot: WorkerSlot, job: _Job, forward: ProgressFn) -> Evaluation:
        """Send one request and read until its result; raise WorkerFault if the worker
        dies or runs past the deadline (then it is killed, with its whole group)."""
        w = slot.ready_worker(forward)
        job_id = next(self._ids)
        w.jobs += 1
        w.send({"op": "evaluate", "id": job_id, "task_name": job.task.name, "task_toml": job.task_toml,
                "shape": job.shape.name, "candidate": job.candidate_abs, "timing": job.timing,
                "timeout_s": job.timeout_s, "race_below": job.race_below})
        # The judge holds the candidate to its time limit; this deadline is for a judge gone silent.
        deadline = time.monotonic() + job.timeout_s + JUDGE_SLACK_S
        last_progress: dict | None = None
        while True:
            try:
                msg = w.read(deadline)
            except _Timeout:
                w.kill()
                raise WorkerFault(f"timed out after {job.timeout_s:g} s {_where(last_progress)}",
                                  w.log_tail()) from None
            if msg is None:
                why = "evaluator closed" if self._closed else w.describe_exit()
                raise WorkerFault(f"{why} {_where(last_progress)}", w.log_tail())
            if msg.get("id") != job_id:
                continue
            if msg.get("event") == "progress":
                last_progress = msg
                forward(msg)
            elif msg.get("event") == "result":
                return Evaluation.from_dict(msg["evaluation"])


def _slot_label(device: str, index: int, devices: list[str]) -> str:
    if device != "cpu":
        return f"cuda:{device}"
    return "cpu" if devices.count("cpu") == 1 else f"cpu:{index}"  # several CPU workers: tell them apart


def _kill_all(workers: set) -> None:
    for w in list(workers):
        w.kill()
        workers.discard(w)


def _safe(progress: ProgressFn | None) -> ProgressFn:
    """A display bug must not abort an evaluation (or kill a worker mid-job)."""
    if progress is None:
        return lambda event: None

    def emit(event: dict) -> None:
        try:
            progress(event)
        except Exception as e:  # noqa: BLE001
            print(f"kdatui: progress callback failed: {type(e).__name__}: {e}", file=sys.stderr)

    return emit


# --------------------------------------------------------------------------- ray backend


class RayEvaluator(Evaluator):
    """Ray tasks with num_gpus=1 on an existing cluster (DESIGN.md "Scale-out").

    Not built yet: only the clear error when Ray is missing is."""

    def __init__(self, address: str | None = None, **_ignored):
        try:
            import ray  # noqa: F401
        except ImportError:
            raise EvaluatorError("the 'ray' evaluator backend needs the ray package (pip install 'ray[default]') "
                                 "and a running Ray cluster; use the 'local' backend otherwise") from None
        raise EvaluatorError("the 'ray' evaluator backend is not implemented yet; use the 'local' backend")

    def evaluate(self, task, candidate_path, shapes=None, *, progress=None, timing=True, race=None):  # pragma: no cover
        raise EvaluatorError("the 'ray' evaluator backend is not implemented yet")

    def close(self) -> None:  # pragma: no cover
        pass
