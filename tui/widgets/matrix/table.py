"""The timing matrix: every kept or recent candidate on every shape of the task.

Rows are keyed and updated in place (dolphie style): a fresh snapshot changes only the
cells whose figures changed, inside `batch_update()`. Rows are removed one by one when
they leave (a pruned member, the oldest attempt scrolling out of the last N) and the
table is rebuilt only when the order itself changes (a new member, new shapes after a
generalize), which is rare.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from ...messages import OpenDetails, Selected, Selection
from .rows import MatrixRow, matrix_rows

LABEL_COLUMN = "_label"


class TimingMatrix(DataTable):
    # enter opens the candidate; shown in the footer (the base binding is hidden)
    BINDINGS = [Binding("enter", "select_cursor", "Open", key_display="⏎", id="details")]
    BORDER_TITLE = "timing matrix · speedup over the baseline (▲ faster ▼ slower ≈ noise)"

    def __init__(self, *, recent: int = 20, **kwargs):
        super().__init__(cursor_type="row", fixed_columns=1, zebra_stripes=False, **kwargs)
        self.recent = recent
        self._columns_sig: tuple = ()
        self._shapes: tuple[str, ...] = ()
        self._order: list[str] = []
        self._sigs: dict[str, tuple] = {}
        self._selections: dict[str, Selection | None] = {}
        self.updates = 0  # cells written since mount (tests and the bench read it)
        self.rebuilds = 0

    # ------------------------------------------------------------------ reading

    @property
    def row_keys(self) -> list[str]:
        return list(self._order)

    def cursor_key(self) -> str | None:
        if not self._order or self.cursor_row < 0 or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    @property
    def selection(self) -> Selection | None:
        key = self.cursor_key()
        return self._selections.get(key) if key else None

    # ------------------------------------------------------------------ updating

    def show(self, snapshot: dict) -> None:
        rows = matrix_rows(snapshot, self.recent)
        shapes = tuple(s["name"] for s in snapshot.get("shapes") or [])
        primary = next((s["name"] for s in snapshot.get("shapes") or [] if s.get("primary")), None)
        keep = self.cursor_key()
        with self.app.batch_update():
            if (shapes, primary) != self._columns_sig:
                self._reset_columns(shapes, primary)
            wanted = [r.key for r in rows]
            wanted_set = set(wanted)
            for key in [k for k in self._order if k not in wanted_set]:
                self.remove_row(key)
                self._sigs.pop(key, None)
                self._selections.pop(key, None)
            self._order = [k for k in self._order if k in wanted_set]
            if self._order != wanted[: len(self._order)]:
                self._clear_rows()
            by_key = {r.key: r for r in rows}
            for key in self._order:
                self._update_row(by_key[key])
            for row in rows[len(self._order):]:
                self._add_row(row)
            self._restore_cursor(keep)

    def _reset_columns(self, shapes: tuple[str, ...], primary: str | None) -> None:
        self.clear(columns=True)
        self.rebuilds += 1
        self._order, self._sigs, self._selections = [], {}, {}
        self.add_column("candidate", key=LABEL_COLUMN)
        for s in shapes:
            label = Text.assemble(("◆ ", "bold yellow"), (s, "bold")) if s == primary else Text(s)
            self.add_column(label, key=s)
        self._shapes = shapes
        self._columns_sig = (shapes, primary)

    def _clear_rows(self) -> None:
        self.clear()
        self.rebuilds += 1
        self._order, self._sigs, self._selections = [], {}, {}

    def _add_row(self, row: MatrixRow) -> None:
        self.add_row(row.label(), *(row.cell(s) for s in self._shapes), key=row.key)
        self._order.append(row.key)
        self._sigs[row.key] = row.sig
        self._selections[row.key] = row.selection
        self.updates += 1 + len(self._shapes)

    def _update_row(self, row: MatrixRow) -> None:
        old = self._sigs.get(row.key)
        new = row.sig
        if old == new:
            return
        old_label, old_cells, old_status = old
        new_label, new_cells, new_status = new
        if old_label != new_label:
            self.update_cell(row.key, LABEL_COLUMN, row.label(), update_width=True)
            self.updates += 1
        old_map = dict(old_cells)
        for shape, sig in new_cells:
            if old_map.get(shape) != sig or old_status != new_status:
                self.update_cell(row.key, shape, row.cell(shape), update_width=True)
                self.updates += 1
        self._sigs[row.key] = new
        self._selections[row.key] = row.selection

    def _restore_cursor(self, keep: str | None) -> None:
        if keep is None or keep not in self._sigs:
            return
        index = self._order.index(keep)
        if index != self.cursor_row:
            self.move_cursor(row=index, animate=False)

    # ------------------------------------------------------------------ events

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(Selected(self._selections.get(event.row_key.value), self))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        sel = self._selections.get(event.row_key.value)
        if sel is not None:
            self.post_message(OpenDetails(sel))
