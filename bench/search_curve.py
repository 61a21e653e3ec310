"""The curve of a search run: best speedup at the primary shape over time, from the run's
event log (`.frontier/runs/<run>/events.jsonl`, `attempt-evaluated` events).

    python bench/search_curve.py .frontier/runs/<run>/events.jsonl [--shape NAME] [--json FILE]

Prints one line per evaluated attempt (minutes since the run started, family, name,
verdict, speedup and noise at the shape) and marks where the best so far improved; then the
best seed (attempts proposed as seeds: the families' defaults), the best found, and whether
the margin between them exceeds the larger of their two noises.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("events")
    ap.add_argument("--shape", help="shape name (default: the first shape of the first evaluated attempt)")
    ap.add_argument("--json", help="write the curve here")
    args = ap.parse_args(argv)
    started, shape, rows, seed_ids = None, args.shape, [], set()
    with open(args.events) as f:
        for line in f:
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill mid-write
            if e.get("kind") == "run-started" and started is None:
                started = e["ts"]
            if e.get("kind") == "attempt-proposed" and "(seed)" in (e.get("reason") or ""):
                seed_ids.add(e.get("attempt"))
            if e.get("kind") != "attempt-evaluated":
                continue
            shape = shape or next(iter(e.get("shapes") or {}), None)
            cell = (e.get("shapes") or {}).get(shape) or {}
            rows.append({"min": (e["ts"] - (started or e["ts"])) / 60, "attempt": e["attempt"], "family": e.get("family"),
                         "name": e.get("name"), "verdict": cell.get("verdict", e.get("verdict")),
                         "speedup": cell.get("speedup"), "noise": cell.get("noise")})
    if not rows:
        print(f"{args.events}: no evaluated attempts", file=sys.stderr)
        return 1
    best, seeds, seen = None, {}, set()
    print(f"{'min':>6} {'#':>4} {'family':<7} {'name':<40} {'verdict':<7} {'speedup':>8} {'noise':>6}")
    for r in rows:
        ok = r["verdict"] == "PASS" and r["speedup"]
        # a seed: proposed as one (the built-in agent's families' defaults), else the first
        # attempt of its family
        is_seed = r["attempt"] in seed_ids if seed_ids else r["family"] not in seen
        seen.add(r["family"])
        if is_seed and ok and (r["family"] not in seeds or r["speedup"] > seeds[r["family"]]["speedup"]):
            seeds[r["family"]] = r
        mark = ""
        if ok and (best is None or r["speedup"] > best["speedup"]):
            best, mark = r, "  <- best"
        sp = f"{r['speedup']:.3f}x" if r["speedup"] else "-"
        nz = f"{r['noise']:.1%}" if r.get("noise") is not None else "-"
        print(f"{r['min']:6.2f} {r['attempt']:>4} {r['family'] or '-':<7} {(r['name'] or '-')[:40]:<40} "
              f"{r['verdict'] or '-':<7} {sp:>8} {nz:>6}{mark}")
    out = {"shape": shape, "rows": rows, "best": best, "seeds": seeds}
    if seeds and best:
        seed = max(seeds.values(), key=lambda r: r["speedup"])
        margin = best["speedup"] / seed["speedup"] - 1
        noise = max(best.get("noise") or 0, seed.get("noise") or 0)
        out.update(best_seed=seed, margin=margin, noise=noise, beats_noise=margin > noise)
        print(f"\nbest seed {seed['name']} {seed['speedup']:.3f}x; best found {best['name']} {best['speedup']:.3f}x "
              f"at {best['min']:.1f} min: {margin:+.1%} (noise {noise:.1%}) -> "
              f"{'beats the seeds by more than the noise' if margin > noise else 'NOT beyond the noise'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
