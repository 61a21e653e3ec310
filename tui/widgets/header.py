"""The run header: run, task, phase, state (and why), elapsed and budget, best speedup on
the primary shape, next cleanup, device, attempt counts and what the engine does now.

The device sits at the right of the second line and is never cut: at 80 columns the
other parts give way (with an ellipsis) first.

Elapsed and the cleanup countdown tick locally between status answers (the engine is
asked every few seconds, not every second); the clock is injectable so snapshot tests
are stable.
"""

from __future__ import annotations

from typing import Callable

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from .. import format as fmt

STATE_BADGE = {
    "running": ("● running", "bold green"),
    "paused": ("‖ paused", "bold yellow"),
    "stopping": ("◼ stopping", "bold red"),
    "stopped": ("■ stopped", "bold red"),
    "finished": ("✓ finished", "bold cyan"),
}


def _line(*parts) -> Text:
    t = Text.assemble(*parts)
    t.no_wrap = True
    t.overflow = "ellipsis"
    return t


def header_lines(status: dict | None, *, since_fetch: float = 0.0, lost: str | None = None,
                 progress: dict | None = None) -> list[Text]:
    """The three header lines, from a `status` result and the seconds since it came."""
    st = status or {}
    state = st.get("state") or ""
    sep = (" · ", "dim")
    if lost is not None and lost.startswith("no engine"):
        tail = lost[len("no engine"):].strip()
        badge = [("○ no engine", "bold reverse yellow"), (tail if tail.startswith(":") else f" {tail}", "yellow")]
    elif lost is not None:
        badge = [("✗ engine gone", "bold reverse red"), (f" {lost}", "red")]
    elif not st:
        badge = [("… connecting", "dim")]
    else:
        label, style = STATE_BADGE.get(state, (state or "?", "bold"))
        badge = [(label, style)]
        if st.get("why"):
            badge.append((f" ({st['why']})", style.replace("bold ", "")))
    warning = (st.get("sandbox") or {}).get("warning")
    if warning:  # stays in sight for as long as it holds: first, after the state
        badge += [sep, (f"⚠ {warning}", "bold red")]
    line1 = _line(*badge, sep, ("task ", "dim"), (str(st.get("task") or "-"), "bold"), sep,
                  str(st.get("phase") or "-"), sep, ("agent ", "dim"), str(st.get("agent") or "-"),
                  sep, ("run ", "dim"), str(st.get("run") or "-"))

    running = state == "running" and lost is None
    elapsed = st.get("elapsed_s")
    if elapsed is not None and running:
        elapsed += since_fetch
    budget = st.get("budget") or {}
    limit = f"/{fmt.hours(budget['hours'])}" if budget.get("hours") else ""  # attempts' limit: line 3
    parts: list = [("elapsed ", "dim"), f"{fmt.duration(elapsed)}{limit}"]
    best = st.get("best")
    if best and best.get("speedup") is not None:
        t = fmt.trend(best["speedup"], 0.0)
        parts += [sep, ("best ", "dim"), (f"{fmt.GLYPH[t]}{best['speedup']:.2f}x", fmt.STYLE[t] + " bold"),
                  f" {best.get('name', '')}", (f" on {best.get('shape', '')}", "dim")]
    else:
        parts += [sep, ("best ", "dim"), "none yet"]
    cleanup = st.get("next_cleanup_s")
    if cleanup is not None:
        if running:
            cleanup = max(0.0, cleanup - since_fetch)
        parts += [sep, ("cleanup in ", "dim"), fmt.duration(cleanup)]
    line2 = _line(*parts)

    att = st.get("attempts") or {}
    limit = budget.get("attempts")
    total = f"{att.get('total', 0)}" + (f"/{limit}" if limit else "")
    parts = [("attempts ", "dim"), total, ("  evaluated ", "dim"), str(att.get("evaluated", 0)),
             ("  admitted ", "dim"), str(att.get("admitted", 0))]
    if att.get("raced"):
        parts += [("  raced ", "dim"), str(att["raced"])]
    if att.get("per_hour"):
        parts += [("  ", "dim"), f"{att['per_hour']:.0f}", ("/h", "dim")]
    parts += [("  members ", "dim"), str(st.get("members", 0)), sep, ("now ", "dim")]
    cur = st.get("current")
    if progress is not None and running:
        step = f"{progress.get('i')}/{progress.get('n')} " if progress.get("n") else ""
        who = f"#{progress['attempt']}" if progress.get("attempt") else "operator job:"
        parts.append((f"{who} {progress.get('stage', '')} {step}{progress.get('shape', '')} "
                      f"{progress.get('label', '')}".strip(), "cyan"))
    elif cur:
        who = f"#{cur['attempt']} " if cur.get("attempt") else ""
        parts.append((f"{who}{cur.get('stage', '')} {cur.get('detail', '')}".strip(), "cyan"))
    else:
        parts.append(("idle" if state != "running" else "waiting for the agent", "dim"))
    line3 = _line(*parts)
    return [line1, line2, line3]


def is_cpu(status: dict | None) -> bool:
    return str((status or {}).get("device") or "").lower().startswith("cpu")


def device_text(status: dict | None) -> Text:
    """The device, whole: `CPU · Triton interpreter` in CPU mode, else the GPU's name."""
    if is_cpu(status):
        return _line(("CPU · Triton interpreter", "bold yellow"))
    return _line((str((status or {}).get("device") or "-"), "bold"))


def header_grid(lines: list[Text], device: Text):
    """The three lines, the device at the right of the second one and never cut."""
    grid = Table.grid(expand=True, padding=(0, 0))
    grid.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
    grid.add_column(no_wrap=True, justify="right", min_width=device.cell_len + 2)
    grid.add_row(lines[1], Text.assemble(("  ", ""), device))
    return Group(lines[0], grid, lines[2])


class RunHeader(Static):
    status: reactive[dict | None] = reactive(None, always_update=True)
    lost: reactive[str | None] = reactive(None)
    progress: reactive[dict | None] = reactive(None)

    def __init__(self, clock: Callable[[], float], **kwargs):
        super().__init__(**kwargs)
        self._clock = clock
        self._fetched_at = clock()

    def set_status(self, status: dict) -> None:
        self._fetched_at = self._clock()
        # a new status says what the engine does now: stale progress would contradict it
        cur = status.get("current") or {}
        if self.progress is not None and cur.get("attempt") != self.progress.get("attempt"):
            self.progress = None
        self.status = status

    def tick(self) -> None:  # noqa: D102
        if self.status and self.status.get("state") == "running" and self.lost is None:
            self.refresh()

    def render(self):
        since = self._clock() - self._fetched_at
        lines = header_lines(self.status, since_fetch=since, lost=self.lost, progress=self.progress)
        return header_grid(lines, device_text(self.status))
