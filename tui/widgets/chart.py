"""A chart of the search: the best speedup on the primary shape over time (a step line),
every attempt a point (● passed, ◆ a new best, ✗ failed, ! error, ◌ raced out), the
baseline's 1.00x as a dotted line. Drawn with characters (no dependency), so it reads in
any terminal and in snapshot tests; `chart_lines` is plain data, tested alone.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from .. import format as fmt

GLYPH = {"passed": ("●", "green"), "failed": ("✗", "red"), "error": ("!", "magenta"), "raced": ("◌", "dim")}
NEW_BEST = ("◆", "bold yellow")
Y_LABEL = 7  # "12.34x "


def legend(cpu: bool) -> Text:
    parts: list = []
    for kind, (g, style) in GLYPH.items():
        parts += [(g, style), f" {kind}  "]
    parts += [NEW_BEST, " new best  ", ("─", "yellow"), " best so far  ", ("┈", "dim"), " 1.00x"]
    t = Text.assemble(*parts)
    t.no_wrap, t.overflow = True, "ellipsis"
    return t


def chart_lines(curve: dict | None, width: int, height: int) -> list[Text]:
    """The chart in `height` lines of `width` cells (at least 20 x 5)."""
    curve = curve or {}
    points = curve.get("points") or []
    cpu = str(curve.get("device") or "").lower().startswith("cpu")
    width, height = max(width, 20), max(height, 5)
    if not points:
        lines = [Text("no evaluated attempt yet: the chart fills as the search goes", style="dim")]
        return lines + [Text("")] * (height - 2) + [legend(cpu)]
    plot_w, plot_h = width - Y_LABEL - 1, height - 2
    values = [p["speedup"] for p in points if p.get("speedup") is not None]
    # the baseline's 1.00x joins the range only when the points are near it: on the CPU
    # (interpreter vs torch, ~0.02x) it would squeeze every point onto one row
    near = bool(values) and max(values) >= 0.5 and min(values) <= 2.0
    lo, hi = min(values + [1.0] * (near or not values)), max(values + [1.0] * (near or not values))
    if hi - lo < 1e-9:
        lo, hi = lo * 0.95, hi * 1.05
    span_t = max((p.get("t") or 0.0) for p in points) or 1.0

    def col(t: float) -> int:
        return min(plot_w - 1, int(round((t or 0.0) / span_t * (plot_w - 1))))

    def row(v: float) -> int:  # 0 is the top
        return min(plot_h - 1, max(0, int(round((hi - v) / (hi - lo) * (plot_h - 1)))))

    grid: list[list[tuple[str, str]]] = [[(" ", "")] * plot_w for _ in range(plot_h)]
    base = row(1.0) if lo <= 1.0 <= hi else None
    for x in range(plot_w if base is not None else 0):
        grid[base][x] = ("┈", "dim")
    best, steps = None, sorted((p["t"] or 0.0, p["speedup"]) for p in points if p.get("best") and p.get("speedup"))
    i = 0
    for x in range(plot_w):  # the best so far at each column's time
        t = x / max(1, plot_w - 1) * span_t
        while i < len(steps) and steps[i][0] <= t + 1e-9:
            best = steps[i][1]
            i += 1
        if best is not None:
            grid[row(best)][x] = ("─", "yellow")
    for p in points:  # points over the lines; a new best over any other point in its cell
        kind = p.get("kind") or "failed"
        g = NEW_BEST if p.get("best") else GLYPH.get(kind, GLYPH["failed"])
        y = row(p["speedup"]) if p.get("speedup") is not None else plot_h - 1
        x = col(p.get("t") or 0.0)
        if grid[y][x][0] != NEW_BEST[0]:
            grid[y][x] = g
    labels = {0: f"{hi:.2f}x", plot_h - 1: f"{lo:.2f}x", **({base: "1.00x"} if base is not None else {})}
    lines = []
    for y in range(plot_h):
        t = Text(f"{labels.get(y, ''):>{Y_LABEL - 1}} ", style="dim")
        t.append("│", style="dim")
        for ch, style in grid[y]:
            t.append(ch, style=style)
        lines.append(t)
    end = fmt.duration(span_t)
    axis = Text(" " * Y_LABEL + "0", style="dim")
    axis.append(f"{'time since the first attempt →':^{max(0, plot_w - 1 - len(end))}}", style="dim")
    axis.append(end, style="dim")
    lines.append(axis)
    lines.append(legend(cpu))
    return lines


class SearchChart(Static):
    """The chart as a pane (wide screens) or the body of the chart screen (`c`)."""

    BORDER_TITLE = "search: best speedup on the primary shape over time"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.curve: dict = {}

    def show_curve(self, curve: dict | None) -> None:
        curve = curve or {}
        if curve != self.curve:
            self.curve = curve
            shape = curve.get("shape") or ""
            best = [b for b in curve.get("best") or []]
            n = len(curve.get("points") or [])
            self.border_title = (f"search on ◆ {shape}: {n} attempt{'s' * (n != 1)}"
                                 + (f", best {best[-1][1]:.2f}x" if best else "")
                                 if shape else self.BORDER_TITLE)
            cpu = str(curve.get("device") or "").lower().startswith("cpu")
            self.border_subtitle = "CPU: interpreter timings are not performance figures" if cpu else ""
            self.refresh()

    def render(self):
        width, height = self.content_size.width or 60, self.content_size.height or 10
        lines = chart_lines(self.curve, width, height)
        out = Text()
        for i, line in enumerate(lines):
            if i:
                out.append("\n")
            out.append_text(line)
        return out
