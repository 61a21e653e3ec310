"""`c`: the chart of the search on the whole screen (live: it follows the snapshots)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer

from ..widgets.chart import SearchChart


class ChartScreen(Screen[None]):
    BINDINGS = [Binding("escape,c,q", "close", "Back", id="chart.close")]

    def compose(self) -> ComposeResult:
        yield SearchChart(id="chart-full")
        yield Footer(compact=True)

    @property
    def chart(self) -> SearchChart:
        return self.query_one(SearchChart)

    def on_mount(self) -> None:
        self.chart.show_curve(self.app.snapshot.get("curve"))

    def action_close(self) -> None:
        self.dismiss(None)
