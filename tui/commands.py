"""Every action the TUI offers, as one named registry (harlequin style), and the command
palette provider that lists them (posting style).

The app builds its key bindings from `ACTIONS`, the help screen lists them, the palette
searches them. Each binding has an id, so a user remaps a key with a keymap
(`{"pause": "P"}`, or `[keymap]` in `~/.config/kdatui/tui.toml`) without touching code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider


@dataclass(frozen=True)
class Action:
    id: str  # binding id: what a keymap names
    key: str | None  # default key; None: palette only
    action: str  # the app's action_<name>
    footer: str  # short label in the footer
    title: str  # what the palette and the help screen say
    help: str  # one line: what it does
    show: bool = True  # in the footer


ACTIONS: tuple[Action, ...] = (
    Action("pause", "p", "pause", "Pause", "Pause the run",
           "Stop starting attempts; the evaluation in progress finishes."),
    Action("resume", "p", "resume", "Resume", "Resume the run", "Start taking attempts again."),
    Action("prune", "x", "prune", "Prune", "Prune the selected member",
           "Move its branch to refs/kdatui/pruned/ (asks first; `restore` brings it back)."),
    Action("archive", "a", "archive", "Archive", "Archive now",
           "Move scratch worktrees, attempt logs and old history to the archive; the frontier stays."),
    Action("generalize", "g", "generalize", "General.", "Generalize to more shapes",
           "Write a task with more shapes, seeded from a member, and re-check it on every shape."),
    Action("recheck", "r", "recheck", "Recheck", "Recheck the selected candidate",
           "Evaluate the selected member or attempt again on every shape of the task."),
    Action("note", "n", "note", "Note", "Leave the agent a note",
           "The note goes into the agent's next prompt."),
    Action("budget", "b", "budget", "Budget", "Give the run more budget",
           "More time or attempts for the live or finished run (+2h, +20attempts); a finished run goes on.",
           show=False),
    Action("details", "enter", "details", "Open", "Open the selected candidate",
           "Idea, parent, checks, per-trial timings, and the diff against its parent.", show=False),
    Action("chart", "c", "chart", "Chart", "Chart of the search",
           "The best speedup on the primary shape over time, every attempt a point (c or esc closes)."),
    Action("detach", "q", "detach", "Detach", "Detach (the engine stays up)",
           "Leave the TUI; the engine keeps running. `kdatui attach` comes back."),
    Action("help", "question_mark", "help", "Help", "Show the keys", "This screen."),
    Action("stop", "s", "stop_run", "Stop", "Stop the run",
           "Stop the engine after the current evaluation (asks first).", show=False),
    Action("tree", "f", "toggle_tree", "Tree", "Show or hide the frontier tree",
           "Below 110 columns the tree is hidden so the shapes fit; the matrix lists every member (★ the best).",
           show=False),
    Action("zoom", "z", "zoom", "Zoom", "Zoom the focused pane",
           "Give the focused pane (tree, matrix or log) the whole screen; z again restores.",
           show=False),
    Action("restore", None, "restore", "", "Restore a pruned member",
           "Bring a pruned member's branch back onto the frontier."),
    Action("refresh", None, "refresh", "", "Refresh now", "Ask the engine for a fresh snapshot."),
    Action("reconnect", None, "reconnect", "", "Reconnect to the engine",
           "Open the command and event connections again (after an engine restart)."),
)

BY_ID = {a.id: a for a in ACTIONS}


def bindings() -> list[Binding]:
    return [Binding(a.key, a.action, a.footer, show=a.show, id=a.id, key_display="⏎" if a.key == "enter" else None)
            for a in ACTIONS if a.key]


def key_of(app, action: Action) -> str:
    """The key that runs `action` now (the keymap may have moved it), as shown to a person."""
    if action.key is None:
        return ""
    keys = getattr(app, "_keymap", {}).get(action.id) or action.key
    first = keys.split(",")[0].strip()
    return {"question_mark": "?", "enter": "enter"}.get(first, first)


class ActionsProvider(Provider):
    """The command palette's list of kdatui actions (ctrl+p)."""

    def _hits(self):
        app = self.app
        for a in ACTIONS:
            if not app.palette_allows(a.action):
                continue
            key = key_of(app, a)
            title = f"{a.title}  ({key})" if key else a.title
            yield a, title, partial(app.run_action, a.action)

    async def discover(self) -> Hits:
        for _a, title, run in self._hits():
            yield DiscoveryHit(title, run, help=_a.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for a, title, run in self._hits():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), run, help=a.help)
