"""The live agent loop: the engine's event stream, one readable line per event, in a
bounded buffer. Written in batches by the app (at most ~10 a second).

A `Log` (plain strings, lines rendered only when visible) rather than a RichLog (each
line rendered at write time): at 1,000 events a second that is the difference between
~0.2 ms and a few microseconds per line, i.e. between a sluggish and a prompt UI. A
highlighter colours the fixed columns (time, tag) when a line is drawn; the tag itself
says the kind, so the log reads without colour.

Progress events (probe i of n, trial j of m) arrive many per second; the log keeps one
line per stage of an evaluation and the header shows the live count.
"""

from __future__ import annotations

from rich.highlighter import Highlighter
from rich.text import Text
from textual.widgets import Log

from ... import format as fmt

# kind -> tag: short, fixed width, so the eye finds admissions, failures, operator actions
KINDS: dict[str, str] = {
    "run-started": "run",
    "run-resumed": "run",
    "run-paused": "run",
    "run-stopping": "run",
    "run-stopped": "run",
    "attempt-proposed": "attempt",
    "attempt-evaluating": "eval",
    "attempt-evaluated": "verdict",
    "attempt-error": "error",
    "agent-output": "agent",
    "agent-turn": "turn",
    "eval-progress": "eval",
    "admitted": "admit",
    "rejected": "reject",
    "pruned": "prune",
    "restored": "restore",
    "archived": "archive",
    "cleanup": "cleanup",
    "generalized": "general",
    "rechecked": "recheck",
    "note": "note",
    "budget": "budget",
    "error": "error",
}
# tag -> (style of the tag, style of the text after it, or "")
STYLES: dict[str, tuple[str, str]] = {
    "run": ("bold", "bold"),
    "attempt": ("cyan", ""),
    "eval": ("dim cyan", ""),
    "verdict": ("cyan", ""),
    "error": ("bold red", "red"),
    "agent": ("dim", ""),
    "turn": ("blue", ""),
    "admit": ("bold green", "green"),
    "reject": ("yellow", ""),
    "prune": ("magenta", "magenta"),
    "restore": ("magenta", "magenta"),
    "archive": ("blue", ""),
    "cleanup": ("blue", ""),
    "general": ("bold magenta", "magenta"),
    "recheck": ("magenta", ""),
    "note": ("bold cyan", "cyan"),
    "budget": ("yellow", "yellow"),
    "you": ("bold cyan", "bold"),
    "engine": ("bold green", ""),
    "refused": ("bold red", "red"),
    "gone": ("bold red", "bold red"),
}
META = ("seq", "id", "ts", "at", "run", "kind", "text")
TAG_WIDTH = 7
BODY = 8 + 1 + TAG_WIDTH + 1  # where the text starts: "HH:MM:SS tag____ "


def event_text(ev: dict) -> str:
    text = ev.get("text")
    if text:
        return str(text)
    kind = ev.get("kind", "?")
    if kind == "agent-output":
        return str(ev.get("line", ""))
    if kind == "eval-progress":
        return (f"#{ev.get('attempt')} {ev.get('shape', '')} {ev.get('stage', '')} "
                f"{ev.get('i', '?')}/{ev.get('n', '?')} {ev.get('label', '')}").strip()
    rest = " ".join(f"{k}={v}" for k, v in ev.items() if k not in META)
    return f"{kind} {rest}".strip()


def log_line(ts: float | None, tag: str, body: str) -> str:
    # one line per entry: newlines in agent output would break the columns
    return f"{fmt.clock(ts)} {tag[:TAG_WIDTH]:<{TAG_WIDTH}} {body}".replace("\n", " ⏎ ")


def event_line(ev: dict) -> str:
    kind = ev.get("kind", "?")
    return log_line(ev.get("ts"), KINDS.get(kind, kind), event_text(ev))


class LoopHighlighter(Highlighter):
    """Colours the time, the tag and, for a few tags, the text, by column."""

    def highlight(self, text: Text) -> None:
        plain = text.plain
        if len(plain) < BODY or plain[2:3] != ":":
            return  # a continuation of a wrapped line
        text.stylize("dim", 0, 8)
        tag_style, body_style = STYLES.get(plain[9:BODY - 1].rstrip(), ("", ""))
        if tag_style:
            text.stylize(tag_style, 9, BODY - 1)
        if body_style:
            text.stylize(body_style, BODY, len(plain))


def wrap(line: str, width: int) -> list[str]:
    """Long lines folded under the text column, at a space when there is one (the Log
    widget does not wrap)."""
    if width <= BODY + 10 or len(line) <= width:
        return [line]
    out: list[str] = []
    head, rest, room = "", line, width
    while len(rest) > room:
        cut = rest.rfind(" ", room // 2, room + 1)
        cut = cut if cut > 0 else room
        out.append(head + rest[:cut])
        rest = rest[cut:].lstrip(" ")
        head, room = " " * BODY, width - BODY
    if rest:
        out.append(head + rest)
    return out


class LoopLog(Log):
    BORDER_TITLE = "agent loop"

    def __init__(self, *, max_lines: int = 2000, now=None, **kwargs):
        import time

        super().__init__(max_lines=max_lines, highlight=True, auto_scroll=True, **kwargs)
        self.highlighter = LoopHighlighter()
        self._now = now or time.time
        self._progress_key: tuple | None = None
        self._early: list[tuple] = []  # what came before the first layout (wrap needs the width)
        self.written = 0

    def _wrap_width(self) -> int:
        return self.scrollable_content_region.width

    def on_resize(self) -> None:
        early, self._early = self._early, []
        for call, args in early:
            call(*args)

    def write_events(self, events: list[dict], skipped: int = 0) -> None:
        if not self.scrollable_content_region.width:
            self._early.append((self.write_events, (events, skipped)))
            return
        lines: list[str] = []
        width = self._wrap_width()
        if skipped > 0:
            lines.append(log_line(self._now(), "…", f"{skipped} earlier events of a burst not shown "
                                                     "(all are in the run's events.jsonl)"))
        for ev in events:
            if ev.get("kind") == "eval-progress":
                key = (ev.get("attempt"), ev.get("shape"), ev.get("stage"))
                if key == self._progress_key:
                    continue
                self._progress_key = key
            lines.extend(wrap(event_line(ev), width))
            self.written += 1
        if lines:
            self.write_lines(lines)

    def write_operator(self, text: str, tag: str = "you") -> None:
        """An operator action and the engine's answer, in the same stream."""
        if not self.scrollable_content_region.width:
            self._early.append((self.write_operator, (text, tag)))
            return
        self.write_lines(wrap(log_line(self._now(), tag, text), self._wrap_width()))
