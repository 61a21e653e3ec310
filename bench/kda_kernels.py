"""Time the fused, split and wide KDA kernel families against fla-core's chunk_kda, paired in one
process, on every shape of a task (default: tasks/kda_fwd_general.toml).

    python bench/kda_kernels.py                         # every family's defaults, every shape
    python bench/kda_kernels.py --sweep --shapes b1_t8192_h96   # a sweep of configs, one shape
    python bench/kda_kernels.py --configs '{"split": [{"CHUNK": 32}]}'
    python bench/kda_kernels.py --check                 # also check random/saturated/correlated

Prints a table: shape, fla ms, then per family ms and speedup (fla / family). Kernels are
compiled first in parallel worker processes (Triton's cache is shared), so the timed
process only loads them. Needs a CUDA GPU; fla-core optional (without it the baseline is
the torch candidate, and the table says so).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context

import torch

from kdatui.engine import baselines
from kdatui.engine.checks import compare, reference_outputs
from kdatui.engine.probes import make_probe
from kdatui.engine.task import Shape, load_task
from kdatui.engine.timing import paired_timing

FAMILIES = {"fused": "kdatui.kernels.kda.fused", "split": "kdatui.kernels.kda.split",
            "wide": "kdatui.kernels.kda.wide"}

# Configs tried by --sweep (each merged over the family's CONFIG).
SWEEP = {
    "fused": [
        {"CHUNK": 16, "BV": 16}, {"CHUNK": 16, "BV": 32}, {"CHUNK": 16, "BV": 64},
        {"CHUNK": 16, "BV": 32, "INV": "doubling"}, {"CHUNK": 16, "BV": 64, "num_warps": 8},
        {"CHUNK": 32, "BV": 32, "num_warps": 8}, {"CHUNK": 32, "BV": 64, "num_warps": 8},
        {"CHUNK": 64, "BV": 64, "num_warps": 8},
    ],
    "split": [
        {"CHUNK": 64, "BV": 32}, {"CHUNK": 64, "BV": 64}, {"CHUNK": 64, "BV": 32, "prep_warps": 8},
        {"CHUNK": 32, "BV": 32, "prep_warps": 8}, {"CHUNK": 32, "BV": 64, "prep_warps": 8},
        {"CHUNK": 32, "BV": 16, "prep_warps": 8}, {"CHUNK": 16, "BV": 32}, {"CHUNK": 16, "BV": 64},
        {"CHUNK": 64, "BV": 16, "num_stages": 3}, {"CHUNK": 32, "BV": 32, "prep_warps": 8, "num_stages": 3},
    ],
    "wide": [  # the H200 figures of these: bench/RESULTS.md, the wide family's section
        {"CHUNK": 32, "BV": 64}, {"CHUNK": 32}, {"CHUNK": 32, "BV": 32}, {"CHUNK": 64}, {"CHUNK": 64, "BV": 64},
        {"CHUNK": 32, "prep_warps": 8}, {"CHUNK": 32, "prep_warps": 2}, {"CHUNK": 64, "num_stages": 3},
    ],
}


def _family(name):
    return importlib.import_module(FAMILIES[name])


def _fn(family: str, config: dict):
    mod = _family(family)
    return lambda *a, **kw: mod.kda_forward(*a, **kw, config=config)


def _warm(family: str, config: dict) -> tuple[str, str, float, str]:
    """Compile one config in a worker process (B=1, T=1024, H=16 specializes like the
    benchmark shapes: T, H and the chunk count are all multiples of 16)."""
    t0 = time.perf_counter()
    try:
        task = load_task(os.path.join(os.path.dirname(__file__), "..", "tasks", "kda_fwd_general.toml"))
        p = make_probe("random", Shape("warm", 1, 1024, 16, 128, 128), task.contract, "cuda")
        fn = _fn(family, config)
        fn(*p.args(), **p.kwargs())
        kw = p.kwargs()
        kw["initial_state"] = None
        fn(*p.args(), **kw)
        torch.cuda.synchronize()
        return family, json.dumps(config), time.perf_counter() - t0, ""
    except Exception as e:  # reported in the table, never fatal to the sweep
        return family, json.dumps(config), time.perf_counter() - t0, f"{type(e).__name__}: {str(e)[:300]}"


def precompile(jobs: list[tuple[str, dict]], workers: int) -> dict[tuple[str, str], str]:
    errors = {}
    ctx = get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futs = [pool.submit(_warm, f, c) for f, c in jobs]
        for fut in as_completed(futs):
            fam, cfg, secs, err = fut.result()
            print(f"  compiled {fam} {cfg} in {secs:.1f} s {'ERROR ' + err if err else ''}", flush=True)
            if err:
                errors[(fam, cfg)] = err
    return errors


_REFS: dict = {}


def quick_check(fn, shape, task, device) -> str:
    """Three probes (random, saturated, correlated) against the fp64 reference (cached)."""
    worst = 0.0
    for probe in ("random", "saturated", "correlated"):
        p = make_probe(probe, shape, task.contract, device)
        key = (shape.name, probe)
        if key not in _REFS:
            if any(k[0] != shape.name for k in _REFS):
                _REFS.clear()  # one shape's references at a time: they are large
            _REFS[key] = reference_outputs(p)
        ref = _REFS[key]
        o, s = fn(*p.args(), **p.kwargs())
        for x, y, what in ((o, ref[0], "o"), (s, ref[1], "final_state")):
            c = compare(x, y, p.tolerance, f"{probe} {what}")
            if not c.ok:
                return f"FAIL {c.reason}"
            worst = max(worst, c.rms_ratio)
    return f"ok rms<={worst:.1e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default=os.path.join(os.path.dirname(__file__), "..", "tasks", "kda_fwd_general.toml"))
    ap.add_argument("--shapes", help="comma-separated shape names (default: all of the task)")
    ap.add_argument("--families", default="fused,split,wide")
    ap.add_argument("--sweep", action="store_true", help="try the sweep configs of each family")
    ap.add_argument("--configs", help='JSON {"family": [config, ...]} (or a file holding it) instead of the defaults')
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="check each swept kernel on 3 probes first")
    ap.add_argument("--full-check", action="store_true",
                    help="run the whole correctness contract on the chosen configs at every shape")
    ap.add_argument("--profile", action="store_true",
                    help="also time each chosen config with its sequential part removed")
    ap.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1))
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a smoke test of this script through the Triton interpreter (no figures)")
    args = ap.parse_args(argv)

    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("bench/kda_kernels.py needs a CUDA GPU (or --device cpu for a smoke test)", file=sys.stderr)
        return 2
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    task = load_task(args.task)
    shapes = [task.shape(s) for s in args.shapes.split(",")] if args.shapes else list(task.shapes.values())
    families = args.families.split(",")
    if args.configs:
        spec = open(args.configs).read() if os.path.exists(args.configs) else args.configs
        configs = {f: json.loads(spec).get(f, []) for f in families}
    elif args.sweep:
        configs = {f: SWEEP[f] for f in families}
    else:
        configs = {f: [{}] for f in families}
    base = baselines.resolve("fla", device)
    dev_name = torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"
    print(f"device {dev_name}  torch {torch.__version__}  baseline {base.name}: {base.note}", flush=True)

    jobs = [(f, c) for f in families for c in configs[f]]
    t0 = time.perf_counter()
    errors = precompile(jobs, args.workers) if device == "cuda" else {}
    print(f"compiled {len(jobs)} configs in {time.perf_counter() - t0:.0f} s", flush=True)

    cache: dict = {}

    def make_inputs_for(shape):
        def make_inputs(trial):  # fresh inputs per trial, shared by every kernel timed on them
            key = (shape.name, trial)
            if key not in cache:
                if any(k[0] != shape.name for k in cache):
                    cache.clear()
                cache[key] = make_probe("random", shape, task.contract, device, variant=f"bench{trial}")
            return cache[key]
        return make_inputs

    def call(fn):
        return lambda p: fn(*p.args(), **p.kwargs())

    def time_row(shape, fam, cfg, fn, stage, check=False):
        row = {"stage": stage, "shape": shape.name, "family": fam, "config": cfg}
        if (fam, json.dumps(cfg)) in errors:
            row["error"] = errors[(fam, json.dumps(cfg))]
            return row
        try:
            if check:
                row["check"] = quick_check(fn, shape, task, device)
            pt = paired_timing(call(base.fn), call(fn), make_inputs_for(shape), device=device,
                               trials=args.trials, warmup=args.warmup, repeats=args.repeats)
            row.update(base_ms=pt.baseline.median_ms, ms=pt.candidate.median_ms, speedup=pt.speedup,
                       spread=pt.noise)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        print(json.dumps(row), flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
        return row

    rows = []
    first = task.primary if task.primary in shapes else shapes[0]
    chosen = {f: configs[f][0] for f in families}
    if any(len(configs[f]) > 1 for f in families):  # a sweep: time all at one shape, keep the fastest
        for f in families:
            sweep = [time_row(first, f, c, _fn(f, c), "sweep", check=args.check) for c in configs[f]]
            rows += sweep
            ok = [r for r in sweep if "error" not in r and "_stop_after" not in r["config"]
                  and not r.get("check", "ok").startswith("FAIL")]
            if ok:
                chosen[f] = min(ok, key=lambda r: r["ms"])["config"]
        print("chosen:", json.dumps(chosen), flush=True)

    reports = {}
    if args.full_check:
        import tempfile

        from kdatui.engine.checks import run_checks
        from kdatui.kernels.kda import families as fams

        tmp = tempfile.mkdtemp(prefix="kda_candidates_")
        paths = {}
        for f in families:
            paths[f] = os.path.join(tmp, f"{f}.py")
            with open(paths[f], "w") as fh:
                fh.write(fams.render(f, chosen[f]))
        for shape in shapes:
            refs: dict = {}  # every probe's reference computed once, shared by the families
            for f in families:
                t0 = time.perf_counter()
                rep = run_checks(task, shape, paths[f], device=device, references=refs)
                bad = rep.first_problem()
                reports[(f, shape.name)] = rep.verdict if not bad else f"{rep.verdict} {bad.probe}: {bad.reason}"
                print(f"check {f} @ {shape.name}: {reports[(f, shape.name)]} "
                      f"({len(rep.results)} steps, {time.perf_counter() - t0:.1f} s, worst rms "
                      f"{max(r.rms_ratio for r in rep.results):.2e})", flush=True)
            del refs

    for shape in shapes:
        for f in families:
            row = time_row(shape, f, chosen[f], _fn(f, chosen[f]), "final")
            row["full_check"] = reports.get((f, shape.name), "")
            rows.append(row)
    if args.profile:  # a stage removed: what each family's chunk-local work costs alone
        for f in families:
            rows.append(time_row(first, f, {**chosen[f], "_stop_after": "prep"},
                                 _fn(f, {**chosen[f], "_stop_after": "prep"}), "profile"))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev_name, "baseline": base.name, "chosen": chosen,
                       "rows": rows}, f, indent=1)
    print()
    print(f"{'stage':<7} {'shape':<14} {'family':<6} {'config':<44} {base.name + ' ms':>7} {'ms':>7} "
          f"{'speedup':>7} {'spread':>6}  check")
    for r in rows:
        cfg = json.dumps({k: v for k, v in r["config"].items()})[:44]
        head = f"{r['stage']:<7} {r['shape']:<14} {r['family']:<6} {cfg:<44}"
        if "error" in r:
            print(f"{head} ERROR {r['error'][:120]}")
            continue
        print(f"{head} {r['base_ms']:7.3f} {r['ms']:7.3f} {r['speedup']:6.2f}x {r['spread']:6.1%}  "
              f"{r.get('full_check') or r.get('check', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
