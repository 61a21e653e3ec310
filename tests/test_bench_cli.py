"""`kdatui bench`: a per-shape table (or JSON), exit 1 when a check fails, and usage errors
as one line with exit status 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kdatui.cli import main
from kdatui.verbs_bench import bench_progress

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "tests" / "tasks" / "tiny.toml")
GOOD = str(ROOT / "kernels" / "kda" / "torch_chunked.py")
ZEROS = str(ROOT / "tests" / "fault_candidates" / "zeros.py")

pytestmark = pytest.mark.timeout(120)


def test_bench_prints_a_per_shape_table_and_exits_0_when_every_shape_passes(capsys):
    assert main(["bench", "--task", TINY, "--candidate", GOOD]) == 0
    out = capsys.readouterr().out
    for text in ("b1_t20_h2_k16_v16", "b2_t9_h1_k16_v16", "PASS", "torch", "speedup", "spread",
                 "timer perf_counter"):
        assert text in out


def test_bench_json_gives_one_evaluation_per_requested_shape(capsys):
    assert main(["bench", "--task", TINY, "--candidate", GOOD, "--shapes", "b2_t9_h1_k16_v16", "--json"]) == 0
    captured = capsys.readouterr()
    evs = json.loads(captured.out)
    assert [e["shape"] for e in evs] == ["b2_t9_h1_k16_v16"]
    ev = evs[0]
    assert ev["verdict"] == "PASS" and ev["device"] == "cpu" and ev["baseline"] == "torch"
    assert ev["timing"]["timer"] == "perf_counter" and ev["timing"]["speedup"] > 0
    assert set(ev["seconds"]) >= {"checks", "timing", "total"}
    assert "device: cpu" not in captured.err  # --json is quiet: only the JSON


def test_bench_exits_1_and_says_why_when_a_check_fails(capsys):
    assert main(["bench", "--task", TINY, "--candidate", ZEROS, "--shapes", "b1_t20_h2_k16_v16"]) == 1
    out = capsys.readouterr().out
    assert "FAIL b1_t20_h2_k16_v16: preflight: o:" in " ".join(out.split())


@pytest.mark.parametrize("args, message", [
    (["--task", "no/such/task.toml", "--candidate", GOOD], "no such task file"),
    (["--task", TINY, "--candidate", "no/such/kernel.py"], "no such candidate"),
    (["--task", TINY, "--candidate", GOOD, "--shapes", "b1_t20_h2_k16_v16,nope"], "no shape named 'nope'"),
    (["--task", TINY, "--candidate", GOOD, "--timeout", "0"], "--timeout 0: expected a positive number"),
])
def test_bench_usage_errors_are_one_line_and_exit_2(capsys, args, message):
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kdatui: error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bench_usage_error_from_the_console_script_has_no_traceback():
    r = subprocess.run([sys.executable, "-m", "kdatui", "bench", "--task", TINY, "--candidate", "missing.py"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "kdatui: error: missing.py: no such candidate (a folder with kernel.py, or a .py file)"]


def test_the_progress_display_follows_every_kind_of_evaluator_event():
    events = [
        {"event": "start", "shape": "a", "worker": "cpu"},
        {"event": "progress", "shape": "a", "phase": "starting", "label": "starting worker", "done": 0, "total": None},
        {"event": "progress", "shape": "a", "phase": "check", "step": 1, "steps": 5, "label": "preflight",
         "done": 1, "total": 7},
        {"event": "progress", "shape": "a", "phase": "check", "step": 5, "steps": 5, "label": "done",
         "done": 5, "total": 7},
        {"event": "progress", "shape": "a", "phase": "timing", "step": 2, "steps": 2, "label": "timed",
         "done": 7, "total": 7},
        {"event": "progress", "shape": "a", "phase": "post_timing", "step": 0, "steps": 1, "done": 7, "total": 7},
        {"event": "worker", "shape": "a", "worker": "cpu", "action": "replaced", "why": "CUDA error"},
        {"event": "result", "shape": "a", "verdict": "PASS"},
        {"event": "result", "shape": "not-a-shape-of-this-run", "verdict": "PASS"},
    ]
    with bench_progress(["a", "b"]) as on_event:
        for e in events:
            on_event(e)
