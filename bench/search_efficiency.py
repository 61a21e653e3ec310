"""How good the search is, as one run measures it: from detuned seeds (the task file's
`search.seed_configs`), how soon the first attempt is evaluated, how many attempts an hour,
and how long until the best reaches 97% of the families' current defaults.

    python bench/search_efficiency.py                          # primary task on a GPU, 15 min
    python bench/search_efficiency.py --budget 10m --json out.json
    python bench/search_efficiency.py --task kda_fwd_cpu --budget 8attempts --no-target   # CPU smoke

What it does, as a user would: a fresh git repo in a temporary folder, the task copied into
it with the seeds detuned (default: split and wide as they were before their last tuning,
fused at GROUP 1), `kdatui run TASK --budget B --detach` there, its events followed until
the budget is spent, then the figures from the run's own event log. The target is the
families' defaults evaluated first by the same evaluator (`--no-target` skips it); the
figure is how long the search takes to win back what the last hand tuning found.
Progress goes to stderr, one line per evaluated attempt; the table and JSON last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DETUNED = {  # the configurations before the tuning recorded in bench/RESULTS.md
    "split": {"prep_warps": 4, "num_stages": 2},
    "fused": {"GROUP": 1},
    "wide": {"prep_maxnreg": 0, "WALK_TMA": False, "num_stages": 2},
}
TARGET_FRACTION = 0.97


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def kdatui(repo: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "kdatui", *args], cwd=repo, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"kdatui {' '.join(args)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-800:]}")
    return r


def default_speedups(task, families: list[str]) -> dict[str, float | None]:
    """Each family's default at the primary shape, through the evaluator a run uses."""
    from kdatui.engine.evaluator import make_evaluator
    from kdatui.kernels.kda.families import FAMILIES

    out: dict[str, float | None] = {}
    with make_evaluator("local") as ev:
        for f in families:
            [e] = ev.evaluate(task, str(FAMILIES[f]), [task.primary_shape])
            out[f] = e.speedup if e.verdict == "PASS" else None
            log(f"target: {f} default {e.verdict} " + (f"{e.speedup:.3f}x" if e.speedup else e.reason[:120]))
    return out


def figures(events: list[dict], primary: str, target: float | None) -> dict:
    started = next((e["ts"] for e in events if e.get("kind") == "run-started"), None)
    evaluated = [e for e in events if e.get("kind") == "attempt-evaluated"]
    first = evaluated[0]["ts"] - started if evaluated and started is not None else None
    end = max((e["ts"] for e in events), default=started)
    span_h = (end - started) / 3600 if started is not None and end > started else 0.0
    best, curve, reached = 0.0, [], None
    for e in evaluated:
        cell = (e.get("shapes") or {}).get(primary) or {}
        sp = cell.get("speedup") if cell.get("verdict") == "PASS" else None
        if sp and sp > best:
            best = sp
            curve.append({"s": round(e["ts"] - started, 1), "attempt": e.get("attempt"), "name": e.get("name"),
                          "speedup": sp})
            if target and reached is None and best >= target:
                reached = e["ts"] - started
    verdicts: dict[str, int] = {}
    for e in evaluated:
        verdicts[e.get("verdict") or "?"] = verdicts.get(e.get("verdict") or "?", 0) + 1
    return {"first_evaluated_s": first, "evaluated": len(evaluated), "run_s": span_h * 3600,
            "attempts_per_hour": len(evaluated) / span_h if span_h else None, "verdicts": verdicts,
            "best": best or None, "target": target, "target_reached_s": reached, "best_curve": curve}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default=None, help="task name or file (default: the primary task on a GPU, "
                                                 "kda_fwd_cpu without one)")
    ap.add_argument("--budget", default="15m", help="the run's budget (15m, 40attempts, ...)")
    ap.add_argument("--seeds", default="split,fused,wide", help="families to search, comma-separated")
    ap.add_argument("--detune", default=None, help="JSON {family: {tunable: value}} (default: the pre-tuning configs)")
    ap.add_argument("--no-target", action="store_true", help="skip evaluating the defaults (no 97%% figure)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary repo (its .frontier/ has the run)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)

    from kdatui.common import load_task_ref
    from kdatui.engine.task import load_task

    if args.task is None:
        import torch

        args.task = "kda_fwd_b1_t8192_h96" if torch.cuda.is_available() else "kda_fwd_cpu"
    base = load_task_ref(args.task)
    seeds = [s for s in args.seeds.split(",") if s]
    detune = json.loads(args.detune) if args.detune else {f: c for f, c in DETUNED.items() if f in seeds}
    task = replace(base, name=f"{base.name}_search", path=None,
                   search=replace(base.search, seeds=seeds, seed_configs=detune))
    target = None
    if not args.no_target:
        speeds = default_speedups(task, seeds)
        known = [v for v in speeds.values() if v]
        target = TARGET_FRACTION * max(known) if known else None

    tmp = Path(tempfile.mkdtemp(prefix="kdatui-search-"))
    repo = tmp / "repo"
    repo.mkdir()
    for cmd in (["init", "-q", "-b", "main"], ["config", "user.name", "search bench"],
                ["config", "user.email", "search@bench.invalid"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    task_file = task.save(repo / f"{task.name}.toml")
    load_task(task_file)  # what the engine will read
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "the task"], cwd=repo, check=True)
    t0 = time.time()
    out = kdatui(repo, "run", str(task_file), "--budget", args.budget, "--detach", "--idle-stop", "30s")
    log(out.stdout.strip())
    run_id = out.stdout.split()[1]
    events_path = repo / ".frontier" / "runs" / run_id / "events.jsonl"
    seen, events, done = 0, [], False
    while not done:
        time.sleep(2.0)
        try:
            lines = events_path.read_text().splitlines()
        except FileNotFoundError:
            continue
        for line in lines[seen:]:
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                break  # a line still being written: read it next time
            seen += 1
            events.append(e)
            if e.get("kind") == "attempt-evaluated":
                cell = (e.get("shapes") or {}).get(task.primary_shape) or {}
                sp = cell.get("speedup")
                log(f"{(e['ts'] - events[0]['ts']) / 60:6.1f} min  #{e.get('attempt')} {e.get('name')}: "
                    f"{e.get('verdict')}" + (f" {sp:.3f}x" if sp else ""))
            if e.get("kind") == "run-stopped" or (
                    e.get("kind") == "budget" and (e.get("text") or "").startswith("run finished")):
                done = True
        st = subprocess.run([sys.executable, "-m", "kdatui", "status", "--json"], cwd=repo, capture_output=True,
                            text=True)
        if st.returncode == 0:
            try:
                done = done or json.loads(st.stdout).get("state") == "finished"
            except json.JSONDecodeError:
                pass
        elif time.time() - t0 > 60:
            done = True  # the engine has gone (its idle stop, or a crash: the event log says which)
    subprocess.run([sys.executable, "-m", "kdatui", "stop"], cwd=repo, capture_output=True, text=True)
    events = [json.loads(line) for line in events_path.read_text().splitlines() if line.strip().startswith("{")]
    fig = {"task": base.name, "budget": args.budget, "seeds": seeds, "detuned": detune,
           **figures(events, task.primary_shape, target)}
    if args.keep:
        fig["repo"] = str(repo)
        log(f"kept: {repo}")
    else:
        subprocess.run(["rm", "-rf", str(tmp)])
    print(f"task {fig['task']} (budget {fig['budget']}; seeds {', '.join(seeds)}, detuned {json.dumps(detune)})")
    first = fig["first_evaluated_s"]
    print(f"  first evaluated attempt  {first:.1f} s after the run started" if first is not None
          else "  first evaluated attempt  none")
    print(f"  attempts evaluated       {fig['evaluated']} in {fig['run_s'] / 60:.1f} min"
          + (f" ({fig['attempts_per_hour']:.0f} an hour)" if fig["attempts_per_hour"] else "")
          + f"; verdicts {fig['verdicts']}")
    if target:
        reached = fig["target_reached_s"]
        print(f"  best {fig['best'] or 0:.3f}x; target {target:.3f}x (97% of the best default) "
              + (f"reached after {reached / 60:.1f} min" if reached is not None else "not reached"))
    else:
        print(f"  best {fig['best'] or 0:.3f}x (no target: --no-target)")
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
