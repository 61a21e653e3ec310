"""`kdatui` command line. Each verb is a small function; errors a user can meet (a bad task
file, a missing candidate, no git repo) print one line and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UserError(Exception):
    """Printed as `kdatui: error: ...` with exit status 2."""


# --------------------------------------------------------------------------- verbs

def cmd_tasks(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from kdatui.engine.task import TaskError, discover_tasks, load_task

    table = Table(title="task files", show_lines=False)
    for col in ("task", "file", "primary", "shapes"):
        table.add_column(col)
    for path in discover_tasks():
        try:
            t = load_task(path)
        except TaskError as e:
            table.add_row(path.stem, _rel(path), "-", f"[red]invalid: {e}[/red]")
            continue
        shapes = "\n".join(f"{'*' if n == t.primary_shape else ' '} {n}: {s.label()}"
                           for n, s in t.shapes.items())
        table.add_row(t.name, _rel(path), t.primary_shape, shapes)
    Console().print(table)
    return EXIT_OK


def cmd_check(args) -> int:
    from kdatui.engine.checks import default_device, run_checks

    from .render import check_table, progress_bar

    task = _load_task(args.task)
    shapes = [task.shape(args.shape)] if args.shape else list(task.shapes.values())
    device = default_device()
    _say_device(device, args.json)
    reports = []
    for shape in shapes:
        with progress_bar(f"check {shape.name}", quiet=args.json) as update:
            reports.append(run_checks(task, shape, args.candidate, device=device, progress=update))
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        for r in reports:
            check_table(r)
    return EXIT_OK if all(r.passed for r in reports) else EXIT_FAILED


# --------------------------------------------------------------------------- helpers

def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _load_task(ref: str):
    from kdatui.engine.task import load_task, resolve_task_path

    return load_task(resolve_task_path(ref))


def _say_device(device: str, quiet: bool) -> None:
    if quiet:
        return
    if device == "cpu":
        print("device: cpu — no GPU here: Triton kernels run through the Triton interpreter "
              "(TRITON_INTERPRET=1); timings are not GPU figures", file=sys.stderr)
    else:
        import torch

        print(f"device: {torch.cuda.get_device_name()}", file=sys.stderr)


# --------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kdatui",
        description="Supervise an agent-driven search for fast Kimi Delta Attention kernels.")
    p.add_argument("--version", action="version", version=f"kdatui {__version__}")
    sub = p.add_subparsers(dest="verb", metavar="COMMAND")

    s = sub.add_parser("tasks", help="list the task files and their shapes")
    s.set_defaults(func=cmd_tasks)

    s = sub.add_parser("check", help="run the correctness contract on a candidate")
    s.add_argument("--task", required=True, help="task file, or a task name (tasks/NAME.toml)")
    s.add_argument("--candidate", required=True, help="candidate folder (with kernel.py) or .py file")
    s.add_argument("--shape", help="one shape of the task (default: every shape)")
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.set_defaults(func=cmd_check)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_OK
    from kdatui.engine.candidate import CandidateError
    from kdatui.engine.task import TaskError

    try:
        return args.func(args)
    except (UserError, TaskError, CandidateError) as e:
        print(f"kdatui: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kdatui: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
