"""End to end on the CPU task with the built-in agent: `kdatui run tasks/kda_fwd_cpu.toml
--budget ...` explores both kernel families, admits a member of each, and every member's
branch passes `kdatui check` again (at the primary shape: the run checked every shape before
it admitted them). Real Triton kernels through the interpreter: slow."""

from __future__ import annotations

import json
import subprocess

import pytest

from frontier_support import make_repo
from test_engine import ROOT, kdatui, status, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def cpu_repo(tmp_path):
    task = "tasks/kda_fwd_cpu.toml"
    r = make_repo(tmp_path / "repo", {task: (ROOT / task).read_text()})
    yield r
    kdatui(r, "stop", check=False, timeout=60)


def test_builtin_run_on_the_cpu_task_admits_both_families_and_members_recheck(cpu_repo):
    kdatui(cpu_repo, "run", "tasks/kda_fwd_cpu.toml", "--budget", "3attempts", "--detach")
    st = wait_for(cpu_repo, lambda s: s["state"] == "finished", what="three attempts", timeout=1200)
    assert st["attempts"]["evaluated"] == 3
    events = [json.loads(line) for line in
              (cpu_repo / ".frontier" / "runs" / st["run"] / "events.jsonl").read_text().splitlines()]
    families = {e["family"] for e in events if e["kind"] == "attempt-proposed"}
    assert {"fused", "split"} <= families
    admitted = {e["family"]: e["name"] for e in events if e["kind"] == "admitted"}
    assert {"fused", "split"} <= set(admitted), f"admitted: {admitted}"
    ideas = [e for e in events if e["kind"] == "attempt-proposed"]
    assert all(e.get("reason") for e in ideas), "every attempt carries its one-line reason"

    members = subprocess.run(["git", "for-each-ref", "--format=%(refname:short)", "refs/heads/frontier/"],
                             cwd=cpu_repo, capture_output=True, text=True).stdout.split()
    assert len(members) >= 2
    for branch in members:
        folder = cpu_repo / "recheck" / branch.replace("/", "_")
        folder.mkdir(parents=True)
        for name in ("kernel.py", "IDEA.md"):
            src = subprocess.run(["git", "show", f"{branch}:candidates/kda_fwd_cpu/{name}"], cwd=cpu_repo,
                                 capture_output=True, text=True, check=True).stdout
            (folder / name).write_text(src)
        out = kdatui(cpu_repo, "check", "--task", "tasks/kda_fwd_cpu.toml", "--candidate", str(folder),
                     "--shape", "b1_t100_h2_k32_v32", "--json", timeout=600)
        assert all(r["verdict"] == "PASS" for r in json.loads(out.stdout)), branch
    assert status(cpu_repo)["members"] == len(members)
