"""The judge's process: its channel to the evaluator, and the order it starts in.

Started by the evaluator (engine/evaluator.py) as
`python -P -m kdatui.engine.judge_main --device cpu|cuda --workdir DIR [--no-spare]`. It
starts its first executor before it imports torch itself, so the two interpreters start side
by side; then the judging (engine/judge.py) serves one evaluation request at a time.

Protocol with the evaluator (JSON lines; the judge's stdout is set aside for it at startup,
fd 1 then points at stderr, so nothing printed can corrupt a message):

  evaluator -> judge   {"op": "evaluate", "id", "task_toml", "task_name", "shape", "candidate",
                        "timing": bool, "timeout_s"}  |  {"op": "exit"}
  judge -> evaluator   {"event": "ready", "pid", "device", "torch", "triton", "harness", "sandbox"}
                       {"event": "progress", "id", "phase", ...}
                       {"event": "result", "id", "evaluation": {...}}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path


class _Channel:
    """The message channel to the evaluator (the judge's original stdout)."""

    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._lock = threading.Lock()

    def send(self, msg: dict) -> None:
        line = json.dumps(msg, default=str)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def _watch_parent(parent_pid: int) -> None:
    """Exit with the evaluator: a judge left behind would hold a GPU (its executors die with
    it: they carry PR_SET_PDEATHSIG / bubblewrap's --die-with-parent)."""

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                try:
                    os.killpg(0, 9)
                finally:
                    os._exit(70)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _run_job(ch: _Channel, judge, msg: dict) -> None:
    from .judge import _Progress, _first_line
    from .records import HARNESS_VERSION, Evaluation
    from .checks import check_steps
    from .task import load_task_text

    task = load_task_text(msg["task_toml"], f"task {msg.get('task_name', '')} (sent to the judge)")
    shape = task.shape(msg["shape"])
    salt = None
    if task.contract.holdout:
        from .probes import holdout_salt

        salt = holdout_salt()  # read here, by the judge alone: it never travels
    progress = _Progress(ch.send, msg["id"], shape.name, len(check_steps(task)),
                         task.bench.trials if msg.get("timing", True) else 0)
    try:
        ev = judge.evaluate(task, shape, msg["candidate"], timing=msg.get("timing", True), salt=salt, progress=progress,
                            timeout_s=msg.get("timeout_s"), race_below=msg.get("race_below"))
    except Exception as e:  # the harness itself failed
        ev = Evaluation.error(msg["candidate"], task.name, shape, f"harness: {type(e).__name__}: {_first_line(e)}",
                              device=judge.device_name, harness=HARNESS_VERSION)
        ev.log = traceback.format_exc()[-4000:]
        judge._retire_current()
    ch.send({"event": "result", "id": msg["id"], "evaluation": ev.to_dict()})
    judge.after()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kdatui.engine.judge_main")
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--memory-limit", type=int, default=0, help="RLIMIT_AS of each CPU executor (0 = none)")
    ap.add_argument("--parent-pid", type=int, default=0)
    ap.add_argument("--reference-cache", type=int, default=0,
                    help="bytes of fp64 reference outputs kept between evaluations (0 = none)")
    ap.add_argument("--workdir", required=True, help="where executors keep their folders")
    ap.add_argument("--logdir", help="where executors' logs are kept after they end (default: WORKDIR/logs)")
    ap.add_argument("--no-spare", action="store_true",
                    help="no spare executor for a next candidate (one-shot use: kdatui check, bench)")
    args = ap.parse_args(argv)
    ch = _Channel()
    import faulthandler

    faulthandler.enable(file=sys.stderr)
    if args.parent_pid:
        _watch_parent(args.parent_pid)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    from .executor import ExecutorPool  # stdlib only: the first executor starts before torch is imported here

    pool = ExecutorPool(args.device, Path(args.workdir), env=dict(os.environ), memory_limit=args.memory_limit,
                        spare=True)
    pool.want_spare = not args.no_spare
    if args.logdir:
        pool.logs = Path(args.logdir)
    import torch

    from .baselines import package_version  # the judge never runs Triton (its executors do): no import
    from .judge import Judge
    from .records import HARNESS_VERSION

    judge = Judge(args.device, workdir=Path(args.workdir), reference_cache=args.reference_cache,
                  memory_limit=args.memory_limit, pool=pool)
    ch.send({"event": "ready", "pid": os.getpid(), "device": judge.device_name, "torch": torch.__version__,
             "triton": package_version("triton"), "harness": HARNESS_VERSION, "sandbox": judge.sandbox.to_dict()})
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            msg = json.loads(line)
            if msg.get("op") == "exit":
                break
            if msg.get("op") == "evaluate":
                _run_job(ch, judge, msg)
    finally:
        judge.close()
        sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
