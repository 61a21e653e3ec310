"""The admission policy (pure), and the frontier in git: branches, commits, prune,
restore, crash safety, and the messages for repos kdatui cannot use."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from frontier_support import FakeEvaluator, git, kernel_source, make_repo, make_task, try_candidate

from kdatui.engine.frontier import (Contender, Frontier, Policy, ShapeScore, decide, member_name,
                                    prune_family)
from kdatui.engine.gitrepo import DirtyTreeError, RepoError
from kdatui.engine.store import Store

TESTS = Path(__file__).resolve().parent
POLICY = Policy(shapes=("p", "q"), primary="p", max_per_family=3)


def c(name: str, family: str, p: float, q: float, *, noise: float = 0.02, fail: str = "") -> Contender:
    scores = {s: ShapeScore("FAIL" if s == fail else "PASS", v, noise) for s, v in (("p", p), ("q", q))}
    return Contender(name, family, scores)


# --------------------------------------------------------------------------- policy (pure)

def test_policy_admits_the_first_candidate_of_an_empty_frontier():
    d = decide(POLICY, c("split-a", "split", 1.2, 1.1), [])
    assert d.admit and "first on the frontier" in d.reason and "first member of family split" in d.reason


def test_policy_admits_a_new_best_on_the_primary_shape():
    members = [c("split-a", "split", 1.5, 1.5), c("fused-a", "fused", 1.2, 1.6)]
    d = decide(POLICY, c("fused-b", "fused", 1.8, 1.0), members)
    assert d.admit
    assert "new best on the primary shape p: 1.8x (was 1.5x by split-a)" in d.reason
    assert d.prune == []  # slower than fused-a on q beyond noise: a trade-off, both kept


def test_a_lead_inside_the_noise_is_not_announced_as_a_new_best():
    members = [c("split-a", "split", 1.5, 1.5), c("fused-a", "fused", 1.2, 1.6)]
    d = decide(POLICY, c("fused-b", "fused", 1.52, 1.7, noise=0.05), members)  # 1.52 vs 1.5: inside 5%
    assert d.admit and "new best" not in d.reason
    assert "fastest on the primary shape p by less than the noise (5%): 1.52x vs 1.5x by split-a" in d.reason


def test_policy_admits_a_new_family_even_when_slower_than_every_member():
    d = decide(POLICY, c("chunked-a", "chunked", 0.9, 0.8), [c("split-a", "split", 1.5, 1.5)])
    assert d.admit and d.reason == "first member of family chunked"


def test_policy_admits_a_family_improvement_and_prunes_the_member_it_beats():
    members = [c("split-a", "split", 1.5, 1.2), c("fused-a", "fused", 2.0, 2.0)]
    d = decide(POLICY, c("split-b", "split", 1.6, 1.19), members)  # q: 1.19 vs 1.2 is inside 2% noise
    assert d.admit and "beats split-a of its family" in d.reason
    assert [n for n, _ in d.prune] == ["split-a"]
    assert "dominated by split-b" in d.prune[0][1]


def test_policy_rejects_a_candidate_that_fails_a_shape():
    d = decide(POLICY, c("split-b", "split", 9.0, 9.0, fail="q"), [c("split-a", "split", 1.0, 1.0)])
    assert not d.admit and d.reason.startswith("does not pass every shape: q: FAIL")


def test_policy_rejects_a_candidate_not_evaluated_on_every_shape():
    cand = Contender("split-b", "split", {"p": ShapeScore("PASS", 3.0)})
    d = decide(POLICY, cand, [])
    assert not d.admit and "q: not evaluated" in d.reason


def test_policy_rejects_a_slower_same_family_candidate():
    d = decide(POLICY, c("split-b", "split", 1.4, 1.2), [c("split-a", "split", 1.5, 1.2)])
    assert not d.admit
    assert d.reason.startswith("no faster than split-a of its family: 1.4x vs 1.5x on p")


def test_policy_faster_on_primary_but_slower_beyond_noise_elsewhere_is_not_a_family_improvement():
    members = [c("split-a", "split", 1.5, 1.5), c("fused-a", "fused", 2.0, 2.0)]
    d = decide(POLICY, c("split-b", "split", 1.6, 1.3), members)  # q 1.3 vs 1.5: beyond noise
    assert not d.admit and "not the fastest on any shape" in d.reason


def test_policy_keeps_the_fastest_candidate_on_any_shape():
    members = [c("split-a", "split", 1.5, 1.2)]
    d = decide(POLICY, c("split-b", "split", 1.3, 1.6), members)  # slower on p, fastest on q
    assert d.admit and d.reason.startswith("fastest on q: 1.6x (was 1.2x by split-a)")
    assert d.prune == []  # neither dominates the other: the matrix shows the trade-off


def test_policy_never_evicts_a_slower_other_family():
    members = [c("split-a", "split", 2.0, 2.0), c("fused-a", "fused", 1.0, 1.0)]
    d = decide(POLICY, c("split-b", "split", 3.0, 3.0), members)
    assert d.admit and [n for n, _ in d.prune] == ["split-a"]
    assert prune_family(POLICY, [*members, c("x", "fused", 0.5, 0.5)], "split") == []


def test_policy_prunes_a_member_dominated_in_its_own_family_only():
    members = [c("split-a", "split", 2.0, 2.0), c("split-b", "split", 1.5, 1.5), c("fused-a", "fused", 1.0, 1.0)]
    victims = prune_family(POLICY, members, "split")
    assert [(v.name) for v, _ in victims] == ["split-b"]
    assert prune_family(POLICY, members, "fused") == []


def test_policy_caps_a_family_and_spares_members_fastest_on_some_shape():
    policy = Policy(shapes=("p", "q"), primary="p", max_per_family=2)
    members = [c("split-a", "split", 2.0, 1.0), c("split-b", "split", 1.0, 2.0), c("split-c", "split", 1.5, 1.5)]
    victims = prune_family(policy, members, "split")
    assert [v.name for v, _ in victims] == ["split-c"]  # a and b hold the best on p and on q
    assert "keeps at most 2 members" in victims[0][1]


def test_member_names_are_family_plus_idea_not_version_numbers():
    assert member_name("split", "BV64 C16") == "split-bv64-c16"
    assert member_name("split", "split-bv32") == "split-bv32"
    assert member_name("Fused", "") == "fused"


# --------------------------------------------------------------------------- frontier in git

@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.setenv("KDATUI_ARCHIVE_DIR", str(tmp_path / "archive"))
    return make_repo(tmp_path / "repo")


@pytest.fixture
def fr(repo):
    with Frontier.open(repo) as f:
        yield f


def test_admission_flow_in_a_repo_keeps_best_families_and_prunes_the_dominated(fr, repo):
    task = make_task()
    run = fr.start_run(task).id
    _, a = try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "q": 1.2})
    _, b = try_candidate(fr, run, task, "fused", "c16", {"p": 1.1, "q": 1.0})
    _, better = try_candidate(fr, run, task, "split", "bv32", {"p": 1.7, "q": 1.3}, parent="split-bv64")
    _, slower = try_candidate(fr, run, task, "split", "bv16", {"p": 1.2, "q": 1.1})
    _, failing = try_candidate(fr, run, task, "fused", "c64", {"p": 5.0, "q": 5.0}, fail=("q",))

    assert a.admitted and b.admitted and b.reason == "first member of family fused"
    assert better.admitted and better.pruned[0][0] == "split-bv64"
    assert not slower.admitted and "no faster than split-bv32" in slower.reason
    assert not failing.admitted and "q: FAIL" in failing.reason

    branches = git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/frontier", "refs/kdatui/pruned")
    assert branches.splitlines() == ["refs/heads/frontier/kt/fused-c16", "refs/heads/frontier/kt/split-bv32",
                                     "refs/kdatui/pruned/kt/split-bv64"]
    members = {m.name: m for m in fr.members("kt")}
    assert set(members) == {"split-bv32", "fused-c16"}  # the slower family stays
    assert members["split-bv32"].best and not members["fused-c16"].best
    for m in members.values():
        assert git(repo, "rev-parse", m.branch) == m.sha
    # the improvement's commit descends from the member it mutated
    git(repo, "merge-base", "--is-ancestor", "refs/kdatui/pruned/kt/split-bv64", "frontier/kt/split-bv32")
    # every decision is an event with its reason
    decisions = fr.store.events(run, kinds=("admission-decision",))
    assert [e["admitted"] for e in decisions] == [True, True, True, False, False]
    assert all(e["reason"] for e in decisions)
    pruned = fr.store.events(run, kinds=("pruned",))
    assert pruned[0]["name"] == "split-bv64" and "dominated by split-bv32" in pruned[0]["reason"]
    lines = (repo / ".frontier" / "runs" / run / "events.jsonl").read_text().splitlines()
    assert [json.loads(x)["kind"] for x in lines].count("admission-decision") == 5
    # the user's tree gets no clutter: .frontier/ is excluded locally (.git/info/exclude)
    assert git(repo, "status", "--porcelain", "-uall").splitlines() == []
    assert "/.frontier/" in (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"


def _race_loop(fr, task, evaluator):
    from kdatui.engine.events import EventBus
    from kdatui.engine.loop import Budget, RunControl, RunLoop

    run = fr.start_run(task).id
    return RunLoop(fr, evaluator, agent=None, bus=EventBus(fr.store, run=lambda: run), task=task, run_id=run,
                   budget=Budget(), control=RunControl()), run


def _proposed(fr, run, task, family, name, speeds, parent=None):
    return fr.propose(run, task, family=family, name=name, idea=f"{family} {name}", parent=parent, reason="try",
                      files={"kernel.py": kernel_source(speeds, note=name),
                             "IDEA.md": f"# {family}-{name}\n\nfamily: {family}\n"})


def test_a_candidate_far_below_its_family_member_is_raced_out_and_never_admitted(fr, repo):
    """Racing: the loop hands the evaluator a bar on the primary shape (the family member's
    speedup less the task's margin); a candidate under it is stopped after one trial, recorded
    RACED with its partial figure, its attempt `raced`, and never considered for admission."""
    task = make_task()
    ev = FakeEvaluator()
    loop, run = _race_loop(fr, task, ev)
    loop.evaluate_attempt(_proposed(fr, run, task, "split", "bv64", {"p": 2.0, "q": 1.5}).id)
    assert ev.races[-1] == {}  # the first of a family has nothing to race against
    slow = _proposed(fr, run, task, "split", "bv16", {"p": 0.5, "q": 3.0}, parent="split-bv64")
    loop.evaluate_attempt(slow.id)
    bar = ev.races[-1]["p"]
    assert bar == pytest.approx(2.0 * (1 - task.bench.race))
    att = fr.attempt(slow.id)
    assert att.status == "failed" and att.verdict == "raced" and "p: RACED" in att.reason
    [p_eval] = [e for e in fr.store.evaluations(slow.id, task.name) if e.shape == "p"]
    assert p_eval.verdict == "RACED" and p_eval.data["timing"]["raced"].startswith("raced out after 1 trial")
    assert {m.name for m in fr.members(task.name)} == {"split-bv64"}  # fastest on q, but never admitted
    decided = [e.get("attempt") for e in fr.store.events(run) if e["kind"] == "admission-decision"]
    assert decided and slow.id not in decided
    # inside the margin: timed in full and considered as usual; another family is not raced
    close = _proposed(fr, run, task, "split", "bv32", {"p": 1.9, "q": 1.6}, parent="split-bv64")
    loop.evaluate_attempt(close.id)
    assert fr.attempt(close.id).verdict == "passed"
    loop.evaluate_attempt(_proposed(fr, run, task, "fused", "c16", {"p": 0.3, "q": 0.3}).id)
    assert ev.races[-1] == {} and "fused-c16" in {m.name for m in fr.members(task.name)}


def test_git_log_and_show_carry_source_checks_and_per_shape_timings(fr, repo):
    task = make_task()
    run = fr.start_run(task).id
    _, adm = try_candidate(fr, run, task, "split", "bv64-c16", {"p": 1.6, "q": 1.25},
                           idea="Split kernel with V-blocks of 64 and 16-token chunks. Expects fewer stalls.")
    log = git(repo, "log", "-1", "frontier/kt/split-bv64-c16")
    assert "split-bv64-c16: Split kernel with V-blocks of 64 and 16-token chunks" in log
    assert re.search(r"shape\s+verdict\s+candidate ms\s+baseline ms\s+speedup\s+noise", log)
    assert re.search(r"p \*\s+PASS\s+1\.25\s+2\s+1\.6x\s+2\.0%", log)  # candidate, baseline ms, speedup
    assert re.search(r"q\s+PASS\s+1\.6\s+2\s+1\.25x\s+2\.0%", log)
    assert "Kept because: first on the frontier" in log
    show = git(repo, "show", "--stat", "frontier/kt/split-bv64-c16")
    for path in ("candidates/kt/kernel.py", "candidates/kt/IDEA.md", "candidates/kt/checks.json",
                 "candidates/kt/timings.json"):
        assert path in show
    src = git(repo, "show", "frontier/kt/split-bv64-c16:candidates/kt/kernel.py")
    assert "def kda_forward" in src and "# fake: p=1.6 q=1.25" in src
    checks = json.loads(git(repo, "show", "frontier/kt/split-bv64-c16:candidates/kt/checks.json"))
    assert checks["verdict"] == "PASS"
    assert [r["probe"] for r in checks["shapes"]["q"]["checks"]["results"]] == ["preflight", "random"]
    timings = json.loads(git(repo, "show", "frontier/kt/split-bv64-c16:candidates/kt/timings.json"))
    assert timings["primary_shape"] == "p"
    assert timings["shapes"]["p"]["speedup"] == 1.6 and timings["shapes"]["p"]["baseline_ms"] == 2.0
    assert timings["shapes"]["q"]["candidate_ms"] == pytest.approx(1.6)


def test_prune_moves_the_branch_and_restore_brings_it_back(fr, repo):
    task = make_task()
    run = fr.start_run(task).id
    _, adm = try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "q": 1.2})
    m = fr.prune("kt", "split-bv64", "operator does not trust it")
    assert m.state == "pruned" and m.ref == "refs/kdatui/pruned/kt/split-bv64"
    assert git(repo, "branch", "--list", "frontier/*") == ""
    assert git(repo, "rev-parse", "refs/kdatui/pruned/kt/split-bv64") == adm.sha
    assert fr.members("kt") == []
    back = fr.restore(None, "split-bv64")
    assert back.state == "member" and back.best
    assert git(repo, "rev-parse", "frontier/kt/split-bv64") == adm.sha
    assert git(repo, "for-each-ref", "refs/kdatui/pruned") == ""
    assert [e["kind"] for e in fr.store.events(None, kinds=("pruned", "restored"))] == ["pruned", "restored"]


def test_a_second_prune_of_the_same_name_keeps_the_first_pruned_commit(fr, repo):
    task = make_task()
    run = fr.start_run(task).id
    _, first = try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "q": 1.2})
    fr.prune("kt", "split-bv64")
    _, second = try_candidate(fr, run, task, "split", "bv64", {"p": 1.4, "q": 1.1})
    assert second.admitted and second.name == "split-bv64" and second.sha != first.sha
    fr.prune("kt", "split-bv64")
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/kdatui/pruned").splitlines()
    assert sorted(refs) == sorted([f"refs/kdatui/pruned/kt/split-bv64 {second.sha}",
                                   f"refs/kdatui/pruned/kt/split-bv64@{first.sha[:8]} {first.sha}"])


def test_an_improvement_with_the_same_name_continues_the_members_branch(fr, repo):
    task = make_task()
    run = fr.start_run(task).id
    _, old = try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "q": 1.2})
    _, new = try_candidate(fr, run, task, "split", "bv64", {"p": 1.8, "q": 1.4})  # from base, not the member
    assert new.admitted and new.name == "split-bv64" and new.pruned == []
    assert git(repo, "rev-parse", "frontier/kt/split-bv64") == new.sha
    git(repo, "merge-base", "--is-ancestor", old.sha, new.sha)  # the old commit stays in the history
    states = sorted((m.attempt, m.state) for m in fr.store.members("kt", states=("member", "replaced")))
    assert states == [(1, "replaced"), (2, "member")]


def test_index_toml_is_regenerated_after_every_change(fr, repo):
    import tomllib

    task = make_task()
    run = fr.start_run(task).id
    try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "q": 1.2})
    try_candidate(fr, run, task, "fused", "c16", {"p": 1.7, "q": 1.0})
    index = tomllib.loads((repo / ".frontier" / "index.toml").read_text())
    kt = index["tasks"]["kt"]
    assert kt["best"] == "fused-c16" and kt["primary_shape"] == "p"
    by_name = {m["name"]: m for m in kt["members"]}
    assert by_name["split-bv64"]["shapes"]["q"]["speedup"] == 1.2
    assert by_name["split-bv64"]["fastest_on"] == ["q"] and by_name["fused-c16"]["fastest_on"] == ["p"]
    assert by_name["fused-c16"]["why"].startswith("new best on the primary shape p")
    fr.prune("kt", "fused-c16")
    index = tomllib.loads((repo / ".frontier" / "index.toml").read_text())
    assert [m["name"] for m in index["tasks"]["kt"]["members"]] == ["split-bv64"]
    assert index["tasks"]["kt"]["best"] == "split-bv64"


# --------------------------------------------------------------------------- crash safety

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[4])
from frontier_support import make_task
from kdatui.engine.frontier import Frontier

point = sys.argv[2]

def hook(name):
    if name == point:
        print("AT", name, flush=True)
        time.sleep(120)  # the parent kills us here

fr = Frontier.open(sys.argv[1], hook=hook)
fr.consider(make_task(), int(sys.argv[3]))
print("DONE", flush=True)
"""


def _kill_during(repo: Path, point: str, attempt: int) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(repo), point, str(attempt), str(TESTS)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.strip() == f"AT {point}", child.stderr.read()
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


def _prepare(repo: Path):
    """A member split-bv64, and an evaluated attempt split-bv32 that beats it."""
    with Frontier.open(repo) as fr:
        task = make_task()
        run = fr.start_run(task).id
        _, first = try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "q": 1.2})
        att, _ = try_candidate(fr, run, task, "split", "bv32", {"p": 1.7, "q": 1.3}, consider=False)
        return first, att


def _raw_store(repo: Path) -> Store:
    return Store(repo / ".frontier")  # the store alone: no recovery


def test_killed_after_the_intent_before_the_commit_rolls_back_and_loses_nothing(repo):
    first, att = _prepare(repo)
    _kill_during(repo, "admission:intent", att.id)
    with _raw_store(repo) as st:  # what the dead process left
        assert [m.name for m in st.members(states=("admitting",))] == ["split-bv32"]
        assert st.attempt(att.id).status == "admitting"
    assert git(repo, "branch", "--list", "frontier/kt/split-bv32") == ""

    with Frontier.open(repo) as fr:
        assert fr.store.members(states=("admitting",)) == []
        assert fr.attempt(att.id).status == "passed"
        assert [m.name for m in fr.members("kt")] == ["split-bv64"]  # no member without its commit
        assert git(repo, "rev-parse", "frontier/kt/split-bv64") == first.sha
        assert [e.shape for e in fr.store.evaluations(att.id)] == ["p", "q"]  # evaluations kept
        assert any("rolled back the admission of kt/split-bv32" in e["what"]
                   for e in fr.store.events(None, kinds=("repaired",)))
        again = fr.consider(make_task(), att.id)  # and it can be admitted after all
        assert again.admitted and again.pruned[0][0] == "split-bv64"


def test_killed_after_the_commit_before_the_store_completes_the_admission(repo):
    first, att = _prepare(repo)
    _kill_during(repo, "admission:committed", att.id)
    tip = git(repo, "rev-parse", "frontier/kt/split-bv32")
    with _raw_store(repo) as st:
        assert [m.name for m in st.members(states=("admitting",))] == ["split-bv32"]

    with Frontier.open(repo) as fr:
        m = fr.find("split-bv32", "kt")
        assert m.state == "member" and m.sha == tip and m.best
        assert fr.attempt(att.id).status == "admitted"
        # the prune the decision implied is carried out too
        assert [x.name for x in fr.members("kt")] == ["split-bv32"]
        assert git(repo, "rev-parse", "refs/kdatui/pruned/kt/split-bv64") == first.sha
        assert "split-bv32" in (repo / ".frontier" / "index.toml").read_text()


def test_killed_in_the_middle_of_a_prune_completes_it(repo):
    first, att = _prepare(repo)
    _kill_during(repo, "prune:intent", att.id)
    with _raw_store(repo) as st:
        assert [m.name for m in st.members(states=("pruning",))] == ["split-bv64"]
    with Frontier.open(repo) as fr:
        assert [x.name for x in fr.members("kt")] == ["split-bv32"]
        assert fr.find("split-bv64", "kt", states=("pruned",)).sha == first.sha
        assert git(repo, "branch", "--list", "frontier/kt/split-bv64") == ""


def test_the_store_refuses_a_member_without_its_commit(repo):
    with Frontier.open(repo) as fr:
        fr.start_run(make_task())
        att = fr.store.add_attempt(run=None, task="kt", family="split", name="x", parent="base", parent_sha=None)
        with pytest.raises(sqlite3.IntegrityError):
            fr.store.conn.execute(
                "INSERT INTO frontier (task, name, family, branch, attempt, state, created, updated) "
                "VALUES ('kt', 'x', 'split', 'frontier/kt/x', ?, 'member', 0, 0)", (att.id,))


# --------------------------------------------------------------------------- repos kdatui cannot use

def test_not_a_git_repo_is_a_clear_message(tmp_path):
    with pytest.raises(RepoError, match=r"not a git repository; kdatui keeps candidates as git branches"):
        Frontier.open(tmp_path)


def test_a_repo_without_commits_is_a_clear_message(tmp_path):
    git(tmp_path, "init", "-q")
    with pytest.raises(RepoError, match=r"has no commits yet.*make a first commit"):
        Frontier.open(tmp_path)


def test_a_dirty_tree_names_the_files_when_a_run_branches_from_it(fr, repo):
    (repo / "README.md").write_text("changed\n")
    with pytest.raises(DirtyTreeError, match=r"uncommitted changes to tracked files \(README.md\); kdatui "
                                             r"branches attempts from the last commit"):
        fr.start_run(make_task())


def test_a_dirty_attempt_worktree_outside_the_candidate_refuses_admission(fr, repo):
    task = make_task()
    run = fr.start_run(task).id
    att, _ = try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "q": 1.2}, consider=False)
    (fr.worktree_path(att) / "README.md").write_text("the agent edited this\n")
    with pytest.raises(DirtyTreeError, match=r"\(README.md\); kdatui commits only the candidate folder "
                                             r"candidates/kt/"):
        fr.consider(task, att.id)
    assert fr.members("kt") == [] and fr.attempt(att.id).status == "passed"


def test_opening_from_inside_an_attempt_worktree_finds_the_main_repo(fr, repo):
    task = make_task()
    run = fr.start_run(task).id
    att = fr.propose(run, task, family="split", name="a", files={"kernel.py": kernel_source({"p": 1})})
    with Frontier.open(fr.candidate_path(att)) as inner:
        assert inner.repo.root == repo
        assert inner.attempt(att.id).worktree == ".frontier/worktrees/1"


def test_fake_evaluator_reads_planted_figures(tmp_path):
    (tmp_path / "kernel.py").write_text(kernel_source({"p": 2.0}, fail=("q",)))
    evals = FakeEvaluator().evaluate(make_task(), tmp_path)
    assert [(e.shape, e.verdict, e.speedup) for e in evals] == [("p", "PASS", 2.0), ("q", "FAIL", None)]


def test_attempts_left_in_flight_by_a_dead_run_are_marked_error_and_the_run_can_resume(repo):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with Frontier.open(repo) as fr:
        task = make_task()
        run = fr.start_run(task).id
        att = fr.propose(run, task, family="split", name="a", files={"kernel.py": kernel_source({"p": 1})})
        fr.start_evaluation(att.id)
        fr.store.update_run(run, pid=dead.pid)  # the engine of this run died mid-evaluation
    with Frontier.open(repo) as fr:
        a = fr.attempt(att.id)
        assert a.status == "error" and a.reason.startswith("interrupted: the process of run")
        assert fr.store.run(run).state == "stopped"
        assert fr.resume_run(run).state == "running" and fr.store.run(run).pid == os.getpid()


def test_a_member_branch_deleted_by_hand_is_recreated_on_open(repo):
    with Frontier.open(repo) as fr:
        task = make_task()
        _, adm = try_candidate(fr, fr.start_run(task).id, task, "split", "bv64", {"p": 1.5, "q": 1.2})
    git(repo, "branch", "-D", "frontier/kt/split-bv64")
    with Frontier.open(repo) as fr:
        assert git(repo, "rev-parse", "frontier/kt/split-bv64") == adm.sha
        assert [m.name for m in fr.members("kt")] == ["split-bv64"]


def test_an_attempt_evaluated_again_after_a_restart_has_no_verdict_until_it_is(fr):
    """The header's `evaluated` counts attempts with a verdict: the one re-evaluated after
    a crash (marked error by the recovery) must not count until its new verdict is in."""
    task = make_task()
    run = fr.start_run(task).id
    att = fr.propose(run, task, family="split", name="a", files={"kernel.py": kernel_source({"p": 1.2, "q": 1.1})})
    fr.store.update_attempt(att.id, status="error", verdict="error", reason="interrupted: the process stopped")
    fr.start_evaluation(att.id)
    again = fr.attempt(att.id)
    assert again.status == "evaluating" and again.verdict is None
    fr.record_evaluations(att.id, task, FakeEvaluator().evaluate(task, fr.candidate_path(att)))
    assert fr.attempt(att.id).verdict == "passed"
