"""Snapshot tests of the TUI's screens (pytest-textual-snapshot) at 80x24 and a larger
size, against the fake engine's fixed state: clocks are frozen and event times render
in UTC, so the pictures do not change from run to run.

Update after an intended change of the look: `pytest tests/test_tui_snapshots.py
--snapshot-update`, then review the SVGs in __snapshots__/ (open them in a browser)."""

from __future__ import annotations

import pytest

from fake_engine import FakeEngine, cpu_state, eight_shapes_state, make_app, ready, until
from fake_engine import fake, utc  # noqa: F401  (fixtures: the fake engine, clocks in UTC)
from kdatui.tui.screens.candidate import CandidateScreen
from kdatui.tui.screens.dialogs import GeneralizeDialog

SMALL, LARGE = (80, 24), (140, 40)




async def on_candidate(pilot, tab: str | None = None):
    await ready(pilot)
    await pilot.press("enter")
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, CandidateScreen) and app.screen.detail is not None,
                what="the candidate's details")
    if tab:
        app.screen.action_tab(tab)
    await pilot.pause()


def test_main_screen_80x24(snap_compare, fake):
    assert snap_compare(make_app(fake), terminal_size=SMALL, run_before=ready)


def test_main_screen_large(snap_compare, fake):
    assert snap_compare(make_app(fake), terminal_size=LARGE, run_before=ready)


def test_candidate_screen_80x24(snap_compare, fake):
    assert snap_compare(make_app(fake), terminal_size=SMALL, run_before=on_candidate)


def test_candidate_screen_diff_large(snap_compare, fake):
    async def diff(pilot):
        await on_candidate(pilot, "diff")

    assert snap_compare(make_app(fake), terminal_size=LARGE, run_before=diff)


def test_candidate_screen_checks_80x24(snap_compare, fake):
    async def checks(pilot):
        await on_candidate(pilot, "checks")

    assert snap_compare(make_app(fake), terminal_size=SMALL, run_before=checks)


def test_generalize_dialog_80x24(snap_compare, fake):
    async def dialog(pilot):
        await ready(pilot)
        await pilot.press("g")
        await until(pilot, lambda: isinstance(pilot.app.screen, GeneralizeDialog))
        await pilot.pause()

    assert snap_compare(make_app(fake), terminal_size=SMALL, run_before=dialog)


@pytest.fixture
def cpu_fake():
    with FakeEngine(cpu_state()) as engine:
        yield engine


@pytest.fixture
def eight_fake():
    with FakeEngine(eight_shapes_state()) as engine:
        yield engine


def test_main_screen_80x24_cpu_task_3_shapes(snap_compare, cpu_fake):
    """All three shapes of the CPU task show; the device label is whole; the matrix says
    interpreter timings are not performance figures."""
    assert snap_compare(make_app(cpu_fake), terminal_size=SMALL, run_before=ready)


def test_main_screen_80x24_8_shapes(snap_compare, eight_fake):
    """The primary shape and a page of the others show, with the hint to page."""
    assert snap_compare(make_app(eight_fake), terminal_size=SMALL, run_before=ready)


async def open_chart(pilot):
    await ready(pilot)
    await pilot.press("c")
    await pilot.pause()


def test_chart_screen_80x24(snap_compare, fake):
    assert snap_compare(make_app(fake), terminal_size=SMALL, run_before=open_chart)


def test_chart_screen_cpu_80x24(snap_compare, cpu_fake):
    assert snap_compare(make_app(cpu_fake), terminal_size=SMALL, run_before=open_chart)
