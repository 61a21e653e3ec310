"""`kdatui tasks` and `kdatui check`."""

from __future__ import annotations

import json

from .common import EXIT_FAILED, EXIT_OK, load_task_ref, rel_path, say_device


def cmd_tasks(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from kdatui.engine.task import TaskError, discover_tasks, load_task

    if args.json:
        rows = []
        for path in discover_tasks():
            try:
                t = load_task(path)
            except TaskError as e:
                rows.append({"name": path.stem, "path": str(path), "error": str(e)})
                continue
            rows.append({"name": t.name, "path": str(path), "primary_shape": t.primary_shape,
                         "shapes": {n: sh.dims() for n, sh in t.shapes.items()}, "baseline": t.bench.baseline,
                         "budget_hours": t.search.budget_hours, "budget_attempts": t.search.budget_attempts,
                         "generalized_from": t.generalized_from or None, "description": t.description})
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = Table(title="task files (* the primary shape)", show_lines=True)
    for col in ("task", "shapes", "B", "T", "H", "K", "V"):
        table.add_column(col, justify="right" if len(col) == 1 else "left")
    for path in discover_tasks():
        try:
            t = load_task(path)
        except TaskError as e:
            table.add_row(f"{path.stem}\n{rel_path(path)}", f"[red]invalid: {e}[/red]", *[""] * 5)
            continue
        names = "\n".join(f"{'*' if n == t.primary_shape else ' '} {n}" for n in t.shapes)
        dims = {k: "\n".join(str(getattr(sh, k)) for sh in t.shapes.values()) for k in "BTHKV"}
        table.add_row(f"{t.name}\n{rel_path(path)}", names, *dims.values())
    Console().print(table)
    return EXIT_OK


def cmd_check(args) -> int:
    from kdatui.engine.checks import default_device, run_checks

    from .render import check_table, progress_bar

    from kdatui.engine.candidate import locate

    task = load_task_ref(args.task)
    locate(args.candidate)  # a missing candidate is a usage error, before any work
    shapes = [task.shape(args.shape)] if args.shape else list(task.shapes.values())
    device = default_device()
    say_device(device, args.json)
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


def register(sub) -> None:
    s = sub.add_parser("tasks", help="list the task files and their shapes")
    s.add_argument("--json", action="store_true", help="print the tasks as JSON")
    s.set_defaults(func=cmd_tasks)

    s = sub.add_parser("check", help="run the correctness contract on a candidate")
    s.add_argument("--task", required=True, help="task file, or a task name (tasks/NAME.toml)")
    s.add_argument("--candidate", required=True, help="candidate folder (with kernel.py) or .py file")
    s.add_argument("--shape", help="one shape of the task (default: every shape)")
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.set_defaults(func=cmd_check)
