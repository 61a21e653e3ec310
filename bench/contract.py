"""The engine's whole contract (kdatui.engine.checks.run_checks: every probe, the holdouts,
input dependence) for variants of a family, on the GPU, one line per probe: where a variant
fails and by how much, before it is made a default.

    python bench/contract.py wide '[{}, {"INV_DOT": "ieee"}]' --shapes b2_t4096_h96,b1_t8192_h96
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from kdatui.engine.checks import run_checks
from kdatui.engine.task import load_task
from kdatui.kernels.kda import families

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("family", choices=sorted(families.FAMILIES))
    ap.add_argument("configs", nargs="?", default="[{}]", help="JSON list of configs over the family's CONFIG")
    ap.add_argument("--task", default=str(ROOT / "tasks" / "kda_fwd_general.toml"))
    ap.add_argument("--shapes", default="", help="shape names of the task, comma-separated (default: all)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = ap.parse_args(argv)
    task = load_task(Path(args.task))
    names = args.shapes.split(",") if args.shapes else list(task.shapes)
    unknown = [n for n in names if n not in task.shapes]
    if unknown:
        print(f"bench/contract.py: {args.task}: no shape {', '.join(unknown)} (has {', '.join(task.shapes)})",
              file=sys.stderr)
        return 2
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, config in enumerate(json.loads(args.configs)):
            path = Path(tmp) / f"v{i}" / "kernel.py"
            path.parent.mkdir()
            path.write_text(families.render(args.family, config))
            for name in names:
                rep = run_checks(task, task.shapes[name], str(path), device=args.device)
                bad += not rep.passed
                print(f"{args.family} {json.dumps(config)} {name}: {rep.verdict} ({rep.seconds:.1f} s)", flush=True)
                for r in rep.results:
                    print(f"    {r.probe:<24} {r.verdict:<5} rms {r.rms_ratio:.3g} max_rel {r.max_rel:.3g} "
                          f"{r.output} {r.reason[:160]}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
