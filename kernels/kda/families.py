"""The kernel families as data: where each family's source is, its tunables, and how to
render a variant (the family's file with another CONFIG) as a self-contained candidate."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

HERE = Path(__file__).parent
FAMILIES = {"fused": HERE / "fused.py", "split": HERE / "split.py", "wide": HERE / "wide.py"}


def source(family: str) -> str:
    if family not in FAMILIES:
        raise KeyError(f"unknown kernel family {family!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[family].read_text()


def module(family: str):
    return importlib.import_module(f"{__package__}.{family}")


def params(family: str) -> dict:
    return dict(module(family).PARAMS)


def default_config(family: str) -> dict:
    return dict(module(family).CONFIG)


def validate(family: str, config: dict) -> dict:
    """The full config (defaults filled in); a key or value outside PARAMS is an error."""
    allowed = params(family)
    full = default_config(family)
    for k, v in config.items():
        if k.startswith("_"):
            raise ValueError(f"{family}: {k} is a profiling knob, not a tunable")
        if k not in allowed:
            raise ValueError(f"{family}: unknown tunable {k!r}; tunables: {', '.join(allowed)}")
        if v not in allowed[k]:
            raise ValueError(f"{family}: {k} = {v!r} not allowed; allowed: {allowed[k]}")
        full[k] = v
    return full


def _config_span(text: str) -> tuple[int, int]:
    """Character span of the `CONFIG = dict(...)` statement."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CONFIG" for t in node.targets):
            start = offsets[node.lineno - 1] + node.col_offset
            end = offsets[node.end_lineno - 1] + node.end_col_offset
            return start, end
    raise ValueError("no CONFIG = ... statement found")


def format_config(config: dict, width: int = 100) -> str:
    parts = [f"{k}={v!r}" for k, v in config.items()]
    out, line = [], "CONFIG = dict("
    for i, p in enumerate(parts):
        piece = p + (", " if i < len(parts) - 1 else ")")
        if len(line) + len(piece.rstrip()) > width:
            out.append(line.rstrip())
            line = "              "
        line += piece
    out.append(line)
    return "\n".join(out)


def render(family: str, config: dict) -> str:
    """The family's source with CONFIG replaced by `config` (validated, defaults filled)."""
    text = source(family)
    start, end = _config_span(text)
    return text[:start] + format_config(validate(family, config)) + text[end:]


def config_of(text: str) -> dict:
    """Read CONFIG back out of a rendered candidate's source."""
    start, end = _config_span(text)
    node = ast.parse(text[start:end]).body[0].value
    return {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
