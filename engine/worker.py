"""The evaluation worker: a subprocess that runs candidates so the engine never does.

Started by `kdatui.engine.evaluator` as `python -P -m kdatui.engine.worker --device ...`,
one per GPU (pinned with CUDA_VISIBLE_DEVICES, so it always uses "cuda") or one on the
CPU. It speaks JSON lines:

  parent -> worker (stdin)      {"op": "evaluate", "id", "task_toml", "shape", "candidate",
                                 "salt"}  |  {"op": "exit"}
  worker -> parent (protocol)   {"event": "ready", "pid", "device", "torch", "triton", "harness"}
                                {"event": "progress", "id", "phase", ...}  (see _Progress)
                                {"event": "result", "id", "evaluation": {...}, "retire", "why"}

The protocol goes over the worker's original stdout, which is set aside at startup;
file descriptor 1 then points at stderr, so whatever a candidate prints (from Python or
from C) lands in the worker's log and cannot corrupt a message.

A worker that cannot trust its own state after a job (a CUDA error leaves the context
unusable, memory exhaustion leaves the heap fragmented, a candidate called sys.exit)
says so with `retire` and exits; the evaluator starts a fresh one. Faults that kill the
process outright (a segfault, os._exit, the OOM killer) or hang it are the evaluator's
to detect: this side cannot report them.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import re
import sys
import threading
import time
import traceback

# Reasons that mean memory ran out, whatever layer noticed it first: Python's MemoryError,
# torch's CPU allocator (a RuntimeError), torch.cuda.OutOfMemoryError. (Triton's "out of
# resource: shared memory" is a launch config too large, not exhaustion: not matched.)
_OOM = re.compile(r"MemoryError|OutOfMemoryError|can't allocate memory|out of memory|out of GPU memory",
                  re.IGNORECASE)
_CUDA_FAULT = re.compile(r"CUDA error|illegal memory access|AcceleratorError|"
                         r"device-side assert|unspecified launch failure", re.IGNORECASE)


class _Protocol:
    """The message channel to the evaluator (the worker's original stdout)."""

    def __init__(self) -> None:
        # Keep the real stdout for messages; make fd 1 an alias of stderr for everyone else.
        self._out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._lock = threading.Lock()

    def send(self, msg: dict) -> None:
        line = json.dumps(msg, default=_jsonable)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def _jsonable(x):
    return str(x)  # numpy scalars, paths, ...: readable beats a crash of the channel


def _limit_address_space(limit_bytes: int) -> None:
    """On the CPU, unbounded allocation must become a MemoryError, not a machine-wide
    OOM kill. Hard and soft both, so a candidate cannot raise it back."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def _watch_parent(parent_pid: int) -> None:
    """Exit with the evaluator: if it dies without killing us (SIGKILL), a stuck candidate
    would otherwise hold a GPU forever. Polls, since a hung main thread cannot react."""

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                try:
                    os.killpg(0, 9)  # our own process group: the worker and anything it spawned
                finally:
                    os._exit(70)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class _Progress:
    """Turns the check and timing callbacks into progress events. Every event carries
    `done`/`total` over the whole evaluation (check steps + timing trials), so a client
    can draw one bar per shape without knowing the phases."""

    def __init__(self, proto: _Protocol, job_id, shape: str, check_steps: int, trials: int):
        self.proto, self.id, self.shape = proto, job_id, shape
        self.check_steps, self.trials = check_steps, trials
        self.total = check_steps + trials
        self.t0 = time.perf_counter()

    def _send(self, **kw) -> None:
        self.proto.send({"event": "progress", "id": self.id, "shape": self.shape, "total": self.total,
                         "elapsed_s": round(time.perf_counter() - self.t0, 3), **kw})

    def check(self, i: int, n: int, label: str) -> None:
        self._send(phase="check", step=i, steps=n, label=label, done=min(i, n))

    def timing(self, j: int, m: int, label: str) -> None:
        self._send(phase="timing", step=j, steps=m, label=label, done=self.check_steps + min(j, m))

    def post_timing(self) -> None:
        self._send(phase="post_timing", step=0, steps=1, label="post-timing check", done=self.total)


class ReferenceCache:
    """fp64 reference outputs kept across evaluations, for `run_checks(references=...)`.

    A warm worker checks candidate after candidate on the same shapes, and every probe's
    reference is a pure function of the probe. run_checks keys its dict by probe name and
    shape only, so each dict here serves one scope: shape, the contract fields a probe
    depends on, and the holdout salt. Whole scopes leave, least recently used first, when
    the references held pass the byte budget (at B=1 T=8192 H=96 one scope is ~14 GB)."""

    def __init__(self, limit_bytes: int):
        from collections import OrderedDict

        self.limit_bytes = limit_bytes
        self._scopes: OrderedDict = OrderedDict()

    def scope(self, task, shape, salt: bytes | None) -> dict | None:
        if self.limit_bytes <= 0:
            return None
        c = task.contract
        # make_probe reads these fields of the contract and no others (keep in step with it).
        key = (tuple(shape.dims().values()), c.seed, c.lower_bound, c.rtol, c.atol_rms, c.rms,
               c.correlated_rtol, c.correlated_atol_rms, c.correlated_rms, salt)
        refs = self._scopes.pop(key, None)
        self._scopes[key] = refs if refs is not None else {}
        return self._scopes[key]

    def trim(self) -> None:
        """After an evaluation: drop the oldest scopes until within the budget (the newest
        stays, even alone over budget, since the next evaluation most likely needs it)."""
        while len(self._scopes) > 1 and self.bytes() > self.limit_bytes:
            self._scopes.popitem(last=False)

    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for refs in self._scopes.values()
                   for out in refs.values() for t in out if t is not None)


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def _device_health(device: str) -> str:
    """Empty if the device still works; otherwise why not. A CUDA fault is sticky: every
    later call in this process would fail too, so the worker must be replaced."""
    if device != "cuda":
        return ""
    import torch

    try:
        torch.cuda.synchronize()
        x = torch.ones(16, device="cuda")
        if float((x + 1).sum().item()) != 32.0:
            return "the GPU computed 1 + 1 wrongly after the evaluation"
    except BaseException as e:  # noqa: BLE001 - any failure here means the context is gone
        return f"CUDA context unusable after the evaluation: {type(e).__name__}: {_first_line(e)}"
    return ""


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0][:200] if s else ""


def _fault_reason(e: BaseException, where: str) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    at = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
    return f"{where}: raised {type(e).__name__}{at}: {_first_line(e)}"


def evaluate_shape(task, shape, candidate: str, device: str, salt: bytes | None, progress: _Progress,
                   references: dict | None = None):
    """Checks, then (only if they pass) paired timing and the post-timing check.
    Returns the Evaluation record (never raises for a candidate's fault)."""
    from kdatui.engine import baselines
    from kdatui.engine import candidate as cand
    from kdatui.engine.checks import HARNESS_VERSION, _judge, reference_outputs, run_checks
    from kdatui.engine.probes import make_probe
    from kdatui.engine.records import Evaluation
    from kdatui.engine.timing import paired_timing

    t_start = time.perf_counter()
    report = run_checks(task, shape, candidate, device=device, progress=progress.check,
                        fail_fast=True, salt=salt, references=references)
    t_checks = time.perf_counter() - t_start
    ev = Evaluation(candidate=candidate, task=task.name, shape=shape.name, dims=shape.dims(),
                    verdict=report.verdict, checks=report, device=report.device, harness=HARNESS_VERSION)
    ev.seconds = {"checks": t_checks, "timing": 0.0, "total": t_checks}
    if not report.passed:
        bad = report.first_problem()
        ev.reason = f"{bad.probe}: {bad.reason}" if bad else "no check ran"
        return ev

    t_timing = time.perf_counter()
    try:
        base = baselines.resolve(task.bench.baseline, device)
    except Exception as e:  # a broken baseline is not the candidate's fault, but no timing is possible
        ev.verdict, ev.reason = "ERROR", _fault_reason(e, f"baseline {task.bench.baseline}")
        return ev
    ev.baseline = base.name
    fn = cand.load(candidate).kda_forward
    kept: dict = {}

    def make_inputs(trial: int):
        return make_probe("random", shape, task.contract, device, variant=f"trial{trial}")

    def keep_last(inputs, out):
        kept["inputs"], kept["out"] = inputs, out

    sides = {"baseline": base.fn, "candidate": fn}

    def timed(side):
        f = sides[side]

        def call(p):
            try:
                return f(*p.args(), **p.kwargs())
            except Exception as e:
                e.kdatui_side = side  # who raised, for the reason
                raise
        return call

    b = task.bench
    try:
        timing = paired_timing(timed("baseline"), timed("candidate"), make_inputs, device=device,
                               trials=b.trials, warmup=b.warmup, repeats=b.repeats, flush_l2=b.flush_l2,
                               progress=progress.timing, keep_last=keep_last)
    except Exception as e:
        side = getattr(e, "kdatui_side", "harness")
        who = f"baseline {base.name}" if side == "baseline" else side
        ev.verdict, ev.reason = "ERROR", _fault_reason(e, f"timing ({who})")
        ev.seconds.update(timing=time.perf_counter() - t_timing, total=time.perf_counter() - t_start)
        return ev
    ev.timing = timing
    ev.seconds["timing"] = time.perf_counter() - t_timing

    # The post-timing check: the output of the last timed call, against the reference for
    # the inputs it was computed from. A kernel that is only right when it is slow shows here.
    # (No reference cache: its key does not tell trial inputs from the "random" probe.)
    progress.post_timing()
    ev.verdict, ev.post_timing, ev.reason = _post_timing_check(kept, reference_outputs, _judge)
    ev.seconds["total"] = time.perf_counter() - t_start
    return ev


def _post_timing_check(kept: dict, reference_outputs, judge) -> tuple[str, str, str]:
    """(verdict, post_timing verdict, reason)."""
    import torch

    out = kept.get("out")
    if not isinstance(out, (tuple, list)) or len(out) != 2 or not all(isinstance(t, torch.Tensor) for t in out):
        return "ERROR", "ERROR", f"post-timing: the last timed call returned {type(out).__name__}, not (o, final_state)"
    p = kept["inputs"]
    try:
        c = judge(out[0], out[1], reference_outputs(p), p.tolerance)
    except Exception as e:  # wrong shape or device in the timed output
        return "ERROR", "ERROR", _fault_reason(e, "post-timing")
    if not c.ok:
        return "FAIL", "FAIL", f"post-timing: {c.reason}"
    return "PASS", "PASS", ""


def _classify(ev) -> str:
    """Why this worker must not be reused after `ev`, or "" if it can be."""
    if ev.verdict != "ERROR":
        return ""
    if _OOM.search(ev.reason):
        ev.reason = ev.reason if ev.reason.startswith("out of memory") else f"out of memory: {ev.reason}"
        return "memory ran out"
    if _CUDA_FAULT.search(ev.reason):
        return "CUDA error"
    return ""


def _run_job(proto: _Protocol, msg: dict, device: str, device_name: str, references: ReferenceCache) -> bool:
    """One evaluation request. Returns False when the worker must exit afterwards."""
    from kdatui.engine.checks import HARNESS_VERSION, check_steps
    from kdatui.engine.records import Evaluation
    from kdatui.engine.task import load_task_text

    task = load_task_text(msg["task_toml"], f"task {msg.get('task_name', '')} (sent to the worker)")
    shape = task.shape(msg["shape"])
    salt = bytes.fromhex(msg["salt"]) if msg.get("salt") else None
    progress = _Progress(proto, msg["id"], shape.name, len(check_steps(task)), task.bench.trials)
    retire = ""
    t0 = time.perf_counter()
    try:
        ev = evaluate_shape(task, shape, msg["candidate"], device, salt, progress,
                            references.scope(task, shape, salt))
        retire = _classify(ev)
    except SystemExit as e:  # a candidate called sys.exit(): report it, then start clean
        ev = Evaluation.error(msg["candidate"], task.name, shape, f"the candidate called sys.exit({e.code!r})")
        retire = "sys.exit"
    except MemoryError as e:  # outside a candidate call (reference, probes, ...): same fault
        ev = Evaluation.error(msg["candidate"], task.name, shape, f"out of memory: {_first_line(e) or 'MemoryError'}")
        retire = "memory ran out"
    except Exception as e:  # the harness itself failed (or a fault it does not wrap)
        ev = Evaluation.error(msg["candidate"], task.name, shape, _fault_reason(e, "harness"))
        ev.log = traceback.format_exc()[-4000:]
        retire = _classify(ev)
    except BaseException as e:  # KeyboardInterrupt and kin raised by a candidate: report, start clean
        ev = Evaluation.error(msg["candidate"], task.name, shape, _fault_reason(e, "candidate"))
        retire = type(e).__name__
    ev.device = ev.device or device_name
    ev.harness = ev.harness or HARNESS_VERSION
    ev.seconds.setdefault("total", time.perf_counter() - t0)
    for part in ("checks", "timing"):
        ev.seconds.setdefault(part, 0.0)
    sick = _device_health(device)
    if sick:
        if ev.verdict != "ERROR":
            ev.verdict, ev.reason = "ERROR", sick
        retire = retire or sick
    proto.send({"event": "result", "id": msg["id"], "evaluation": ev.to_dict(), "retire": bool(retire),
                "why": retire})
    if not retire:
        references.trim()
        _release_memory(device)
    return not retire


def _release_memory(device: str) -> None:
    """Give back what the last evaluation held (probe inputs, outputs at large shapes), so
    the next candidate starts with the whole GPU, not what the caching allocator kept."""
    import gc

    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdatui.engine.worker")
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--memory-limit", type=int, default=0, help="RLIMIT_AS in bytes (CPU only; 0 = none)")
    ap.add_argument("--parent-pid", type=int, default=0)
    ap.add_argument("--reference-cache", type=int, default=0,
                    help="bytes of fp64 reference outputs kept between evaluations (0 = none)")
    args = ap.parse_args(argv)

    proto = _Protocol()
    faulthandler.enable(file=sys.stderr)  # a segfault leaves a Python traceback in the log
    if args.parent_pid:
        _watch_parent(args.parent_pid)
    if args.device == "cpu":
        # Triton kernels run through the interpreter; must be set before triton is imported.
        os.environ["TRITON_INTERPRET"] = "1"
        if args.memory_limit:
            _limit_address_space(args.memory_limit)

    import torch
    import triton

    from kdatui.engine.checks import HARNESS_VERSION

    references = ReferenceCache(args.reference_cache)
    device_name = _device_name(args.device)
    proto.send({"event": "ready", "pid": os.getpid(), "device": device_name, "torch": torch.__version__,
                "triton": triton.__version__, "harness": HARNESS_VERSION})
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if msg.get("op") == "exit":
            break
        if msg.get("op") == "evaluate":
            if not _run_job(proto, msg, args.device, device_name, references):
                break
    sys.stderr.flush()
    # Skip interpreter teardown: candidate threads or CUDA state must not hang the exit.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
