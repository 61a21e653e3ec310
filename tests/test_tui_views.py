"""What the screen says, and that it says it truthfully: the header at 80 columns, the
matrix's figures against its one baseline row, every shape reachable at 80 columns, the
chart of the search, more budget, generalize on the CPU, and detaching from a finished
run. Against the fake engine (tests/fake_engine.py)."""

from __future__ import annotations

from fake_engine import (FakeEngine, aio, cell, cpu_state, demo_curve, demo_state, eight_shapes_state, make_app,
                         ready, until)
from fake_engine import fake, utc  # noqa: F401  (fixtures)
from kdatui.tui.screens.chart import ChartScreen
from kdatui.tui.screens.dialogs import GeneralizeDialog, PromptDialog
from kdatui.tui.widgets.chart import chart_lines
from kdatui.tui.widgets.matrix import cell_text, matrix_rows
from kdatui.tui.widgets.matrix.rows import MEASURED

SMALL = (80, 24)


def screen_text(app) -> str:
    from rich.console import Console
    import os

    con = Console(width=app.size.width, record=True, file=open(os.devnull, "w"), color_system=None)
    con.print(app.screen._compositor.render_update(full=True))
    return con.export_text()


# ---------------------------------------------------------------------------- the header

@aio
async def test_the_cpu_device_label_is_whole_at_80_columns():
    with FakeEngine(cpu_state()) as fake:
        app = make_app(fake)
        async with app.run_test(size=SMALL) as pilot:
            await ready(pilot)
            await pilot.pause(0.1)
            header = screen_text(app).splitlines()[:3]
            assert any(line.rstrip().endswith("CPU · Triton interpreter") for line in header), header


@aio
async def test_q_on_a_finished_run_does_not_say_the_run_goes_on():
    state = demo_state()
    state["status"].update(state="finished", why="budget spent: 6 attempts", current=None)
    with FakeEngine(state) as fake:
        app = make_app(fake)
        async with app.run_test(size=SMALL) as pilot:
            await ready(pilot)
            assert "✓ finished (budget spent: 6 attempts)" in screen_text(app)
            await pilot.press("q")
            await pilot.pause(0.05)
        assert app.return_value == "detached-finished"


def test_the_cli_says_what_detaching_left_behind(monkeypatch, capsys):
    from pathlib import Path

    import kdatui.tui.app as app_mod
    import kdatui.verbs_run as verbs

    monkeypatch.setattr(verbs, "frontier_dir", lambda: Path("/nonexistent"))

    monkeypatch.setattr(app_mod, "run_tui", lambda path: "detached-finished")
    verbs.attach()
    out = capsys.readouterr().out
    assert "the run has finished" in out and "goes on" not in out.replace("to go on", "")


# ---------------------------------------------------------------------------- the matrix

def test_ms_are_normalized_to_the_baseline_row_so_they_agree_with_the_speedups():
    snap = cpu_state()
    rows = {r.key: r for r in matrix_rows(snap)}
    base = rows["baseline"].cells["b2_t37_h3_k32_v32"]["baseline_ms"]
    for key in ("m:fused-c64-w4", "m:split-bv64-c16", "a:1"):
        r = rows[key]
        c = r.cells["b2_t37_h3_k32_v32"]
        shown = r.cell("b2_t37_h3_k32_v32").plain
        # the cell's ms is the baseline row's over the speedup: a faster one never shows more ms
        assert shown.endswith(f"{base / c['speedup']:.0f}ms"), shown
    slower = rows["m:split-bv64-c16"].cell("b2_t37_h3_k32_v32").plain  # 0.81x
    faster = rows["m:fused-c32-w8"].cell("b2_t37_h3_k32_v32").plain  # 1.18x
    assert float(slower.split()[-1][:-2]) > base > float(faster.split()[-1][:-2])


def test_measured_mode_shows_each_cells_own_baseline():
    c = cell("b1_t8192_h96", 1.34)
    assert cell_text(c, base_ms=9.0).plain == "▲1.34x 6.72ms"  # normalized to a 9 ms baseline row
    assert cell_text(c, base_ms=9.0, mode=MEASURED).plain == "▲1.34x 4.19/5.61ms"


@aio
async def test_t_switches_the_matrix_to_measured_figures_and_the_title_says_which(fake):
    app = make_app(fake)
    async with app.run_test(size=(140, 40)) as pilot:
        await ready(pilot)
        m = app.main.matrix
        assert "ms at the baseline row's pace" in m.border_title
        m.focus()
        await pilot.press("t")
        await pilot.pause(0.05)
        assert "measured" in m.border_title
        assert m.get_cell("m:fused-c64-w4", "b1_t8192_h96").plain == "▲1.34x 4.19/5.61ms"


@aio
async def test_on_the_cpu_the_matrix_says_timings_are_not_performance_figures():
    with FakeEngine(cpu_state()) as fake:
        app = make_app(fake)
        async with app.run_test(size=SMALL) as pilot:
            await ready(pilot)
            assert "not performance figures" in app.main.matrix.border_subtitle


@aio
async def test_the_cpu_tasks_three_shapes_all_show_at_80x24():
    with FakeEngine(cpu_state()) as fake:
        app = make_app(fake)
        async with app.run_test(size=SMALL) as pilot:
            await ready(pilot)
            await pilot.pause(0.1)
            m = app.main.matrix
            assert list(m._shapes) == ["b1_t100_h2_k32_v32", "b2_t64_h2_k64_v64", "b2_t37_h3_k32_v32"]
            assert "f: tree" in m.border_subtitle, "the hidden tree is hinted"
            text = screen_text(app)
            assert "b2_t37_h3" in text and "▼0.81x" in text


@aio
async def test_with_eight_shapes_the_matrix_pages_them_and_says_so():
    with FakeEngine(eight_shapes_state()) as fake:
        app = make_app(fake)
        async with app.run_test(size=SMALL) as pilot:
            await ready(pilot)
            await pilot.pause(0.1)
            m = app.main.matrix
            first = list(m._shapes)
            assert first[0] == "b1_t8192_h96" and len(first) < 8
            assert f"{len(first)} of 8 shapes: ] [ more" in m.border_subtitle
            seen = set(first)
            for _ in range(8):
                await pilot.press("right_square_bracket")
                await pilot.pause(0.02)
                assert m._shapes[0] == "b1_t8192_h96", "the primary shape stays"
                seen |= set(m._shapes)
            assert len(seen) == 8, "every shape is reachable"


@aio
async def test_f_shows_the_hidden_tree_at_80_columns(fake):
    app = make_app(fake)
    async with app.run_test(size=SMALL) as pilot:
        await ready(pilot)
        tree = app.main.frontier_tree
        assert not tree.display or tree.size.width == 0
        await pilot.press("f")
        await pilot.pause(0.05)
        assert tree.size.width > 0 and "f: tree" not in app.main.matrix.border_subtitle


# ---------------------------------------------------------------------------- the chart

def test_the_chart_draws_every_attempt_and_the_best_so_far():
    st = demo_state()
    curve = st["curve"]
    lines = [t.plain for t in chart_lines(curve, 60, 12)]
    body = "\n".join(lines[:-2])  # the plot, without the axis and the legend
    assert "1.40x" in lines[0] and "1.00x" in body  # the highest point, the baseline
    assert body.count("◆") == len(curve["best"]) and "─" in body
    assert body.count("✗") >= 2 and "!" in body  # failed and error attempts are points too
    assert "time since the first attempt" in lines[-2] and "1h50m" in lines[-2]
    assert "raced" in lines[-1]
    empty = [t.plain for t in chart_lines({}, 60, 8)]
    assert "no evaluated attempt yet" in empty[0]


@aio
async def test_c_opens_the_chart_and_it_fills_as_attempts_come(fake):
    app = make_app(fake)
    async with app.run_test(size=SMALL) as pilot:
        await ready(pilot)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ChartScreen), what="the chart")
        chart = app.screen.chart
        assert "11 attempts" in chart.border_title
        att = fake.state["attempts"]
        att.append({"id": 13, "family": "split", "name": "split-bv16", "status": "admitted", "verdict": "passed",
                    "parent": "base", "idea": "", "reason": "", "cells": {"b1_t8192_h96": cell("b1_t8192_h96", 1.5)}})
        fake.state["curve"] = demo_curve(att, fake.state["shapes"])
        fake.emit("attempt-evaluated", attempt=13, text="#13 PASS 1.50x")
        await until(pilot, lambda: "12 attempts, best 1.50x" in chart.border_title, what="the new point", timeout=20)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ChartScreen))


# ---------------------------------------------------------------------------- actions

@aio
async def test_b_gives_the_run_more_budget(fake):
    app = make_app(fake)
    async with app.run_test(size=SMALL) as pilot:
        await ready(pilot)
        await pilot.press("b")
        await until(pilot, lambda: isinstance(app.screen, PromptDialog), what="the budget prompt")
        await pilot.press(*"+2h +20attempts", "enter")
        await until(pilot, lambda: fake.commands("budget"), what="the budget request", timeout=20)
        assert fake.commands("budget")[0]["change"] == "+2h,+20attempts"


@aio
async def test_generalize_on_the_cpu_offers_small_shapes_and_asks_whether_to_continue():
    with FakeEngine(cpu_state()) as fake:
        app = make_app(fake)
        async with app.run_test(size=SMALL) as pilot:
            await ready(pilot)
            await pilot.press("g")
            await until(pilot, lambda: isinstance(app.screen, GeneralizeDialog))
            dialog = app.screen
            offered = [name for name, _ in dialog.common]
            assert offered and all(int(n.split("_t")[1].split("_")[0]) <= 256 for n in offered), offered
            await pilot.press("space")
            dialog.query_one("#gen-continue").value = False
            await pilot.press("ctrl+g")
            await until(pilot, lambda: len(fake.commands("generalize")) == 2, timeout=20)
            req = fake.commands("generalize")[-1]
            assert req["shapes"] == [offered[0]] and req["continue_search"] is False
