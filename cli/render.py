"""Terminal rendering for the CLI verbs: progress bars and result tables (rich)."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

VERDICT_STYLE = {"PASS": "green", "RACED": "dim", "FAIL": "red", "FLAKY": "yellow", "SUSPECT": "bold magenta", "ERROR": "bold red"}
console = Console()


@contextmanager
def progress_bar(title: str, quiet: bool = False):
    """A progress bar on stderr; yields update(i, n, label)."""
    if quiet:
        yield lambda i, n, label: None
        return
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[label]}"), TimeElapsedColumn(),
                  console=Console(file=sys.stderr), transient=True) as bar:
        tid = bar.add_task(title, total=None, label="")

        def update(i: int, n: int, label: str) -> None:
            bar.update(tid, completed=i, total=n, label=label)

        yield update


def fmt(x: float, digits: int = 3) -> str:
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    return f"{x:.{digits}g}"


def check_table(report) -> None:
    t = Table(title=f"{report.candidate} @ {report.shape} ({report.device})  "
                    f"[{VERDICT_STYLE[report.verdict]}]{report.verdict}[/]  {report.seconds:.1f} s")
    for col, just in (("probe", "left"), ("verdict", "left"), ("max_abs", "right"),
                      ("max_rel", "right"), ("rms_ratio", "right"), ("s", "right"), ("reason", "left")):
        t.add_column(col, justify=just)
    for r in report.results:
        t.add_row(r.probe, f"[{VERDICT_STYLE[r.verdict]}]{r.verdict}[/]", fmt(r.max_abs),
                  fmt(r.max_rel), fmt(r.rms_ratio), f"{r.seconds:.2f}", r.reason)
    console.print(t)
