"""Where a family's time goes between do_bench in one process and a batch in an executor.

    python bench/timing_diag.py [--shape b1_t8192_h96] [--families split,wide,fused]

For each family at one shape, median ms a call of:
  dobench.probe   do_bench on the "random" probe's inputs (what bench/harness.py compares with)
  dobench.fill    do_bench on a timing set drawn by the judge's fill_timing_set (the data timed)
  loop.fresh      this process, calls back to back on 4 fresh sets, L2 flushed, events around
                  each, outputs copied out and dropped (the runner's batch, without an executor)
  exec.fresh      the same batch in a sandboxed executor (the judge's arena, sets 1..4, lead 0)
  exec.same       the executor, one set 4 times
  exec.noflush    the executor, 4 fresh sets, no L2 flush
and the executor's allocator figures after its batches (device allocations, retries).
--variants adds rows for the same family changed in the executor: `clone` (the candidate
clones its inputs into its own memory first), `prep` (the parallel stage alone, split and wide:
config _stop_after="prep"), `nosandbox` (KDATUI_SANDBOX=none), and `arena` adds a loop in this
process on inputs that are views of a cuMemAlloc'd arena (no IPC).
A diagnostic: it prints a table and touches nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WRAP = '''

# --- appended by bench/timing_diag.py: the allocator's figures on stderr after each call
import sys as _sys
import torch as _torch
_inner = kda_forward
_n = [0]


def kda_forward(*a, **kw):
    out = _inner(*a, **kw)
    _n[0] += 1
    if _n[0] % 8 == 0:
        s = _torch.cuda.memory_stats()
        _sys.stderr.write(f"DIAGMEM calls {_n[0]} device_alloc {s.get('num_device_alloc')} "
                          f"device_free {s.get('num_device_free')} retries {s.get('num_alloc_retries')} "
                          f"reserved {s.get('reserved_bytes.all.current', 0) / 2**30:.2f} GiB\\n")
        _sys.stderr.flush()
    return out
'''


CLONE = '''
_inner2 = kda_forward


def kda_forward(q, k, v, g, beta, A_log, dt_bias, **kw):
    if kw.get("initial_state") is not None:
        kw["initial_state"] = kw["initial_state"].clone()
    return _inner2(q.clone(), k.clone(), v.clone(), g.clone(), beta.clone(), A_log.clone(), dt_bias.clone(), **kw)
'''

PREP = '''
_inner3 = kda_forward


def kda_forward(*a, **kw):
    o, h = _inner3(*a, config={"_stop_after": "prep"}, **kw)
    return o, (h if h is not None else None)
'''


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="b1_t8192_h96")
    ap.add_argument("--families", default="split,wide,fused")
    ap.add_argument("--rounds", type=int, default=5, help="batches per executor figure")
    ap.add_argument("--variants", default="", help="comma-separated: clone, prep, nosandbox, arena")
    args = ap.parse_args(argv)

    import torch
    from triton.testing import do_bench

    from kdatui.engine.arena import Arena
    from kdatui.engine.executor import ExecutorPool, read_candidate
    from kdatui.engine.judge import CandidateSession, fill_timing_set, timing_probe
    from kdatui.engine.probes import make_probe
    from kdatui.engine.task import load_task
    from kdatui.kernels.kda import families

    task = load_task(ROOT / "tasks" / "kda_fwd_general.toml")
    shape = task.shapes[args.shape]
    dims = shape.dims()
    variants = [v for v in args.variants.split(",") if v]
    common = {"init": True, "scale": dims["K"] ** -0.5, "lower_bound": task.contract.lower_bound, "ofs": True}
    work = Path(tempfile.mkdtemp(prefix="kdatui-diag-"))
    pools: dict[str, ExecutorPool] = {}

    def loop(fn, sets) -> float:
        """The runner's batch in this process: median event ms over the rounds."""
        flush = torch.empty(64 << 20, dtype=torch.int32, device="cuda")
        outs = [(torch.empty_like(s.v), torch.empty_like(s.initial_state)) for s in sets]
        meds = []
        for _ in range(args.rounds):
            st = [torch.cuda.Event(enable_timing=True) for _ in sets]
            en = [torch.cuda.Event(enable_timing=True) for _ in sets]
            fn(*sets[0].args(), **sets[0].kwargs())
            for j, s in enumerate(sets):
                flush.zero_()
                st[j].record()
                o, h = fn(*s.args(), **s.kwargs())
                en[j].record()
                outs[j][0].copy_(o)
                outs[j][1].copy_(h)
                del o, h
            torch.cuda.synchronize()
            meds.append(statistics.median(x.elapsed_time(y) for x, y in zip(st, en)))
        return statistics.median(meds)

    def in_process(fam: str) -> dict:
        mod = families.module(fam)
        row = {"family": fam}
        p = make_probe("random", shape, task.contract, "cuda", variant="diag")
        row["dobench.probe"] = do_bench(lambda: mod.kda_forward(*p.args(), **p.kwargs()), warmup=100, rep=500,
                                        return_mode="median")
        f = timing_probe(shape, task.contract, 12345, "cuda")
        row["dobench.fill"] = do_bench(lambda: mod.kda_forward(*f.args(), **f.kwargs()), warmup=100, rep=500,
                                       return_mode="median")
        sets = [timing_probe(shape, task.contract, 777 + i, "cuda") for i in range(4)]
        row["loop.fresh"] = loop(mod.kda_forward, sets)
        if "arena" in variants:  # the same sets as views of a driver-allocated arena, in this process
            from dataclasses import replace as dc_replace

            ar = Arena("cuda", dims, 4)
            views = []
            for i, s in enumerate(sets):
                d = ar.inputs[i]
                for name, t in s.tensors().items():
                    d["init" if name == "initial_state" else name].copy_(t)
                views.append(dc_replace(s, q=d["q"], k=d["k"], v=d["v"], g=d["g"], beta=d["beta"], A_log=d["A_log"],
                                        dt_bias=d["dt_bias"], initial_state=d["init"]))
            torch.cuda.synchronize()
            row["loop.arena"] = loop(mod.kda_forward, views)
            del views
            ar.close()
        del p, f, sets
        torch.cuda.empty_cache()
        return row

    def in_executor(fam: str, extra: str, sandbox_kind: str = "") -> dict:
        row: dict = {}
        key = sandbox_kind or "default"
        if key not in pools:
            env = dict(os.environ)
            if sandbox_kind:
                env["KDATUI_SANDBOX"] = sandbox_kind
                os.environ["KDATUI_SANDBOX"] = sandbox_kind
            (work / key).mkdir()
            pools[key] = ExecutorPool("cuda", work / key, env=env, spare=False)
            os.environ.pop("KDATUI_SANDBOX", None)
        pool = pools[key]
        folder = work / f"cand-{fam}-{len(list(work.iterdir()))}"
        folder.mkdir()
        (folder / "kernel.py").write_text(Path(families.FAMILIES[fam]).read_text() + WRAP + extra)
        files, module = read_candidate(folder)
        sess = CandidateSession(pool.take(), "cuda", files, module, timeout_s=600)
        row["sandbox"] = pool.info.kind
        problem = sess.load_problem()
        if problem:
            row["problem"] = problem
            return row
        sess.prepare(dims, 5)
        for i in range(5):
            fill_timing_set(sess.arena.inputs[i], 99 + i, "cuda")
        sess.arena.settle()
        sess.request({"op": "warmup", "set": 0, "n": 3, **common}, "warm")
        for label, sets_, fl in (("exec.fresh", [1, 2, 3, 4], True), ("exec.same", [1, 1, 1, 1], True),
                                 ("exec.noflush", [1, 2, 3, 4], False)):
            meds, walls = [], []
            for _ in range(args.rounds):
                ans, wall = sess.request({"op": "batch", "sets": sets_, "lead": 0, "flush": fl, **common}, "timed")
                meds.append(statistics.median(ans["ms"]))
                walls.append(wall / len(sets_))
            row[label] = statistics.median(meds)
            row[label + ".wall"] = statistics.median(walls)
        ans, _ = sess.request({"op": "host_cost", "set": 0, "n": 3, **common}, "host")
        row["host"] = statistics.median(ans["ms"])
        mem = [ln for ln in sess.ex.log_tail().splitlines() if "DIAGMEM" in ln]
        row["mem"] = mem[-1].split("DIAGMEM ", 1)[1] if mem else "(no figures)"
        sess.close()
        pool.retire(sess.ex)
        return row

    rows = []
    for fam in [f for f in args.families.split(",") if f]:
        base = in_process(fam)
        base.update(in_executor(fam, ""))
        rows.append(base)
        print(f"DIAG {base}", flush=True)
        for v, extra, kind in (("clone", CLONE, ""), ("prep", PREP, ""), ("nosandbox", "", "none")):
            if v not in variants or (v == "prep" and fam == "fused"):
                continue
            r = {"family": f"{fam}+{v}", **in_executor(fam, extra, kind)}
            rows.append(r)
            print(f"DIAG {r}", flush=True)
    for pool in pools.values():
        pool.close()

    keys = ["dobench.probe", "dobench.fill", "loop.fresh", "loop.arena", "exec.fresh", "exec.same", "exec.noflush"]
    print(f"\n{shape.name} on {torch.cuda.get_device_name()}: ms a call (exec.*: events; wall per call in brackets)")
    print(f"{'row':<15}" + "".join(f"{k:>15}" for k in keys) + f"{'host':>7}")
    for r in rows:
        cells = []
        for k in keys:
            v, w = r.get(k), r.get(k + ".wall")
            if v is None:
                cells.append(f"{'-':>15}")
            else:
                cells.append(f"{v:>8.3f}" + (f" [{w:5.2f}]" if w is not None else "       "))
        print(f"{r['family']:<15}" + "".join(cells) + f"{r.get('host', 0):>7.3f}")
        print(f"{'':<15}sandbox {r.get('sandbox')}; allocator: {r.get('mem')}" +
              (f"; problem: {r['problem']}" if r.get("problem") else ""))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FLA_FLASH_KDA", "0")
    sys.exit(main())
