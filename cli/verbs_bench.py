"""`kdatui bench`: evaluate a candidate (every check, then paired timing) per shape, in the
evaluator's isolated workers, with a live bar per shape and a table at the end."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager

from .common import EXIT_FAILED, EXIT_OK, UserError, load_task_ref, say_device


def cmd_bench(args) -> int:
    from kdatui.engine.candidate import locate
    from kdatui.engine.evaluator import EvaluatorError, make_evaluator

    task = load_task_ref(args.task)
    locate(args.candidate)  # a missing candidate is a usage error, before any worker starts
    names = [s.strip() for s in args.shapes.split(",") if s.strip()] if args.shapes else list(task.shapes)
    shapes = [task.shape(n) for n in names]
    if args.timeout is not None and args.timeout <= 0:
        raise UserError(f"--timeout {args.timeout:g}: expected a positive number of seconds")
    run_socket = os.environ.get("KDATUI_ENGINE_SOCKET")
    if run_socket:  # inside a coding agent's turn: the run's judge evaluates it, between attempts
        evaluations = evaluate_in_run(run_socket, args.candidate, names, timing=True, quiet=args.json)
    else:
        try:
            evaluator = make_evaluator(args.backend, timeout_s=args.timeout, spare=False)
        except EvaluatorError as e:
            raise UserError(str(e)) from None
        with evaluator:
            _say_workers(evaluator, quiet=args.json)
            say_sandbox(evaluator)
            with bench_progress([s.name for s in shapes], quiet=args.json) as on_event:
                evaluations = evaluator.evaluate(task, args.candidate, shapes, progress=on_event)
    if args.json:
        print(json.dumps([e.to_dict() for e in evaluations], indent=2))
    else:
        bench_table(evaluations)
    return EXIT_OK if all(e.passed for e in evaluations) else EXIT_FAILED


def evaluate_in_run(socket_path: str, candidate: str, shapes: list[str] | None, *, timing: bool, quiet: bool):
    """`kdatui check`/`bench` inside an agent's turn: through the run's agent socket (the
    run's task and judge; the salt and the harness stay the engine's)."""
    from pathlib import Path

    from kdatui.engine.protocol import Client, EngineError, EngineUnavailable
    from kdatui.engine.records import Evaluation

    if not quiet:
        print(f"kdatui: evaluating through the run's engine ({socket_path}); it waits for the current attempt",
              file=sys.stderr)
    try:
        with Client(socket_path, timeout=None) as c:
            res = c.request("evaluate", candidate=str(Path(candidate).resolve()), shapes=shapes, timing=timing)
    except (EngineError, EngineUnavailable) as e:
        raise UserError(f"the run's engine ({socket_path}): {e}") from None
    return [Evaluation.from_dict(d) for d in res["evaluations"]]


def say_sandbox(evaluator) -> None:
    """A candidate that runs unsandboxed is said on every run, on stderr (also with --json)."""
    warning = evaluator.sandbox.warning
    if warning:
        print(f"kdatui: warning: {warning}", file=sys.stderr)


def _say_workers(evaluator, quiet: bool) -> None:
    devices = getattr(evaluator, "devices", None)
    if quiet or not devices:
        return
    if devices == ["cpu"]:
        say_device("cpu", quiet)
    else:
        print(f"device: {len(devices)} GPU worker{'s' * (len(devices) > 1)} "
              f"(CUDA_VISIBLE_DEVICES {','.join(devices)})", file=sys.stderr)


@contextmanager
def bench_progress(shape_names: list[str], quiet: bool = False):
    """One bar per shape, driven by the evaluator's progress events; yields the callback."""
    if quiet:
        yield lambda event: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .render import VERDICT_STYLE

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[label]}"), TimeElapsedColumn(),
                  console=Console(file=sys.stderr), transient=True) as bar:
        rows = {n: bar.add_task(n, total=None, label="waiting for a worker", start=False) for n in shape_names}

        def on_event(event: dict) -> None:
            row = rows.get(event.get("shape"))
            if row is None:
                return
            kind = event.get("event")
            if kind == "start":
                bar.start_task(row)
                bar.update(row, label=f"on {event.get('worker', '')}")
            elif kind == "progress":
                bar.update(row, completed=event.get("done") or 0, total=event.get("total"),
                           label=_progress_label(event))
            elif kind == "result":
                v = event.get("verdict", "")
                total = bar.tasks[row].total or 1
                bar.update(row, completed=total, total=total, label=f"[{VERDICT_STYLE.get(v, '')}]{v}[/]")
            elif kind == "worker":
                bar.update(row, label=f"worker replaced: {event.get('why', '')[:60]}")

        yield on_event


def _progress_label(event: dict) -> str:
    phase, step, steps, label = (event.get(k) for k in ("phase", "step", "steps", "label"))
    if phase == "check":
        return f"check {min(step + 1, steps)}/{steps} {label}" if label != "done" else "checks done"
    if phase == "timing":
        return f"timing trial {min(step + 1, steps)}/{steps}" if step < steps else "timed"
    if phase == "post_timing":
        return "post-timing check"
    return label or phase or ""


def bench_table(evaluations) -> None:
    """The per-shape table, then one line per shape that did not pass (reasons are long;
    they get the full width below the table instead of a narrow column)."""
    from rich import box
    from rich.table import Table

    from .render import VERDICT_STYLE, console, fmt

    if not evaluations:
        return
    first = evaluations[0]
    t = Table(title=f"{first.candidate}  task {first.task}  ({first.device or '?'}, harness {first.harness})",
              box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0))  # fits 80 columns
    for col, just in (("shape", "left"), ("verdict", "left"), ("baseline", "left"), ("base ms", "right"),
                      ("cand ms", "right"), ("speedup", "right"), ("spread", "right"), ("chk+time s", "right")):
        t.add_column(col, justify=just, no_wrap=col != "baseline")
    for e in evaluations:
        style = VERDICT_STYLE.get(e.verdict, "")
        if e.timing:
            noise = e.timing.noise
            within = abs(e.timing.speedup - 1.0) <= noise
            cells = [fmt(e.baseline_ms, 4), fmt(e.candidate_ms, 4),
                     f"{e.timing.speedup:.3f}x" + ("~" if within else " "), f"{noise:.1%}"]
        else:
            cells = ["-", "-", "-", "-"]
        secs = f"{e.seconds.get('checks', 0):.1f}+{e.seconds.get('timing', 0):.1f}"
        t.add_row(e.shape, f"[{style}]{e.verdict}[/]", e.baseline or "-", *cells, secs)
    timed = [e for e in evaluations if e.timing]
    if timed:
        pt = timed[0].timing
        t.caption = (f"timer {pt.timer}, {pt.trials} trials x {pt.repeats} calls, each on fresh inputs, L2 flush "
                     f"{'on' if pt.flush_l2 else 'off'}. speedup = median over trials of baseline / candidate; "
                     f"spread = (max - min) / median of those per-trial ratios; ~ = within the spread (noise)")
    console.print(t)
    for e in timed:
        b, c = e.timing.baseline.host_ms, e.timing.candidate.host_ms
        if b is not None and c is not None:
            console.print(f"host {e.shape}: {b:.3f} ms to enqueue one baseline call, {c:.3f} ms one candidate call "
                          f"(with the GPU idle; not in the speedup)", highlight=False)
        for flag in e.timing.flags:
            console.print(f"[yellow]flag[/] {e.shape}: {flag}", highlight=False)
    for e in evaluations:
        if not e.passed:
            console.print(f"[{VERDICT_STYLE.get(e.verdict, '')}]{e.verdict}[/] {e.shape}: {e.reason}",
                          highlight=False)


def register(sub) -> None:
    s = sub.add_parser("bench", help="check and time a candidate against the baseline, per shape")
    s.add_argument("--task", required=True, help="task file, or a task name (tasks/NAME.toml)")
    s.add_argument("--candidate", required=True, help="candidate folder (with kernel.py) or .py file")
    s.add_argument("--shapes", help="comma-separated shape names of the task (default: every shape)")
    s.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="time limit per shape (default: the task's bench.timeout_s)")
    s.add_argument("--backend", choices=("local", "ray"), default="local", help="evaluator backend")
    s.add_argument("--json", action="store_true", help="print the evaluations as JSON (no progress bar)")
    s.set_defaults(func=cmd_bench)
