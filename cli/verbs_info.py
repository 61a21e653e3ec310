"""`kdatui curve` (the search's curve, for export) and `kdatui completion bash|zsh|fish`;
`kdatui --version` (with torch, Triton, fla and the device) is built here too."""

from __future__ import annotations

import argparse
import json
import sys

from .common import EXIT_OK, UserError, rel_path


# --------------------------------------------------------------------------- curve

def cmd_curve(args) -> int:
    from pathlib import Path

    from kdatui.engine.curve import curve_of, save_png
    from kdatui.engine.frontier import Frontier
    from kdatui.engine.store import FrontierError

    try:
        with Frontier.open(Path.cwd(), recover=False) as fr:
            task = args.task or _latest_task(fr)
            if task is None:
                raise UserError("no run in this repo yet; `kdatui run TASK` starts one")
            if fr.store.task(task) is None:
                raise UserError(f"no task {task!r} in this repo's store; tasks: "
                                f"{', '.join(sorted({r.task for r in fr.store.runs()})) or 'none'}")
            curve = curve_of(fr.store, task)
    except FrontierError as e:
        raise UserError(str(e)) from None
    if args.png:
        try:
            save_png(curve, args.png)
        except ImportError:
            raise UserError("--png needs matplotlib: pip install 'kdatui[plot]' (or matplotlib)") from None
        print(f"wrote {rel_path(Path(args.png))}: {len(curve.points)} attempts of {task}", file=sys.stderr)
        if not (args.json or args.csv):
            return EXIT_OK
    if args.json:
        print(json.dumps(curve.to_dict(), indent=2))
    elif args.csv:
        sys.stdout.write(curve.csv())
    else:
        _print_curve(curve)
    return EXIT_OK


def _latest_task(fr) -> str | None:
    runs = [r for r in fr.store.runs() if r.agent != "generalize"]
    return max(runs, key=lambda r: r.created).task if runs else None


def _print_curve(curve) -> None:
    print(f"{curve.task}: speedup on {curve.shape} per attempt (* a new best)"
          + ("; CPU: interpreter timings are not performance figures" if curve.device.startswith("cpu") else ""))
    print(f"{'min':>7} {'#':>5} {'kind':<7} {'speedup':>8} {'best':>8}  name")
    best = None
    for p in curve.points:
        if p.best:
            best = p.speedup
        sp = "-" if p.speedup is None else f"{p.speedup:.3f}x"
        b = "-" if best is None else f"{best:.3f}x"
        print(f"{p.t / 60:7.1f} {p.attempt:5d} {p.kind:<7} {sp:>8} {b:>8}{' *' if p.best else '  '} {p.name}")
    if not curve.points:
        print("  (no evaluated attempt yet)")


# --------------------------------------------------------------------------- completion

def fish_completion(parser: argparse.ArgumentParser, prog: str = "kdatui") -> str:
    """A fish completion script from the parser (shtab writes bash, zsh and tcsh)."""
    def esc(s: str | None) -> str:
        return (s or "").replace("'", "\\'").split("\n")[0][:80]

    lines = [f"# fish completion for {prog} (kdatui completion fish > ~/.config/fish/completions/{prog}.fish)",
             f"complete -c {prog} -f"]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    lines.append(f"complete -c {prog} -n '__fish_use_subcommand' -l version -d 'versions and the device'")
    for verb, p in sub.choices.items():
        lines.append(f"complete -c {prog} -n '__fish_use_subcommand' -a {verb} -d '{esc(helps.get(verb))}'")
        cond = f"__fish_seen_subcommand_from {verb}"
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                inner = {c.dest: c.help for c in a._choices_actions}
                for name in a.choices:
                    lines.append(f"complete -c {prog} -n '{cond}; and not __fish_seen_subcommand_from "
                                 f"{' '.join(a.choices)}' -a {name} -d '{esc(inner.get(name))}'")
                continue
            for opt in a.option_strings:
                if opt.startswith("--") and opt != "--help":
                    files = "" if a.nargs == 0 or a.const is not None else " -r -F"
                    lines.append(f"complete -c {prog} -n '{cond}' -l {opt[2:]}{files} -d '{esc(a.help)}'")
            if a.dest == "shell":
                lines.append(f"complete -c {prog} -n '{cond}' -a 'bash zsh fish tcsh'")
    return "\n".join(lines) + "\n"


def cmd_completion(args) -> int:
    from .cli import build_parser

    parser = build_parser()
    if args.shell == "fish":
        sys.stdout.write(fish_completion(parser))
        return EXIT_OK
    import shtab

    sys.stdout.write(shtab.complete(parser, shell=args.shell))
    return EXIT_OK


# --------------------------------------------------------------------------- version

def version_text(kdatui_version: str) -> str:
    """kdatui's version, and what it runs on: torch, Triton, fla, the device."""
    from kdatui.engine.baselines import package_version as v

    lines = [f"kdatui {kdatui_version}", f"torch   {v('torch')}", f"triton  {v('triton')}",
             f"fla     {v('fla-core')}" + ("" if v("fla-core") != "not installed" else
                                           " (pip install 'kdatui[baseline]' to time against fla's chunk_kda)")]
    try:
        import torch

        if torch.cuda.is_available():
            names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
            device = f"{torch.cuda.device_count()} x {', '.join(names)} (CUDA {torch.version.cuda})"
        else:
            device = "cpu (no GPU: Triton kernels run through the Triton interpreter)"
    except Exception as e:  # a broken torch install still prints the versions
        device = f"unknown ({type(e).__name__}: {e})"
    lines.append(f"device  {device}")
    return "\n".join(lines)


class VersionAction(argparse.Action):
    def __init__(self, option_strings, version: str, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print kdatui's version, torch, Triton, fla and the device, and exit"):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)
        self.version = version

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text(self.version))
        parser.exit()


def register(sub) -> None:
    s = sub.add_parser("curve", help="the search's curve: best speedup on the primary shape, every attempt")
    s.add_argument("--task", help="the task (default: the latest run's)")
    out = s.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the curve as JSON")
    out.add_argument("--csv", action="store_true", help="print one CSV row per attempt")
    s.add_argument("--png", metavar="FILE", help="draw it into a PNG (needs matplotlib: kdatui[plot])")
    s.set_defaults(func=cmd_curve)

    s = sub.add_parser("completion", help="print a shell completion script: bash, zsh, fish (or tcsh)")
    s.add_argument("shell", choices=("bash", "zsh", "fish", "tcsh"))
    s.set_defaults(func=cmd_completion)
