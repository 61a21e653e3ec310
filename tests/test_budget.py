"""A run's budget: parsed, changed by the operator (`kdatui budget +2h`), and kept across
a restart (the attempts made and the time run carry over); the engine of a finished run
stays up for the operator. Unit tests here; the end-to-end ones (kill -9, resume, more
budget, the engine still answering long after finishing) are in test_engine.py."""

from __future__ import annotations

import pytest

from kdatui.engine.daemon import IDLE_STOP_S, idle_note, parse_idle_stop
from kdatui.engine.loop import Budget, RunClock


def test_budget_changes_add_to_the_limit_or_set_it():
    b = Budget(hours=1.0, attempts=6)
    assert b.changed("+2h", elapsed_s=3600, attempts=6) == Budget(3.0, 6)
    assert b.changed("+20attempts", elapsed_s=0, attempts=6) == Budget(1.0, 26)
    assert b.changed("8h", elapsed_s=0, attempts=0) == Budget(8.0, 6)
    assert b.changed("+30m,+4a", elapsed_s=0, attempts=0) == Budget(1.5, 10)


def test_adding_to_an_unlimited_side_counts_from_what_is_spent():
    b = Budget(hours=0.0, attempts=6)
    assert b.changed("+2h", elapsed_s=1800, attempts=6) == Budget(2.5, 6)
    assert Budget(1.0, 0).changed("+3attempts", elapsed_s=0, attempts=9) == Budget(1.0, 12)


def test_a_bad_budget_change_says_what_is_expected():
    with pytest.raises(ValueError, match=r"\+2h or \+20attempts"):
        Budget(1.0, 0).changed("+2 parsecs", elapsed_s=0, attempts=0)
    with pytest.raises(ValueError, match="say how much"):
        Budget(1.0, 0).changed("", elapsed_s=0, attempts=0)


def test_the_budget_is_spent_by_time_run_not_wall_time_since_start():
    b = Budget(hours=1.0, attempts=0)
    assert b.spent(3599, 0) is None
    assert b.spent(3600, 0) == "budget spent: 1 h"
    assert Budget(0, 6).spent(0, 6) == "budget spent: 6 attempts"
    assert Budget(0.5, 6).text() == "30 min, 6 attempts" and Budget().text() == "no limit"


def test_the_run_clock_carries_what_was_spent_and_stops_while_halted():
    t = [1000.0]
    clock = RunClock(spent_s=120.0, now=lambda: t[0])
    assert clock.elapsed() == 120.0
    clock.start()
    t[0] += 30
    assert clock.elapsed() == 150.0
    clock.halt()  # paused or finished: no time is spent
    t[0] += 600
    assert clock.elapsed() == 150.0
    clock.start()
    t[0] += 10
    assert clock.elapsed() == 160.0


def test_a_finished_engine_stays_up_a_day_by_default_and_says_so():
    assert IDLE_STOP_S >= 12 * 3600, "long enough to come back the next morning"
    assert parse_idle_stop(None) == IDLE_STOP_S
    assert parse_idle_stop("90m") == 5400 and parse_idle_stop("never") == 0
    with pytest.raises(ValueError, match="expected a time"):
        parse_idle_stop("3attempts")
    assert "24 h" in idle_note(IDLE_STOP_S) and "kdatui stop" in idle_note(0)
