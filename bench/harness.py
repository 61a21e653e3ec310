"""Measure the evaluator itself on a GPU (issue 4's acceptance figures).

    python bench/harness.py --json harness.json [--compare kda_kernels.json]

Parts, in this order (each one's failure is printed and the others still run):
  fault    a candidate whose Triton kernel stores to a wild address (CUDA illegal memory
           access) must give ERROR; kernels/kda/split.py evaluated right after must PASS
           (the first full evaluation: it also compiles split's kernels)
  cost     one full, warm evaluation of split at the primary shape (every check, paired
           timing, post-timing check; worker up, kernels compiled, references cached in the
           worker): seconds for checks vs timing (target <= 60 s), beside the cold figures
  noise    split against itself (the task's baseline set to the same file), 5 evaluations:
           each speedup and spread (target: speedup within 1.00 +- 0.01, spread <= 2%)
  compare  (with --compare) fused and split against fla at the primary shape, as the
           evaluator reports them; with FILE (the --json output of bench/kda_kernels.py)
           the configs that script timed last, its speedups, and the difference (target <= 3%)
  dobench  every family against fla at --shapes (default: the primary shape and two general
           ones), the harness's speedup (judge and sandboxed executors) beside
           triton.testing.do_bench's ratio measured in this process (target within 3%), and
           each side's host cost of one call
  contract the whole contract, no timing, for each family at every shape of the general task
           (issue 12: the honest candidates pass through the judge)

noise and compare run a reduced contract (preflight only; the probes are what cost
measures) so the part measures timing, not checks. Needs a CUDA GPU. Prints a short
table at the end; --json writes every figure and evaluation record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks" / "kda_fwd_b1_t8192_h96.toml"
SPLIT = ROOT / "kernels" / "kda" / "split.py"
FUSED = ROOT / "kernels" / "kda" / "fused.py"
ILLEGAL = ROOT / "tests" / "candidates_gpu" / "illegal_address.py"
NOISE_RUNS = 5
NOISE_SPEEDUP_TOL, NOISE_SPREAD_MAX = 0.01, 0.02
COST_MAX_S = 1.92  # issue 12: a warm evaluation within +20% of 1.6 s
TIMING_MAX_S = 1.0  # issue 13: its timing part
COMPARE_TOL = 0.03


def log(msg: str) -> None:
    print(msg, flush=True)


def show_events(tag: str):
    """Print what matters while it runs: workers replaced, results."""

    def on_event(e: dict) -> None:
        if e.get("event") == "worker":
            log(f"  [{tag}] worker replaced: {e.get('why')}")
        elif e.get("event") == "progress" and e.get("phase") == "starting":
            log(f"  [{tag}] {e.get('label')}")

    return on_event


def summary(ev) -> dict:
    d = {"verdict": ev.verdict, "reason": ev.reason, "baseline": ev.baseline, "device": ev.device,
         "seconds": {k: round(v, 2) for k, v in ev.seconds.items()}}
    if ev.timing:
        d.update(base_ms=ev.baseline_ms, cand_ms=ev.candidate_ms, speedup=ev.speedup,
                 spread=ev.timing.noise, timer=ev.timing.timer)
    return d


def timing_only(task, baseline: str | None = None):
    """The task with the contract cut to static + preflight: for parts that measure timing."""
    contract = replace(task.contract, probes=[], holdout=0, input_dependence=False)
    bench = task.bench if baseline is None else replace(task.bench, baseline=baseline)
    return replace(task, contract=contract, bench=bench)


def evaluate(evaluator, task, candidate, tag: str):
    t0 = time.perf_counter()
    [ev] = evaluator.evaluate(task, str(candidate), [task.primary_shape], progress=show_events(tag))
    wall = time.perf_counter() - t0
    log(f"  [{tag}] {ev.verdict} {ev.reason}  ({wall:.1f} s wall; checks {ev.seconds.get('checks', 0):.2f} s, "
        f"timing {ev.seconds.get('timing', 0):.2f} s)"
        + (f"  speedup {ev.speedup:.4f} spread {ev.timing.noise:.2%} vs {ev.baseline}" if ev.timing else ""))
    return ev, wall


def part_fault(evaluator, task) -> tuple[dict, str]:
    bad, bad_wall = evaluate(evaluator, task, ILLEGAL, "illegal_address")
    good, good_wall = evaluate(evaluator, task, SPLIT, "split (cold)")
    ok = bad.verdict == "ERROR" and good.verdict == "PASS"
    res = {"ok": ok, "illegal_address": summary(bad), "illegal_address_wall_s": bad_wall,
           "split_after": summary(good), "split_after_wall_s": good_wall,
           "evaluations": [bad.to_dict(), good.to_dict()]}
    line = f"illegal address -> {bad.verdict} ({bad.reason[:70]}); split next -> {good.verdict}"
    return res, line


def part_cost(evaluator, task, cold: dict | None = None) -> tuple[dict, str]:
    """Warm: the worker is up, split is compiled and (after part fault) every probe's
    reference is cached in the worker, as in the search loop's steady state."""
    ev, wall = evaluate(evaluator, task, SPLIT, "split (warm)")
    per_check = {r.probe: round(r.seconds, 2) for r in ev.checks.results} if ev.checks else {}
    log("  per check (s): " + ", ".join(f"{k} {v}" for k, v in per_check.items()))
    s = ev.seconds
    log("  timing by part (s): " + ", ".join(f"{k.split('.', 1)[1]} {v:.3f}" for k, v in s.items() if k.startswith("timing.")))
    ok = ev.verdict == "PASS" and s.get("total", 1e9) <= COST_MAX_S and s.get("timing", 1e9) <= TIMING_MAX_S
    res = {"ok": ok, "wall_s": wall, "seconds": s, "per_check_s": per_check, "evaluation": ev.to_dict(),
           "cold_seconds": cold}
    line = (f"{ev.verdict}: warm total {s.get('total', 0):.1f} s = checks {s.get('checks', 0):.1f} s + timing "
            f"{s.get('timing', 0):.2f} s (wall {wall:.1f} s; targets <= {COST_MAX_S:g} s, timing <= {TIMING_MAX_S:g} s)")
    if cold:
        line += (f"; cold (fresh worker, compile, references) {cold.get('total', 0):.1f} s = "
                 f"{cold.get('checks', 0):.1f} + {cold.get('timing', 0):.1f}")
    return res, line


def part_noise(evaluator, task) -> tuple[dict, str]:
    same = timing_only(task, baseline=str(SPLIT))
    runs = []
    for i in range(NOISE_RUNS):
        ev, _ = evaluate(evaluator, same, SPLIT, f"noise {i + 1}/{NOISE_RUNS}")
        runs.append(summary(ev))
    speedups = [r.get("speedup") for r in runs]
    spreads = [r.get("spread") for r in runs]
    ok = all(s is not None and abs(s - 1) <= NOISE_SPEEDUP_TOL for s in speedups) and \
        all(s is not None and s <= NOISE_SPREAD_MAX for s in spreads)
    res = {"ok": ok, "runs": runs, "speedups": speedups, "spreads": spreads}
    line = ("speedups " + " ".join("-" if s is None else f"{s:.4f}" for s in speedups) + "; spreads "
            + " ".join("-" if s is None else f"{s:.2%}" for s in spreads)
            + f" (target 1 +- {NOISE_SPEEDUP_TOL:g}, spread <= {NOISE_SPREAD_MAX:.0%})")
    return res, line


def part_compare(evaluator, task, path: str) -> tuple[dict, str]:
    """fused and split vs fla through the evaluator; with `path` (bench/kda_kernels.py --json
    output) the same configs that script timed last (its "final" rows) and its speedups."""
    import tempfile

    from kdatui.kernels.kda import families

    theirs, configs = {}, {}
    if path:
        for r in json.loads(Path(path).read_text())["rows"]:
            if r.get("shape") == task.primary_shape and r.get("stage", "final") == "final" and "speedup" in r:
                theirs[r["family"]], configs[r["family"]] = r["speedup"], r.get("config") or {}
    timed = timing_only(task, baseline="fla")
    tmp = Path(tempfile.mkdtemp(prefix="kdatui-harness-"))
    ours = {}
    for fam, default in (("fused", FUSED), ("split", SPLIT)):
        cand = default
        if configs.get(fam):  # the config kda_kernels.py chose, as a self-contained candidate
            cand = tmp / f"{fam}.py"
            cand.write_text(families.render(fam, configs[fam]))
        ev, _ = evaluate(evaluator, timed, cand, f"{fam} vs fla")
        ours[fam] = {**summary(ev), "config": configs.get(fam, {})}
    res = {"evaluator": ours, "kda_kernels": theirs, "diff": {}}
    parts = []
    for fam in ("fused", "split"):
        mine = ours[fam].get("speedup")
        ref = theirs.get(fam)
        if mine is not None and ref:
            res["diff"][fam] = mine / ref - 1
        parts.append(f"{fam} {'-' if mine is None else f'{mine:.3f}x'}"
                     + (f" vs {ref:.3f}x ({res['diff'][fam]:+.1%})" if fam in res["diff"] else ""))
    res["ok"] = bool(res["diff"]) and all(abs(d) <= COMPARE_TOL for d in res["diff"].values())
    base = ours["split"].get("baseline", "?")
    if base != "fla":
        parts.append(f"(baseline is {base}, not fla: fla-core is not importable)")
    return res, "; ".join(parts) + (f" (target within {COMPARE_TOL:.0%})" if theirs else "")


FAMILIES = ["fused", "split"]


def _families():
    from kdatui.kernels.kda import families

    return {f: families.FAMILIES[f] for f in FAMILIES}


def part_dobench(evaluator, task, shapes: list[str]) -> tuple[dict, str]:
    import torch
    from triton.testing import do_bench

    from kdatui.engine import baselines
    from kdatui.engine.probes import make_probe
    from kdatui.engine.task import load_task
    from kdatui.kernels.kda import families

    general = load_task(ROOT / "tasks" / "kda_fwd_general.toml")
    res: dict = {"rows": []}
    worst = 0.0
    parts = []
    for name in shapes:
        shape = general.shapes.get(name) or task.shapes[name]
        t = replace(timing_only(task, baseline="fla"), shapes={shape.name: shape}, primary_shape=shape.name)
        p = make_probe("random", shape, task.contract, "cuda", variant="dobench")
        args, kw = p.args(), p.kwargs()
        fla_ms = do_bench(lambda: baselines.fla_kda_forward(*args, **kw), warmup=200, rep=1000, return_mode="median")
        for fam, path in _families().items():
            mod = families.module(fam)
            ms = do_bench(lambda: mod.kda_forward(*args, **kw), warmup=200, rep=1000, return_mode="median")
            fla_ms2 = do_bench(lambda: baselines.fla_kda_forward(*args, **kw), warmup=100, rep=500, return_mode="median")
            ratio = ((fla_ms + fla_ms2) / 2) / ms
            ev, _ = evaluate(evaluator, t, path, f"{fam} @ {shape.name}")
            row = {"shape": shape.name, "family": fam, "do_bench_fla_ms": (fla_ms + fla_ms2) / 2, "do_bench_ms": ms,
                   "do_bench_ratio": ratio, **summary(ev)}
            if ev.timing:
                row.update(harness_ratio=ev.speedup, diff=ev.speedup / ratio - 1,
                           host_ms={"fla": ev.timing.baseline.host_ms, fam: ev.timing.candidate.host_ms},
                           timing_s=ev.seconds.get("timing"), flags=ev.timing.flags, suspect=ev.timing.suspect)
                worst = max(worst, abs(row["diff"]))
                parts.append(f"{shape.name} {fam} {ev.speedup:.3f}x vs do_bench {ratio:.3f}x ({row['diff']:+.1%})")
            else:
                parts.append(f"{shape.name} {fam} {ev.verdict}")
            log(f"  {row}")
            res["rows"].append(row)
        del p, args, kw
        torch.cuda.empty_cache()
    res["ok"] = bool(parts) and worst <= COMPARE_TOL
    res["worst_diff"] = worst
    return res, "; ".join(parts)


def part_contract(evaluator, task) -> tuple[dict, str]:
    from kdatui.engine.task import load_task

    general = load_task(ROOT / "tasks" / "kda_fwd_general.toml")
    res: dict = {"rows": []}
    bad = []
    for shape in general.shapes.values():
        for fam, path in _families().items():
            t0 = time.perf_counter()
            [ev] = evaluator.evaluate(general, str(path), [shape.name], timing=False)
            worst = max((r.rms_ratio for r in ev.checks.results[1:]), default=None) if ev.checks else None
            row = {"shape": shape.name, "family": fam, "verdict": ev.verdict, "reason": ev.reason,
                   "worst_rms": worst, "seconds": round(time.perf_counter() - t0, 1)}
            log(f"  {row}")
            res["rows"].append(row)
            if ev.verdict != "PASS":
                bad.append(f"{fam}@{shape.name}: {ev.reason[:80]}")
    res["ok"] = not bad
    n = len(res["rows"])
    return res, (f"{n - len(bad)}/{n} PASS the whole contract" + (": " + "; ".join(bad) if bad else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write every figure and evaluation record to this file")
    ap.add_argument("--compare", nargs="?", const="", metavar="FILE",
                    help="also time fused and split vs fla; FILE: bench/kda_kernels.py --json output to compare")
    ap.add_argument("--parts", default="fault,cost,noise,compare", help="which parts to run (comma-separated)")
    ap.add_argument("--timeout", type=float, default=300.0, help="time limit per evaluation, seconds")
    ap.add_argument("--task", default=str(TASK), help="task file (its primary shape is used)")
    ap.add_argument("--shapes", default="b1_t8192_h96,b1_t8192_h64,b2_t4096_h96",
                    help="shapes of the dobench part (names in the general task)")
    ap.add_argument("--families", default=",".join(FAMILIES), help="kernel families of dobench and contract")
    ap.add_argument("--allow-cpu", action="store_true",
                    help="run without a GPU (a smoke test of this script, e.g. with tasks/kda_fwd_cpu.toml)")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print("bench/harness.py needs a CUDA GPU", file=sys.stderr)
        return 2
    from kdatui.engine.evaluator import LocalEvaluator, visible_devices
    from kdatui.engine.task import load_task

    task = load_task(args.task)
    FAMILIES[:] = [f for f in args.families.split(",") if f]
    wanted = [p for p in args.parts.split(",") if p]
    if args.compare is None and "compare" in wanted:
        wanted.remove("compare")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    results: dict = {"device": device, "torch": torch.__version__, "task": task.name,
                     "shape": task.primary_shape, "parts": {}, "errors": {}}
    lines: dict[str, str] = {}
    t_all = time.perf_counter()
    # One worker on one GPU: the parts measure a warm worker, as the search loop would use it.
    with LocalEvaluator(devices=visible_devices()[:1], timeout_s=args.timeout) as evaluator:
        log(f"harness: {results['device']}, task {task.name} @ {task.primary_shape}, parts {','.join(wanted)}")
        for part in wanted:
            log(f"== {part}")
            t0 = time.perf_counter()
            try:
                if part == "fault":
                    res, line = part_fault(evaluator, task)
                elif part == "cost":
                    cold = results["parts"].get("fault", {}).get("split_after", {}).get("seconds")
                    res, line = part_cost(evaluator, task, cold)
                elif part == "noise":
                    res, line = part_noise(evaluator, task)
                elif part == "compare":
                    res, line = part_compare(evaluator, task, args.compare)
                elif part == "dobench":
                    res, line = part_dobench(evaluator, task, [x for x in args.shapes.split(",") if x])
                elif part == "contract":
                    res, line = part_contract(evaluator, task)
                else:
                    raise ValueError(f"unknown part {part!r}")
                res["part_wall_s"] = time.perf_counter() - t0
                results["parts"][part] = res
                lines[part] = ("ok   " if res.get("ok") else "FAIL ") + line
            except Exception as e:  # one part's failure must not cost the others
                tb = traceback.format_exc()
                log(tb)
                results["errors"][part] = tb
                lines[part] = f"ERROR {type(e).__name__}: {str(e)[:150]}"
            log(f"   {lines[part]}  ({time.perf_counter() - t0:.0f} s)")
    results["wall_s"] = time.perf_counter() - t_all

    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    print()
    print(f"evaluator harness on {results['device']} (torch {results['torch']}), {task.name} @ "
          f"{task.primary_shape}, {results['wall_s']:.0f} s")
    for part, line in lines.items():
        print(f"  {part:<8} {line}")
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    os.environ.setdefault("FLA_FLASH_KDA", "0")
    sys.exit(main())
