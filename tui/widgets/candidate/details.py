"""A candidate's details as table rows: the checks per shape and the per-trial timings,
from the `candidate` result (CheckReport and PairedTiming dicts, engine/checks.py and
engine/timing.py). Plain functions; the screen puts them in DataTables."""

from __future__ import annotations

from rich.text import Text

from kdatui.engine.timing import noise_of

from ... import format as fmt

VERDICT_STYLE = {"PASS": "green", "RACED": "dim", "FAIL": "bold red", "FLAKY": "bold yellow", "SUSPECT": "bold magenta", "ERROR": "bold magenta"}


def verdict_text(v: str | None) -> Text:
    v = (v or "?").upper()
    glyph = "✓" if v == "PASS" else fmt.FAILED
    return Text(f"{glyph} {v}", style=VERDICT_STYLE.get(v, ""))


def _num(v) -> str:
    if v is None:
        return "-"
    try:
        return f"{float(v):.2e}"
    except (TypeError, ValueError):
        return str(v)


def check_rows(checks: list[dict]) -> list[tuple]:
    """(shape, probe, verdict, max_abs, max_rel, rms_ratio, output, reason) per check."""
    rows = []
    for report in checks or []:
        shape = report.get("shape", "")
        results = report.get("results") or []
        if not results:
            rows.append((shape, "-", verdict_text(report.get("verdict")), "-", "-", "-", "", ""))
        for r in results:
            rows.append((shape, r.get("probe", ""), verdict_text(r.get("verdict")), _num(r.get("max_abs")),
                         _num(r.get("max_rel")), _num(r.get("rms_ratio")), r.get("output", ""),
                         r.get("reason", "")))
    return rows


def time_spent(seconds: dict | None) -> str:
    """Where an evaluation's time went, from its record's `seconds`: `checks 0.62s · timing
    0.98s (warmup 0.04, fill 0.16, batches 0.54, audit 0.25) · 1.79s in all`."""
    if not seconds:
        return ""
    parts = [f"checks {seconds.get('checks', 0.0):.2f}s"]
    if seconds.get("timing"):
        inner = ", ".join(f"{k.split('.', 1)[1]} {v:.2f}" for k, v in seconds.items() if k.startswith("timing."))
        parts.append(f"timing {seconds['timing']:.2f}s" + (f" ({inner})" if inner else ""))
    parts.append(f"{seconds.get('total', 0.0):.2f}s in all")
    return " · ".join(parts)


def trial_rows(timings: dict[str, dict], seconds: dict[str, dict] | None = None) -> list[tuple]:
    """Per shape: the candidate's and the baseline's median, spread and every trial's time,
    then the speedup (noise: the spread of the per-trial paired ratios), why timing stopped
    early if it was raced out, and where the evaluation's time went (`seconds`, per shape)."""
    rows = []
    seconds = seconds or {}
    for shape, t in (timings or {}).items():
        spent = time_spent(seconds.get(shape))
        if not t:
            rows.append((shape, "-", "-", "-", "not timed"))
            if spent:
                rows.append((shape, "time", "", "", spent))
            continue
        for side in ("candidate", "baseline"):
            s = t.get(side) or {}
            trials = " ".join(fmt.ms(x) for x in s.get("trial_ms") or [])
            if s.get("host_ms") is not None:
                trials += f"  (host {fmt.ms(s['host_ms'])} a call)"
            rows.append((shape, side, fmt.ms(s.get("median_ms")), f"{(s.get('spread') or 0) * 100:.1f}%", trials))
        sp = t.get("speedup")
        noise = noise_of(t) or 0.0
        trend = fmt.trend(sp, noise)
        rows.append((shape, "speedup", Text(f"{fmt.GLYPH[trend]}{fmt.speedup(sp)}", style=fmt.STYLE[trend]),
                     f"±{noise * 100:.1f}%",
                     f"{t.get('trials', '?')} trials x {t.get('repeats', '?')} calls, {t.get('timer', '?')}"
                     + (", L2 flushed" if t.get("flush_l2") else "")))
        if t.get("suspect"):
            rows.append((shape, "SUSPECT", Text("✗", style="bold magenta"), "", t["suspect"]))
        for flag in t.get("flags") or []:
            rows.append((shape, "flag", Text("!", style="bold yellow"), "", flag))
        if t.get("raced"):
            rows.append((shape, "RACED", Text("◌", style="dim"), "", t["raced"]))
        if spent:
            rows.append((shape, "time", "", "", spent))
    return rows


def _nowrap(*parts) -> Text:
    t = Text.assemble(*parts)
    t.no_wrap = True
    t.overflow = "ellipsis"
    return t


def summary_lines(detail: dict, title: str) -> list[Text]:
    """Three lines over the tabs: name, family, status and verdicts; parent; branch, sha
    and why it was kept."""
    sep = (" · ", "dim")
    verdicts = [c.get("verdict") for c in detail.get("checks") or []]
    shown = [(title, "bold")]
    for key in ("family", "status"):
        if detail.get(key):
            shown += [sep, (f"{key} ", "dim"), str(detail[key])]
    if verdicts:
        passed = sum(v == "PASS" for v in verdicts)
        shown += [sep, (f"checks {passed}/{len(verdicts)} shapes pass",
                        "green" if passed == len(verdicts) else "red")]
    lines = [_nowrap(*shown), _nowrap(("parent ", "dim"), str(detail.get("parent") or "-"))]
    third: list = []
    if detail.get("branch"):
        third += [("branch ", "dim"), str(detail["branch"])]
    if detail.get("sha"):
        third += [("@", "dim"), str(detail["sha"])[:10]]
    if detail.get("why"):
        third += [sep, (str(detail["why"]), "italic")]
    if third:
        lines.append(_nowrap(*third))
    return lines
