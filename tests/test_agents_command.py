"""Command agents: configuration, PROMPT.md, a turn of a scripted coding agent (its
stream-json made readable, its candidate read back), failures, the turn timeout, turns in
order."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kdatui.engine.agents.base import AgentContext, AttemptView, MemberView, Plan, make_agent
from kdatui.engine.agents.command import (AgentConfig, AgentConfigError, CommandAgent, StreamParser,
                                          load_agent_configs, parse_idea)
from kdatui.engine.agents.prompt import render_prompt
from kdatui.kernels.kda import torch_chunked

SCRIPT = Path(__file__).parent / "agents" / "scripted_agent.py"


@pytest.fixture(autouse=True)
def plumbing_without_the_sandbox(monkeypatch):
    """These tests watch the command plumbing write where they look (outside the worktree);
    the agent's sandbox is tested in tests/test_trust.py."""
    monkeypatch.setenv("KDATUI_SANDBOX", "none")


def scripted(name: str = "scripted", *args: str, timeout_s: float | None = None, env=None) -> AgentConfig:
    extra = " ".join(args)
    return AgentConfig(name=name, command=f"{SCRIPT} {{prompt_file}} {extra}".strip(), timeout_s=timeout_s,
                       env=env or {})


def cell(speedup, ms, verdict="PASS"):
    base = ms * speedup if ms is not None else None
    return {"verdict": verdict, "speedup": speedup, "ms": ms, "baseline_ms": base, "noise": 0.01}


@pytest.fixture
def members(cpu_task):
    shapes = list(cpu_task.shapes)
    return [
        MemberView("split-default", "split", "Two stages: the chunk-local terms in parallel, then the recurrence.",
                   {"BV": 64}, {shapes[0]: cell(1.5, 0.2), shapes[1]: cell(1.2, 0.3), shapes[2]: cell(0.9, 0.4)},
                   best=True),
        MemberView("fused-default", "fused", "One launch per V-block.", {"BV": 64},
                   {shapes[0]: cell(0.8, 0.375), shapes[1]: cell(1.4, 0.25), shapes[2]: cell(None, None, "FAIL")}),
    ]


def context(task, members=(), *, notes=(), feedback=(), history=(), log=None, socket=None, timeout_s=30.0):
    return AgentContext(task=task, run_id="run-1", members=list(members), history=list(history), notes=list(notes),
                        feedback=list(feedback), log=log if log is not None else (lambda line: None),
                        rng=random.Random(0), engine_socket=socket, timeout_s=timeout_s)


def worktree_of(tmp_path, task) -> tuple[Path, Path]:
    wt = tmp_path / "wt"
    cdir = wt / "candidates" / task.name
    cdir.mkdir(parents=True)
    return wt, cdir


# --------------------------------------------------------------------------- PROMPT.md

def test_the_prompt_has_the_contract_shapes_rules_frontier_feedback_and_notes(cpu_task, members):
    ctx = context(cpu_task, members, notes=["try BV=32 on split", "keep fp32 accumulation"],
                  feedback=["#7 split-bv32: FAIL b1_t100_h2_k32_v32 (correlated: max_rel 0.4)"],
                  history=[AttemptView(7, "split", "split-bv32", "frontier/kda_fwd_cpu/split-default", "failed",
                                       "failed", "", "correlated: max_rel 0.4", {"BV": 32})],
                  socket=Path("/tmp/control.sock"))
    plan = Plan(family="split", name="claude-8", parent="split-default", idea="")
    text = render_prompt(ctx, plan, agent="claude", cdir="candidates/kda_fwd_cpu", task_file="/r/tasks/cpu.toml",
                         timeout_s=1800)
    # the contract in the prompt's words: interface, math, tolerances, probes, holdout
    assert "def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale, lower_bound," in text
    assert "[B, H, V, K] fp32" in text
    assert "lower_bound * sigmoid(exp(A_log[h]) * (g_t + dt_bias[h]))" in text
    assert "rtol = 0.05" in text and "atol = 0.5 x RMS(y)" in text and "< 0.03" in text
    assert "correlated" in text and "holdout" in text and "fp64_correlated" in text
    # the shapes, the primary marked
    for name in cpu_task.shapes:
        assert f"| {name} |" in text
    assert f"| {cpu_task.primary_shape} | 1 | 100 | 2 | 32 | 32 | primary |" in text
    # the rules
    assert "Candidate folder: `candidates/kda_fwd_cpu/`" in text
    assert "fla, fla_core, flash_kda or kdatui" in text
    assert "`family: <name>`" in text
    assert "kdatui check --task /r/tasks/cpu.toml --candidate candidates/kda_fwd_cpu" in text
    assert "kdatui bench --task /r/tasks/cpu.toml --candidate candidates/kda_fwd_cpu" in text
    assert "evaluator queue" in text  # the socket is set
    assert "30 minutes" in text
    # the frontier per shape (speedup and ms), no average
    assert "| split-default (best) | split | 1.5x 0.2 ms | 1.2x 0.3 ms | 0.9x 0.4 ms |" in text
    assert "| fused-default | fused | 0.8x 0.375 ms | 1.4x 0.25 ms | FAIL |" in text
    assert "| baseline (torch) |  | 0.3 ms | 0.36 ms | 0.36 ms |" in text
    others = [s for s in cpu_task.shapes if s != cpu_task.primary_shape]
    header = f"| member | family | {cpu_task.primary_shape} (primary) | {others[0]} | {others[1]} |"
    assert header in text.splitlines(), "one column per shape, no averaged column"
    assert "git show frontier/kda_fwd_cpu/split-default:candidates/kda_fwd_cpu/kernel.py" in text
    # feedback, history and notes, clearly headed
    assert "## Feedback from the last evaluations\n\n- #7 split-bv32: FAIL" in text
    assert "- #7 split-bv32 (split, from split-default): failed — correlated: max_rel 0.4" in text
    assert "5 holdout probes with secret inputs" in text and "Each runs 2 times" in text
    notes = text.index("## Notes from the operator")
    assert text.index("- try BV=32 on split") > notes and text.index("- keep fp32 accumulation") > notes
    assert "branch from the frontier member **split-default**" in text
    assert len(text) < 12000, "the prompt restates the contract; it does not paste KDA.md"


def test_an_empty_frontier_and_no_notes_are_said_so(cpu_task):
    text = render_prompt(context(cpu_task), Plan("agent", "claude-1", None, ""), agent="claude",
                         cdir="candidates/kda_fwd_cpu", task_file="t.toml", timeout_s=600)
    assert "No member yet" in text
    assert "(no evaluation yet)" in text
    assert "## Notes from the operator (read first)\n\n(none)" in text
    assert "evaluator queue" not in text
    assert "the run's base commit" in text


# --------------------------------------------------------------------------- stream-json

def test_claude_stream_json_becomes_readable_lines():
    p = StreamParser()
    feed = lambda obj: p.feed(json.dumps(obj))  # noqa: E731
    assert feed({"type": "system", "subtype": "init", "model": "opus", "tools": []}) == ["session started (model opus)"]
    assert feed({"type": "assistant", "message": {"content": [
        {"type": "text", "text": "Let me look.\n\nThe kernel is slow."},
        {"type": "tool_use", "name": "Bash", "input": {"command": "kdatui check --task t.toml --candidate c"}},
        {"type": "tool_use", "name": "Edit", "input": {"file_path": "/w/kernel.py", "old_string": "a"}}]}}) == [
        "Let me look.", "The kernel is slow.", "tool Bash: kdatui check --task t.toml --candidate c",
        "tool Edit: /w/kernel.py"]
    assert feed({"type": "user", "message": {"content": [
        {"type": "tool_result", "content": "PASS\nPASS\nPASS", "is_error": False}]}}) == ["  -> PASS (+2 lines)"]
    assert feed({"type": "user", "message": {"content": [
        {"type": "tool_result", "content": [{"type": "text", "text": "boom"}], "is_error": True}]}}) == [
        "  -> (error) boom"]
    assert feed({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 65000, "num_turns": 9,
                 "total_cost_usd": 1.234, "result": "Done: BV 32."}) == [
        "result: success in 65 s 9 turns $1.23: Done: BV 32."]
    assert feed({"type": "stream_event", "event": {}}) == []
    assert p.feed("plain text stays\n") == ["plain text stays"]
    assert p.feed("{not json") == ["{not json"]


def test_codex_and_gemini_json_lines_become_readable_lines():
    p = StreamParser()
    feed = lambda obj: p.feed(json.dumps(obj))  # noqa: E731
    assert feed({"type": "thread.started", "thread_id": "t"}) == ["session started"]
    assert feed({"type": "item.started", "item": {"type": "command_execution", "command": "bash -lc ls"}}) == [
        "$ bash -lc ls"]
    assert feed({"type": "item.completed", "item": {"type": "command_execution", "command": "ls",
                                                     "aggregated_output": "kernel.py\n", "exit_code": 0}}) == [
        "  -> exit 0: kernel.py"]
    assert feed({"type": "item.completed", "item": {"type": "agent_message", "text": "Wrote it."}}) == ["Wrote it."]
    assert feed({"type": "item.completed", "item": {"type": "file_change",
                                                     "changes": [{"path": "k.py", "kind": "update"}]}}) == [
        "edited k.py (update)"]
    assert feed({"type": "turn.failed", "error": {"message": "rate limited"}}) == ["turn failed: rate limited"]
    # gemini: streamed assistant text is joined into lines
    assert feed({"type": "init", "model": "gemini-x"}) == ["session started (model gemini-x)"]
    assert feed({"type": "message", "role": "assistant", "content": "Hello ", "delta": True}) == []
    assert feed({"type": "message", "role": "assistant", "content": "world.\nNext", "delta": True}) == ["Hello world."]
    assert feed({"type": "tool_use", "tool_name": "run_shell_command",
                 "parameters": {"command": "kdatui bench"}}) == ["Next", "tool run_shell_command: kdatui bench"]
    # any other JSON line with a text field
    assert feed({"type": "note", "text": "a text field"}) == ["a text field"]


# --------------------------------------------------------------------------- a turn

def _run_kernel(path: Path):
    spec = importlib.util.spec_from_file_location("kdatui_candidate_scripted", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    g = torch.Generator().manual_seed(0)
    B, T, H, K, V = 1, 37, 2, 32, 32
    q, k, gate = (torch.randn(B, T, H, K, generator=g).bfloat16() for _ in range(3))
    v = torch.randn(B, T, H, V, generator=g).bfloat16()
    beta = torch.randn(B, T, H, generator=g).bfloat16()
    args = (q, k, v, gate, beta, torch.zeros(H), torch.zeros(H, K))
    o, s = mod.kda_forward(*args, scale=K ** -0.5, lower_bound=-5.0)
    o_ref, s_ref = torch_chunked.kda_forward(*args, scale=K ** -0.5, lower_bound=-5.0)
    return (o.float() - o_ref.float()).norm() / o_ref.float().norm(), (s - s_ref).norm() / s_ref.norm()


def test_a_turn_writes_a_candidate_and_returns_its_family_name_and_idea(cpu_task, members, tmp_path):
    wt, cdir = worktree_of(tmp_path, cpu_task)
    lines: list[str] = []
    agent = CommandAgent([scripted()])
    ctx = context(cpu_task, members, log=lines.append, socket=tmp_path / "control.sock", notes=["go"])
    plan = agent.plan(ctx)
    assert plan.parent == "split-default" and plan.name == "scripted-1"
    result = agent.work(ctx, plan, wt, cdir)
    assert result.ok, result.reason
    assert result.family == "torch" and result.name == "torch-c16"
    assert result.idea.startswith("The plain-torch chunked form with 16-token chunks: smaller triangular solves")
    assert "Second paragraph" not in result.idea
    assert "- go" in (wt / "PROMPT.md").read_text()
    assert agent.consecutive_failures == 0 and agent.turn == 1
    # the output, readable, in the event log
    assert "scripted: session started (model scripted-1)" in lines
    assert "scripted: scripted agent: plain text on stdout" in lines
    assert "scripted: stderr: scripted agent: a line on stderr" in lines
    assert f"scripted: tool Write: {Path('candidates/kda_fwd_cpu/kernel.py')}" in lines
    assert f"scripted: The run's engine listens on {tmp_path / 'control.sock'}." in lines
    assert any(ln.startswith("scripted: result: success in 1 s 3 turns $0.01") for ln in lines)
    assert any(ln.startswith("scripted: exited with status 0") for ln in lines)
    assert not any('"type"' in ln for ln in lines), "a stream-json line reached the log raw"
    # the candidate is a working kernel
    err_o, err_s = _run_kernel(cdir / "kernel.py")
    assert err_o < 0.03 and err_s < 0.03


def test_placeholders_are_filled_per_argument_and_the_environment_is_passed(cpu_task, tmp_path):
    wt, cdir = worktree_of(tmp_path, cpu_task)
    out = tmp_path / "args.json"
    code = ("import json,os,sys; json.dump({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
            "'env': {k: os.environ.get(k) for k in ('FOO', 'KDATUI_ENGINE_SOCKET')}}, open(sys.argv[1], 'w'))")
    cfg = AgentConfig("py", f"{sys.executable} -c \"{code}\" {out} {{worktree}} {{candidate_dir}} {{task}} "
                            "--file={task_file} '{json: 1}'", env={"FOO": "bar"})
    ctx = context(cpu_task)
    result = CommandAgent([cfg]).work(ctx, Plan("agent", "py-1", None, ""), wt, cdir)
    assert not result.ok and "left no candidates/kda_fwd_cpu/kernel.py" in result.reason
    got = json.loads(out.read_text())
    assert got["argv"][1:4] == [str(wt), str(cdir), cpu_task.name]
    assert got["argv"][4] == f"--file={cpu_task.path.resolve()}"
    assert got["argv"][5] == "{json: 1}"
    assert Path(got["cwd"]).resolve() == wt.resolve()
    assert got["env"] == {"FOO": "bar", "KDATUI_ENGINE_SOCKET": None}


def test_a_task_without_a_file_is_written_next_to_the_prompt(cpu_task, tmp_path):
    wt, cdir = worktree_of(tmp_path, cpu_task)
    task = replace(cpu_task, path=None)
    result = CommandAgent([scripted()]).work(context(task), Plan("agent", "s-1", None, ""), wt, cdir)
    assert result.ok
    assert (wt / "TASK.toml").read_text() == task.dumps()
    assert f"--task {wt / 'TASK.toml'}" in (wt / "PROMPT.md").read_text()


def test_a_failing_turn_is_not_ok_and_says_why(cpu_task, tmp_path):
    wt, cdir = worktree_of(tmp_path, cpu_task)
    lines: list[str] = []
    agent = CommandAgent([scripted("flaky", "--mode", "fail")])
    for n in range(1, 4):
        result = agent.work(context(cpu_task, log=lines.append), Plan("agent", f"flaky-{n}", None, ""), wt, cdir)
        assert not result.ok
        assert result.reason.startswith("flaky exited with status 1: ")
        assert agent.consecutive_failures == n
    assert not (cdir / "kernel.py").exists()
    assert "flaky: turn failed: " + result.reason in lines


def test_a_turn_that_leaves_no_new_kernel_fails(cpu_task, tmp_path):
    wt, cdir = worktree_of(tmp_path, cpu_task)
    agent = CommandAgent([scripted("idle", "--mode", "noop")])
    result = agent.work(context(cpu_task), Plan("agent", "idle-1", None, ""), wt, cdir)
    assert not result.ok and result.reason == "idle left no candidates/kda_fwd_cpu/kernel.py"
    (cdir / "kernel.py").write_text("# the parent's kernel\n")
    result = agent.work(context(cpu_task), Plan("split", "idle-2", "split-default", ""), wt, cdir)
    assert not result.ok and "kernel.py as it was (its parent's)" in result.reason
    assert agent.consecutive_failures == 2


def test_a_missing_command_is_a_failed_turn(cpu_task, tmp_path):
    wt, cdir = worktree_of(tmp_path, cpu_task)
    agent = CommandAgent([AgentConfig("ghost", "no-such-agent-cli-kdatui {prompt_file}")])
    result = agent.work(context(cpu_task), Plan("agent", "ghost-1", None, ""), wt, cdir)
    assert not result.ok and "cannot run 'no-such-agent-cli-kdatui'" in result.reason


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pid: int, within: float = 3.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc to see the processes gone")
def test_a_hanging_command_is_killed_with_its_children_at_the_timeout(cpu_task, tmp_path):
    wt, cdir = worktree_of(tmp_path, cpu_task)
    pids = tmp_path / "pids"
    lines: list[str] = []
    agent = CommandAgent([scripted("slow", "--mode", "hang", "--pidfile", str(pids), timeout_s=2.0)],
                         kill_grace_s=0.5)
    t0 = time.monotonic()
    result = agent.work(context(cpu_task, log=lines.append, timeout_s=600), Plan("agent", "slow-1", None, ""),
                        wt, cdir)
    took = time.monotonic() - t0
    assert not result.ok
    assert result.reason == "slow ran past the turn's timeout of 2 s and was killed"
    assert took < 8, f"the turn took {took:.1f} s"
    leader, child = (int(x) for x in pids.read_text().split())
    assert _wait_dead(leader) and _wait_dead(child), "a process of the turn survived it"
    assert "slow: Thinking for a very long time..." in lines


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc to see the processes gone")
def test_close_kills_a_running_turn(cpu_task, tmp_path):
    wt, cdir = worktree_of(tmp_path, cpu_task)
    pids = tmp_path / "pids"
    agent = CommandAgent([scripted("slow", "--mode", "hang", "--pidfile", str(pids))])
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", agent.work(
        context(cpu_task, timeout_s=60), Plan("agent", "slow-1", None, ""), wt, cdir)))
    th.start()
    end = time.monotonic() + 10
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < end:
        time.sleep(0.05)
    agent.close()
    th.join(timeout=5)
    assert not th.is_alive()
    assert not out["r"].ok and "stopped" in out["r"].reason
    leader, child = (int(x) for x in pids.read_text().split())
    assert _wait_dead(leader) and _wait_dead(child)


def test_agents_take_turns_in_order(cpu_task, members, tmp_path):
    agent = CommandAgent([scripted("a", "--chunk", "16"), scripted("b", "--chunk", "8")])
    names, results, history = [], [], []
    for i in range(4):
        wt, cdir = worktree_of(tmp_path / str(i), cpu_task)
        ctx = context(cpu_task, members, history=history)
        plan = agent.plan(ctx)
        names.append(plan.name)
        result = agent.work(ctx, plan, wt, cdir)
        results.append(result.name)
        history.append(AttemptView(i + 1, result.family, result.name, "base", "passed", "passed", "", "", None))
    assert names == ["a-1", "b-2", "a-3", "b-4"]
    # a name IDEA.md asks for that is taken already gets the turn's number
    assert results == ["torch-c16", "torch-c8", "torch-c16-3", "torch-c8-4"]


def test_the_parent_rotates_over_the_families_best_members(cpu_task, members):
    agent = CommandAgent([scripted()])
    slower_split = replace(members[0], name="split-bv32", best=False,
                           cells={cpu_task.primary_shape: cell(1.1, 0.3)})
    ctx = context(cpu_task, [slower_split, *members])
    parents = []
    for turn in range(4):
        agent.turn = turn
        parents.append(agent.plan(ctx).parent)
    assert parents == ["split-default", "fused-default", "split-default", "fused-default"]
    assert agent.plan(context(cpu_task)).parent is None


# --------------------------------------------------------------------------- IDEA.md

def test_idea_md_gives_family_name_and_the_first_paragraph():
    text = ("# A faster split\n\n**family:** Split\nname: `split-bv32`\nparent: split-default\n\n"
            "Halve BV to double the programs.\nExpect 5%.\n\nDetails follow.\n")
    assert parse_idea(text) == ("split", "split-bv32", "Halve BV to double the programs. Expect 5%.")
    assert parse_idea("just an idea") == (None, None, "just an idea")


# --------------------------------------------------------------------------- configuration

def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_agents_are_read_from_the_user_and_repo_configs_and_the_caller(isolated_env, tmp_path):
    _write(isolated_env / "config.toml", '[agents.claude]\ncommand = "claude -p {prompt}"\n'
                                         '[agents.codex]\ncommand = "codex exec {prompt}"\ntimeout_s = 900\n')
    repo = tmp_path / "repo"
    _write(repo / ".frontier" / "config.toml",
           '[agents.claude]\ncommand = "claude -p {prompt} --output-format stream-json"\nenv = { A = "1", N = 2 }\n'
           '[other]\nkey = 1\n')
    configs = load_agent_configs(repo=repo)
    assert configs["claude"].command == "claude -p {prompt} --output-format stream-json"
    assert configs["claude"].env == {"A": "1", "N": "2"}
    assert configs["claude"].source == str(repo / ".frontier" / "config.toml")
    assert configs["codex"].timeout_s == 900.0
    configs = load_agent_configs({"agents": {"codex": {"command": "codex exec --json {prompt_file}"}}}, repo=repo)
    assert configs["codex"].command == "codex exec --json {prompt_file}" and configs["codex"].timeout_s is None
    assert load_agent_configs({"x": {"command": "x {prompt_file}"}}, repo=repo)["x"].command == "x {prompt_file}"


@pytest.mark.parametrize("table,message", [
    ('[agents.claude]\ntimeout_s = 10\n', "missing key 'agents.claude.command'"),
    ('[agents.claude]\ncommand = "claude"\ntimeout_s = "soon"\n',
     "agents.claude.timeout_s = 'soon': expected a positive number of seconds"),
    ('[agents.claude]\ncommand = "claude"\ntimeout = 10\n', "unknown key 'agents.claude.timeout'; allowed here"),
    ('[agents.claude]\ncommand = "claude -p {prompt_path}"\n', "(found {prompt_path})"),
    ('[agents.claude]\ncommand = "claude -p \'unclosed"\n', "a command line shlex can split"),
    ('[agents.claude]\ncommand = ""\n', "agents.claude.command = '': expected a non-empty command"),
    ('[agents.claude]\ncommand = "claude"\nenv = "A=1"\n', "agents.claude.env = 'A=1': expected a table"),
    ('[agents.claude]\ncommand = "claude"\nenv = { A = [1] }\n', "agents.claude.env.A = [1]: expected a string"),
    ('agents = "claude"\n', "agents = 'claude': expected a table of agents"),
    ('[agents]\nclaude = "claude -p"\n', "agents.claude = 'claude -p': expected a table"),
    ('[agents.builtin]\ncommand = "x"\n', "'builtin' is the built-in agent's name"),
    ('[agents.claude\ncommand = "x"\n', "not valid TOML"),
])
def test_a_malformed_agent_config_names_the_file_and_the_key(tmp_path, table, message):
    repo = tmp_path / "repo"
    path = _write(repo / ".frontier" / "config.toml", table)
    with pytest.raises(AgentConfigError) as e:
        load_agent_configs(repo=repo)
    assert str(e.value).startswith(f"{path}: ")
    assert message in str(e.value)


def test_a_malformed_user_config_names_the_user_file(isolated_env, tmp_path):
    path = _write(isolated_env / "config.toml", '[agents.claude]\ncommand = 5\n')
    with pytest.raises(AgentConfigError, match=f"^{path}: agents.claude.command = 5: expected"):
        load_agent_configs(repo=tmp_path)


def test_make_agent_builds_command_agents_from_the_config(cpu_task, tmp_path):
    repo = tmp_path / "repo"
    _write(repo / ".frontier" / "config.toml",
           f'[agents.s1]\ncommand = "{SCRIPT} {{prompt_file}}"\n[agents.s2]\ncommand = "{SCRIPT} {{prompt_file}}"\n')
    agent = make_agent("s1, s2", cpu_task, repo=repo)
    assert isinstance(agent, CommandAgent) and [c.name for c in agent.configs] == ["s1", "s2"]
    with pytest.raises(ValueError, match="unknown agent 'nope'.*s1, s2"):
        make_agent("nope", cpu_task, repo=repo)


def test_the_scripted_agent_is_an_executable():
    assert os.access(SCRIPT, os.X_OK)
    assert SCRIPT.read_text().startswith("#!/usr/bin/env python3\n")
