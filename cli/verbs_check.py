"""`kdatui tasks` and `kdatui check`."""

from __future__ import annotations

import json
import os

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
    """The whole correctness contract, per shape, through the evaluator: the candidate runs
    in a sandboxed executor, judged from another process (never in this one)."""
    from kdatui.engine.candidate import locate
    from kdatui.engine.evaluator import make_evaluator

    from .render import check_table
    from .verbs_bench import bench_progress, evaluate_in_run, say_sandbox

    task = load_task_ref(args.task)
    locate(args.candidate)  # a missing candidate is a usage error, before any work
    shapes = [task.shape(args.shape)] if args.shape else list(task.shapes.values())
    run_socket = os.environ.get("KDATUI_ENGINE_SOCKET")
    if run_socket:  # inside a coding agent's turn: the run's judge checks it
        evaluations = evaluate_in_run(run_socket, args.candidate, [s.name for s in shapes], timing=False,
                                      quiet=args.json)
    else:
        with make_evaluator("local", spare=False) as evaluator:
            say_device("cpu" if evaluator.device_kind == "cpu" else "cuda", args.json)
            say_sandbox(evaluator)
            with bench_progress([s.name for s in shapes], quiet=args.json) as on_event:
                evaluations = evaluator.evaluate(task, args.candidate, shapes, progress=on_event, timing=False)
    reports = [report_of(e) for e in evaluations]
    if args.json:
        print(json.dumps(reports, indent=2))
    else:
        for e in evaluations:
            if e.checks is not None:
                check_table(e.checks)
            if e.verdict == "ERROR" and (e.checks is None or e.checks.verdict != "ERROR"):
                print(f"ERROR {e.shape}: {e.reason}")
    return EXIT_OK if all(e.passed for e in evaluations) else EXIT_FAILED


def report_of(e) -> dict:
    """The check report of an evaluation as `kdatui check --json` prints it; an evaluation
    that ended before its checks did (its executor died) still says why."""
    if e.checks is not None:
        d = e.checks.to_dict()
        if e.verdict != d["verdict"]:
            d["verdict"] = e.verdict
        d["reason"] = e.reason
        d["candidate"] = e.candidate
        return d
    return {"candidate": e.candidate, "task": e.task, "shape": e.shape, "dims": e.dims, "device": e.device,
            "harness": e.harness, "verdict": e.verdict, "reason": e.reason, "results": [], "seconds": e.seconds.get("total", 0.0)}


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
