"""The engine as a user drives it: `kdatui run --detach` in a git repo, the CLI clients of
its control socket, and a kill -9 in the middle of an evaluation.

These use small Python agents (tests/agents_py/) on the tiny task so each run takes seconds;
the built-in agent on the CPU task is exercised in test_engine_builtin.py."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frontier_support import make_repo

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "tasks" / "tiny.toml"
AGENTS = ROOT / "tests" / "agents_py"
TORCH_AGENT = f"python:{AGENTS / 'torch_agent.py'}:TorchAgent"
SLOW_AGENT = f"python:{AGENTS / 'torch_agent.py'}:SlowAgent"


def kdatui(repo: Path, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "kdatui", *args], cwd=repo, capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if check and p.returncode != 0:
        raise AssertionError(f"kdatui {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def status(repo: Path) -> dict:
    return json.loads(kdatui(repo, "status", "--json").stdout)


def wait_for(repo: Path, pred, timeout: float = 120, what: str = "") -> dict:
    deadline = time.time() + timeout
    st = None
    while time.time() < deadline:
        try:
            st = status(repo)
            if pred(st):
                return st
        except AssertionError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last status {st}")


@pytest.fixture
def repo(tmp_path):
    r = make_repo(tmp_path / "repo", {"tiny.toml": TINY.read_text()})
    yield r
    kdatui(r, "stop", check=False, timeout=30)
    lock = r / ".frontier" / "engine.lock"
    deadline = time.time() + 20
    while time.time() < deadline:  # let the engine exit before the folder goes away
        from kdatui.engine.daemon import read_lock

        if not lock.exists() or read_lock(lock.parent) is None:
            break
        time.sleep(0.2)


def test_detached_run_spends_its_budget_and_leaves_a_frontier(repo):
    out = kdatui(repo, "run", "tiny.toml", "--agent", TORCH_AGENT, "--budget", "3attempts", "--detach").stdout
    assert "started" in out
    st = wait_for(repo, lambda s: s["state"] == "finished", what="the budget to be spent")
    assert st["why"] == "budget spent: 3 attempts"
    assert st["attempts"]["evaluated"] == 3 and st["members"] >= 1 and st["best"]["speedup"] > 0
    sock = repo / ".frontier" / "control.sock"
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    events = (repo / ".frontier" / "runs" / st["run"] / "events.jsonl").read_text().splitlines()
    kinds = {json.loads(line)["kind"] for line in events}
    assert {"run-started", "attempt-proposed", "attempt-evaluated", "admitted", "agent-output"} <= kinds
    # the user's repo shows no untracked clutter
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""
    # one engine per repo
    second = kdatui(repo, "run", "tiny.toml", "--agent", TORCH_AGENT, "--detach", check=False)
    assert second.returncode == 2 and "a run is live" in second.stderr and st["run"] in second.stderr


def test_pause_note_resume_and_stop_over_the_socket(repo):
    kdatui(repo, "run", "tiny.toml", "--agent", TORCH_AGENT, "--budget", "40attempts", "--detach")
    wait_for(repo, lambda s: s["attempts"]["evaluated"] >= 1, what="a first attempt")
    assert "paused" in kdatui(repo, "pause").stdout
    st = wait_for(repo, lambda s: s["state"] == "paused" and s["current"] is None, what="the pause")
    n = st["attempts"]["total"]
    time.sleep(1.5)
    assert status(repo)["attempts"]["total"] == n, "a paused run starts no attempt"
    kdatui(repo, "note", "try", "a", "smaller", "chunk")
    assert status(repo)["notes_pending"] == 1
    kdatui(repo, "resume")
    wait_for(repo, lambda s: s["attempts"]["total"] > n and s["notes_pending"] == 0, what="the next attempt")
    events = (repo / ".frontier" / "runs" / st["run"] / "events.jsonl").read_text()
    assert "try a smaller chunk" in events  # delivered to the agent's next turn (it logs its notes)
    kdatui(repo, "stop")
    deadline = time.time() + 30
    while (repo / ".frontier" / "control.sock").exists() and time.time() < deadline:
        time.sleep(0.2)
    assert not (repo / ".frontier" / "control.sock").exists()
    gone = kdatui(repo, "status", check=False)
    assert gone.returncode == 2 and "no engine" in gone.stderr


def test_kill_9_mid_evaluation_then_run_again_resumes(repo):
    kdatui(repo, "run", "tiny.toml", "--agent", SLOW_AGENT, "--budget", "3attempts", "--detach")
    st = wait_for(repo, lambda s: (s["current"] or {}).get("stage") in ("check", "timing") and
                  s["attempts"]["evaluated"] >= 1, what="an evaluation in flight", timeout=180)
    run_id, pid, victim = st["run"], st["pid"], st["current"]["attempt"]
    os.kill(pid, signal.SIGKILL)
    time.sleep(1.0)
    import sqlite3

    with sqlite3.connect(repo / ".frontier" / "kdatui.db") as db:
        spent_before = db.execute("SELECT spent_s FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    assert spent_before > 0, "the time spent is on disk before a kill -9"
    out = kdatui(repo, "run", "tiny.toml", "--agent", SLOW_AGENT, "--detach").stdout
    assert run_id in out and "resumed" in out, "the crashed run is resumed, not replaced"
    assert "keeps its budget (3 attempts)" in out, "no --budget: the run's own budget, not the task's"
    st = wait_for(repo, lambda s: s["state"] == "finished", what="the resumed run to finish", timeout=240)
    assert st["run"] == run_id
    # the budget carried over: 3 attempts in all (the interrupted one counted once), and the
    # clock went on from what was spent, not from zero
    assert st["why"] == "budget spent: 3 attempts" and st["attempts"]["total"] == 3
    assert st["attempts"]["evaluated"] == 3
    assert st["elapsed_s"] >= spent_before
    time.sleep(1.2)
    assert status(repo)["elapsed_s"] == st["elapsed_s"], "a finished run's clock stands still"
    events = [json.loads(line) for line in
              (repo / ".frontier" / "runs" / run_id / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "attempt-resumed" and e["attempt"] == victim for e in events)
    evaluated = [e for e in events if e["kind"] == "attempt-evaluated" and e["attempt"] == victim]
    assert evaluated, "the interrupted attempt was evaluated again, not lost"
    # the store opens and every member has its commit
    from kdatui.engine.frontier import Frontier

    with Frontier.open(repo, recover=False) as fr:
        for m in fr.members("tiny"):
            assert m.sha and fr.repo.sha(m.sha) == m.sha


def test_more_budget_for_a_finished_run_makes_it_go_on(repo):
    kdatui(repo, "run", "tiny.toml", "--agent", TORCH_AGENT, "--budget", "2attempts", "--detach")
    st = wait_for(repo, lambda s: s["state"] == "finished", what="the budget to be spent")
    assert st["attempts"]["total"] == 2
    out = kdatui(repo, "budget", "+2attempts").stdout
    assert "2 attempts -> 4 attempts" in out and "the run goes on" in out
    st = wait_for(repo, lambda s: s["state"] == "finished" and s["attempts"]["total"] == 4,
                  what="two more attempts")
    assert st["budget"]["attempts"] == 4 and st["why"] == "budget spent: 4 attempts"
    bad = kdatui(repo, "budget", "+2parsecs", check=False)
    assert bad.returncode == 2 and "+2h or +20attempts" in bad.stderr


@pytest.mark.slow
def test_a_finished_runs_engine_stays_up_with_nothing_attached(repo):
    """It used to exit 60 s after finishing when no client was attached."""
    kdatui(repo, "run", "tiny.toml", "--agent", TORCH_AGENT, "--budget", "1attempts", "--detach")
    st = wait_for(repo, lambda s: s["state"] == "finished", what="the budget to be spent")
    log = (repo / ".frontier" / "runs" / st["run"] / "engine.log").read_text()
    assert "no client has been attached for 24 h" in log, "the log states the idle limit"
    assert st["idle_stop_s"] == 24 * 3600
    time.sleep(75)
    assert status(repo)["state"] == "finished", "the engine still answers"


SCRIPTED = ROOT / "tests" / "agents" / "scripted_agent.py"


def _configure_scripted(repo: Path, mode: str) -> None:
    (repo / ".frontier").mkdir(exist_ok=True)
    (repo / ".frontier" / "config.toml").write_text(
        f'[agents.scripted]\ncommand = "{sys.executable} {SCRIPTED} {{prompt_file}} --mode {mode} --chunk 0"\n'
        f'timeout_s = 60\n')


def test_a_coding_agent_cli_is_driven_evaluated_admitted_and_reads_notes(repo):
    _configure_scripted(repo, "ok")
    kdatui(repo, "run", "tiny.toml", "--agent", "scripted", "--budget", "30attempts", "--detach")
    st = wait_for(repo, lambda s: s["attempts"]["admitted"] >= 1, what="an admitted attempt")
    kdatui(repo, "pause")
    st = wait_for(repo, lambda s: s["state"] == "paused" and s["current"] is None, what="the pause")
    kdatui(repo, "note", "prefer the split family")
    n = st["attempts"]["total"]
    kdatui(repo, "resume")
    wait_for(repo, lambda s: s["attempts"]["total"] > n, what="the next turn")
    kdatui(repo, "pause")
    events = [json.loads(line) for line in
              (repo / ".frontier" / "runs" / st["run"] / "events.jsonl").read_text().splitlines()]
    proposed = [e["attempt"] for e in events if e["kind"] == "attempt-proposed"]
    prompt = (repo / ".frontier" / "worktrees" / str(proposed[n]) / "PROMPT.md").read_text()
    assert "prefer the split family" in prompt, "the operator's note is in the next PROMPT.md"
    lines = [e["text"] for e in events if e["kind"] == "agent-output"]
    assert lines and not any(line.lstrip().startswith('{"type"') for line in lines), \
        "stream-json is rendered into readable lines"
    members = json.loads(kdatui(repo, "status", "--json").stdout)["members"]
    assert members >= 1


def test_three_failed_agent_turns_pause_the_run_with_the_reason(repo):
    _configure_scripted(repo, "fail")
    kdatui(repo, "run", "tiny.toml", "--agent", "scripted", "--budget", "30attempts", "--detach")
    st = wait_for(repo, lambda s: s["state"] == "paused", what="the pause after three failures")
    assert "3 failed agent turns in a row" in st["why"]
    assert st["attempts"]["total"] == 3 and st["attempts"]["admitted"] == 0


def test_prune_recheck_archive_and_generalize_go_through_the_live_engine(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("KDATUI_ARCHIVE_DIR", str(tmp_path / "archive"))
    kdatui(repo, "run", "tiny.toml", "--agent", TORCH_AGENT, "--budget", "3attempts", "--detach")
    st = wait_for(repo, lambda s: s["state"] == "finished", what="the budget to be spent")
    best = st["best"]["name"]

    out = kdatui(repo, "recheck", best).stdout
    assert f"rechecked {best}" in out and "PASS" in out

    out = kdatui(repo, "archive").stdout
    assert "live engine" in out
    assert not list((repo / ".frontier" / "worktrees").glob("[0-9]*")), "scratch worktrees archived"
    assert any((tmp_path / "archive").rglob("*")), "the archive folder holds the logs"

    # a recheck prunes the member's family by the new figures: on a busy CPU the rechecked
    # member can come out dominated and leave, so generalize from whatever is best now
    best = status(repo)["best"]["name"]
    bad = kdatui(repo, "generalize", "--from", best, "--shapes", "B=1,T=33,H=2,K=16,V=16,T=5", check=False)
    assert bad.returncode == 2 and "T is given twice" in bad.stderr
    out = kdatui(repo, "generalize", "--from", best, "--shapes", "B=1,T=33,H=2,K=16,V=16").stdout
    assert "the live engine will generalize tiny/" in out, "it says what it will do before it waits"
    assert "wrote task" in out and "not tracked by git" in out and "continues the search" in out
    st = wait_for(repo, lambda s: s["task"] != "tiny", what="the run on the generalized task")
    assert st["phase"].startswith("generalized") and st["members"] >= 1
    new_task = (repo / "tasks" / f"{st['task']}.toml").read_text()
    assert "b1_t33_h2_k16_v16" in new_task and "b1_t20_h2_k16_v16" in new_task

    kdatui(repo, "pause")
    wait_for(repo, lambda s: s["state"] == "paused" and s["current"] is None, what="the pause")
    victim = status(repo)["best"]["name"]
    kdatui(repo, "frontier", "prune", victim)
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/kdatui/pruned/"], cwd=repo,
                          capture_output=True, text=True).stdout
    assert f"refs/kdatui/pruned/{st['task']}/{victim}" in refs
