"""The frontier as a tree: families -> member branches, the best marked.

Updated in place: a new member gets a leaf, a pruned member's leaf goes, a changed
label is set; the cursor stays on the member it was on.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Tree

from ... import format as fmt
from ...messages import OpenDetails, Selected, Selection


def member_label(member: dict, primary: str | None) -> Text:
    cell = (member.get("cells") or {}).get(primary or "") or {}
    sp = cell.get("speedup")
    t = fmt.trend(sp, cell.get("noise"))
    best = bool(member.get("best"))
    parts: list = [("★ " if best else "", "bold yellow"), (member["name"], "bold" if best else "")]
    if sp is not None and (cell.get("verdict") in (None, "PASS")):
        parts += [" ", (f"{fmt.GLYPH[t]}{sp:.2f}x", fmt.STYLE[t])]
    status = member.get("status")
    if status and status != "member":
        parts += [" ", (f"[{status}]", "italic yellow")]
    return Text.assemble(*parts)


class FrontierTree(Tree[Selection]):
    BINDINGS = [Binding("enter", "select_cursor", "Open", key_display="⏎", id="details", show=False)]
    BORDER_TITLE = "frontier"

    def __init__(self, **kwargs):
        super().__init__("frontier", **kwargs)
        self.show_root = False
        self.guide_depth = 2
        self._families: dict[str, object] = {}
        self._members: dict[str, object] = {}
        self._labels: dict[str, tuple] = {}

    @property
    def member_names(self) -> list[str]:
        return list(self._members)

    @property
    def selection(self) -> Selection | None:
        node = self.cursor_node
        return node.data if node is not None else None

    def show(self, snapshot: dict) -> None:
        primary = next((s["name"] for s in snapshot.get("shapes") or [] if s.get("primary")), None)
        task = (snapshot.get("status") or {}).get("task") or ""
        self.border_title = f"frontier · {task}" if task else "frontier"
        members = {m["name"]: m for m in snapshot.get("members") or []}
        keep = self.selection
        for name in [n for n in self._members if n not in members]:
            self._members.pop(name).remove()
            self._labels.pop(name, None)
        by_family: dict[str, list[dict]] = {}
        for m in sorted(members.values(), key=lambda m: (m.get("family", ""), m["name"])):
            by_family.setdefault(m.get("family") or "?", []).append(m)
        for fam in [f for f in self._families if f not in by_family]:
            self._families.pop(fam).remove()
        for fam, ms in sorted(by_family.items()):
            node = self._families.get(fam)
            best = any(m.get("best") for m in ms)
            flabel = Text.assemble((fam, "bold"), f" ({len(ms)})", (" ★" if best else "", "bold yellow"))
            if node is None:
                node = self.root.add(flabel, expand=True)
                self._families[fam] = node
            elif str(node.label) != flabel.plain:
                node.set_label(flabel)
            for m in ms:
                sig = (m["name"], bool(m.get("best")), m.get("status"),
                       tuple(sorted(((m.get("cells") or {}).get(primary or "") or {}).items())))
                leaf = self._members.get(m["name"])
                if leaf is None:
                    self._members[m["name"]] = node.add_leaf(member_label(m, primary),
                                                             data=Selection("member", m["name"], m.get("attempt")))
                    self._labels[m["name"]] = sig
                elif self._labels.get(m["name"]) != sig:
                    leaf.set_label(member_label(m, primary))
                    self._labels[m["name"]] = sig
        if keep is not None and keep.name in self._members and self.selection != keep:
            self.move_cursor(self._members[keep.name])

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted) -> None:
        event.stop()
        self.post_message(Selected(event.node.data, self))

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        event.stop()
        if event.node.data is not None:
            self.post_message(OpenDetails(event.node.data))
