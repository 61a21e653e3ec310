"""Archive and cleanup: scratch worktrees, attempt logs and old events move out of the
repo; the frontier stays; everything is restorable."""

from __future__ import annotations

import json
import tarfile
import tomllib

import pytest
from frontier_support import git, kernel_source, make_repo, make_task, try_candidate

from kdatui.engine.archive import (archive_root, cleanup, cleanup_due, next_cleanup, read_index,
                                   restore_attempt, run_archive_dir)
from kdatui.engine.frontier import Frontier


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("KDATUI_ARCHIVE_DIR", str(tmp_path / "archive"))
    repo = make_repo(tmp_path / "repo")
    fr = Frontier.open(repo)
    task = make_task()
    run = fr.start_run(task).id
    kept, adm = try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "q": 1.2})
    failed, _ = try_candidate(fr, run, task, "split", "broken", {"p": 2.0}, fail=("p",))
    busy = fr.propose(run, task, family="fused", name="c16", files={"kernel.py": kernel_source({"p": 1})})
    fr.log_path(failed).parent.mkdir(parents=True, exist_ok=True)
    fr.log_path(failed).write_text("agent: tried a broken thing\n")
    (fr.worktree_path(failed) / "notes.txt").write_text("uncommitted notes of the agent\n")
    yield fr, repo, run, task, kept, adm, failed, busy, tmp_path / "archive"
    fr.close()


def test_archive_keeps_the_frontier_and_moves_scratch_worktrees_logs_and_events_out(setup):
    fr, repo, run, task, kept, adm, failed, busy, archive = setup
    frontier_before = git(repo, "for-each-ref", "refs/heads/frontier")
    [report] = cleanup(fr, run, keep_events_s=0)

    # the frontier and its branches stay
    assert git(repo, "for-each-ref", "refs/heads/frontier") == frontier_before
    assert [m.name for m in fr.members("kt")] == ["split-bv64"]
    assert git(repo, "rev-parse", "frontier/kt/split-bv64") == adm.sha
    # finished attempts: worktree gone, scratch branch moved to the archive refs
    worktrees = git(repo, "worktree", "list", "--porcelain")
    assert f".frontier/worktrees/{busy.id}" in worktrees  # in flight: left alone
    for att in (kept, failed):
        assert f".frontier/worktrees/{att.id}\n" not in worktrees + "\n"
        assert not (repo / ".frontier" / "worktrees" / str(att.id)).exists()
        assert git(repo, "branch", "--list", f"kdatui/scratch/{run}/{att.id}") == ""
        git(repo, "rev-parse", "--verify", f"refs/kdatui/archive/{run}/{att.id}")
        assert fr.attempt(att.id).branch == f"refs/kdatui/archive/{run}/{att.id}"
    assert fr.attempt(failed.id).status == "archived" and fr.attempt(failed.id).verdict == "failed"
    assert fr.attempt(kept.id).status == "admitted"
    # the agent's uncommitted notes were committed before the worktree went
    assert git(repo, "show", f"refs/kdatui/archive/{run}/{failed.id}:notes.txt") == "uncommitted notes of the agent"
    # logs and old events are in the dated archive folder, listed in INDEX.toml
    folder = report.folder
    assert folder.parent == run_archive_dir(fr, run) == archive / "repo" / run
    assert not fr.log_path(failed).exists()
    with tarfile.open(folder / "logs.tar.gz") as tar:
        assert tar.extractfile(f"{failed.id}.log").read() == b"agent: tried a broken thing\n"
    archived_events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    assert "admission-decision" in {e["kind"] for e in archived_events} and report.events == len(archived_events)
    assert {e["kind"] for e in fr.store.events(run)} <= {"attempt-archived", "archived"}
    left = [json.loads(x)["kind"] for x in fr.store.events_path(run).read_text().splitlines()]
    assert "admission-decision" not in left
    [entry] = tomllib.loads((folder.parent / "INDEX.toml").read_text())["archive"]
    assert entry["logs"]["members"] == [f"{failed.id}.log"]
    assert entry["events"]["count"] == report.events
    assert {w["attempt"] for w in entry["worktrees"]} == {kept.id, failed.id}
    for f in (entry["logs"]["file"], entry["events"]["file"], entry["attempts_file"]):
        assert (folder.parent / f).exists()
    attempts = json.loads((folder / "attempts.json").read_text())
    assert {a["id"] for a in attempts} == {kept.id, failed.id} and attempts[0]["evaluations"]


def test_an_archived_attempt_is_restored_with_its_worktree_and_log(setup):
    fr, repo, run, task, kept, adm, failed, busy, archive = setup
    cleanup(fr, run, keep_events_s=0)
    att = restore_attempt(fr, failed.id)
    assert att.status == "failed" and att.branch == f"kdatui/scratch/{run}/{failed.id}"
    wt = fr.worktree_path(att)
    assert (wt / "notes.txt").read_text() == "uncommitted notes of the agent\n"
    assert "# fake: p=2.0" in (fr.candidate_path(att) / "kernel.py").read_text()
    assert fr.log_path(att).read_text() == "agent: tried a broken thing\n"
    assert git(repo, "for-each-ref", f"refs/kdatui/archive/{run}/{failed.id}") == ""
    # and it can be archived again
    [again] = cleanup(fr, run, keep_events_s=3600)
    assert [w["attempt"] for w in again.worktrees] == [failed.id]


def test_a_second_pass_with_nothing_new_archives_nothing(setup):
    fr, repo, run, *_ = setup
    cleanup(fr, run, keep_events_s=0)
    [again] = cleanup(fr, run, keep_events_s=3600)
    assert again.empty and again.folder is None
    assert len(read_index(fr, run)) == 1


def test_an_archive_interrupted_after_removing_a_worktree_is_completed_by_the_next_pass(setup):
    fr, repo, run, task, kept, adm, failed, busy, archive = setup
    wt = fr.worktree_path(failed)
    fr.repo.snapshot_worktree(wt, "snapshot")
    fr.repo.remove_worktree(wt)  # ... and the process died here
    [report] = cleanup(fr, run, keep_events_s=3600)
    assert failed.id in [w["attempt"] for w in report.worktrees]
    assert fr.attempt(failed.id).branch == f"refs/kdatui/archive/{run}/{failed.id}"
    assert git(repo, "show", f"refs/kdatui/archive/{run}/{failed.id}:notes.txt") == "uncommitted notes of the agent"


def test_cleanup_is_due_every_cleanup_every_hours(setup):
    fr, repo, run, task, *_ = setup
    created = fr.store.run(run).created
    every = task.search.cleanup_every_hours
    assert next_cleanup(fr, run, every) == pytest.approx(created + every * 3600)
    assert not cleanup_due(fr, run, every, now=created + 60)
    assert cleanup_due(fr, run, every, now=created + every * 3600 + 1)
    cleanup(fr, run, now=created + every * 3600 + 1)
    assert not cleanup_due(fr, run, every, now=created + every * 3600 + 2)


def test_the_archive_folder_defaults_outside_the_repo(monkeypatch, tmp_path):
    monkeypatch.delenv("KDATUI_ARCHIVE_DIR", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert archive_root() == tmp_path / ".local" / "share" / "kdatui" / "archive"
    monkeypatch.setenv("KDATUI_ARCHIVE_DIR", str(tmp_path / "elsewhere"))
    assert archive_root() == tmp_path / "elsewhere"
