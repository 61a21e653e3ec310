"""Plain formatting shared by the widgets: durations, times, milliseconds, speedups.

Colours are named ANSI colours (green, red, yellow, ...) so they survive 256- and
16-colour terminals; every coloured figure also carries a glyph (▲ ▼ ≈ ✗) so it reads
without colour.
"""

from __future__ import annotations

import time

BETTER, WORSE, SAME = "▲", "▼", "≈"
FAILED = "✗"
STYLE = {
    "better": "green",
    "worse": "red",
    "same": "yellow",
    "failed": "bold red",
    "error": "bold magenta",
    "flaky": "bold yellow",
    "pending": "dim",
}


def duration(seconds: float | None) -> str:
    """12s, 4m05s, 3h07m, 2d04h: short enough for a header at 80 columns."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def hours(h: float | None) -> str:
    if not h:
        return "no limit"
    return f"{h:g}h" if h >= 1 else f"{round(h * 60)}m"


def clock(ts: float | None) -> str:
    """Wall-clock time of an event, local time, HH:MM:SS."""
    if ts is None:
        return "--:--:--"
    return time.strftime("%H:%M:%S", time.localtime(ts))


def ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1000:
        return f"{v / 1000:.2f}s"
    if v >= 100:
        return f"{v:.0f}ms"
    if v >= 10:
        return f"{v:.1f}ms"
    return f"{v:.2f}ms" if v >= 1 else f"{v:.3f}ms"


def speedup(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def trend(value: float | None, noise: float | None) -> str:
    """better / worse / same than the baseline, with the timing's noise as the dead band."""
    if value is None:
        return "same"
    band = max(noise or 0.0, 0.0)
    if value > 1.0 + band:
        return "better"
    if value < 1.0 - band:
        return "worse"
    return "same"


GLYPH = {"better": BETTER, "worse": WORSE, "same": SAME}
