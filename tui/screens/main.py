"""The main screen: header, frontier tree, timing matrix, chart of the search, live agent
loop, footer. Below 110 columns the tree is hidden (f shows it) so the matrix has the width.

The screen only renders what the app hands it (a snapshot, a batch of events) and
reports what the operator points at; the app talks to the engine."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer

from ..messages import OpenDetails, Selected, Selection
from ..widgets.chart import SearchChart
from ..widgets.frontier import FrontierTree
from ..widgets.header import RunHeader
from ..widgets.loop import LoopLog
from ..widgets.matrix import TimingMatrix


def fit_footer(screen: Screen, width: int) -> None:
    """At 80 columns the action keys need the whole footer; ctrl+p is in the help screen."""
    for footer in screen.query(Footer):
        footer.show_command_palette = width >= 100


class MainScreen(Screen):
    AUTO_FOCUS = "#matrix"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]

    def __init__(self) -> None:
        super().__init__()
        self.selection: Selection | None = None

    def compose(self) -> ComposeResult:
        app = self.app
        yield RunHeader(clock=app.clock, id="header")
        with Horizontal(id="body"):
            yield FrontierTree(id="frontier")
            yield TimingMatrix(recent=app.recent_attempts, id="matrix")
        with Horizontal(id="bottom"):
            yield LoopLog(max_lines=app.log_lines, now=app.wallclock, id="loop")
            yield SearchChart(id="chart")
        yield Footer(compact=True)

    @property
    def header(self) -> RunHeader:
        return self.query_one(RunHeader)

    @property
    def frontier_tree(self) -> FrontierTree:
        return self.query_one(FrontierTree)

    @property
    def matrix(self) -> TimingMatrix:
        return self.query_one(TimingMatrix)

    @property
    def loop(self) -> LoopLog:
        return self.query_one(LoopLog)

    @property
    def chart(self) -> SearchChart:
        return self.query_one(SearchChart)

    def show_snapshot(self, snapshot: dict) -> None:
        first = not self.matrix.row_keys
        with self.app.batch_update():
            if snapshot.get("status"):
                self.header.set_status(snapshot["status"])
            self.frontier_tree.show(snapshot)
            self.matrix.show(snapshot)
            self.chart.show_curve(snapshot.get("curve"))
            names = {m["name"] for m in snapshot.get("members") or []}
            gone = self.selection is not None and self.selection.kind == "member" and self.selection.name not in names
            if first or self.selection is None or gone:  # nothing (or a pruned member) selected: the best
                self._point_at_best(snapshot)

    def _point_at_best(self, snapshot: dict) -> None:
        """Start on the best member, so enter, r, x, g act on something sensible."""
        best = next((m["name"] for m in snapshot.get("members") or [] if m.get("best")), None)
        keys = self.matrix.row_keys
        if best and f"m:{best}" in keys:
            self.matrix.move_cursor(row=keys.index(f"m:{best}"), animate=False)
            self.selection = Selection("member", best, next(
                (m.get("attempt") for m in snapshot["members"] if m["name"] == best), None))

    def on_resize(self, event) -> None:
        fit_footer(self, event.size.width)
        self._tree_hint()

    def toggle_tree(self) -> None:
        """Below 110 columns the tree is hidden (the matrix needs the width); f shows it."""
        self.toggle_class("-tree")
        self._tree_hint()

    def _tree_hint(self) -> None:
        hidden = self.has_class("-narrow") and not self.has_class("-tree")
        hints = ["f: tree"] if hidden else []
        matrix = self.matrix
        if matrix.hints != hints:
            matrix.hints = hints
            if matrix._snapshot:
                matrix.show(matrix._snapshot)

    def on_descendant_focus(self, event) -> None:
        # what is highlighted in the pane the operator moves to is what the keys act on;
        # focus coming back from a dialog to a pane with nothing highlighted keeps the selection
        if isinstance(event.widget, (FrontierTree, TimingMatrix)) and event.widget.selection is not None:
            self.selection = event.widget.selection

    @on(Selected)
    def _selected(self, message: Selected) -> None:
        # only the pane the operator is in decides (a tree refilling itself must not)
        if message.source is None or message.source is self.focused:
            self.selection = message.selection

    @on(OpenDetails)
    def _open(self, message: OpenDetails) -> None:
        self.selection = message.selection
        self.app.open_details(message.selection)
