"""The timing matrix: every kept or recent candidate on every shape of the task.

When the shapes do not all fit the width (80 columns and many shapes), the primary shape
stays and the others show a page at a time: the border title says which (`shapes 1-3 of
8`) and that `]` / `[` page through them, so nothing is hidden without a hint. `t`
switches the cells between ms normalized to the baseline row and the measured figures.

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
from .rows import LABEL_WIDTH, MEASURED, NORMALIZED, MatrixRow, matrix_rows

LABEL_COLUMN = "_label"
CELL_WIDTH = {"normalized": 15, "measured": 20}  # "▲1.34x 2.45ms", "▲1.34x 2.45/3.28ms", with padding


def header_label(shape: str, primary: bool) -> Text:
    """A shape's column header on two lines (`b1_t100_h2` / `_k32_v32`), so a long name
    does not make its column wider than its cells."""
    cut = shape.find("_k") if len(shape) > 12 else -1
    top, bottom = (shape[:cut], shape[cut:]) if cut > 0 else (shape, "")
    if primary:
        return Text.assemble(("◆ ", "bold yellow"), (top, "bold"), *(("\n", ("  " + bottom, "bold")) if bottom else ()))
    return Text(top + ("\n" + bottom if bottom else ""))
TITLE = "timing matrix · ▲ faster ▼ slower ≈ noise"


class TimingMatrix(DataTable):
    # enter opens the candidate; shown in the footer (the base binding is hidden)
    BINDINGS = [
        Binding("enter", "select_cursor", "Open", key_display="⏎", id="details", show=False),
        Binding("right_square_bracket", "shapes(1)", "More shapes", show=False, id="matrix.next_shapes"),
        Binding("left_square_bracket", "shapes(-1)", "Shapes back", show=False, id="matrix.prev_shapes"),
        Binding("t", "timings", "ms", show=False, id="matrix.timings"),
    ]
    BORDER_TITLE = TITLE

    def __init__(self, *, recent: int = 20, **kwargs):
        super().__init__(cursor_type="row", fixed_columns=1, zebra_stripes=False, header_height=2, **kwargs)
        self.recent = recent
        self.hints: list[str] = []  # more hints for the title (the screen's: "f: tree")
        self.mode = NORMALIZED
        self.page = 0  # which page of the non-primary shapes shows when they do not all fit
        self._snapshot: dict = {}
        self._fit = 0  # how many shapes fit the width (0: not measured yet)
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

    def fitting(self, width: int | None = None) -> int:
        """How many shape columns fit in the width (at least one)."""
        width = self.size.width if width is None else width
        if width <= 0:
            return 1 << 16
        return max(1, (width - (LABEL_WIDTH + 2) - 2) // CELL_WIDTH[self.mode])

    def visible_shapes(self, shapes: list[str], primary: str | None) -> tuple[list[str], str]:
        """The shapes that show now, and the hint to put in the title ("" when all show)."""
        fit = self.fitting()
        if len(shapes) <= fit:
            return shapes, ""
        first = [primary] if primary in shapes else shapes[:1]
        others = [s for s in shapes if s not in first]
        per = max(1, fit - len(first))
        pages = (len(others) + per - 1) // per
        self.page %= pages
        lo = self.page * per
        page = others[lo:lo + per]
        return first + page, f"{1 + len(page)} of {len(shapes)} shapes: ] [ more"

    def on_resize(self, event) -> None:
        fit = self.fitting(event.size.width)
        if fit != self._fit and self._snapshot:
            self._fit = fit
            self.show(self._snapshot)
        self._fit = fit

    def action_shapes(self, step: int) -> None:
        self.page += step
        if self._snapshot:
            self.show(self._snapshot)

    def action_timings(self) -> None:
        self.mode = MEASURED if self.mode == NORMALIZED else NORMALIZED
        if self._snapshot:
            self.show(self._snapshot)
        self.app.notify("cells show the measured ms: candidate / its own baseline" if self.mode == MEASURED
                        else "cells show ms normalized to the baseline row (baseline-row ms / speedup)",
                        title="timing matrix", timeout=4)

    def _titles(self, snapshot: dict, hint: str) -> None:
        mode = "ms measured: candidate/own baseline" if self.mode == MEASURED else "ms at the baseline row's pace"
        self.border_title = " · ".join([TITLE, f"{mode} (t)"])
        device = str((snapshot.get("status") or {}).get("device") or "")
        cpu = "CPU: interpreter timings are not performance figures" if device.lower().startswith("cpu") else ""
        self.border_subtitle = " · ".join(x for x in (hint, *self.hints, cpu) if x)

    def show(self, snapshot: dict) -> None:
        self._snapshot = snapshot
        rows = matrix_rows(snapshot, self.recent, self.mode)
        all_shapes = [s["name"] for s in snapshot.get("shapes") or []]
        primary = next((s["name"] for s in snapshot.get("shapes") or [] if s.get("primary")), None)
        visible, hint = self.visible_shapes(all_shapes, primary)
        shapes = tuple(visible)
        self._titles(snapshot, hint)
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
            self.add_column(header_label(s, s == primary), key=s)
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
        shown = set(self._shapes)
        if old_label != new_label:
            self.update_cell(row.key, LABEL_COLUMN, row.label(), update_width=True)
            self.updates += 1
        old_map = dict(old_cells)
        for shape, sig in new_cells:
            if shape in shown and (old_map.get(shape) != sig or old_status != new_status):
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
