"""A candidate up close: IDEA.md, parent, checks per shape, per-trial timings, the diff
against its parent (syntax highlighted) and the kernel source.

The data comes from the engine's `candidate` request (the screen never reads git or the
store itself). Tabs 1-5 switch sections; escape goes back.
"""

from __future__ import annotations

from rich.markdown import Markdown
from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from kdatui.engine.protocol import EngineError, EngineUnavailable

from ..messages import Selection
from ..widgets.candidate import check_rows, summary_lines, trial_rows

TABS = ("idea", "checks", "trials", "diff", "kernel")
# ANSI themes: the terminal's own 16 colours, no true-colour assumption
SYNTAX_THEME = "ansi_dark"


class CandidateScreen(Screen):
    BINDINGS = [
        Binding("escape,backspace", "app.pop_screen", "Back", id="candidate.back"),
        *[Binding(str(i), f"tab('{t}')", t.capitalize(), show=False, id=f"candidate.tab.{t}")
          for i, t in enumerate(TABS, 1)],
    ]

    def __init__(self, selection: Selection):
        super().__init__()
        self.selection = selection
        self.detail: dict | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text(f"{self.selection.label} · asking the engine…", style="bold"), id="cand-title")
        with TabbedContent(initial="idea", id="cand-tabs"):
            with TabPane("1 Idea", id="idea"):
                with VerticalScroll(classes="cand-scroll"):
                    yield Static("", id="cand-idea")
            with TabPane("2 Checks", id="checks"):
                yield DataTable(id="cand-checks", cursor_type="row", zebra_stripes=True)
            with TabPane("3 Trials", id="trials"):
                yield DataTable(id="cand-trials", cursor_type="row", zebra_stripes=True)
            with TabPane("4 Diff", id="diff"):
                with VerticalScroll(classes="cand-scroll"):
                    yield Static("", id="cand-diff", classes="code")
            with TabPane("5 Kernel", id="kernel"):
                with VerticalScroll(classes="cand-scroll"):
                    yield Static("", id="cand-kernel", classes="code")
        yield Footer(compact=True)

    def on_resize(self, event) -> None:
        from .main import fit_footer

        fit_footer(self, event.size.width)

    def on_mount(self) -> None:
        self.run_worker(self.load(), group="candidate", exclusive=True)

    async def load(self) -> None:
        try:
            detail = await self.app.client.request("candidate", **self.selection.candidate_args())
        except (EngineError, EngineUnavailable) as e:
            self.query_one("#cand-title", Static).update(
                Text.assemble((self.selection.label, "bold"), (f" · the engine could not say: {e}", "red")))
            return
        self.show(detail)

    def show(self, detail: dict) -> None:
        self.detail = detail
        title = detail.get("name") or self.selection.label
        self.query_one("#cand-title", Static).update(Text("\n").join(summary_lines(detail, title)))
        idea = detail.get("idea") or "_(no IDEA.md)_"
        self.query_one("#cand-idea", Static).update(Markdown(idea))

        checks = self.query_one("#cand-checks", DataTable)
        checks.clear(columns=True)
        checks.add_columns("shape", "probe", "verdict", "max_abs", "max_rel", "rms_ratio", "output", "reason")
        for row in check_rows(detail.get("checks") or []):
            checks.add_row(*row)

        trials = self.query_one("#cand-trials", DataTable)
        trials.clear(columns=True)
        trials.add_columns("shape", "side", "median", "spread", "trials")
        for row in trial_rows(detail.get("timings") or {}, detail.get("seconds")):
            trials.add_row(*row)

        diff = detail.get("diff") or ""
        parent = detail.get("parent") or "its parent"
        self.query_one("#cand-diff", Static).update(
            Syntax(diff, "diff", theme=SYNTAX_THEME, word_wrap=False) if diff.strip()
            else Text(f"no difference from {parent}", style="dim"))
        kernel = detail.get("kernel") or ""
        self.query_one("#cand-kernel", Static).update(
            Syntax(kernel, "python", theme=SYNTAX_THEME, line_numbers=True, word_wrap=False) if kernel
            else Text("no source", style="dim"))

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        # arrows then scroll what the tab shows
        pane = self.query_one(f"#{tab}", TabPane)
        target = next(iter(pane.query(".cand-scroll, DataTable")), None)
        if target is not None:
            target.focus()
