"""The judge out of the candidate's reach (issue 12) and a timer it cannot bend (issue 13), on
the CPU: candidates written to attack the harness (tests/attack_candidates/) get no PASS they
do not deserve and no speedup above their honest version's; what they try to read, write or
reach is out of their sandbox. Run through the evaluator, `kdatui check`, `kdatui bench` and a
`kdatui run`.

The sandbox tests need bubblewrap (or root, for the uid fallback): they skip with the reason
where this machine has neither; the process-boundary tests hold everywhere.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from kdatui.engine import sandbox
from kdatui.engine.evaluator import LocalEvaluator
from kdatui.engine.task import load_task
from planting import ATTACKS, attack

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "tasks" / "tiny.toml"
HONEST = ROOT / "kernels" / "kda" / "torch_chunked.py"
MEMORY_LIMIT = 2 << 30

pytestmark = pytest.mark.timeout(300)
SANDBOX = sandbox.detect()
needs_sandbox = pytest.mark.skipif(not SANDBOX.sandboxed, reason=f"no sandbox on this machine: {SANDBOX.reason}")


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("trust-config")
    (d / "holdout_salt").write_text("5a17" * 16)
    os.chmod(d / "holdout_salt", 0o600)
    return d


@pytest.fixture(scope="module")
def task():
    t = load_task(TINY)
    t.contract.holdout = 1  # the salt is used: the leak tests look for it
    t.bench.trials, t.bench.repeats = 3, 3
    return t


@pytest.fixture(scope="module")
def evaluator(config_dir):
    env = {**os.environ, "KDATUI_CONFIG_DIR": str(config_dir), "OMP_NUM_THREADS": "1"}
    with LocalEvaluator(devices=["cpu"], timeout_s=120, memory_limit=MEMORY_LIMIT, env=env) as ev:
        yield ev


@pytest.fixture(scope="module")
def honest(evaluator, task):
    [ev] = evaluator.evaluate(task, str(HONEST), [task.primary_shape])
    assert ev.verdict == "PASS", ev.reason
    return ev


def one(evaluator, task, candidate):
    [ev] = evaluator.evaluate(task, candidate, [task.primary_shape])
    return ev


def no_better_than(ev, honest) -> None:
    """No speedup above the honest version's beyond the noise of either (generous on the CPU,
    where the interpreter's timings are noisy: the attacks these catch gain 5-22x). The honest
    candidate is the torch baseline's own algorithm, so its true speedup is 1: a run that drew
    it below 1 (0.73 or less once, on 2 busy cores) does not tighten the bound under an honest figure."""
    if ev.timing is not None:
        limit = max(honest.speedup, 1.0) * (1 + max(honest.timing.noise, ev.timing.noise, 0.5))
        assert ev.speedup <= limit, (ev.speedup, limit, ev.reason)


# --------------------------------------------------------------------------- the process boundary

@pytest.mark.parametrize("name", ["patch_checks_sys_modules", "patch_checks_gc"])
def test_patching_the_checks_in_its_own_process_wins_nothing(evaluator, task, name):
    ev = one(evaluator, task, attack(name))
    assert ev.verdict in ("FAIL", "ERROR"), ev.reason
    assert ev.timing is None  # never timed, so no speedup at all
    assert ev.checks is not None and ev.checks.results[0].verdict == "PASS"  # past the static check


def test_the_judge_process_never_imports_a_candidate(evaluator, task):
    # the evaluator's process and the judge's: only an executor may hold the candidate
    ev = one(evaluator, task, attack("patch_checks_sys_modules"))
    assert ev.verdict != "PASS"
    assert not [m for m in sys.modules if m.startswith("kdatui_candidate")]
    judge = evaluator.slots[0].worker
    maps = Path(f"/proc/{judge.pid}/maps").read_text()
    assert "patch_checks_sys_modules" not in maps


# --------------------------------------------------------------------------- the sandbox

def _leak_source(reads: list[str], globs: list[str], writes: list[str], port: int) -> str:
    src = (ATTACKS / "leak.py").read_text()
    src = src.replace("PATHS_TO_READ = []  # substituted", f"PATHS_TO_READ = {reads!r}")
    src = src.replace("GLOBS = []  # substituted", f"GLOBS = {globs!r}")
    src = src.replace("PATHS_TO_WRITE = []  # substituted", f"PATHS_TO_WRITE = {writes!r}")
    return src.replace("PORT = 0  # substituted", f"PORT = {port}")


@pytest.fixture
def listener():
    """A local server the candidate tries to reach; records every connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.settimeout(0.2)
    got: list = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
                got.append(c.recv(100))
                c.close()
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], got
    stop.set()
    t.join(2)
    srv.close()


@needs_sandbox
def test_a_candidate_reads_no_secret_or_state_writes_nothing_outside_and_reaches_no_network(
        evaluator, task, config_dir, tmp_path, listener):
    port, connections = listener
    # a repo as a run leaves it: the store, another attempt's worktree, and this attempt's folder
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".frontier" / "worktrees" / "7" / "candidates").mkdir(parents=True)
    (repo / ".frontier" / "kdatui.db").write_text("STORE-SECRET")
    other = repo / ".frontier" / "worktrees" / "3" / "candidates" / "kernel.py"
    other.parent.mkdir(parents=True)
    other.write_text("OTHER-WORKTREE")
    home_secret = Path.home() / ".kdatui-test-secret"
    home_secret.write_text("HOME-SECRET")
    try:
        reads = [str(config_dir / "holdout_salt"), str(repo / ".frontier" / "kdatui.db"), str(other),
                 str(home_secret)]
        globs = [str(config_dir) + "/**/*salt*", "~/.config/**/*salt*", str(repo / ".frontier") + "/**/*"]
        outside = [repo / "planted.txt", config_dir / "planted.txt", Path.home() / "planted-by-leak.txt",
                   repo / ".frontier" / "worktrees" / "3" / "planted.txt"]
        src = _leak_source(reads, globs, [str(p) for p in outside], port)
        cand = repo / ".frontier" / "worktrees" / "7" / "candidates" / "leak"
        cand.mkdir()
        (cand / "kernel.py").write_text(src)
        ev = one(evaluator, task, str(cand))
    finally:
        home_secret.unlink()
    assert ev.verdict == "ERROR"
    m = re.search(r"LEAK (.*)", ev.reason)
    assert m, ev.reason
    codes = dict(part.split("=") for part in m.group(1).split())
    assert all(codes[f"R{i}"] == "no" for i in range(len(reads))), codes  # not one secret read
    assert all(codes[f"G{i}"] == "0" for i in range(len(globs))), codes  # nothing found by globbing
    # a write under /tmp lands in the sandbox's private /tmp, gone with it; anywhere else it is refused
    assert all(codes[f"W{i}"] == "no" for i, p in enumerate(outside) if not str(p).startswith("/tmp/")), codes
    assert codes["N"] == "no" and not connections
    for p in outside:
        assert not p.exists(), p
    assert "5a17" * 16 not in json.dumps(ev.to_dict())
    assert (config_dir / "holdout_salt").read_text() == "5a17" * 16  # untouched


@needs_sandbox
def test_the_executor_runs_in_the_sandbox_the_doctor_names(evaluator):
    info = evaluator.slots[0].sandbox or sandbox.detect()
    assert info.kind == SANDBOX.kind and info.sandboxed


# --------------------------------------------------------------------------- the timer

def test_a_candidate_that_stops_the_host_clock_is_suspect_and_not_faster(evaluator, task, honest):
    ev = one(evaluator, task, attack("stop_the_clock"))
    assert ev.checks.passed
    assert ev.verdict == "SUSPECT", ev.reason
    assert "time.perf_counter was replaced" in ev.reason
    no_better_than(ev, honest)


def test_a_candidate_that_bends_the_runners_own_clock_is_suspect_and_not_faster(evaluator, task, honest):
    ev = one(evaluator, task, attack("stop_the_runners_clock"))
    assert ev.checks.passed
    assert ev.timing is not None
    assert ev.verdict == "SUSPECT" and "the runner's own clock (_perf) was replaced" in ev.reason, ev.reason
    no_better_than(ev, honest)


def test_a_clock_bent_out_of_the_runners_sight_is_credited_the_judges_wall_time():
    # what the judge does when the runner's own checks are fooled too: its own clock decides
    from kdatui.engine.timing import bound_by_wall

    credited, flag = bound_by_wall([0.01, 0.01, 0.01], wall_ms=3.4, overhead_per_call_ms=0.1)
    assert flag.startswith("wall-bound") and abs(credited - (3.4 - 0.3) / 3) < 1e-9


def test_work_deferred_past_the_timer_fails_the_audit_or_is_credited_its_time(evaluator, task, honest):
    ev = one(evaluator, task, attack("defer_work"))
    assert ev.checks.passed, ev.reason
    assert ev.verdict != "PASS" or ev.timing.flags, (ev.verdict, ev.reason)
    if ev.verdict == "FAIL":
        assert ev.reason.startswith("post-timing:")
    no_better_than(ev, honest)


def test_a_cache_on_sampled_inputs_gains_nothing_on_fresh_timed_inputs(evaluator, task, honest):
    # with the sparse input-dependence check off, it passes, and is timed: every timed call
    # has inputs it never saw, so its memory never answers
    t = replace(task, contract=replace(task.contract, input_dependence=False))
    from planting import planted

    ev = one(evaluator, t, planted("memo_fingerprint"))
    assert ev.verdict == "PASS", ev.reason
    no_better_than(ev, honest)
    # and with the contract whole, it fails a check that says why
    ev = one(evaluator, task, planted("memo_fingerprint"))
    assert ev.verdict == "FAIL" and "one input element changed in place" in ev.reason


def test_timing_records_fresh_inputs_the_audit_and_the_host_cost(honest, task):
    t = honest.timing
    assert t.sets_per_batch == task.bench.repeats  # a fresh input set for every timed call
    assert t.audited >= 2 and honest.post_timing == "PASS"
    assert t.baseline.host_ms is not None and t.candidate.host_ms is not None
    assert t.flags == [] and t.suspect == ""


def test_a_timing_below_the_racing_bar_stops_after_one_trial_and_says_so(evaluator, task, honest):
    """The bar is the least speedup that could be admitted (the loop sets it from the family's
    member): the honest candidate under a bar 50x its speedup runs one trial of three; under a
    bar 50x below, all three."""
    p = task.primary_shape
    [ev] = evaluator.evaluate(task, str(HONEST), [p], race={p: honest.speedup * 50})
    assert ev.verdict == "RACED" and ev.reason.startswith("timing: raced out after 1 trial")
    assert ev.timing.trials == 1 and "2 trials not run" in ev.timing.raced and ev.post_timing == "PASS"
    [full] = evaluator.evaluate(task, str(HONEST), [p], race={p: honest.speedup / 50})
    assert full.verdict == "PASS" and full.timing.trials == task.bench.trials and full.timing.raced == ""
    # every shape of the call: the raced one goes first, the others are then checked, not timed
    other = next(s for s in task.shapes if s != p)
    evs = {e.shape: e for e in evaluator.evaluate(task, str(HONEST), [other, p], race={p: honest.speedup * 50})}
    assert evs[p].verdict == "RACED" and evs[p].timing.trials == 1
    assert evs[other].verdict == "RACED" and evs[other].timing is None and evs[other].checks.passed
    assert evs[other].reason == f"not timed: raced out on {p}"


# --------------------------------------------------------------------------- through the CLI and a run

def _cli(*args, env=None, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "kdatui", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=280, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def test_kdatui_check_gives_a_harness_patch_no_pass():
    p = _cli("check", "--task", str(TINY), "--candidate", attack("patch_checks_sys_modules"),
             "--shape", "b1_t20_h2_k16_v16", "--json")
    assert p.returncode == 1, p.stderr
    (report,) = json.loads(p.stdout)
    assert report["verdict"] == "FAIL"


def test_kdatui_bench_gives_a_bent_clock_no_speedup_and_says_why():
    p = _cli("bench", "--task", str(TINY), "--candidate", attack("stop_the_clock"), "--shapes",
             "b1_t20_h2_k16_v16", "--json")
    assert p.returncode == 1, p.stderr
    (ev,) = json.loads(p.stdout)
    assert ev["verdict"] == "SUSPECT" and "perf_counter" in ev["reason"]


def test_without_a_sandbox_the_cli_says_so_and_everything_still_works(tmp_path):
    # bwrap hidden from PATH (and root's uid fallback switched off, as for an ordinary user)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if not (Path(d) / "bwrap").exists())
    env = {"PATH": f"{bin_dir}{os.pathsep}{path}", "KDATUI_SANDBOX": "none" if os.geteuid() == 0 else ""}
    p = _cli("bench", "--task", str(TINY), "--candidate", str(HONEST), "--shapes", "b1_t20_h2_k16_v16", env=env)
    assert p.returncode == 0, p.stderr
    assert "candidates not sandboxed" in p.stderr
    env.pop("KDATUI_SANDBOX")
    p = _cli("doctor", "--json", env=env)
    doc = json.loads(p.stdout)
    sb = next(c for c in doc["checks"] if c["name"] == "sandbox")
    assert sb["ok"] is False or os.geteuid() == 0  # root keeps the uid fallback
    assert "bubblewrap" in sb["detail"] or "uid" in sb["detail"]


def test_a_run_keeps_every_attack_off_the_frontier(tmp_path, config_dir):
    from frontier_support import make_repo

    repo = make_repo(tmp_path / "repo", {"tiny.toml": TINY.read_text()})
    agent = f"python:{ROOT / 'tests' / 'agents_py' / 'torch_agent.py'}:AttackAgent"
    env = {"KDATUI_CONFIG_DIR": str(config_dir), "KDATUI_TEST_ATTACKS": "patch_checks_sys_modules,stop_the_clock"}
    try:
        p = _cli("run", "tiny.toml", "--agent", agent, "--budget", "2attempts", "--detach", cwd=repo, env=env)
        assert p.returncode == 0, p.stderr
        deadline = time.time() + 240
        st = {}
        while time.time() < deadline:
            q = _cli("status", "--json", cwd=repo, env=env)
            if q.returncode == 0:
                st = json.loads(q.stdout)
                if st.get("state") in ("finished", "stopped") and st.get("attempts", {}).get("evaluated", 0) >= 2:
                    break
            time.sleep(0.5)
        assert st.get("attempts", {}).get("evaluated", 0) >= 2, st
        fl = _cli("frontier", "list", cwd=repo, env=env)
        assert "patch-checks" not in fl.stdout and "stop-the-clock" not in fl.stdout, fl.stdout
        events = (repo / ".frontier" / "runs").rglob("events.jsonl")
        text = "".join(e.read_text() for e in events)
        assert "SUSPECT" in text and "5a17" * 16 not in text
    finally:
        _cli("stop", cwd=repo, env=env)


# --------------------------------------------------------------------------- a coding agent's turn

@pytest.mark.skipif(SANDBOX.kind != "bwrap", reason=f"the agent sandbox needs bubblewrap: {SANDBOX.reason}")
def test_an_agent_turn_writes_its_worktree_only_and_reads_no_salt_or_store(tmp_path, cpu_task, monkeypatch):
    import random

    from frontier_support import make_repo
    from kdatui.engine.agents.base import AgentContext, Plan
    from kdatui.engine.agents.command import AgentConfig, CommandAgent

    config = tmp_path / "config"
    config.mkdir()
    (config / "holdout_salt").write_text("5a17" * 16)
    monkeypatch.setenv("KDATUI_CONFIG_DIR", str(config))
    repo = make_repo(tmp_path / "repo", {"tiny.toml": TINY.read_text()})
    (repo / ".frontier").mkdir(exist_ok=True)
    (repo / ".frontier" / "kdatui.db").write_text("STORE")
    wt = repo / ".frontier" / "worktrees" / "1"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "kdatui/scratch/r/1", str(wt)], cwd=repo, check=True)
    cdir = wt / "candidates" / cpu_task.name
    cdir.mkdir(parents=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    script = repo / "agent_probe.py"  # in the repo's tree: readable in the turn (read-only)
    script.write_text(f"""
import json, os, subprocess, sys
out = {{}}
def attempt(name, f):
    try:
        f(); out[name] = "ok"
    except Exception as e:
        out[name] = "no: " + type(e).__name__
attempt("read_salt", lambda: open({str(config / "holdout_salt")!r}).read())
attempt("read_store", lambda: open({str(repo / ".frontier" / "kdatui.db")!r}).read())
attempt("write_repo", lambda: open({str(repo / "planted.txt")!r}, "w").write("x"))
attempt("write_home", lambda: open(os.path.expanduser("~/.kdatui-agent-test"), "w").write("x"))
r = subprocess.run(["git", "update-ref", "refs/heads/frontier/t/evil", "HEAD"], capture_output=True)
out["move_ref"] = "ok" if r.returncode == 0 else "no"
r = subprocess.run(["git", "status", "--short"], capture_output=True, text=True)
out["git_status"] = "ok" if r.returncode == 0 else "no: " + r.stderr[-200:]
cdir = os.environ["KDATUI_CANDIDATE_DIR"]
open(os.path.join(cdir, "kernel.py"), "w").write(open({str(HONEST)!r}).read())
open(os.path.join(cdir, "found.json"), "w").write(json.dumps(out))
""")
    cfg = AgentConfig("probe", f"{sys.executable} {script}", network=False)
    ctx = AgentContext(task=cpu_task, run_id="r", members=[], history=[], notes=[], feedback=[],
                       log=lambda line: None, rng=random.Random(0), engine_socket=None, timeout_s=120)
    try:
        result = CommandAgent([cfg]).work(ctx, Plan("torch", "probe-1", None, ""), wt, cdir)
    finally:
        home_mark = Path.home() / ".kdatui-agent-test"
        home_written = home_mark.exists()
        home_mark.unlink(missing_ok=True)
    assert result.ok, result.reason  # it could write its own worktree
    found = json.loads((cdir / "found.json").read_text())
    assert found["read_salt"].startswith("no") and found["read_store"].startswith("no"), found
    assert found["write_repo"].startswith("no") and found["move_ref"] == "no", found
    assert found["git_status"] == "ok", found  # the review tools still work in its worktree
    assert not (repo / "planted.txt").exists()
    assert home_written and found["write_home"] == "ok"  # a CLI keeps its own logins in the home dir
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)"], cwd=repo, capture_output=True, text=True).stdout
    assert "frontier/t/evil" not in refs
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip() == head


def test_the_audited_calls_are_a_uniform_draw_over_the_whole_trial():
    # drawn batch by batch after each batch ran: always exactly AUDITS_PER_TRIAL of a trial's
    # calls, each call as likely as any other wherever its batch falls
    from kdatui.engine.judge import AUDITS_PER_TRIAL, _select

    counts = [0] * 30
    for _ in range(3000):
        left, n, start = [AUDITS_PER_TRIAL, 30], 0, 0
        for k in (8, 8, 8, 6):
            picks = _select(k, left)
            n += len(picks)
            for i in picks:
                counts[start + i] += 1
            start += k
        assert n == AUDITS_PER_TRIAL
    expect = 3000 * AUDITS_PER_TRIAL / 30
    assert all(0.7 * expect < c < 1.3 * expect for c in counts), counts


def test_the_uid_fallback_lets_nobody_through_a_private_temporary_dir(tmp_path):
    """mkdtemp makes 0700 dirs: an executor dropped to nobody could not reach its own
    candidate inside one (it failed so on the H200, where bwrap is absent)."""
    top = tmp_path / "kdatui-exec-x"
    inner = top / "exec-0" / "candidate"
    inner.mkdir(parents=True)
    top.chmod(0o700)
    (top / "exec-0").chmod(0o755)  # the executor's own dir, already open: the private one is above it
    sandbox._let_traverse(inner.parent)
    for d in (top, top / "exec-0"):
        mode = d.stat().st_mode
        assert mode & 0o001, oct(mode)  # others pass through
    assert not top.stat().st_mode & 0o004  # and still cannot list the private one
