"""Engine overhead per attempt (everything but the evaluation) and event throughput to clients.

    python bench/engine.py [--attempts 40] [--events 20000]

overhead: the real run loop (built-in agent, git worktrees, store, admission commits, index)
          in a temporary repo, with an evaluator that answers at once with synthetic PASS
          evaluations: wall time per attempt. Target <= 1 s.
events:   the real event bus and control socket: events emitted as fast as possible while a
          subscribed client reads them; events per second delivered (target >= 1,000), and
          that the batched store writes kept up. CPU only; no GPU needed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class InstantEvaluator:
    """Synthetic evaluations: PASS on every shape, a speedup drawn around 1."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def evaluate(self, task, candidate, shapes=None, *, progress=None, timing=True, race=None):
        from kdatui.engine.records import Evaluation
        from kdatui.engine.timing import PairedTiming, SideTiming

        out = []
        for name in shapes or list(task.shapes):
            s = task.shapes[name] if isinstance(name, str) else name
            base = 1.0
            cand = base / self.rng.uniform(0.6, 1.6)
            t = PairedTiming(SideTiming(base, 0.01, [base]), SideTiming(cand, 0.01, [cand]), base / cand,
                             trials=1, repeats=1, timer="synthetic", flush_l2=False)
            out.append(Evaluation(candidate=str(candidate), task=task.name, shape=s.name, dims=s.dims(),
                                  verdict="PASS", timing=t, baseline="synthetic", device="synthetic"))
        return out

    def close(self):
        pass


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def bench_overhead(n: int) -> dict:
    from kdatui.engine.agents import make_agent
    from kdatui.engine.events import EventBus
    from kdatui.engine.frontier import Frontier
    from kdatui.engine.loop import Budget, RunControl, RunLoop
    from kdatui.engine.task import load_task

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        (repo / "tasks").mkdir(parents=True)
        (repo / "tasks" / "t.toml").write_text((ROOT / "tasks" / "kda_fwd_b1_t8192_h96.toml").read_text())
        git(repo, "init", "-q")
        git(repo, "add", ".")
        git(repo, "-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "init")
        fr = Frontier.open(repo)
        task = load_task(repo / "tasks" / "t.toml")
        run = fr.start_run(task, agent="builtin")
        bus = EventBus(fr.store, run=lambda: run.id)
        loop = RunLoop(fr, InstantEvaluator(), make_agent("builtin", task), bus, task, run.id, Budget(attempts=n),
                       RunControl())
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            loop.step()
            times.append(time.perf_counter() - t0)
        bus.close()
        members = len(fr.members(task.name))
        fr.close()
    return {"attempts": n, "mean_s": statistics.mean(times), "median_s": statistics.median(times),
            "max_s": max(times), "members": members}


def bench_events(n: int) -> dict:
    from kdatui.engine.daemon import ControlServer
    from kdatui.engine.events import EventBus
    from kdatui.engine.protocol import Client
    from kdatui.engine.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / ".frontier")
        bus = EventBus(store, run=lambda: "bench")

        class Stub:  # the server needs only the bus and a command handler
            def __init__(self):
                self.bus = bus

            def handle(self, cmd, args):
                return {}

        server = ControlServer(Stub(), Path(tmp) / "control.sock")
        server.start()
        got = []
        done = threading.Event()

        def reader():
            with Client(Path(tmp) / "control.sock") as c:
                for ev in c.events(backlog=0):
                    if ev["kind"] == "agent-output":
                        got.append(ev)
                    if len(got) >= n:
                        done.set()
                        return

        th = threading.Thread(target=reader, daemon=True)
        th.start()
        time.sleep(0.3)
        t0 = time.perf_counter()
        for i in range(n):
            bus.emit("agent-output", f"line {i} of a chatty coding agent streaming its work")
        emitted = time.perf_counter() - t0
        done.wait(60)
        delivered = time.perf_counter() - t0
        bus.close()
        stored = store.conn.execute("SELECT count(*) FROM events WHERE kind = 'agent-output'").fetchone()[0]
        server.close()
        store.close()
    return {"events": n, "emit_per_s": n / emitted, "delivered": len(got), "delivered_per_s": len(got) / delivered,
            "stored": stored}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attempts", type=int, default=40)
    ap.add_argument("--events", type=int, default=20000)
    args = ap.parse_args(argv)
    o = bench_overhead(args.attempts)
    print(f"overhead per attempt (builtin agent, worktree, store, admission; evaluation excluded): "
          f"mean {o['mean_s'] * 1e3:.0f} ms, median {o['median_s'] * 1e3:.0f} ms, max {o['max_s'] * 1e3:.0f} ms "
          f"over {o['attempts']} attempts ({o['members']} members at the end); target <= 1000 ms")
    e = bench_events(args.events)
    print(f"events: emitted {e['emit_per_s']:,.0f}/s; a subscribed client received {e['delivered']:,} of "
          f"{e['events']:,} at {e['delivered_per_s']:,.0f}/s; {e['stored']:,} stored; target >= 1,000/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
