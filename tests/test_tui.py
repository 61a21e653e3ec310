"""The TUI against a fake engine that speaks the control protocol (tests/fake_engine.py):
every binding sends the right command and the screen shows the engine's answer; events
are batched; the engine going away is shown, not a traceback.

These run in a second or so each; the fake engine serves from threads of the test
process over a real Unix socket, so the TUI's client code is exercised as in a run."""

from __future__ import annotations


import pytest
from rich.text import Text
from textual.command import CommandPalette
from textual.widgets import DataTable, Input, SelectionList

from fake_engine import T0, FakeEngine, aio, cell, demo_state, make_app, ready, until
from fake_engine import fake, utc  # noqa: F401  (fixtures: the fake engine, clocks in UTC)
from kdatui.tui.app import answer_text, load_keymap
from kdatui.tui.client import EventFeed
from kdatui.tui.commands import ACTIONS
from kdatui.tui.screens.candidate import CandidateScreen
from kdatui.tui.screens.dialogs import (ConfirmDialog, EngineGoneDialog, GeneralizeDialog, PromptDialog, check_specs,
                                        split_specs)
from kdatui.tui.screens.help import HelpScreen
from kdatui.tui.screens.task_picker import TaskPickerApp
from kdatui.tui.widgets.header import device_text, header_lines
from kdatui.tui.widgets.loop import event_line
from kdatui.tui.widgets.matrix import cell_text, matrix_rows

SIZE = (100, 30)




def header_text(app) -> str:
    lines = header_lines(app.main.header.status, lost=app.main.header.lost)
    return "\n".join(t.plain for t in lines) + "\n" + device_text(app.main.header.status).plain


def notifications(app) -> list[str]:
    return [n.message for n in app._notifications]


# ---------------------------------------------------------------------------- pure parts

def test_cells_read_without_colour_and_failures_name_their_verdict():
    assert cell_text(cell("b1_t8192_h96", 1.34)).plain.startswith("▲1.34x")
    assert cell_text(cell("b1_t8192_h96", 0.80)).plain.startswith("▼0.80x")
    assert cell_text(cell("b1_t8192_h96", 1.01)).plain.startswith("≈1.01x")  # inside the 2% noise
    assert cell_text(cell("b1_t8192_h96", None, "FAIL")).plain == "✗ FAIL"
    assert cell_text(cell("b1_t8192_h96", None, "ERROR")).plain == "✗ ERROR"
    assert cell_text(cell("b1_t8192_h96", 0.31, "RACED")).plain == "◌0.31x raced"  # its partial figure
    assert cell_text(None, status="evaluating").plain == "…"
    assert cell_text(None).plain == "·"


def test_matrix_rows_are_baseline_members_then_recent_attempts_with_no_average():
    snap = demo_state()
    rows = matrix_rows(snap, recent=5)
    keys = [r.key for r in rows]
    assert keys[0] == "baseline"
    assert keys[1:5] == ["m:fused-c32-w8", "m:fused-c64-w4", "m:split-bv32-c16", "m:split-bv64-c16"]
    assert keys[5:] == ["a:8", "a:9", "a:10", "a:11", "a:12"]  # oldest first: new ones append
    shapes = {s["name"] for s in snap["shapes"]}
    for r in rows:
        assert set(r.cells) == shapes  # one column per shape, nothing averaged


def test_header_ticks_elapsed_and_cleanup_only_while_running():
    st = demo_state()["status"]
    lines = header_lines(st, since_fetch=60)
    assert "3h26m" in lines[1].plain and "8h33m" in lines[1].plain
    lines = header_lines({**st, "state": "paused", "why": "paused by the operator"}, since_fetch=60)
    assert "paused (paused by the operator)" in lines[0].plain and "3h25m" in lines[1].plain
    assert "engine gone" in header_lines(st, lost="the engine closed the connection")[0].plain


def test_the_header_counts_raced_out_attempts_and_the_rate_when_the_engine_gives_them():
    st = demo_state()["status"]
    plain = header_lines(st)[2].plain
    assert "raced" not in plain and "/h" not in plain
    st = {**st, "attempts": {**st["attempts"], "raced": 3, "per_hour": 41.6}}
    assert "raced 3  42/h  members" in header_lines(st)[2].plain


def test_a_candidates_timing_rows_say_it_was_raced_out_and_where_the_time_went():
    from kdatui.tui.widgets.candidate.details import trial_rows

    side = {"median_ms": 3.0, "spread": 0.01, "trial_ms": [3.0]}
    timing = {"candidate": side, "baseline": {**side, "median_ms": 1.0}, "speedup": 0.33, "trials": 1,
              "repeats": 2, "timer": "perf_counter", "raced": "raced out after 1 trial: at best 0.333x, below 1.2x"}
    seconds = {"checks": 0.62, "timing": 0.31, "timing.warmup": 0.04, "timing.batches": 0.27, "total": 0.95}
    rows = {r[1]: r for r in trial_rows({"p": timing}, {"p": seconds})}
    assert rows["RACED"][4].startswith("raced out after 1 trial")
    assert rows["time"][4] == "checks 0.62s · timing 0.31s (warmup 0.04, batches 0.27) · 0.95s in all"


def test_the_header_says_when_candidates_are_not_sandboxed():
    st = demo_state()["status"]
    assert "not sandboxed" not in header_lines(st)[0].plain
    warned = {**st, "sandbox": {"kind": "none", "warning": "candidates not sandboxed: bubblewrap is not installed"}}
    line = header_lines(warned)[0].plain
    assert "⚠ candidates not sandboxed: bubblewrap is not installed" in line
    assert line.index("not sandboxed") < line.index("task")  # first, after the state: it stays in sight


def test_event_lines_show_kind_and_text():
    assert event_line({"ts": T0, "kind": "admitted", "text": "x admitted"}) == "22:13:20 admit   x admitted"
    assert event_line({"ts": T0, "kind": "agent-output", "line": "hello"}).endswith("agent   hello")


def test_typed_shapes_are_checked_with_the_engine_parser():
    assert split_specs("b1_t4096_h64  B=2,T=2048,H=32;b1_t100_h2_k32_v32") == [
        "b1_t4096_h64", "B=2,T=2048,H=32", "b1_t100_h2_k32_v32"]
    assert check_specs(["b1_t4096_h64", "B=2,T=2048,H=32"]) is None
    assert "missing H" in check_specs(["B=1,T=4096"])


def test_answer_text_prefers_the_engines_words():
    assert answer_text("pause", {"text": "paused"}) == "paused"
    assert answer_text("archive", {"moved": 3}) == "archive: moved 3"
    assert answer_text("note", {}) == "note: done"


def test_event_feed_wakes_the_app_once_per_burst():
    wakes = []
    feed = EventFeed("/nonexistent", backlog=0, keep=10, on_wake=lambda: wakes.append(1))
    feed._add([{"kind": "agent-output"}] * 30)
    feed._add([{"kind": "admitted"}])
    assert len(wakes) == 1
    batch = feed.drain()
    assert batch.received == 31 and len(batch.events) == 10 and batch.stale
    feed._add([{"kind": "eval-progress", "i": 1}])
    assert len(wakes) == 2 and feed.drain().progress == {"kind": "eval-progress", "i": 1}


def test_keymap_file_is_read_and_bad_ids_are_reported(tmp_path):
    p = tmp_path / "tui.toml"
    p.write_text('[keymap]\npause = "k"\nfly = "f"\n')
    keymap, problem = load_keymap(p)
    assert keymap == {"pause": "k"} and "'fly'" in problem


# ---------------------------------------------------------------------------- the main screen

@aio
async def test_main_screen_shows_header_tree_matrix_and_log(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        head = header_text(app)
        for part in ("running", "kda_fwd_demo-0001", "kda_fwd_demo", "generalized", "3h25m/6h",
                     "▲1.34x fused-c64-w4 on b1_t8192_h96", "cleanup in 8h34m", "NVIDIA H200"):
            assert part in head, part
        main = app.main
        assert main.frontier_tree.member_names == ["fused-c32-w8", "fused-c64-w4", "split-bv32-c16", "split-bv64-c16"]
        matrix = main.matrix
        assert [str(c.label.plain if isinstance(c.label, Text) else c.label).lstrip("◆ ")
                for c in matrix.columns.values()][1:] == ["b1_t8192_h96", "b1_t4096_h64", "b2_t2048_h32"]
        assert matrix.row_keys[:5] == ["baseline", "m:fused-c32-w8", "m:fused-c64-w4", "m:split-bv32-c16",
                                       "m:split-bv64-c16"]
        assert matrix.get_cell("m:fused-c64-w4", "b1_t8192_h96").plain.startswith("▲1.34x")
        assert matrix.get_cell("a:2", "b1_t8192_h96").plain == "✗ FAIL"
        assert main.loop.written >= 10
        assert main.selection.name == "fused-c64-w4"  # starts on the best member


@aio
async def test_pause_then_resume_with_p(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("p")
        await until(pilot, lambda: app.state == "paused", what="paused state")
        assert [r["cmd"] for r in fake.commands("pause")] == ["pause"]
        assert "paused (paused by the operator)" in header_text(app)
        assert any("paused" in n for n in notifications(app))
        await pilot.press("p")  # the same key resumes a paused run
        await until(pilot, lambda: app.state == "running", what="running state")
        assert len(fake.commands("resume")) == 1 and len(fake.commands("pause")) == 1


@aio
async def test_prune_asks_first_then_the_member_leaves_tree_and_matrix(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        rebuilds = app.main.matrix.rebuilds  # the first layout may size the columns more than once
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), what="the confirm dialog")
        assert not fake.commands("prune")
        await pilot.press("y")
        await until(pilot, lambda: "fused-c64-w4" not in app.main.frontier_tree.member_names, what="the leaf to go")
        assert fake.commands("prune")[0]["name"] == "fused-c64-w4"
        assert "m:fused-c64-w4" not in app.main.matrix.row_keys
        assert app.main.matrix.rebuilds == rebuilds  # removed in place, not rebuilt


@aio
async def test_prune_declined_sends_nothing(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("n")
        await pilot.pause(0.1)
        assert not fake.commands("prune") and "fused-c64-w4" in app.main.frontier_tree.member_names


@aio
async def test_archive_sends_archive_and_shows_the_answer(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("a")
        await until(pilot, lambda: any("archived 3" in n for n in notifications(app)), what="the answer")
        assert len(fake.commands("archive")) == 1


@aio
async def test_note_dialog_sends_the_text(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, PromptDialog))
        await pilot.press(*"quick: try BV=32 on split")  # q, p, s... type, they do not act
        await pilot.press("enter")
        await until(pilot, lambda: fake.commands("note"), what="the note")
        assert fake.commands("note")[0]["text"] == "quick: try BV=32 on split"
        assert fake.state["notes"] == ["quick: try BV=32 on split"]
        assert not fake.commands("pause") and not fake.commands("stop") and app.is_running


@aio
async def test_generalize_dialog_sends_the_source_and_the_shapes(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GeneralizeDialog))
        dialog = app.screen
        common = dialog.query_one(SelectionList)
        assert common.has_focus
        first = common.get_option_at_index(0).value
        await pilot.press("space")  # tick the first common shape
        dialog.query_one("#gen-typed", Input).focus()
        await pilot.press(*"B=2,T=2048,H=48")
        await pilot.press("ctrl+g")
        await until(pilot, lambda: len(fake.commands("generalize")) == 2, what="the generalize requests")
        plan, req = fake.commands("generalize")
        assert plan["dry_run"] is True and "dry_run" not in req  # it says what it will do first
        assert any("will" in n or "generalize kda_fwd_demo/" in n for n in notifications(app))
        assert req["from"] == "fused-c64-w4"  # the selected member
        assert req["shapes"] == [first, "B=2,T=2048,H=48"]
        await until(pilot, lambda: any("wrote tasks/" in n for n in notifications(app)))


@aio
async def test_generalize_dialog_refuses_a_malformed_shape(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GeneralizeDialog))
        app.screen.query_one("#gen-typed", Input).focus()
        await pilot.press(*"B=1,T=4096")
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert isinstance(app.screen, GeneralizeDialog)
        assert "missing H" in str(app.screen.query_one("#gen-error").render())
        assert not fake.commands("generalize")


@aio
async def test_recheck_sends_the_selected_member_or_attempt(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("r")
        await until(pilot, lambda: fake.commands("recheck"))
        assert fake.commands("recheck")[0]["name"] == "fused-c64-w4"
        await pilot.press("ctrl+end")  # the newest attempt
        await pilot.press("r")
        await until(pilot, lambda: len(fake.commands("recheck")) == 2)
        assert fake.commands("recheck")[1]["name"] == "attempt:12"


@aio
async def test_tree_selection_drives_the_actions(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.main.frontier_tree.focus()
        await pilot.press("down", "down", "down", "down")  # fused, c32, c64, split, split-bv32
        await pilot.press("down")
        assert app.main.selection.name == "split-bv32-c16"
        await pilot.press("r")
        await until(pilot, lambda: fake.commands("recheck"))
        assert fake.commands("recheck")[0]["name"] == "split-bv32-c16"


@aio
async def test_the_log_having_focus_keeps_the_selection(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.main.loop.focus()
        await pilot.pause()
        assert app.main.selection.name == "fused-c64-w4"
        app.main.matrix.focus()
        await pilot.press("down")
        assert app.main.selection.name == "split-bv32-c16"


@aio
async def test_enter_opens_the_candidate_screen(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, CandidateScreen) and app.screen.detail is not None,
                    what="the candidate's details")
        assert {k: v for k, v in fake.commands("candidate")[0].items() if k != "id"} == {
            "cmd": "candidate", "name": "fused-c64-w4"}
        screen = app.screen
        checks = screen.query_one("#cand-checks", DataTable)
        assert checks.row_count == 12  # 4 probes x 3 shapes
        trials = screen.query_one("#cand-trials", DataTable)
        assert trials.row_count == 9  # candidate, baseline, speedup per shape
        assert "+CHUNK = 64" in str(screen.detail["diff"])
        await pilot.press("4")
        assert screen.query_one("TabbedContent").active == "diff"
        await pilot.press("escape")
        assert not isinstance(app.screen, CandidateScreen)


@aio
async def test_enter_on_an_attempt_asks_for_the_attempt(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+end", "enter")
        await until(pilot, lambda: isinstance(app.screen, CandidateScreen) and app.screen.detail is not None)
        assert fake.commands("candidate")[0]["attempt"] == 12


@aio
async def test_detach_exits_and_leaves_the_run_going(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("q")
        await pilot.pause(0.1)
    assert app.return_value == "detached"
    assert not fake.commands("stop") and fake.state["status"]["state"] == "running"
    fake.requests.clear()
    from kdatui.engine.protocol import Client

    with Client(fake.path) as c:  # the engine still answers after the TUI left
        assert c.request("status")["state"] == "running"


@aio
async def test_stop_asks_first_and_the_stopped_run_offers_to_quit(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await until(pilot, lambda: isinstance(app.screen, EngineGoneDialog), what="the engine to go away")
        assert app.screen.stopped
        assert len(fake.commands("stop")) == 1
        await pilot.press("q")
        await pilot.pause(0.1)
    assert app.return_value == "stopped"


@aio
async def test_engine_going_away_shows_in_the_header_without_a_traceback(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        fake.stop()
        await until(pilot, lambda: isinstance(app.screen, EngineGoneDialog), what="the engine-gone dialog")
        assert not app.screen.stopped
        await pilot.press("escape")  # stay and read the last state
        assert "engine gone" in header_text(app)
        await pilot.press("a")  # actions needing the engine are disabled, nothing breaks
        await pilot.pause(0.05)
        assert app.check_action("archive", ()) is None
        assert app.main.frontier_tree.member_names  # the last state is still on screen


@aio
async def test_reconnect_after_the_engine_restarts(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        fake.stop()
        await until(pilot, lambda: isinstance(app.screen, EngineGoneDialog))
        state = demo_state()
        state["status"]["state"] = "paused"
        with FakeEngine(state, path=fake.path) as again:
            await pilot.press("r")
            await until(pilot, lambda: app.lost is None and app.state == "paused", what="the new engine's state")
            assert "engine gone" not in header_text(app)
            again.emit("admitted", text="after the restart")
            await until(pilot, lambda: any("after the restart" in line for line in app.main.loop.lines))


@aio
async def test_no_engine_at_the_socket_says_so_and_offers_the_tasks(tmp_path):
    from kdatui.tui.app import KdaTuiApp
    from kdatui.tui.screens.task_picker import TaskPickerScreen

    app = KdaTuiApp(tmp_path / "control.sock", keymap={})
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, TaskPickerScreen), what="the task picker")
        assert "does not exist" in app.lost and app.absent
        assert any(e.name == "kda_fwd_cpu" for e in app.screen.entries)
        await pilot.press("escape")  # no task: the main screen says there is no engine
        await until(pilot, lambda: not isinstance(app.screen, TaskPickerScreen))
        assert "no engine" in header_text(app)
        assert app.check_action("pause", ()) is None  # engine actions are off
        await pilot.press("q")
        await pilot.pause(0.05)
    assert app.return_value == "detached"


@aio
async def test_the_app_can_be_constructed_without_an_engine_for_textual_run_dev(tmp_path, monkeypatch):
    """`textual run --dev kdatui.tui.app:KdaTuiApp` constructs the app with no arguments."""
    from kdatui.tui.app import KdaTuiApp
    from kdatui.tui.screens.task_picker import TaskPickerScreen

    monkeypatch.chdir(tmp_path)  # not a git repo: no socket to look for
    app = KdaTuiApp()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, TaskPickerScreen), what="the task picker")
        assert "not in a git repository" in app.lost


def test_run_tui_refuses_a_missing_socket_with_a_message(tmp_path):
    from kdatui.engine.protocol import EngineUnavailable
    from kdatui.tui.app import run_tui

    with pytest.raises(EngineUnavailable, match="kdatui run"):
        run_tui(tmp_path / "control.sock")


@aio
async def test_engine_refusal_is_shown(fake):
    fake.fail["archive"] = "an archive is already running"
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("a")
        await until(pilot, lambda: any("already running" in n for n in notifications(app)))
        assert app.lost is None


@aio
async def test_prune_without_a_member_selected_says_what_to_do(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+home")  # the baseline row
        await pilot.press("x")
        await pilot.pause(0.05)
        assert not isinstance(app.screen, ConfirmDialog)
        assert any("Select a frontier member" in n for n in notifications(app))


@aio
async def test_zoom_gives_the_focused_pane_the_screen(fake):
    app = make_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await pilot.press("z")
        assert app.screen.maximized is app.main.matrix
        await pilot.press("z")
        assert app.screen.maximized is None


# ---------------------------------------------------------------------------- live updates

@aio
async def test_a_burst_of_events_is_drawn_in_a_few_batches(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        flushes, written = app.stats["flushes"], app.main.loop.written
        for _ in range(10):
            fake.emit_many([("agent-output", {"line": f"line {i}", "ts": T0}) for i in range(100)])
        await until(pilot, lambda: app.stats["events"] >= 17 + 1000, what="the burst")
        assert app.stats["flushes"] - flushes <= 6  # ~10 per second at most, not 1,000
        assert app.main.loop.written - written == 1000


@aio
async def test_an_evaluation_updates_only_its_cells(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        matrix = app.main.matrix
        rebuilds, updates = matrix.rebuilds, matrix.updates
        att = next(a for a in fake.state["attempts"] if a["id"] == 12)
        att["cells"]["b1_t4096_h64"] = cell("b1_t4096_h64", 1.08)
        fake.emit("attempt-evaluated", attempt=12, text="#12 b1_t4096_h64 1.08x")
        await until(pilot, lambda: matrix.get_cell("a:12", "b1_t4096_h64").plain.startswith("≈1.08x")
                    or matrix.get_cell("a:12", "b1_t4096_h64").plain.startswith("▲1.08x"), what="the new cell")
        assert matrix.rebuilds == rebuilds and matrix.updates - updates == 1


@aio
async def test_a_new_attempt_is_appended_and_the_oldest_leaves(fake):
    app = make_app(fake, recent_attempts=5)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        matrix = app.main.matrix
        rebuilds = matrix.rebuilds
        fake.state["attempts"].append({"id": 13, "family": "split", "name": "split-bv16", "status": "proposed",
                                       "verdict": None, "parent": "base", "idea": "", "reason": "", "cells": {}})
        fake.emit("attempt-proposed", attempt=13, text="#13 proposed")
        await until(pilot, lambda: "a:13" in matrix.row_keys)
        assert "a:8" not in matrix.row_keys and matrix.row_keys[-1] == "a:13"
        assert matrix.rebuilds == rebuilds
        assert matrix.get_cell("a:13", "b1_t8192_h96").plain == "…"


@aio
async def test_progress_events_show_in_the_header(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        fake.emit("eval-progress", attempt=12, shape="b2_t2048_h32", stage="probes", i=3, n=10, label="strong")
        await until(pilot, lambda: (app.main.header.progress or {}).get("i") == 3)
        lines = header_lines(app.main.header.status, progress=app.main.header.progress)
        assert "#12 probes 3/10 b2_t2048_h32 strong" in lines[2].plain


# ---------------------------------------------------------------------------- help, palette, keymap

@aio
async def test_help_lists_every_action(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        text = " ".join(str(s.render()) for s in app.screen.query("Static"))
        from kdatui.tui.screens.help import keys_table

        rows = keys_table(app).columns[1]._cells
        for a in ACTIONS:
            assert a.title in rows
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        assert text


@aio
async def test_command_palette_runs_an_action(fake):
    app = make_app(fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"archive now")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: fake.commands("archive"), what="archive from the palette")


@aio
async def test_a_keymap_moves_a_binding(fake):
    app = make_app(fake, keymap={"pause": "k"})
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("p")
        await pilot.pause(0.1)
        assert not fake.commands("pause")
        await pilot.press("k")
        await until(pilot, lambda: fake.commands("pause"))


# ---------------------------------------------------------------------------- the task picker

@aio
async def test_task_picker_returns_the_chosen_task(tmp_path):
    (tmp_path / "tasks").mkdir()
    good = tmp_path / "tasks" / "a.toml"
    good.write_text('name = "a"\nprimary_shape = "s"\n[shapes.s]\nB = 1\nT = 64\nH = 2\nK = 32\nV = 32\n')
    bad = tmp_path / "tasks" / "b.toml"
    bad.write_text("name = 'b'\n")
    app = TaskPickerApp(paths=[bad, good])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("enter")  # the bad task is disabled: the highlight starts on the good one
        await pilot.pause(0.1)
    assert app.return_value == good


@aio
async def test_a_long_command_waits_for_its_answer_past_the_request_timeout(fake):
    """generalize answers after the re-check of every shape (minutes on the CPU): the
    TUI used to give up after 60 s and call the engine gone."""
    from kdatui.engine.protocol import EngineUnavailable
    from kdatui.tui.client import EngineClient

    client = EngineClient(fake.path, timeout=0.3)
    await client.connect()
    try:
        fake.delay["generalize"] = 0.8
        res = await client.request("generalize", shapes=["b1_t4096_h32"], **{"from": "fused-c64-w4"})
        assert "wrote tasks/" in res["text"]
        fake.delay["status"] = 0.8
        with pytest.raises(EngineUnavailable, match="did not answer `status`"):
            await client.request("status")
    finally:
        await client.close()
