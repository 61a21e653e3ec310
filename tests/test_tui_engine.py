"""The TUI driven by Pilot against a real engine (a `kdatui run --detach` in a temporary
repo, a coding-agent CLI stand-in on the tiny CPU task): every binding does what it says and
the engine's state shows it."""

from __future__ import annotations

import json
import subprocess

import pytest

from fake_engine import aio, until
from frontier_support import make_repo
from kdatui.engine.protocol import Client
from kdatui.tui.screens.candidate import CandidateScreen
from kdatui.tui.screens.dialogs import ConfirmDialog, GeneralizeDialog, PromptDialog
from test_engine import SCRIPTED, TINY, kdatui, status, wait_for

SIZE = (110, 32)


@pytest.fixture
def live(tmp_path, monkeypatch):
    monkeypatch.setenv("KDATUI_ARCHIVE_DIR", str(tmp_path / "archive"))
    repo = make_repo(tmp_path / "repo", {"tiny.toml": TINY.read_text()})
    (repo / ".frontier").mkdir()
    import sys

    (repo / ".frontier" / "config.toml").write_text(
        f'[agents.scripted]\ncommand = "{sys.executable} {SCRIPTED} {{prompt_file}} --chunk 0"\ntimeout_s = 60\n')
    kdatui(repo, "run", "tiny.toml", "--agent", "scripted", "--budget", "2000attempts", "--detach")
    wait_for(repo, lambda s: s["members"] >= 1 and s["attempts"]["evaluated"] >= 2, what="two evaluated attempts")
    yield repo
    kdatui(repo, "stop", check=False, timeout=30)


def engine(repo) -> Client:
    return Client(repo / ".frontier" / "control.sock")


def make_app(repo):
    from kdatui.tui.app import KdaTuiApp

    return KdaTuiApp(repo / ".frontier" / "control.sock", keymap={})


async def _wait_engine(pilot, repo, pred, what, timeout=30.0):
    await _until(pilot, lambda: pred(status(repo)), timeout=timeout, what=what)


async def _until(pilot, cond, timeout=10.0, what=""):
    """`until`, saying what the app last told the user when it times out."""
    try:
        await until(pilot, cond, timeout=timeout, what=what)
    except AssertionError as e:
        log = [str(line) for line in pilot.app.main.loop.lines[-8:]]
        raise AssertionError(f"{e}; the app's notifications: {[n.message for n in pilot.app._notifications]}; "
                             f"selection: {pilot.app.selection}; log: {log}") from None


@aio
async def test_every_binding_acts_on_the_real_engine(live):
    repo = live
    app = make_app(repo)
    async with app.run_test(size=SIZE) as pilot:
        # a live run streams events all the time: ready once the first snapshot is on screen
        await _until(pilot, lambda: bool(app.snapshot) and bool(app.main.matrix.row_keys), timeout=20,
                     what="the first snapshot")
        # p: pause; the engine says paused once the step in flight is done
        await pilot.press("p")
        await _wait_engine(pilot, repo, lambda s: s["state"] == "paused" and s["current"] is None, "paused")
        await until(pilot, lambda: app.state == "paused", what="the header to say paused")

        # n: a note, delivered in the next PROMPT.md
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, PromptDialog), what="the note dialog")
        await pilot.press(*"try the split family next")
        await pilot.press("enter")
        await _wait_engine(pilot, repo, lambda s: s["notes_pending"] == 1, "the note at the engine")

        # r: recheck the selected member (the best): a new evaluation
        await pilot.press("r")
        await _until(pilot, lambda: any(e.get("kind") == "rechecked" for e in _events(repo)), timeout=60,
                     what="the recheck")

        # x: prune the selected member, after a confirmation
        victim = app.main.selection.name
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), what="the confirmation")
        await pilot.press("y")
        await until(pilot, lambda: victim not in app.main.frontier_tree.member_names, what="the member to leave the tree")
        refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/kdatui/pruned/"], cwd=repo,
                              capture_output=True, text=True).stdout
        assert f"refs/kdatui/pruned/tiny/{victim}" in refs

        # a: archive now
        await pilot.press("a")
        await until(pilot, lambda: any(e.get("kind") == "archived" for e in _events(repo)), timeout=60,
                    what="the archive")
        assert any((repo.parent / "archive").rglob("*"))

        # p again: resume; the next turn's PROMPT.md carries the note
        n_before = status(repo)["attempts"]["total"]
        await pilot.press("p")
        await _wait_engine(pilot, repo, lambda s: s["attempts"]["total"] > n_before and s["notes_pending"] == 0,
                           "the next turn")
        prompt = repo / ".frontier" / "worktrees" / str(n_before + 1) / "PROMPT.md"
        await _until(pilot, prompt.exists, what="the next turn's PROMPT.md")
        assert "try the split family next" in prompt.read_text()

        # pause again so the frontier holds still, and point at the best member
        await pilot.press("p")
        await _wait_engine(pilot, repo, lambda s: s["state"] == "paused" and s["current"] is None, "paused")
        await _until(pilot, lambda: app.snapshot["status"]["state"] == "paused", what="the view to catch up")
        from kdatui.tui.messages import Selection

        best = status(repo)["best"]["name"]
        await _until(pilot, lambda: any(m["name"] == best for m in app.snapshot["members"]),
                     what="the view to show the best member")
        member = next(m for m in app.snapshot["members"] if m["name"] == best)
        app.main.selection = Selection("member", best, member["attempt"])

        # enter: the candidate screen of a real member (idea, diff, checks)
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, CandidateScreen), what="the candidate screen")
        await _until(pilot, lambda: app.screen.detail is not None, what="the candidate's detail", timeout=15)
        assert app.screen.detail["kernel"] and app.screen.detail["checks"]
        await pilot.press("escape")

        # g: generalize the selected member to one more shape; the engine writes the task and runs it
        await pilot.press("g")
        await _until(pilot, lambda: isinstance(app.screen, GeneralizeDialog), what="the generalize dialog")
        from textual.widgets import Input

        app.screen.query_one("#gen-typed", Input).focus()
        await pilot.press(*"B=1,T=33,H=2,K=16,V=16")
        await pilot.press("ctrl+g")
        await _wait_engine(pilot, repo, lambda s: s["task"] != "tiny", "the generalized run", timeout=90)
        st = status(repo)
        task_file = repo / "tasks" / f"{st['task']}.toml"
        assert "b1_t33_h2_k16_v16" in task_file.read_text()
        await until(pilot, lambda: app.snapshot and app.snapshot["status"]["task"] == st["task"],
                    what="the view to follow the new run")

        # q: detach; the run goes on
        await pilot.press("q")
    assert status(repo)["state"] in ("running", "paused"), "detaching leaves the run going"


def _events(repo) -> list[dict]:
    runs = sorted((repo / ".frontier" / "runs").glob("*/events.jsonl"))
    out = []
    for p in runs:
        out += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return out
