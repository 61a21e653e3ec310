"""The timing matrix as plain data: which rows (baseline, frontier members, the last N
attempts), in which order, and how a cell reads. No Textual here, so it is tested alone.

Rows are keyed (`baseline`, `m:<member>`, `a:<attempt id>`) and carry a hashable
signature per cell, so the table updates only the cells whose figures changed.
There is no averaged column: each shape is its own column.

Each candidate is timed against its own baseline measurement (paired, trial by trial), so
its ms and the baseline row's ms come from different measurements. So that ms and × never
contradict each other, a cell shows by default the speedup and the ms *normalized to the
baseline row* (baseline-row ms / speedup); `measured` mode shows the measured figures
instead: the candidate's ms over its own baseline's ms.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text

from ... import format as fmt
from ...messages import Selection

LABEL_WIDTH = 24
STATUS_GLYPH = {
    "proposed": ("·", "dim"),
    "evaluating": ("…", "yellow"),
    "passed": ("✓", "green"),
    "failed": ("✗", "red"),
    "error": ("!", "magenta"),
    "admitting": ("+", "green"),
    "admitted": ("+", "bold green"),
    "archived": ("a", "dim"),
    "pruned": ("-", "dim"),
}
CELL_KEYS = ("verdict", "speedup", "ms", "baseline_ms", "noise")
NORMALIZED, MEASURED = "normalized", "measured"


def cell_sig(cell: dict | None) -> tuple | None:
    if not cell:
        return None
    return tuple(cell.get(k) for k in CELL_KEYS)


@dataclass
class MatrixRow:
    key: str
    kind: str  # baseline / member / attempt
    selection: Selection | None
    label_sig: tuple
    cells: dict[str, dict | None] = field(default_factory=dict)
    status: str = ""  # attempts: their status (a missing cell reads "…" while evaluating)
    base: dict[str, float | None] = field(default_factory=dict)  # the baseline row's ms per shape
    mode: str = NORMALIZED

    @property
    def sig(self) -> tuple:
        return (self.label_sig, tuple((s, (cell_sig(c), self.base.get(s))) for s, c in self.cells.items()),
                (self.status, self.mode))

    def label(self) -> Text:
        kind, *rest = self.label_sig
        if kind == "baseline":
            return Text(_clip(f"baseline {rest[0]}".strip()), style="italic")
        if kind == "member":
            name, best = rest
            return Text.assemble(("★ " if best else "  ", "bold yellow"), (_clip(name, LABEL_WIDTH - 2), "bold"))
        aid, name, status = rest
        glyph, style = STATUS_GLYPH.get(status, ("?", ""))
        return Text.assemble((glyph + " ", style), _clip(f"#{aid} {name}", LABEL_WIDTH - 2))

    def cell(self, shape: str) -> Text:
        if self.kind == "baseline":
            return baseline_text(self.cells.get(shape))
        return cell_text(self.cells.get(shape), status=self.status, base_ms=self.base.get(shape), mode=self.mode)


def _clip(s: str, width: int = LABEL_WIDTH) -> str:
    return s if len(s) <= width else s[: width - 1] + "…"


def cell_text(cell: dict | None, status: str = "", base_ms: float | None = None, mode: str = NORMALIZED) -> Text:
    """`▲1.34x 2.45ms` better than the baseline, `▼0.81x 4.02ms` worse, `≈1.01x` within
    the timing's noise, `!` after it when the judge flagged the timing; `✗ FAIL` / `✗ ERROR` /
    `✗ FLAKY` / `✗ SUSPECT` for a failed shape, `◌0.31x` for one raced out of timing (its
    partial figure: it could not be admitted); `…` while
    the shape is being evaluated, `·` when it has not been. The ms is `base_ms / speedup`
    (normalized to the baseline row) when the row's baseline is given, else measured;
    `measured` mode shows `candidate/its baseline` ms (`2.45/3.28`)."""
    if not cell or (cell.get("verdict") in (None, "") and cell.get("speedup") is None):
        if status in ("evaluating", "proposed"):
            return Text("…", style=fmt.STYLE["pending"])
        return Text("·", style=fmt.STYLE["pending"])
    verdict = (cell.get("verdict") or "").upper()
    if verdict == "RACED" and cell.get("speedup") is not None:
        return Text(f"◌{cell['speedup']:.2f}x raced", style=fmt.STYLE["pending"])
    if verdict and verdict != "PASS":
        style = {"ERROR": fmt.STYLE["error"], "SUSPECT": fmt.STYLE["error"], "FLAKY": fmt.STYLE["flaky"]}.get(verdict, fmt.STYLE["failed"])
        return Text(f"{fmt.FAILED} {verdict}", style=style)
    sp = cell.get("speedup")
    if sp is None:
        return Text("✓ pass", style="green")
    t = fmt.trend(sp, cell.get("noise"))
    if mode == MEASURED and cell.get("baseline_ms") is not None:
        figure = f"{fmt.ms(cell.get('ms')).removesuffix('ms')}/{fmt.ms(cell['baseline_ms'])}"
    elif base_ms is not None and sp:
        figure = fmt.ms(base_ms / sp)
    else:
        figure = fmt.ms(cell.get("ms"))
    text = Text.assemble((f"{fmt.GLYPH[t]}{sp:.2f}x", fmt.STYLE[t]), " ", (figure, "dim"))
    if cell.get("flags"):
        text.append("!", style=fmt.STYLE["flaky"])  # the judge flagged its timing (the candidate screen says why)
    return text


def baseline_text(cell: dict | None) -> Text:
    if not cell or cell.get("baseline_ms") is None:
        return Text("·", style="dim")
    return Text.assemble(" 1.00x ", (fmt.ms(cell.get("baseline_ms")), "dim"))


def _baseline_cells(shapes: list[str], members: list[dict], attempts: list[dict]) -> dict[str, dict | None]:
    """The baseline's time per shape: the newest figure any evaluated candidate carries."""
    out: dict[str, dict | None] = {s: None for s in shapes}
    for row in [*members, *reversed(attempts)]:
        for s, c in (row.get("cells") or {}).items():
            if s in out and out[s] is None and c and c.get("baseline_ms") is not None:
                out[s] = {"baseline_ms": c["baseline_ms"]}
    return out


def matrix_rows(snapshot: dict, recent: int = 20, mode: str = NORMALIZED) -> list[MatrixRow]:
    """Baseline, then the members (by family, then name), then the last `recent` attempts,
    oldest first, so a new attempt is appended at the bottom (no row churn)."""
    shapes = [s["name"] for s in snapshot.get("shapes") or []]
    members = sorted(snapshot.get("members") or [], key=lambda m: (m.get("family", ""), m.get("name", "")))
    attempts = sorted(snapshot.get("attempts") or [], key=lambda a: a.get("id", 0))
    if recent >= 0:
        attempts = attempts[-recent:] if recent else []
    base_cells = _baseline_cells(shapes, members, attempts)
    base = {s: (c or {}).get("baseline_ms") for s, c in base_cells.items()}
    rows = [MatrixRow("baseline", "baseline", None, ("baseline", snapshot.get("baseline") or ""), base_cells)]
    for m in members:
        cells = m.get("cells") or {}
        rows.append(MatrixRow(f"m:{m['name']}", "member", Selection("member", m["name"], m.get("attempt")),
                              ("member", m["name"], bool(m.get("best"))), {s: cells.get(s) for s in shapes},
                              base=base, mode=mode))
    for a in attempts:
        cells = a.get("cells") or {}
        status = a.get("status") or ""
        rows.append(MatrixRow(f"a:{a['id']}", "attempt", Selection("attempt", a.get("name") or "", a["id"]),
                              ("attempt", a["id"], a.get("name") or a.get("family") or "", status),
                              {s: cells.get(s) for s in shapes}, status=status, base=base, mode=mode))
    return rows
