"""The evaluator: candidates run in sandboxed executors under a judge process; every fault a
candidate can plant (crash, exit, hang, unbounded allocation, exception, wrong structure)
becomes an ERROR that names it, within the time limit, and the next evaluation runs in a
fresh executor while the judge goes on.

CPU only (the Triton interpreter), on tests/tasks/tiny.toml: one full evaluation there
takes well under a second once a worker is up.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from kdatui.engine.evaluator import EvaluatorError, LocalEvaluator, make_evaluator, visible_devices
from kdatui.engine.records import Evaluation
from kdatui.engine.task import TaskError, load_task

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "tasks" / "tiny.toml"
GOOD = ROOT / "kernels" / "kda" / "torch_chunked.py"
FAULTS = ROOT / "tests" / "fault_candidates"
TIMEOUT_S = 10.0  # the evaluator's override of the task's 20 s: the hang test waits this long
SLACK_S = 10.0  # kill, reap and report, on a loaded 2-core machine
MEMORY_LIMIT = 2 << 30  # a CPU worker peaks near 1 GiB of address space

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def task():
    return load_task(TINY)


CHILD_TAG = str(os.getpid())  # the hang candidate's child runs `sleep 600.<tag>`, found by its command line


def _children_left() -> list[int]:
    """Processes the hang candidate spawned that still live (seen from outside any sandbox)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if args[:2] == [b"sleep", f"600.{CHILD_TAG}".encode()] and not _process_gone(int(d)):
                out.append(int(d))
    return out


@pytest.fixture(scope="module")
def evaluator():
    # One intra-op thread: the tensors are tiny, and on a busy 2-core machine OpenMP's
    # spin-waits slow a worker down tenfold.
    env = {**os.environ, "KDATUI_TEST_CHILD_TAG": CHILD_TAG, "OMP_NUM_THREADS": "1"}
    with LocalEvaluator(devices=["cpu"], timeout_s=TIMEOUT_S, memory_limit=MEMORY_LIMIT, env=env) as ev:
        yield ev


def evaluate_one(evaluator, task, candidate, shape=None) -> tuple[Evaluation, float]:
    t0 = time.monotonic()
    [ev] = evaluator.evaluate(task, candidate, [shape or task.primary_shape])
    return ev, time.monotonic() - t0


def assert_passes_with_timing(ev: Evaluation) -> None:
    assert ev.verdict == "PASS", ev.reason
    assert ev.reason == ""
    assert ev.timing is not None and ev.speedup > 0
    assert ev.timing.timer == "perf_counter"
    assert ev.device == "cpu"
    assert ev.post_timing == "PASS"


def _process_gone(pid: int) -> bool:
    """Dead or a zombie (an orphan whose reaper is slow is as good as dead)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" in f.read()
    except FileNotFoundError:
        return True


# --------------------------------------------------------------------------- good candidates


def test_good_candidate_passes_with_a_cpu_timing_record(evaluator, task):
    ev, _ = evaluate_one(evaluator, task, GOOD)
    assert_passes_with_timing(ev)
    assert ev.baseline == "torch"
    assert ev.harness
    assert ev.candidate == str(GOOD)
    assert set(ev.seconds) >= {"checks", "timing", "total"}
    assert ev.seconds["total"] >= ev.seconds["checks"] + ev.seconds["timing"] - 1e-6
    assert [r.probe for r in ev.checks.results] == ["static", "preflight", "random", "saturated", "input_dependence"]
    assert all(r.verdict == "PASS" for r in ev.checks.results)
    assert ev.timing.trials == task.bench.trials and len(ev.timing.candidate.trial_ms) == task.bench.trials
    assert Evaluation.from_dict(ev.to_dict()) == ev  # the record survives the JSON round trip


def test_evaluate_defaults_to_every_shape_and_streams_progress(evaluator, task):
    events = []
    evs = evaluator.evaluate(task, GOOD, progress=events.append)
    assert [e.shape for e in evs] == list(task.shapes)
    for shape in task.shapes:
        mine = [e for e in events if e.get("shape") == shape]
        kinds = [e["event"] for e in mine]
        assert kinds[0] == "start" and kinds[-1] == "result"
        steps = [e for e in mine if e["event"] == "progress" and e["phase"] == "check"]
        trials = [e for e in mine if e["event"] == "progress" and e["phase"] == "timing"]
        assert [e["label"] for e in steps][:2] == ["static", "preflight"]
        assert steps[0]["steps"] == 5 and trials[0]["steps"] == task.bench.trials
        done = [e["done"] for e in mine if e["event"] == "progress" and e["phase"] != "starting"]
        assert done == sorted(done) and done[-1] == mine[-2]["total"] == 5 + task.bench.trials
        assert all(e["worker"] == "cpu" for e in mine)


def test_the_calling_process_never_imports_the_candidate(evaluator, task, tmp_path):
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "kernel.py").write_text(
        GOOD.read_text() + "\n\nimport os as _os\n"
        "try:\n"
        "    with open(_os.path.join(_os.path.dirname(__file__), 'imported_by'), 'w') as _f:\n"
        "        _f.write(str(_os.getpid()))\n"
        "except OSError:\n"
        "    pass  # the sandbox shows the candidate its folder read-only\n")
    before = set(sys.modules)
    ev, _ = evaluate_one(evaluator, task, cand)
    assert_passes_with_timing(ev)
    # the executor ran it on a copy of its files: nothing it wrote lands in the folder given
    marker = cand / "imported_by"
    assert not marker.exists() or int(marker.read_text()) != os.getpid()
    new = set(sys.modules) - before
    assert not [m for m in new if m.startswith("kdatui_candidate_")]
    assert not [m for m, mod in sys.modules.items() if str(getattr(mod, "__file__", "") or "").startswith(str(cand))]


def test_a_wrong_answer_is_fail_not_error_and_is_not_timed(evaluator, task):
    ev, _ = evaluate_one(evaluator, task, FAULTS / "zeros.py")
    assert ev.verdict == "FAIL"
    assert ev.reason.startswith("preflight: o:") and "out of tolerance" in ev.reason
    assert ev.timing is None and ev.seconds["timing"] == 0.0


def test_the_post_timing_check_catches_a_kernel_that_goes_wrong_when_timed(evaluator, task, tmp_path):
    # Right for the first 8 calls (what the checks of the tiny task make), zeros after.
    src = GOOD.read_text().replace("def kda_forward(", "def _right(")
    src += ("\n\n_calls = [0]\n\n\ndef kda_forward(*args, **kwargs):\n    _calls[0] += 1\n"
            "    o, final = _right(*args, **kwargs)\n    if _calls[0] > 8:\n        o = o * 0\n"
            "    return o, final\n")
    (tmp_path / "kernel.py").write_text(src)
    ev, _ = evaluate_one(evaluator, task, tmp_path)
    assert ev.checks.passed
    assert ev.verdict == "FAIL" and ev.post_timing == "FAIL"
    assert ev.reason.startswith("post-timing: o:")
    # the calls it timed did not do the work: no figure of theirs stands, the reason says what they were
    assert ev.timing is None and ev.speedup is None
    assert "the timing before it does not stand" in ev.reason


def test_the_judge_reference_cache_keeps_one_dict_per_shape_contract_and_salt(task):
    import torch

    from kdatui.engine.judge import ReferenceCache

    cache = ReferenceCache(limit_bytes=1000)
    a = cache.scope(task, task.primary, None)
    assert cache.scope(task, task.primary, None) is a
    assert cache.scope(task, task.primary, b"salt") is not a
    other_seed = load_task(TINY)
    other_seed.contract.seed = 7
    assert cache.scope(other_seed, task.primary, None) is not a
    other_shape = task.shapes["b2_t9_h1_k16_v16"]
    b = cache.scope(task, other_shape, None)
    b["random"] = (torch.zeros(100, dtype=torch.float64), None)  # 800 bytes
    a = cache.scope(task, task.primary, None)
    a["random"] = (torch.zeros(100, dtype=torch.float64), torch.zeros(10, dtype=torch.float64))  # 880 bytes
    cache.trim()  # over budget: the least recently used scopes leave, the newest stays
    assert cache.scope(task, task.primary, None) is a and a
    assert cache.scope(task, other_shape, None) == {}
    assert ReferenceCache(0).scope(task, task.primary, None) is None


def test_a_candidate_that_changes_its_inputs_cannot_change_the_next_evaluation(evaluator, task, tmp_path):
    src = GOOD.read_text().replace("def kda_forward(", "def _right(")
    src += ("\n\ndef kda_forward(q, k, v, *args, **kwargs):\n    out = _right(q, k, v, *args, **kwargs)\n"
            "    v.mul_(-3.0)\n    return out\n")
    (tmp_path / "kernel.py").write_text(src)
    bad, _ = evaluate_one(evaluator, task, tmp_path)
    assert bad.verdict == "FAIL" and "modified its input v in place" in bad.reason
    good, _ = evaluate_one(evaluator, task, GOOD)
    assert_passes_with_timing(good)


# --------------------------------------------------------------------------- planted faults

FAULT_CASES = {
    # candidate: what the reason must say
    "segfault": r"^executor killed by signal SIGSEGV \(segmentation fault\) during check 2/5 'preflight'",
    "exit3": r"^executor exited with status 3 during check 2/5 'preflight'",
    "alloc": r"^out of memory: preflight: raised \w*MemoryError at alloc\.py",
    "alloc_torch": r"^out of memory: preflight: raised RuntimeError .*can't allocate memory",
    "raises": r"^preflight: raised ValueError at raises\.py:\d+: planted fault: this kernel always raises",
    "wrong_shape": r"^preflight: o has shape \[1, 2, 20, 16\], expected \[1, 20, 2, 16\]",
    "sys_exit": r"^the candidate called sys\.exit\(0\)",
}


@pytest.mark.parametrize("fault", list(FAULT_CASES))
def test_a_planted_fault_is_an_error_naming_it_and_the_next_evaluation_passes(evaluator, task, fault):
    ev, seconds = evaluate_one(evaluator, task, FAULTS / f"{fault}.py")
    assert ev.verdict == "ERROR"
    assert re.search(FAULT_CASES[fault], ev.reason), ev.reason
    assert ev.device == "cpu"
    assert seconds < TIMEOUT_S + SLACK_S
    good, _ = evaluate_one(evaluator, task, GOOD)
    assert_passes_with_timing(good)


def test_a_hang_times_out_kills_the_executor_with_what_it_spawned_and_the_judge_goes_on(evaluator, task):
    judge_pid = evaluator.slots[0].worker.pid if evaluator.slots[0].worker else None
    ev, seconds = evaluate_one(evaluator, task, FAULTS / "hang.py")
    assert ev.verdict == "ERROR"
    assert ev.reason.startswith(f"timed out after {TIMEOUT_S:g} s during check 2/5 'preflight'"), ev.reason
    assert TIMEOUT_S <= seconds < TIMEOUT_S + SLACK_S
    deadline = time.monotonic() + 5
    while _children_left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _children_left(), "a process the candidate spawned survived the timeout"
    assert judge_pid is None or evaluator.slots[0].worker.pid == judge_pid, "the judge was replaced for a hang"
    good, _ = evaluate_one(evaluator, task, GOOD)
    assert_passes_with_timing(good)


def test_a_candidate_that_hangs_on_one_shape_is_not_run_on_the_others(evaluator, task):
    t0 = time.monotonic()
    evs = evaluator.evaluate(task, FAULTS / "hang.py")
    assert [e.shape for e in evs] == list(task.shapes)
    assert evs[0].reason.startswith("timed out after"), evs[0].reason
    assert all(e.verdict == "ERROR" and e.reason.startswith("not run: the candidate hung on") for e in evs[1:])
    assert time.monotonic() - t0 < TIMEOUT_S + SLACK_S  # one time limit, not one per shape


def test_a_crash_keeps_the_worker_log_tail_for_diagnosis(evaluator, task):
    ev, _ = evaluate_one(evaluator, task, FAULTS / "segfault.py")
    assert "Segmentation fault" in ev.log  # faulthandler's report from the worker's stderr
    assert "segfault.py" in ev.log


# --------------------------------------------------------------------------- lifecycle


def test_close_never_waits_on_a_stuck_worker(task):
    ev = LocalEvaluator(devices=["cpu"], timeout_s=600, memory_limit=MEMORY_LIMIT)
    started = threading.Event()
    result: list = []

    def on_event(e):
        if e.get("event") == "progress" and e.get("label") == "preflight":
            started.set()

    t = threading.Thread(target=lambda: result.extend(
        ev.evaluate(task, FAULTS / "hang.py", [task.primary_shape], progress=on_event)))
    t.start()
    assert started.wait(60), "the hang candidate never started"
    time.sleep(0.3)
    pid = ev.slots[0].worker.pid
    t0 = time.monotonic()
    ev.close()
    assert time.monotonic() - t0 < 5.0
    t.join(10)
    assert not t.is_alive()
    assert result[0].verdict == "ERROR" and result[0].reason.startswith("evaluator closed")
    assert _process_gone(pid)
    with pytest.raises(EvaluatorError, match="closed"):
        ev.evaluate(task, GOOD)


def test_several_workers_evaluate_the_shapes_of_one_call_in_parallel(task):
    events = []
    with LocalEvaluator(devices=["cpu", "cpu"], memory_limit=MEMORY_LIMIT) as ev:
        evs = ev.evaluate(task, GOOD, progress=events.append)
    assert [e.shape for e in evs] == list(task.shapes)
    assert all(e.verdict == "PASS" for e in evs), [e.reason for e in evs]
    starts = {e["shape"]: e["worker"] for e in events if e["event"] == "start"}
    assert sorted(starts.values()) == ["cpu:0", "cpu:1"]


def test_the_holdout_salt_is_read_by_the_judge_from_the_user_config(tmp_path):
    # The salt never travels in a message: the judge reads (or makes) it in its own config dir.
    env = {**os.environ, "KDATUI_CONFIG_DIR": str(tmp_path / "config"), "OMP_NUM_THREADS": "1"}
    task = load_task(TINY)
    task.contract.holdout = 1
    with LocalEvaluator(devices=["cpu"], memory_limit=MEMORY_LIMIT, env=env) as evaluator:
        ev, _ = evaluate_one(evaluator, task, GOOD)
    assert_passes_with_timing(ev)
    assert ev.checks.results[-2].probe == "holdout_0" and ev.checks.results[-2].passed
    assert (tmp_path / "config" / "holdout_salt").exists()  # the judge read (made) it there


def test_a_project_kernel_baseline_path_is_resolved_for_the_worker(evaluator, tmp_path):
    task = load_task(TINY)
    task.bench.baseline = os.path.relpath(GOOD)  # relative to the test's cwd; workers run elsewhere
    ev, _ = evaluate_one(evaluator, task, GOOD)
    assert_passes_with_timing(ev)
    assert ev.baseline == task.bench.baseline


def test_an_unknown_shape_is_a_task_error_before_any_work(evaluator, task):
    with pytest.raises(TaskError, match="no shape named 'nope'"):
        evaluator.evaluate(task, GOOD, ["nope"])


def test_no_gpu_means_one_cpu_worker(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_devices() == ["cpu"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_devices() == ["cpu"]


def test_the_ray_backend_says_what_it_needs():
    try:
        import ray  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("ray is installed")
    with pytest.raises(EvaluatorError, match="needs the ray package"):
        make_evaluator("ray")
    with pytest.raises(EvaluatorError, match="unknown evaluator backend"):
        make_evaluator("slurm")


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_an_illegal_address_on_the_gpu_is_an_error_and_the_next_evaluation_passes():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    task = load_task(ROOT / "tasks" / "kda_fwd_cpu.toml")
    with LocalEvaluator(devices=visible_devices()[:1]) as ev:
        [bad] = ev.evaluate(task, ROOT / "tests" / "candidates_gpu" / "illegal_address.py", [task.primary_shape])
        assert bad.verdict == "ERROR"
        assert re.search(r"illegal memory access|CUDA error|worker killed", bad.reason), bad.reason
        [good] = ev.evaluate(task, ROOT / "kernels" / "kda" / "split.py", [task.primary_shape])
        assert good.verdict == "PASS", good.reason
        assert good.timing.timer == "cuda_event_batch"


def test_the_logs_of_judges_and_executors_stay_in_the_log_dir(task, tmp_path):
    logs = tmp_path / "run-logs"
    with LocalEvaluator(devices=["cpu"], timeout_s=TIMEOUT_S, memory_limit=MEMORY_LIMIT, log_dir=logs) as ev:
        [bad] = ev.evaluate(task, FAULTS / "segfault.py", [task.primary_shape])
        assert bad.verdict == "ERROR"
    kept = {p.name: p.read_text(errors="replace") for p in logs.rglob("*.log")}
    assert any(n.startswith("judge-") for n in kept), kept.keys()
    assert any("Segmentation fault" in text for n, text in kept.items() if n.startswith("exec-")), kept.keys()
