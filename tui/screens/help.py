"""`?`: every key (as remapped by the user's keymap), what it does, and how to read the
matrix."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from ..commands import ACTIONS, key_of

LEGEND = [
    ("▲1.34x 2.45ms", "green", "faster than the baseline beyond the timing's noise (speedup, candidate ms)"),
    ("▼0.81x 4.02ms", "red", "slower than the baseline beyond the noise"),
    ("≈1.01x", "yellow", "within the noise: no difference"),
    ("✗ FAIL", "bold red", "a check failed on that shape (also ✗ ERROR, ✗ FLAKY)"),
    ("…  ·", "dim", "being evaluated / not evaluated on that shape"),
    ("★", "bold yellow", "the best member on the primary shape"),
    ("◆", "bold yellow", "the primary shape (the one the search optimizes)"),
    ("▲1.34x 4.19ms", "dim", "ms at the baseline row's pace: its ms / the speedup, so ms and × agree (t: measured)"),
]


def keys_table(app) -> Table:
    t = Table(box=None, show_header=True, header_style="bold", pad_edge=False, expand=True)
    t.add_column("key", no_wrap=True)
    t.add_column("action", no_wrap=True)
    t.add_column("what it does", ratio=1)
    for a in ACTIONS:
        t.add_row(Text(key_of(app, a) or "ctrl+p", style="bold cyan"), a.title, Text(a.help, style="dim"))
    for key, what, helptext in (("ctrl+p", "Command palette", "Every action by name."),
                                ("tab", "Next pane", "Tree, matrix, log."),
                                ("t", "Matrix ms", "ms normalized to the baseline row, or measured (candidate / its own baseline)."),
                                ("] [", "Matrix shapes", "Page through the shapes when they do not all fit (the primary stays)."),
                                ("1-5", "Candidate tabs", "Idea, checks, trials, diff, kernel (candidate screen)."),
                                ("esc", "Back", "Close a dialog or the candidate screen.")):
        t.add_row(Text(key, style="bold cyan"), what, Text(helptext, style="dim"))
    return t


def legend_table() -> Table:
    t = Table(box=None, show_header=False, pad_edge=False, expand=True)
    t.add_column(no_wrap=True)
    t.add_column(ratio=1)
    for sample, style, meaning in LEGEND:
        t.add_row(Text(sample, style=style), Text(meaning, style="dim"))
    return t


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close", id="help.close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog dialog-wide", id="help"):
            yield Label("kdatui keys", classes="dialog-title")
            yield Static(keys_table(self.app))
            yield Label("reading the matrix", classes="dialog-title")
            yield Static(legend_table())
            yield Static(Text("Keys are remappable by id (the `pause`, `prune`, ... names) in the [keymap] "
                              "table of ~/.config/kdatui/tui.toml.", style="dim"))

    async def action_dismiss(self, result=None) -> None:
        self.dismiss(None)
