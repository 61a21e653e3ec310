"""Task files: the shipped ones load, load/save round-trips losslessly, and every
malformed file gives one TaskError naming the file, the key, the bad value and what
was expected (never a traceback)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from kdatui.engine.task import (
    PROBES, Shape, Task, TaskError, discover_tasks, load_task, load_task_text, parse_shape_spec,
    resolve_task_path,
)

TASKS = Path(__file__).resolve().parents[1] / "tasks"

SHIPPED = ["kda_fwd_b1_t8192_h96", "kda_fwd_general", "kda_fwd_cpu"]


# --------------------------------------------------------------------------- shipped tasks

@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_task_files_load(name):
    t = load_task(TASKS / f"{name}.toml")
    assert t.name == name
    assert t.op == "kda_forward"
    assert t.primary_shape in t.shapes
    assert t.primary is t.shapes[t.primary_shape]
    assert t.path == TASKS / f"{name}.toml"
    assert list(t.contract.probes) == list(PROBES)
    assert t.contract.holdout == 5
    assert t.contract.lower_bound == -5.0


def test_primary_task_has_only_the_representative_shape():
    t = load_task(TASKS / "kda_fwd_b1_t8192_h96.toml")
    assert [s.dims() for s in t.shapes.values()] == [dict(B=1, T=8192, H=96, K=128, V=128)]


def test_general_task_covers_the_lengths_heads_and_batch_of_the_issue():
    t = load_task(TASKS / "kda_fwd_general.toml")
    dims = {(s.B, s.T, s.H) for s in t.shapes.values()}
    assert dims == {(1, 2048, 96), (1, 4096, 96), (1, 8192, 96), (1, 16384, 96),
                    (1, 8192, 32), (1, 8192, 64), (2, 4096, 96)}
    assert all(s.K == s.V == 128 for s in t.shapes.values())
    assert t.primary.dims() == dict(B=1, T=8192, H=96, K=128, V=128)


def test_cpu_task_shapes_are_small_and_varied():
    t = load_task(TASKS / "kda_fwd_cpu.toml")
    shapes = list(t.shapes.values())
    assert {s.K for s in shapes} <= {32, 64} and all(s.K == s.V for s in shapes)
    assert any(s.T % 64 for s in shapes)  # a T that is not a multiple of the chunk
    assert all(s.H >= 2 for s in shapes)
    assert max(s.B for s in shapes) == 2
    assert all(s.B * s.T * s.H <= 1024 for s in shapes)  # interpreter-sized


def test_discover_tasks_finds_the_three_shipped_tasks(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no ./tasks: the bundled ones
    assert {p.stem for p in discover_tasks()} >= set(SHIPPED)


def test_resolve_task_path_accepts_a_name_or_a_path(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert load_task(resolve_task_path("kda_fwd_cpu")).name == "kda_fwd_cpu"
    p = TASKS / "kda_fwd_cpu.toml"
    assert resolve_task_path(str(p)) == p
    with pytest.raises(TaskError, match="no task named 'nope'"):
        resolve_task_path("nope")


def test_missing_task_file_is_a_task_error_naming_it(tmp_path):
    with pytest.raises(TaskError) as e:
        load_task(tmp_path / "absent.toml")
    assert str(tmp_path / "absent.toml") in str(e.value) and "no such task file" in str(e.value)


# --------------------------------------------------------------------------- round trip

@pytest.mark.parametrize("name", SHIPPED)
def test_task_round_trips_losslessly_through_text(name):
    t = load_task(TASKS / f"{name}.toml")
    text = t.dumps()
    again = load_task_text(text, "roundtrip")
    assert again == t
    assert again.dumps() == text  # stable: writing twice gives the same text
    assert list(again.shapes) == list(t.shapes)  # shape order is kept


@pytest.mark.parametrize("name", SHIPPED)
def test_task_saved_to_a_file_loads_back_equal(name, tmp_path):
    t = load_task(TASKS / f"{name}.toml")
    out = t.save(tmp_path / "copy.toml")
    assert out == tmp_path / "copy.toml" and t.path == out
    assert load_task(out) == t
    assert [p.name for p in tmp_path.iterdir()] == ["copy.toml"]  # no temp file left


def test_non_default_settings_survive_the_round_trip(tmp_path, cpu_task):
    t = replace(cpu_task, description="edited",
                contract=replace(cpu_task.contract, probes=["boundary", "random"], holdout=2,
                                 rtol=0.01, input_dependence=False, seed=7),
                path=None)
    t = t.with_shapes({"extra": Shape("extra", 1, 17, 2, 16, 32)}, name="edited_task")
    back = load_task(t.save(tmp_path / "edited.toml"))
    assert back == t
    assert back.contract.probes == ["boundary", "random"]
    assert back.shapes["extra"].dims() == dict(B=1, T=17, H=2, K=16, V=32)
    assert tomllib.loads((tmp_path / "edited.toml").read_text())["contract"]["input_dependence"] is False
    t = replace(t, bench=replace(t.bench, race=0.0),
                search=replace(t.search, seeds=["split"], seed_configs={"split": {"prep_warps": 4, "INV": "subst"}}))
    back = load_task(t.save(tmp_path / "seeded.toml"))
    assert back == t and back.search.seed_configs == {"split": {"prep_warps": 4, "INV": "subst"}}
    assert back.bench.race == 0.0


def test_with_shapes_refuses_to_reuse_a_name_for_other_dims(cpu_task):
    name = cpu_task.primary_shape
    with pytest.raises(TaskError, match=re.escape(repr(name))):
        cpu_task.with_shapes({name: Shape(name, 9, 9, 9, 16, 16)}, name="x")
    same = cpu_task.with_shapes({name: cpu_task.primary}, name="x")  # same dims: fine
    assert same.shapes == cpu_task.shapes


def test_unknown_shape_name_is_a_task_error_listing_the_shapes(cpu_task):
    with pytest.raises(TaskError) as e:
        cpu_task.shape("b9_t9_h9")
    assert "b9_t9_h9" in str(e.value) and cpu_task.primary_shape in str(e.value)


# --------------------------------------------------------------------------- malformed files

GOOD = """\
name = "t"
primary_shape = "a"

[shapes.a]
B = 1
T = 64
H = 2
K = 32
V = 32

[contract]
lower_bound = -5.0
probes = ["random", "saturated"]
"""

# (id, edit of GOOD, fragments the message must contain: key, bad value, what is expected)
MALFORMED = [
    ("bad-toml-syntax", lambda s: s.replace("[shapes.a]", "[shapes.a"),
     ["not valid TOML", "line"]),
    ("missing-shapes", lambda s: s.split("[shapes.a]")[0] + s.split("V = 32\n")[1],
     ["'shapes'", "missing", "table of named shapes"]),
    ("empty-shapes", lambda s: s.split("[shapes.a]")[0] + "shapes = {}\n" + s.split("V = 32\n")[1],
     ["shapes", "at least one shape"]),
    ("K-not-power-of-two", lambda s: s.replace("K = 32", "K = 48"),
     ["shapes.a.K", "48", "power of two"]),
    ("negative-T", lambda s: s.replace("T = 64", "T = -5"),
     ["shapes.a.T", "-5", "positive integer"]),
    ("T-not-an-integer", lambda s: s.replace("T = 64", 'T = "64"'),
     ["shapes.a.T", "'64'", "positive integer"]),
    ("missing-shape-dimension", lambda s: s.replace("H = 2\n", ""),
     ["shapes.a.H", "missing", "positive integer"]),
    ("unknown-top-level-key", lambda s: s.replace("primary_shape =", "primary_shap ="),
     ["primary_shap", "unknown key", "primary_shape"]),
    ("unknown-contract-key", lambda s: s.replace("lower_bound =", "lower_bund ="),
     ["contract.lower_bund", "unknown key", "lower_bound"]),
    ("unknown-shape-key", lambda s: s.replace("V = 32", "V = 32\nW = 1"),
     ["shapes.a.W", "unknown key", "B, T, H, K, V"]),
    ("primary-shape-not-a-shape", lambda s: s.replace('primary_shape = "a"', 'primary_shape = "b1"'),
     ["primary_shape", "'b1'", "one of the shape names", "a"]),
    ("bad-probe-name", lambda s: s.replace('"saturated"', '"saturatd"'),
     ["contract.probes", "saturatd", "probe names", "saturated"]),
    ("duplicate-probe", lambda s: s.replace('"saturated"', '"random"'),
     ["contract.probes", "distinct"]),
    ("lower-bound-below-range", lambda s: s.replace("lower_bound = -5.0", "lower_bound = -6.0"),
     ["contract.lower_bound", "-6.0", "[-5, 0)"]),
    ("lower-bound-zero", lambda s: s.replace("lower_bound = -5.0", "lower_bound = 0"),
     ["contract.lower_bound", "0", "[-5, 0)"]),
    ("lower-bound-not-a-number", lambda s: s.replace("lower_bound = -5.0", "lower_bound = true"),
     ["contract.lower_bound", "True", "[-5, 0)"]),
    ("bad-section-type", lambda s: "bench = 3\n" + s,
     ["bench", "3", "a table"]),
    ("bad-op", lambda s: 'op = "kda_backward"\n' + s,
     ["op", "kda_backward", "kda_forward"]),
    ("race-out-of-range", lambda s: s + "\n[bench]\nrace = 1.0\n",
     ["bench.race", "1.0", "fraction"]),
    ("seed-config-of-an-unseeded-family", lambda s: s + '\n[search]\nseeds = ["split"]\n'
                                                      '[search.seed_configs.fused]\nGROUP = 1\n',
     ["search.seed_configs.fused", "not one of search.seeds", "split"]),
    ("seed-config-not-a-table", lambda s: s + '\n[search]\nseeds = ["split"]\nseed_configs = {split = 4}\n',
     ["search.seed_configs", "family = {tunable = value"]),
]


@pytest.mark.parametrize("edit,fragments", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_task_file_gives_one_clear_error(tmp_path, edit, fragments):
    path = tmp_path / "broken.toml"
    path.write_text(edit(GOOD))
    with pytest.raises(TaskError) as e:
        load_task(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: "), msg  # names the file first
    assert "\n" not in msg, msg  # one line
    for frag in fragments:
        assert frag in msg, (frag, msg)
    # no chained exception (a TOML or OS error) that would print as a second traceback
    err = e.value
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


def test_the_unedited_malformed_base_is_valid():
    # guards the table above: every failure comes from its edit, not from GOOD itself
    t = load_task_text(GOOD, "good")
    assert t.primary.dims() == dict(B=1, T=64, H=2, K=32, V=32)


# --------------------------------------------------------------------------- shape specs

@pytest.mark.parametrize("spec", ["B=1,T=4096,H=64", "b1_t4096_h64", " B=1, T=4096, H=64 ",
                                  "B=1,T=4096,H=64,K=128,V=128"])
def test_parse_shape_spec_accepts_both_forms(spec):
    s = parse_shape_spec(spec)
    assert s.dims() == dict(B=1, T=4096, H=64, K=128, V=128)
    assert s.name == "b1_t4096_h64"


def test_parse_shape_spec_reads_k_v_and_a_name():
    s = parse_shape_spec("b2_t37_h3_k32_v32")
    assert s.dims() == dict(B=2, T=37, H=3, K=32, V=32) and s.name == "b2_t37_h3_k32_v32"
    s = parse_shape_spec("mine:B=2,T=100,H=4,K=64,V=32")
    assert s.name == "mine" and s.dims() == dict(B=2, T=100, H=4, K=64, V=32)
    assert parse_shape_spec("B=1,T=10,H=2,K=32,V=32").name == "b1_t10_h2_k32_v32"


@pytest.mark.parametrize("spec,fragments", [
    ("B=1,T=4096", ["missing H"]),
    ("B=1,T=x,H=2", ["T = 'x'", "integer"]),
    ("B=1,T=4096,H=64,K=48", ["K = 48", "power of two"]),
    ("B=1,T=0,H=64", ["T = 0", "positive integer"]),
    ("B=1,T=4096,Q=64", ["unknown dimension 'Q'", "B, T, H, K, V"]),
    ("B1,T2,H3", ["'B1' is not KEY=VALUE"]),
    ("b1_t0_h64", ["T = 0", "positive integer"]),
    ("bad name:B=1,T=2,H=3", ["shape name 'bad name'"]),
])
def test_parse_shape_spec_rejects_bad_specs_clearly(spec, fragments):
    with pytest.raises(TaskError) as e:
        parse_shape_spec(spec)
    msg = str(e.value)
    assert "shape spec" in msg and "\n" not in msg
    for frag in fragments:
        assert frag in msg, (frag, msg)


def test_shape_default_names_and_labels():
    assert Shape.default_name(1, 8192, 96, 128, 128) == "b1_t8192_h96"
    assert Shape.default_name(2, 37, 3, 32, 32) == "b2_t37_h3_k32_v32"
    assert Shape("x", 1, 2, 3, 16, 32).label() == "B1 T2 H3 K16 V32"


def test_task_equality_ignores_where_it_was_loaded_from(tmp_path, cpu_task):
    copy = load_task(cpu_task.save(tmp_path / "c.toml"))
    assert isinstance(copy, Task) and copy.path != TASKS / "kda_fwd_cpu.toml"
    assert copy == load_task(TASKS / "kda_fwd_cpu.toml")


def test_a_shape_spec_that_repeats_a_dimension_is_an_error_naming_it():
    with pytest.raises(TaskError, match=r"B is given twice"):
        parse_shape_spec("B=1,T=10,H=2,K=32,V=32,B=2")


def test_only_a_task_written_by_generalize_is_in_the_generalized_phase(tmp_path):
    from kdatui.engine.loop import _phase

    cpu = load_task(TASKS / "kda_fwd_cpu.toml")
    assert len(cpu.shapes) == 3 and _phase(cpu) == "3 shapes"
    new = cpu.with_shapes({}, "kda_fwd_cpu-more")
    new.generalized_from = "kda_fwd_cpu/fused-c16"
    again = load_task(new.save(tmp_path / "more.toml"))
    assert again.generalized_from == "kda_fwd_cpu/fused-c16" and _phase(again) == "generalized (3 shapes)"
