"""The CLI's reading verbs and conventions: --json on tasks, frontier list|show and
curve; `kdatui curve --csv`; a frontier list with many shapes at 80 columns;
`kdatui --version` naming torch, Triton, fla and the device; shell completion; the exit
statuses in --help."""

from __future__ import annotations

import json

import pytest
from frontier_support import SHAPES, make_repo, make_task, try_candidate

from kdatui.cli import main
from kdatui.engine.frontier import Frontier
from kdatui.engine.task import Shape


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "220")
    repo = make_repo(tmp_path / "repo")
    task = make_task(path=tmp_path / "kt.toml")
    with Frontier.open(repo) as fr:
        run = fr.start_run(task).id
        try_candidate(fr, run, task, "split", "bv64", {"p": 1.5, "q": 1.2})
        try_candidate(fr, run, task, "split", "bv32", {"p": 1.7, "q": 1.3}, parent="split-bv64")
        try_candidate(fr, run, task, "fused", "c16", {"p": 1.1, "q": 1.4})
    monkeypatch.chdir(repo)
    return repo


def test_help_lists_the_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "exit status:" in out
    for code in ("0 ", "1 ", "2 ", "130"):
        assert f"\n  {code}" in out


def test_version_names_torch_triton_fla_and_the_device(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("kdatui ")
    for key in ("torch ", "triton ", "fla ", "device "):
        assert any(line.startswith(key) for line in lines), (key, out)
    assert "cpu" in out or "CUDA" in out


@pytest.mark.parametrize("shell,marker", [("bash", "complete -o bashdefault"), ("zsh", "#compdef kdatui"),
                                          ("fish", "complete -c kdatui")])
def test_completion_scripts_know_the_verbs(capsys, shell, marker):
    code, out, _ = run_main(capsys, "completion", shell)
    assert code == 0 and marker in out
    for verb in ("run", "attach", "budget", "frontier", "curve", "generalize"):
        assert verb in out


def test_tasks_json_lists_every_task_with_its_shapes(capsys):
    code, out, _ = run_main(capsys, "tasks", "--json")
    tasks = {t["name"]: t for t in json.loads(out)}
    assert code == 0 and tasks["kda_fwd_cpu"]["primary_shape"] == "b1_t100_h2_k32_v32"
    assert len(tasks["kda_fwd_cpu"]["shapes"]) == 3 and tasks["kda_fwd_cpu"]["baseline"] == "torch"


def test_frontier_list_and_show_json(repo, capsys):
    code, out, err = run_main(capsys, "frontier", "list", "--json")
    assert code == 0, err
    data = json.loads(out)
    kt = next(t for t in data["tasks"] if t["task"] == "kt")
    by_name = {m["name"]: m for m in kt["members"]}
    assert set(by_name) == {"split-bv32", "fused-c16"} and kt["pruned"] == ["split-bv64"]
    assert by_name["split-bv32"]["best"] and by_name["split-bv32"]["cells"]["p"]["speedup"] == 1.7
    code, out, err = run_main(capsys, "frontier", "show", "split-bv32", "--json")
    m = json.loads(out)
    assert code == 0 and m["family"] == "split" and [e["shape"] for e in m["evaluations"]] == ["p", "q"]
    assert m["evaluations"][0]["verdict"] == "PASS" and m["evaluations"][0]["checks"]


def test_curve_exports_every_attempt_as_json_and_csv(repo, capsys):
    code, out, err = run_main(capsys, "curve", "--json")
    assert code == 0, err
    c = json.loads(out)
    assert c["task"] == "kt" and c["shape"] == "p" and len(c["points"]) == 3
    assert [p["kind"] for p in c["points"]] == ["passed", "passed", "passed"]
    assert [b[1] for b in c["best"]] == [1.5, 1.7]  # fused-c16 (1.1x) raised nothing
    code, out, _ = run_main(capsys, "curve", "--csv")
    rows = out.strip().splitlines()
    assert rows[0].startswith("attempt,t_s,ts,name,family,kind,speedup") and len(rows) == 4
    assert rows[-1].endswith(",1.7000")  # best so far after the third attempt
    code, out, _ = run_main(capsys, "curve")
    assert "split-bv32" in out and "*" in out


def test_curve_png_says_what_it_needs_without_matplotlib(repo, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = run_main(capsys, "curve", "--png", str(repo / "c.png"))
    assert code == 2 and "needs matplotlib" in err


def test_frontier_list_with_eight_shapes_at_80_columns_turns_shapes_into_rows(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    extra = {f"s{i}": Shape(f"s{i}", B=1, T=16 * (i + 1), H=2, K=32, V=32) for i in range(6)}
    monkeypatch.setitem(SHAPES, "p", SHAPES["p"])
    SHAPES.update(extra)
    try:
        repo = make_repo(tmp_path / "repo")
        task = make_task(("p", "q", *extra), path=tmp_path / "kt.toml")
        with Frontier.open(repo) as fr:
            run = fr.start_run(task).id
            try_candidate(fr, run, task, "split", "bv64", {s: 1.5 for s in task.shapes})
            try_candidate(fr, run, task, "fused", "c16", {s: 1.2 for s in task.shapes})
        monkeypatch.chdir(repo)
        code, out, err = run_main(capsys, "frontier", "list")
    finally:
        for k in extra:
            SHAPES.pop(k)
    assert code == 0, err
    assert "fami…" not in out and "shapes as rows" in out
    for s in ("p *", "q", "s0", "s5"):
        assert s in out
    assert "split-bv64" in out and "(split, best)" in out.replace("\n", "")
    assert max(len(line) for line in out.splitlines()) <= 80
