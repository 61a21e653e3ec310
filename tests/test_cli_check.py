"""`kdatui check` and `kdatui tasks`: exit codes, JSON output, and one-line errors (never a
traceback) for what a user can get wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kdatui.cli import main

REPO = Path(__file__).resolve().parents[1]
CPU_TASK = "tasks/kda_fwd_cpu.toml"
TORCH_CHUNKED = "kernels/kda/torch_chunked.py"
from planting import planted  # noqa: E402

NAN_ONE = planted("nan_one")
SMALL_SHAPE = "b2_t37_h3_k32_v32"


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", "200")  # rich tables unwrapped


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_of_torch_chunked_on_the_cpu_task_passes_every_shape_as_json(capsys, cpu_task):
    code, out, err = run_main(capsys, "check", "--task", CPU_TASK, "--candidate", TORCH_CHUNKED, "--json")
    assert code == 0, err
    reports = json.loads(out)  # stdout is the JSON and nothing else
    assert [r["shape"] for r in reports] == list(cpu_task.shapes)
    for r in reports:
        assert r["verdict"] == "PASS", r
        assert r["device"] == "cpu" and r["task"] == "kda_fwd_cpu"
        assert all(x["verdict"] == "PASS" for x in r["results"])
        assert len(r["results"]) == 18  # static, preflight, 10 probes, 5 holdout, input dependence


def test_check_of_a_bad_candidate_exits_1_with_a_fail_verdict(capsys):
    code, out, err = run_main(capsys, "check", "--task", CPU_TASK, "--candidate", NAN_ONE,
                              "--shape", SMALL_SHAPE, "--json")
    assert code == 1
    (report,) = json.loads(out)
    assert report["shape"] == SMALL_SHAPE and report["verdict"] == "FAIL"
    assert "non-finite" in report["results"][1]["reason"]


def test_check_prints_a_table_without_json(capsys):
    code, out, err = run_main(capsys, "check", "--task", "kda_fwd_cpu", "--candidate", NAN_ONE,
                              "--shape", SMALL_SHAPE)
    assert code == 1
    assert "preflight" in out and "FAIL" in out and "non-finite" in out
    assert "device: cpu" in err  # says the timings are not GPU figures


def test_check_of_an_erroring_candidate_exits_1(capsys):
    code, out, _ = run_main(capsys, "check", "--task", CPU_TASK, "--candidate",
                            "tests/candidates/imports_fla.py", "--shape", SMALL_SHAPE, "--json")
    assert code == 1
    (report,) = json.loads(out)
    assert report["verdict"] == "ERROR" and "baseline library fla" in report["results"][0]["reason"]


@pytest.mark.parametrize("argv,fragment", [
    (["--task", "tasks/no_such_task.toml", "--candidate", TORCH_CHUNKED], "no such task file"),
    (["--task", "no_such_task", "--candidate", TORCH_CHUNKED], "no task named 'no_such_task'"),
    (["--task", CPU_TASK, "--candidate", "kernels/kda/no_such.py"], "no such candidate"),
    (["--task", CPU_TASK, "--candidate", TORCH_CHUNKED, "--shape", "b9_t9_h9"], "no shape named 'b9_t9_h9'"),
])
def test_check_usage_errors_exit_2_with_one_line(capsys, argv, fragment):
    code, out, err = run_main(capsys, "check", *argv, "--json")
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kdatui: error: ") and fragment in lines[0], err
    assert "Traceback" not in err


def test_check_of_a_malformed_task_file_exits_2_naming_file_and_key(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text((REPO / CPU_TASK).read_text().replace("K = 32", "K = 48", 1))
    code, _, err = run_main(capsys, "check", "--task", str(bad), "--candidate", TORCH_CHUNKED)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and ".K = 48" in lines[0] and "power of two" in lines[0]


def test_missing_task_from_the_command_line_exits_2_without_a_traceback(tmp_path):
    # a real process: what a user sees, from the module entry point
    env = {**os.environ, "KDATUI_CONFIG_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "kdatui", "check", "--task", "tasks/nope.toml",
                           "--candidate", TORCH_CHUNKED], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip() == "kdatui: error: tasks/nope.toml: no such task file"


def test_tasks_lists_the_three_shipped_tasks_with_their_shapes(capsys):
    code, out, _ = run_main(capsys, "tasks")
    assert code == 0
    for name in ("kda_fwd_b1_t8192_h96", "kda_fwd_general", "kda_fwd_cpu"):
        assert name in out
    for shape in ("b1_t100_h2_k32_v32", "b2_t4096_h96", "b1_t16384_h96"):
        assert shape in out
    assert "invalid" not in out


def test_help_lists_the_verbs(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "check" in out and "tasks" in out
