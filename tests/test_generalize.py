"""Generalize a frontier member to more shapes; recheck a member."""

from __future__ import annotations

import pytest
from frontier_support import FakeEvaluator, git, make_repo, make_task, try_candidate

from kdatui.engine.frontier import Frontier
from kdatui.engine.generalize import generalize, parse_extra_shapes, recheck
from kdatui.engine.task import TaskError, load_task


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("KDATUI_ARCHIVE_DIR", str(tmp_path / "archive"))
    repo = make_repo(tmp_path / "repo")
    task = make_task(("p",), path=tmp_path / "kt.toml")
    with Frontier.open(repo) as fr:
        run = fr.start_run(task).id
        _, adm = try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "b2_t128_h4_k32_v32": 1.3,
                                                               "wide": 0.9})
        yield fr, repo, task, adm, tmp_path


def test_generalize_writes_a_task_seeds_its_frontier_and_evaluates_every_shape(env):
    fr, repo, task, adm, tmp = env
    ev = FakeEvaluator()
    out = tmp / "kt_wide.toml"
    result = generalize(fr, task, "split-bv64", ["B=2,T=128,H=4,K=32,V=32", "wide:B=1,T=256,H=8,K=32,V=32"],
                        evaluator=ev, task_out=out)

    new = load_task(out)  # a valid task file
    assert new.name == "kt_wide" and new.primary_shape == "p"
    assert list(new.shapes) == ["p", "b2_t128_h4_k32_v32", "wide"]
    assert new.shapes["wide"].T == 256 and new.contract == task.contract
    # the member was checked and timed on every shape, old and new, from the new candidate path
    [(task_name, path, shapes)] = ev.calls
    assert task_name == "kt_wide" and shapes == ["p", "b2_t128_h4_k32_v32", "wide"]
    assert path.endswith("candidates/kt_wide")
    stored = fr.store.evaluations(result.attempt, "kt_wide")
    assert [(e.shape, e.speedup) for e in stored] == [("p", 1.5), ("b2_t128_h4_k32_v32", 1.3), ("wide", 0.9)]
    # the new task's frontier starts with the member, on a branch from the member's commit
    [m] = fr.members("kt_wide")
    assert m.name == "split-bv64" and m.best and m.why.startswith("generalized from kt/split-bv64")
    assert result.branch == "frontier/kt_wide/split-bv64"
    git(repo, "merge-base", "--is-ancestor", adm.sha, result.branch)
    src = git(repo, "show", f"{result.branch}:candidates/kt_wide/kernel.py")
    assert src == git(repo, "show", f"{adm.sha}:candidates/kt/kernel.py")
    assert "wide" in git(repo, "show", f"{result.branch}:candidates/kt_wide/timings.json")
    assert "kt_wide" in (repo / ".frontier" / "index.toml").read_text()
    # the old task's frontier is untouched
    assert [x.sha for x in fr.members("kt")] == [adm.sha]


def test_generalize_defaults_the_task_file_to_tasks_in_the_repo(env):
    fr, repo, task, adm, tmp = env
    result = generalize(fr, task, "split-bv64", ["b2_t128_h4_k32_v32"], evaluator=FakeEvaluator())
    assert result.task_path == repo / "tasks" / "kt-2shapes.toml"
    assert load_task(result.task_path).name == "kt-2shapes"


def test_a_member_that_fails_a_new_shape_still_seeds_the_task_and_says_so(env):
    fr, repo, task, adm, tmp = env

    class Failing(FakeEvaluator):
        def evaluate(self, task, path, shapes=None, *, progress=None):
            from frontier_support import evaluation

            return [evaluation(s, None if s.name == "wide" else 1.4, verdict="FAIL" if s.name == "wide" else "PASS",
                               task=task.name) for s in task.shapes.values()]

    result = generalize(fr, task, "split-bv64", ["wide:B=1,T=256,H=8,K=32,V=32"], evaluator=Failing(),
                        task_out=tmp / "kt_wide.toml")
    assert result.failures and result.failures[0].startswith("wide: FAIL")
    [m] = fr.members("kt_wide")
    assert "fails on wide: FAIL" in m.why and "a seed to fix" in m.why


@pytest.mark.parametrize("specs, message", [
    ([], "no shapes given"),
    (["B=1,T=64"], "missing H"),
    (["B=1,T=64,H=2,K=48,V=32"], "expected a power of two"),
    (["B=1,T=64,H=2,K=32,V=32"], "already in kt as 'p'"),
    (["p:B=3,T=64,H=2,K=32,V=32"], "the name 'p' is already used"),
    (["B=1,T=64,H=9,X=2"], "unknown dimension 'X'"),
])
def test_bad_shapes_are_clear_errors(env, specs, message):
    fr, repo, task, adm, tmp = env
    with pytest.raises(TaskError, match=message):
        parse_extra_shapes(task, specs)
    with pytest.raises(TaskError, match=message):
        generalize(fr, task, "split-bv64", specs, evaluator=FakeEvaluator(), task_out=tmp / "x.toml")
    assert not (tmp / "x.toml").exists()


def test_generalize_refuses_to_overwrite_a_task_file(env):
    fr, repo, task, adm, tmp = env
    (tmp / "x.toml").write_text("mine\n")
    with pytest.raises(TaskError, match="exists already"):
        generalize(fr, task, "split-bv64", ["wide:B=1,T=256,H=8,K=32,V=32"], evaluator=FakeEvaluator(),
                   task_out=tmp / "x.toml")
    assert (tmp / "x.toml").read_text() == "mine\n"


def test_recheck_records_new_figures_for_a_member(env):
    fr, repo, task, adm, tmp = env

    class Slower(FakeEvaluator):
        def evaluate(self, task, path, shapes=None, *, progress=None):
            from frontier_support import evaluation

            assert (path / "kernel.py").exists()  # checked out from the member's commit
            return [evaluation(s, 1.1, task=task.name) for s in task.shapes.values()]

    evals = recheck(fr, task, "split-bv64", evaluator=Slower())
    assert [(e.shape, e.speedup) for e in evals] == [("p", 1.1)]
    assert fr.contender(fr.find("split-bv64", "kt")).speed("p") == 1.1
    assert "worktrees/recheck-" not in git(repo, "worktree", "list")  # the temporary checkout is gone
