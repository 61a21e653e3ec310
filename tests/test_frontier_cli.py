"""`kdatui frontier list|show|diff|prune|restore`, `kdatui archive`, `kdatui generalize`
on a temporary repo: what each prints, and one-line errors for repos kdatui cannot use."""

from __future__ import annotations

import sys

import pytest
from frontier_support import FakeEvaluator, git, make_repo, make_task, try_candidate

from kdatui.cli import main
from kdatui.engine.frontier import Frontier
from kdatui.engine.task import load_task


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "220")  # rich tables unwrapped
    monkeypatch.setenv("KDATUI_ARCHIVE_DIR", str(tmp_path / "archive"))


@pytest.fixture
def repo(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo")
    task = make_task(path=tmp_path / "kt.toml")
    with Frontier.open(repo) as fr:
        run = fr.start_run(task).id
        try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "q": 1.2},
                      idea="Split kernel, V-blocks of 64. Expects the state stage to stay in registers.")
        try_candidate(fr, run, task, "split", "bv32", {"p": 1.7, "q": 1.3}, parent="split-bv64")
        try_candidate(fr, run, task, "fused", "c16", {"p": 1.1, "q": 1.4})
    monkeypatch.chdir(repo / ".frontier")  # any folder of the repo will do
    return repo


def test_frontier_list_shows_every_member_per_shape(repo, capsys):
    code, out, err = run_main(capsys, "frontier", "list")
    assert code == 0, err
    assert "frontier of kt" in out
    assert "split-bv32 (best)" in out and "fused-c16" in out
    assert "1.7x" in out and "1.176 ms" in out  # speedup and candidate ms of split-bv32 on p
    assert "1.4x" in out  # fused-c16 on q: kept as fastest there
    assert "first member of family fused" in out
    assert "pruned (1): split-bv64" in out


def test_frontier_show_prints_idea_timings_and_checks(repo, capsys):
    code, out, err = run_main(capsys, "frontier", "show", "split-bv64")  # a pruned member can be shown
    assert code == 0, err
    assert "kt/split-bv64" in out and "pruned; kdatui frontier restore split-bv64" in out
    assert "V-blocks of 64" in out  # the idea, from IDEA.md on its commit
    assert "per-shape timing" in out
    for text in ("p *", "B1 T64 H2 K32 V32", "1.333", "1.5x", "1.2x", "2.0%"):
        assert text in out
    assert "checks" in out and "preflight" in out and "random" in out and "PASS" in out


def test_frontier_diff_compares_two_kernels(repo, capsys):
    code, out, err = run_main(capsys, "frontier", "diff", "split-bv64", "split-bv32")
    assert code == 0, err
    assert "-# fake: p=1.5 q=1.2" in out and "+# fake: p=1.7 q=1.3" in out
    assert "candidates/kt/kernel.py" in out


def test_frontier_prune_and_restore_say_what_they_did(repo, capsys):
    code, out, err = run_main(capsys, "frontier", "prune", "fused-c16", "--reason", "not needed")
    assert code == 0, err
    assert "pruned kt/fused-c16: branch frontier/kt/fused-c16 moved to refs/kdatui/pruned/kt/fused-c16" in out
    assert git(repo, "branch", "--list", "frontier/kt/fused-c16") == ""
    code, out, err = run_main(capsys, "frontier", "restore", "fused-c16")
    assert code == 0, err
    assert out.startswith("restored kt/fused-c16: branch frontier/kt/fused-c16 at")
    assert git(repo, "branch", "--list", "frontier/kt/fused-c16").strip() == "frontier/kt/fused-c16"


def test_archive_prints_what_moved_and_restore_brings_an_attempt_back(repo, capsys):
    code, out, err = run_main(capsys, "archive", "--keep-events-hours", "0")
    assert code == 0, err
    assert "worktree removed, branch -> refs/kdatui/archive/" in out
    assert "the frontier branches stay" in out
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    code, out, err = run_main(capsys, "archive", "--restore", "1")
    assert code == 0, err
    assert "restored attempt 1: worktree .frontier/worktrees/1" in out
    assert (repo / ".frontier" / "worktrees" / "1" / "candidates" / "kt" / "kernel.py").exists()


def test_generalize_from_the_cli(repo, capsys, monkeypatch):
    import kdatui.verbs_frontier as verbs

    fake = FakeEvaluator()
    monkeypatch.setattr(verbs, "make_evaluator", lambda task: fake)
    code, out, err = run_main(capsys, "generalize", "--from", "split-bv32", "--shapes", "wide:B=1,T=256,H=8,K=32,V=32",
                              "--task-out", str(repo / "tasks" / "kt_wide.toml"), "--quiet")
    assert code == 0, err
    assert "wrote task kt_wide" in out and "3 shapes: p, q, wide" in out
    assert "seeded its frontier with split-bv32: branch frontier/kt_wide/split-bv32" in out
    assert "wide: PASS" in out
    assert fake.calls[0][2] == ["p", "q", "wide"]
    assert list(load_task(repo / "tasks" / "kt_wide.toml").shapes) == ["p", "q", "wide"]
    # it said what it would do before the work, and where the task file is, untracked
    assert "generalize kt/split-bv32 to 3 shapes (adds wide [B1 T256 H8 K32 V32])" in err
    assert "task file tasks/kt_wide.toml (not tracked by git: `git add tasks/kt_wide.toml`" in out


def test_generalize_refuses_a_shape_that_repeats_a_dimension_before_any_work(repo, capsys, monkeypatch):
    import kdatui.verbs_frontier as verbs

    def no(task):
        raise AssertionError("no evaluator may be made for bad shapes")

    monkeypatch.setattr(verbs, "make_evaluator", no)
    code, out, err = run_main(capsys, "generalize", "--from", "split-bv32", "--shapes", "B=1,T=10,H=2,K=32,V=32,B=2")
    assert code == 2 and "B is given twice" in err


def test_generalize_without_an_evaluator_is_a_clear_error(repo, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "kdatui.engine.evaluator", None)  # import fails
    code, out, err = run_main(capsys, "generalize", "--from", "split-bv32", "--shapes", "b1_t256_h8_k32_v32")
    assert code == 2
    assert "generalize needs the evaluator" in err and "Traceback" not in err


def test_generalize_with_a_bad_shape_is_a_clear_error(repo, capsys, monkeypatch):
    import kdatui.verbs_frontier as verbs

    monkeypatch.setattr(verbs, "make_evaluator", lambda task: FakeEvaluator())
    code, out, err = run_main(capsys, "generalize", "--from", "split-bv32", "--shapes", "B=1,T=64,H=2,K=48")
    assert code == 2
    assert err.startswith("kdatui: error: shape 'B=1,T=64,H=2,K=48'") and "K = 48: expected a power of two" in err
    assert err.count("\n") == 1


def test_an_unknown_member_is_a_clear_error(repo, capsys):
    code, out, err = run_main(capsys, "frontier", "show", "nope")
    assert code == 2
    assert err.strip() == "kdatui: error: no member named 'nope' in any task (known: split-bv32, fused-c16)"


def test_not_a_repo_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "plain").mkdir()
    monkeypatch.chdir(tmp_path / "plain")
    code, out, err = run_main(capsys, "frontier", "list")
    assert code == 2
    assert err.count("\n") == 1 and "not a git repository" in err and "Traceback" not in err
    assert not (tmp_path / "plain" / ".frontier").exists()


def test_a_repo_without_commits_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    git(tmp_path, "init", "-q")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, "archive")
    assert code == 2
    assert err.count("\n") == 1 and "no commits yet" in err


def test_an_empty_frontier_says_so(tmp_path, monkeypatch, capsys):
    make_repo(tmp_path / "r")
    monkeypatch.chdir(tmp_path / "r")
    code, out, err = run_main(capsys, "frontier", "list")
    assert code == 0 and out.startswith("no frontier members yet")
