"""The correctness contract as code: the plain-torch candidate passes every probe on every
CPU-task shape, and each planted bad candidate (tests/candidates/) is rejected with the
right verdict and reason."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kdatui.engine import checks
from kdatui.engine.runner import poisoned_allocations
from kdatui.engine.candidate import CandidateError, load, static_check
from kdatui.engine.checks import CheckReport, compare, run_checks
from kdatui.engine.probes import NO_INITIAL_STATE, ODD_SCALE, Tolerance, probe_names

REPO = Path(__file__).resolve().parents[1]
CANDIDATES = Path(__file__).resolve().parent / "candidates"
TORCH_CHUNKED = REPO / "kernels" / "kda" / "torch_chunked.py"


from planting import planted  # noqa: E402  (a planted kernel travels with its torch helper)


def check(task, candidate, salt=None, **kw):
    return run_checks(task, task.primary, candidate, device="cpu", salt=salt, **kw)


def by_probe(report: CheckReport) -> dict:
    return {r.probe: r for r in report.results}


def assert_stopped_at_preflight(report):
    assert [r.probe for r in report.results] == ["static", "preflight"]


# --------------------------------------------------------------------------- good candidates

def _shape_ids():
    from kdatui.engine.task import load_task

    return list(load_task(REPO / "tasks" / "kda_fwd_cpu.toml").shapes)


@pytest.mark.parametrize("shape_name", _shape_ids())
def test_torch_chunked_passes_every_probe_on_every_cpu_task_shape(cpu_task, shape_name):
    shape = cpu_task.shape(shape_name)
    report = run_checks(cpu_task, shape, str(TORCH_CHUNKED), device="cpu")  # the secret salt
    assert report.verdict == "PASS", report.first_problem()
    assert [r.probe for r in report.results] == checks.check_steps(cpu_task)  # nothing skipped
    assert len(report.results) == 2 + len(cpu_task.contract.probes) + 5 + 1
    for r in report.results[1:]:
        assert r.verdict == "PASS" and r.reason == "", r
        assert math.isfinite(r.max_abs) and math.isfinite(r.rms_ratio), r
        limit = 0.15 if "correlated" in r.probe else 0.03
        assert r.rms_ratio < limit, r
        assert r.output in ("o", "final_state"), r
    assert report.shape == shape_name and report.dims == shape.dims() and report.device == "cpu"


def test_good_candidate_passes_when_loaded_through_a_planted_wrapper(tiny_task, salt):
    # the planting mechanism (torch_chunked loaded by path) is sound, so every failure
    # below comes from the planted fault
    report = check(tiny_task, planted("good_wrapper"), salt)
    assert report.verdict == "PASS", report.first_problem()


def test_good_candidate_passes_as_a_folder_with_kernel_py(tiny_task, salt, tmp_path):
    (tmp_path / "cand").mkdir()
    (tmp_path / "cand" / "kernel.py").write_text(TORCH_CHUNKED.read_text())
    (tmp_path / "cand" / "IDEA.md").write_text("plain torch\n")
    report = check(tiny_task, str(tmp_path / "cand"), salt)
    assert report.verdict == "PASS", report.first_problem()


# --------------------------------------------------------------------------- wrong answers

def test_nan_in_one_element_of_o_fails_as_non_finite(tiny_task, salt):
    report = check(tiny_task, planted("nan_one"), salt)
    assert report.verdict == "FAIL"
    pre = by_probe(report)["preflight"]
    assert pre.verdict == "FAIL" and "1 non-finite element" in pre.reason and pre.reason.startswith("o:")
    assert all(r.verdict == "FAIL" for r in report.results[1:])


def test_one_unwritten_element_of_o_fails_through_the_poisoned_allocation(tiny_task, salt):
    report = check(tiny_task, planted("unwritten_one"), salt)
    assert report.verdict == "FAIL"
    pre = by_probe(report)["preflight"]
    assert pre.verdict == "FAIL" and "1 non-finite element" in pre.reason
    S = tiny_task.primary
    assert f"[0, {S.T - 1}, {S.H - 1}, {S.V - 1}]" in pre.reason  # the very element skipped


def test_ignored_scale_argument_fails_on_the_probes_with_another_scale(tiny_task, salt):
    report = check(tiny_task, planted("ignores_scale"), salt)
    assert report.verdict == "FAIL"
    res = by_probe(report)
    odd = [p for p in tiny_task.contract.probes if p in ODD_SCALE]
    assert odd, "the tiny task must keep a probe with a non-default scale"
    for p in odd:
        assert res[p].verdict == "FAIL" and res[p].reason.startswith("o:"), res[p]
    assert res["random"].verdict == "PASS"  # at the default scale it is right: the scale is the fault


def test_scale_of_one_over_k_fails(tiny_task, salt):
    report = check(tiny_task, planted("scale_one_over_k"), salt)
    assert report.verdict == "FAIL"
    assert by_probe(report)["preflight"].reason.startswith("o:")


def test_wrong_final_state_with_correct_o_fails_naming_final_state(tiny_task, salt):
    report = check(tiny_task, planted("wrong_final_state"), salt)
    assert report.verdict == "FAIL"
    first = report.first_problem()
    assert first.probe == "preflight"
    assert first.output == "final_state" and first.reason.startswith("final_state:")
    for r in report.results:
        if not r.passed:
            assert "final_state" in r.reason and r.output == "final_state", r


def test_result_cached_from_the_first_call_fails(tiny_task, salt):
    report = check(tiny_task, planted("cached_first_call"), salt)
    assert report.verdict == "FAIL"
    res = by_probe(report)
    assert res["input_dependence"].verdict == "FAIL"
    assert "stale or cached" in res["input_dependence"].reason
    assert res["random"].verdict == "FAIL"  # already the first probe gets the stale answer


def test_result_cached_per_input_tensor_fails_at_the_second_probe(tiny_task, salt):
    # The executor hands the candidate the same tensors (the arena's views) for every call,
    # their contents changed in place: a cache keyed on identity answers the second probe stale.
    report = check(tiny_task, planted("cached_by_input_identity"), salt)
    res = by_probe(report)
    assert res["preflight"].verdict == "PASS"
    assert res["random"].verdict == "FAIL" and "out of tolerance" in res["random"].reason
    assert report.verdict == "FAIL"


def test_a_cache_keyed_on_sampled_input_elements_fails_input_dependence(tiny_task, salt):
    # right on every probe (each changes every element); one changed element is missed
    report = check(tiny_task, planted("memo_fingerprint"), salt)
    res = by_probe(report)
    assert all(r.verdict == "PASS" for r in report.results if r.probe != "input_dependence"), report.first_problem()
    assert res["input_dependence"].verdict == "FAIL"
    assert "one input element changed in place" in res["input_dependence"].reason
    assert report.verdict == "FAIL"


@pytest.mark.parametrize("where", [[0, 0, 0, 0], [1, 37, 2, 5], [1, 99, 3, 31]])
def test_one_changed_query_element_moves_only_its_row_of_the_reference(cpu_task, where):
    # the judge recomputes one row after a one-element change (input_dependence); it must be
    # the full reference of the changed inputs, everywhere
    from kdatui.engine.probes import make_probe
    from kdatui.engine.task import Shape
    from kdatui.kernels.kda import reference

    shape = Shape("t", B=2, T=100, H=4, K=32, V=16)
    p = make_probe("random", shape, cpu_task.contract, "cpu", variant="rows")
    before = reference.chunked(*p.args(), **p.kwargs(True))
    p.q[tuple(where)] = -8.0
    after = reference.chunked(*p.args(), **p.kwargs(True))
    got = checks._row_changed(p, before, where)
    assert torch.allclose(got[0], after[0], rtol=1e-9, atol=1e-12)
    assert torch.equal(got[1], after[1])
    b, t, h = where[:3]
    assert not torch.allclose(before[0][b, t, h], after[0][b, t, h])  # the row did move


def test_input_dependence_can_be_switched_off_in_the_contract(tiny_task, salt):
    task = replace(tiny_task, contract=replace(tiny_task.contract, input_dependence=False))
    report = check(task, planted("memo_fingerprint"), salt)
    assert "input_dependence" not in by_probe(report)
    assert report.verdict == "PASS"


def test_factored_exponent_over_64_tokens_fails_saturated_and_boundary(cpu_task):
    # the full probe list at the CPU task's primary shape (T=100: one full 64-token chunk)
    report = check(cpu_task, planted("factored_exp"))
    assert [r.probe for r in report.results] == checks.check_steps(cpu_task)
    res = by_probe(report)
    for p in ("saturated", "boundary"):
        assert res[p].verdict == "FAIL", res[p]
        assert "non-finite" in res[p].reason, res[p]
    assert report.verdict == "FAIL"


def test_ignored_initial_state_fails_and_only_probes_without_one_pass(tiny_task, salt):
    report = check(tiny_task, planted("ignores_initial_state"), salt)
    assert report.verdict == "FAIL"
    res = by_probe(report)
    assert res["preflight"].verdict == "FAIL"
    assert res["random"].verdict == "FAIL"
    assert res["correlated"].verdict == "FAIL"  # no decay: the initial state never fades
    for p in NO_INITIAL_STATE & set(res):
        assert res[p].verdict == "PASS", res[p]


def test_correct_for_the_first_calls_then_wrong_fails(tiny_task, salt):
    report = check(tiny_task, planted("good_then_bad"), salt)
    assert report.verdict == "FAIL"
    res = by_probe(report)
    assert res["preflight"].verdict == "PASS"  # the first calls were right ...
    assert all(res[p].verdict == "FAIL" for p in probe_names(tiny_task.contract)[1:])  # ... then not


def test_candidate_modifying_its_input_in_place_fails_preflight(tiny_task, salt):
    report = check(tiny_task, planted("modifies_input"), salt)
    pre = by_probe(report)["preflight"]
    assert pre.verdict == "FAIL" and "modified its input g in place" in pre.reason
    assert report.verdict == "FAIL"


# --------------------------------------------------------------------------- flaky

def test_one_element_corrupted_on_a_random_third_of_calls_is_flaky_or_fails(tiny_task, salt):
    report = check(tiny_task, planted("flaky_third"), salt)
    assert report.verdict in ("FLAKY", "FAIL")
    flaky = [r for r in report.results if r.verdict == "FLAKY"]
    assert flaky, [(r.probe, r.verdict) for r in report.results]
    assert all("runs on identical inputs disagree" in r.reason for r in flaky)


def test_final_state_that_changes_between_identical_runs_is_flaky(tiny_task, salt):
    # each run alone is within tolerance; only comparing the two runs shows the race
    report = check(tiny_task, planted("flaky_final_state"), salt)
    assert report.verdict == "FLAKY", [(r.probe, r.verdict, r.reason) for r in report.results]
    flaky = [r for r in report.results if r.verdict == "FLAKY"]
    assert all("final_state" in r.reason and "differ" in r.reason for r in flaky)


def test_flaky_ranks_below_fail_and_error_in_the_report_verdict():
    assert checks.worst(["PASS", "FLAKY"]) == "FLAKY"
    assert checks.worst(["FLAKY", "FAIL"]) == "FAIL"
    assert checks.worst(["FAIL", "ERROR", "FLAKY"]) == "ERROR"
    assert checks.worst(["PASS", "PASS"]) == "PASS"
    assert CheckReport("c", "t", "s", {}, "cpu").verdict == "ERROR"  # nothing ran: not a pass


# --------------------------------------------------------------------------- broken interface

@pytest.mark.parametrize("name,fragment", [
    ("returns_input_v", "o shares memory with the input v"),
    ("returns_q_view", "o shares memory with the input q"),
    ("final_state_into_initial_state", "final_state shares memory with the input initial_state"),
    ("wrong_shape", "o has shape [1, 79, 2, 16], expected [1, 80, 2, 16]"),
    ("raises", "raised RuntimeError at raises.py:"),
    ("noncontiguous", "o is not dense (not contiguous)"),
    ("wrong_dtype", "o has dtype torch.float32, expected torch.bfloat16"),
    ("not_a_pair", "returned Tensor, expected a pair (o, final_state)"),
])
def test_interface_violations_are_errors_with_a_reason(tiny_task, salt, name, fragment):
    report = check(tiny_task, planted(name), salt)
    assert report.verdict == "ERROR"
    pre = by_probe(report)["preflight"]
    assert pre.verdict == "ERROR" and fragment in pre.reason, pre.reason
    assert "\n" not in pre.reason
    assert_stopped_at_preflight(report)


def test_raised_exception_reason_carries_the_candidates_message(tiny_task, salt):
    pre = by_probe(check(tiny_task, planted("raises"), salt))["preflight"]
    assert "planted failure inside the candidate" in pre.reason


# --------------------------------------------------------------------------- static check

def test_import_fla_is_an_error_without_running_anything(tiny_task, salt, tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    monkeypatch.setenv("KDATUI_TEST_IMPORT_MARKER", str(marker))
    report = check(tiny_task, planted("imports_fla"), salt)
    assert report.verdict == "ERROR"
    assert [r.probe for r in report.results] == ["static"]
    assert "baseline library fla" in report.results[0].reason
    assert "imports_fla.py:13" in report.results[0].reason  # file and line of the import
    assert not marker.exists(), "the candidate module was imported"
    with pytest.raises(CandidateError, match="baseline library fla"):
        load(planted("imports_fla"))
    assert not marker.exists()


@pytest.mark.parametrize("source,fragment", [
    ("from fla.ops.kda import chunk_kda\n", "baseline library fla"),
    ("import flash_kda\n", "baseline library flash_kda"),
    ("import importlib\nm = importlib.import_module('fla')\n", "baseline library fla"),
    ("fla = __import__('fla_core')\n", "baseline library fla-core"),
    ("import kdatui.kernels.kda.reference as r\n", "imports kdatui"),
    ("def kda_forward(:\n", "syntax error"),
])
def test_static_check_rejects_forbidden_imports_and_syntax_errors(tmp_path, source, fragment):
    path = tmp_path / "kernel.py"
    path.write_text(source)
    problems = static_check(path)
    assert problems and any(fragment in p for p in problems), problems


def test_static_check_covers_every_file_of_a_candidate_folder(tmp_path, tiny_task, salt):
    folder = tmp_path / "cand"
    folder.mkdir()
    (folder / "kernel.py").write_text(TORCH_CHUNKED.read_text())
    (folder / "helper.py").write_text("import fla\n")
    assert any("helper.py:1" in p and "fla" in p for p in static_check(folder))
    report = check(tiny_task, str(folder), salt)
    assert report.verdict == "ERROR" and [r.probe for r in report.results] == ["static"]


@pytest.mark.parametrize("source,fragment", [
    ("x = 1\n", "defines no callable kda_forward"),
    ("raise ImportError('no triton here')\n", "import failed: ImportError: no triton here"),
])
def test_candidate_that_cannot_load_is_an_error(tmp_path, tiny_task, salt, source, fragment):
    path = tmp_path / "broken.py"
    path.write_text(source)
    report = check(tiny_task, str(path), salt)
    assert report.verdict == "ERROR"
    assert [r.probe for r in report.results] == ["static"]
    assert fragment in report.results[0].reason


def test_missing_candidate_is_an_error(tiny_task, salt, tmp_path):
    report = check(tiny_task, str(tmp_path / "nope.py"), salt)
    assert report.verdict == "ERROR" and "no such candidate" in report.results[0].reason


# --------------------------------------------------------------------------- the harness

def test_fail_fast_stops_at_the_first_problem(tiny_task, salt):
    report = check(tiny_task, planted("ignores_scale"), salt, fail_fast=True)
    assert report.results[-1].verdict == "FAIL"
    assert all(r.passed for r in report.results[:-1])
    assert report.results[-1].probe == "strong"


def test_progress_reports_every_step_then_done(tiny_task, salt):
    seen = []
    check(tiny_task, str(TORCH_CHUNKED), salt, progress=lambda i, n, label: seen.append((i, n, label)))
    steps = checks.check_steps(tiny_task)
    assert [label for _, _, label in seen] == steps + ["done"]
    assert [i for i, _, _ in seen] == list(range(len(steps) + 1))
    assert {n for _, n, _ in seen} == {len(steps)}


def test_report_is_json_serializable_and_round_trips(tiny_task, salt):
    report = check(tiny_task, planted("nan_one"), salt)
    d = json.loads(json.dumps(report.to_dict()))  # inf becomes Infinity, still parseable
    assert d["verdict"] == "FAIL" and d["task"] == tiny_task.name and d["shape"] == "tiny"
    for r in d["results"]:
        assert set(r) >= {"probe", "verdict", "reason", "max_abs", "max_rel", "rms_ratio"}
    back = CheckReport.from_dict(d)
    assert back.verdict == report.verdict
    assert [r.probe for r in back.results] == [r.probe for r in report.results]


def test_poisoned_allocations_fill_fresh_float_tensors_with_nan_and_are_undone():
    # the executor's runner poisons the candidate's allocations (tested here in-process)
    originals = (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty)
    with poisoned_allocations(torch, "cpu"):
        assert torch.isnan(torch.empty(4)).all()
        assert torch.isnan(torch.empty_like(torch.zeros(3, dtype=torch.bfloat16))).all()
        assert torch.isnan(torch.zeros(2).new_empty(5)).all()
        assert torch.isnan(torch.empty_strided((2, 2), (1, 2))).all()
        assert torch.empty(3, dtype=torch.int64).dtype == torch.int64  # ints left alone
    assert (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty) == originals


def test_poisoned_allocations_are_undone_when_the_candidate_raises():
    original = torch.empty
    with pytest.raises(RuntimeError):
        with poisoned_allocations(torch, "cpu"):
            raise RuntimeError("candidate failed")
    assert torch.empty is original


# --------------------------------------------------------------------------- the comparison rule

TOL = Tolerance(rtol=0.05, atol_rms=0.5, rms=0.03)


def test_compare_passes_an_element_within_atol_or_rtol():
    y = torch.ones(1000, dtype=torch.float64)  # RMS 1: atol 0.5
    x = y.clone()
    x[0] = 1.4  # off by 0.4 <= atol: passes on its own (the RMS error stays small)
    c = compare(x, y, TOL, "o")
    assert c.ok and math.isclose(c.max_abs, 0.4, rel_tol=1e-12)
    y2 = torch.ones(10000, dtype=torch.float64)
    y2[0] = 100.0  # off by 4 > atol (~0.7), but 4 <= 0.05 * 100: passes
    x2 = y2.clone()
    x2[0] = 104.0
    assert compare(x2, y2, TOL, "o").ok


def test_compare_fails_an_element_beyond_both_atol_and_rtol():
    y = torch.ones(1000, dtype=torch.float64)
    x = y.clone()
    x[7] = 1.6
    c = compare(x, y, TOL, "o")
    assert not c.ok and "1 of 1,000 elements out of tolerance" in c.reason and "[7]" in c.reason


def test_compare_fails_a_normalized_rms_error_over_the_limit():
    y = torch.ones(1000, dtype=torch.float64)
    x = y * 1.04  # every element inside rtol, yet 4% RMS error
    c = compare(x, y, TOL, "final_state")
    assert not c.ok and c.reason.startswith("final_state: normalized RMS error")
    assert math.isclose(c.rms_ratio, 0.04, rel_tol=1e-9)


def test_compare_fails_non_finite_elements_and_says_where():
    y = torch.ones(2, 3, dtype=torch.float64)
    x = y.clone()
    x[1, 2] = float("inf")
    c = compare(x, y, TOL, "o")
    assert not c.ok and "1 non-finite element" in c.reason and "[1, 2]" in c.reason
    assert c.max_abs == math.inf
