"""Task files: what to optimize, on which shapes, under which contract.

A task is a TOML file (`tasks/*.toml`), read with tomllib and written with tomli-w.
Every key is validated; a bad file raises `TaskError` naming the file, the key, the
value found and what was expected. Unknown keys are errors too (a typo must not be
silently ignored), which also makes load -> save -> load lossless.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import tomli_w

OPS = ("kda_forward",)
PROBES = (
    "random",
    "saturated",
    "strong",
    "mixed_depth",
    "switch",
    "boundary",
    "correlated",
    "random_depth",
    "fp64_random_depth",
    "fp64_correlated",
)
SHAPE_KEYS = ("B", "T", "H", "K", "V")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class TaskError(ValueError):
    """A task file (or a shape spec) is malformed. The message says where and why."""


@dataclass(frozen=True)
class Shape:
    name: str
    B: int
    T: int
    H: int
    K: int
    V: int

    def dims(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in SHAPE_KEYS}

    def label(self) -> str:
        return f"B{self.B} T{self.T} H{self.H} K{self.K} V{self.V}"

    @staticmethod
    def default_name(B: int, T: int, H: int, K: int, V: int) -> str:
        name = f"b{B}_t{T}_h{H}"
        return name if K == V == 128 else f"{name}_k{K}_v{V}"


@dataclass
class Contract:
    rtol: float = 0.05
    atol_rms: float = 0.5
    rms: float = 0.03
    correlated_rtol: float = 0.2
    correlated_atol_rms: float = 1.0
    correlated_rms: float = 0.15
    lower_bound: float = -5.0
    probes: list[str] = field(default_factory=lambda: list(PROBES))
    holdout: int = 5
    runs_per_probe: int = 2
    input_dependence: bool = True
    seed: int = 0


@dataclass
class Bench:
    warmup: int = 3
    repeats: int = 10
    trials: int = 5
    flush_l2: bool = True
    baseline: str = "fla"
    timeout_s: float = 600.0
    # racing: a candidate whose best trial so far is below (1 - race) x its family member's
    # speedup on the primary shape is stopped there (recorded RACED, never admitted); 0: off
    race: float = 0.2


@dataclass
class Search:
    agent: str = "builtin"
    budget_hours: float = 6.0
    budget_attempts: int = 0
    cleanup_every_hours: float = 12.0
    max_members_per_family: int = 3
    seeds: list[str] = field(default_factory=lambda: ["fused", "split"])
    # a seed family's first attempt with these tunables over its default (e.g. a detuned start
    # for bench/search_efficiency.py): {"split": {"prep_warps": 4, "num_stages": 2}}
    seed_configs: dict = field(default_factory=dict)


@dataclass
class Task:
    name: str
    shapes: dict[str, Shape]
    primary_shape: str
    op: str = "kda_forward"
    description: str = ""
    generalized_from: str = ""  # "<task>/<member>" when `generalize` wrote this task
    contract: Contract = field(default_factory=Contract)
    bench: Bench = field(default_factory=Bench)
    search: Search = field(default_factory=Search)
    path: Path | None = field(default=None, compare=False)

    @property
    def primary(self) -> Shape:
        return self.shapes[self.primary_shape]

    def shape(self, name: str) -> Shape:
        if name not in self.shapes:
            raise TaskError(
                f"{self._where()}: no shape named {name!r}; the task has {', '.join(self.shapes)}"
            )
        return self.shapes[name]

    def _where(self) -> str:
        return str(self.path) if self.path else f"task {self.name}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "op": self.op}
        if self.description:
            d["description"] = self.description
        if self.generalized_from:
            d["generalized_from"] = self.generalized_from
        d["primary_shape"] = self.primary_shape
        d["shapes"] = {n: s.dims() for n, s in self.shapes.items()}
        for section in ("contract", "bench", "search"):
            obj = getattr(self, section)
            d[section] = {f.name: getattr(obj, f.name) for f in fields(obj)}
        return d

    def dumps(self) -> str:
        return tomli_w.dumps(self.to_dict())

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        text = self.dumps()
        load_task_text(text, str(path))  # never write a file we could not read back
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        self.path = path
        return path

    def with_shapes(self, extra: dict[str, Shape], name: str) -> "Task":
        shapes = dict(self.shapes)
        for n, s in extra.items():
            if n in shapes and shapes[n] != s:
                raise TaskError(f"shape name {n!r} is already used by {shapes[n].label()}")
            shapes[n] = s
        return replace(self, name=name, shapes=shapes, path=None)


# --------------------------------------------------------------------------- loading


def load_task(path: str | Path) -> Task:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise TaskError(f"{path}: no such task file") from None
    except OSError as e:
        raise TaskError(f"{path}: cannot read: {e.strerror}") from None
    task = load_task_text(text, str(path))
    task.path = path
    return task


def load_task_text(text: str, where: str = "<task>") -> Task:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TaskError(f"{where}: not valid TOML: {e}") from None
    return _task_from_dict(data, where)


def _fail(where: str, key: str, value: Any, expected: str) -> TaskError:
    return TaskError(f"{where}: {key} = {value!r}: expected {expected}")


def _check_keys(where: str, prefix: str, data: dict, allowed: tuple[str, ...]) -> None:
    for k in data:
        if k not in allowed:
            key = f"{prefix}.{k}" if prefix else k
            raise TaskError(f"{where}: unknown key {key!r}; allowed here: {', '.join(allowed)}")


def _get(where, data, key, prefix, kind, default=..., check=None, expected=""):
    full = f"{prefix}.{key}" if prefix else key
    if key not in data:
        if default is ...:
            raise TaskError(f"{where}: missing key {full!r} ({expected or kind.__name__})")
        return default
    v = data[key]
    ok = isinstance(v, kind) and not (kind in (int, float) and isinstance(v, bool))
    if kind is float and isinstance(v, int) and not isinstance(v, bool):
        v, ok = float(v), True
    if not ok or (check is not None and not check(v)):
        raise _fail(where, full, v, expected or kind.__name__)
    return v


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def parse_shape(where: str, name: str, dims: Any) -> Shape:
    prefix = f"shapes.{name}"
    if not _NAME.match(name):
        raise TaskError(f"{where}: shape name {name!r}: expected letters, digits, '_', '-', '.'")
    if not isinstance(dims, dict):
        raise _fail(where, prefix, dims, "a table with B, T, H, K, V")
    _check_keys(where, prefix, dims, SHAPE_KEYS)
    pos = lambda v: v >= 1  # noqa: E731
    vals = {k: _get(where, dims, k, prefix, int, check=pos, expected="a positive integer")
            for k in ("B", "T", "H")}
    for k in ("K", "V"):
        vals[k] = _get(where, dims, k, prefix, int, check=lambda v: _pow2(v) and 16 <= v <= 256,
                       expected="a power of two from 16 to 256")
    return Shape(name=name, **vals)


def _task_from_dict(data: dict, where: str) -> Task:
    _check_keys(where, "", data, ("name", "op", "description", "generalized_from", "primary_shape", "shapes",
                                  "contract", "bench", "search"))
    name = _get(where, data, "name", "", str, check=lambda v: bool(_NAME.match(v)),
                expected="a name of letters, digits, '_', '-', '.'")
    op = _get(where, data, "op", "", str, default="kda_forward", check=lambda v: v in OPS,
              expected=f"one of {', '.join(OPS)}")
    description = _get(where, data, "description", "", str, default="")
    generalized_from = _get(where, data, "generalized_from", "", str, default="",
                            expected="the task/member it was generalized from")
    raw_shapes = _get(where, data, "shapes", "", dict, expected="a table of named shapes")
    if not raw_shapes:
        raise TaskError(f"{where}: shapes: expected at least one shape")
    shapes = {n: parse_shape(where, n, d) for n, d in raw_shapes.items()}
    primary = _get(where, data, "primary_shape", "", str, check=lambda v: v in shapes,
                   expected=f"one of the shape names ({', '.join(shapes)})")
    contract = _section(where, data, "contract", Contract, {
        "rtol": (float, lambda v: 0 < v < 1, "a number in (0, 1)"),
        "atol_rms": (float, lambda v: 0 < v <= 10, "a number in (0, 10]"),
        "rms": (float, lambda v: 0 < v < 1, "a number in (0, 1)"),
        "correlated_rtol": (float, lambda v: 0 < v < 1, "a number in (0, 1)"),
        "correlated_atol_rms": (float, lambda v: 0 < v <= 10, "a number in (0, 10]"),
        "correlated_rms": (float, lambda v: 0 < v < 1, "a number in (0, 1)"),
        "lower_bound": (float, lambda v: -5 <= v < 0, "a number in [-5, 0)"),
        "probes": (list, lambda v: all(p in PROBES for p in v) and len(set(v)) == len(v),
                   f"a list of distinct probe names from {', '.join(PROBES)}"),
        "holdout": (int, lambda v: 0 <= v <= 16, "an integer from 0 to 16"),
        "runs_per_probe": (int, lambda v: 1 <= v <= 5, "an integer from 1 to 5"),
        "input_dependence": (bool, None, "true or false"),
        "seed": (int, lambda v: v >= 0, "a non-negative integer"),
    })
    bench = _section(where, data, "bench", Bench, {
        "warmup": (int, lambda v: 0 <= v <= 1000, "an integer from 0 to 1000"),
        "repeats": (int, lambda v: 1 <= v <= 10000, "an integer from 1 to 10000"),
        "trials": (int, lambda v: 1 <= v <= 1000, "an integer from 1 to 1000"),
        "flush_l2": (bool, None, "true or false"),
        "baseline": (str, lambda v: v != "", "'fla', 'torch', or a candidate path"),
        "timeout_s": (float, lambda v: v > 0, "a positive number of seconds"),
        "race": (float, lambda v: 0 <= v < 1, "a fraction from 0 (no racing) up to 1"),
    })
    search = _section(where, data, "search", Search, {
        "agent": (str, lambda v: v != "", "an agent name ('builtin' or a configured command agent)"),
        "budget_hours": (float, lambda v: v >= 0 and math.isfinite(v), "a non-negative number"),
        "budget_attempts": (int, lambda v: v >= 0, "a non-negative integer (0: no limit)"),
        "cleanup_every_hours": (float, lambda v: v > 0, "a positive number of hours"),
        "max_members_per_family": (int, lambda v: v >= 1, "a positive integer"),
        "seeds": (list, lambda v: all(isinstance(s, str) and s for s in v),
                  "a list of family names or candidate paths"),
        "seed_configs": (dict, lambda v: all(isinstance(c, dict) and all(
            isinstance(x, (str, int, float, bool)) for x in c.values()) for c in v.values()),
            "a table of family = {tunable = value, ...}"),
    })
    unseeded = [f for f in search.seed_configs if f not in search.seeds]
    if unseeded:
        raise TaskError(f"{where}: search.seed_configs.{unseeded[0]}: {unseeded[0]!r} is not one of search.seeds "
                        f"({', '.join(search.seeds)})")
    return Task(name=name, op=op, description=description, generalized_from=generalized_from, shapes=shapes, primary_shape=primary,
                contract=contract, bench=bench, search=search)


def _section(where, data, key, cls, spec):
    raw = _get(where, data, key, "", dict, default={}, expected="a table")
    _check_keys(where, key, raw, tuple(spec))
    defaults = cls()
    kwargs = {}
    for k, (kind, check, expected) in spec.items():
        kwargs[k] = _get(where, raw, k, key, kind, default=getattr(defaults, k), check=check,
                         expected=expected)
    return cls(**kwargs)


# --------------------------------------------------------------------------- shape specs

def parse_shape_spec(spec: str) -> Shape:
    """Parse a shape written on the command line: `B=1,T=4096,H=64[,K=128,V=128]`,
    optionally prefixed by `NAME:`, or the compact form `b1_t4096_h64[_k64_v64]`."""
    s = spec.strip()
    m = re.fullmatch(r"b(\d+)_t(\d+)_h(\d+)(?:_k(\d+)_v(\d+))?", s)
    if m:
        B, T, H = (int(x) for x in m.group(1, 2, 3))
        K = int(m.group(4) or 128)
        V = int(m.group(5) or 128)
        return parse_shape("shape spec", s, {"B": B, "T": T, "H": H, "K": K, "V": V})
    name = None
    if ":" in s:
        name, s = s.split(":", 1)
    dims: dict[str, int] = {"K": 128, "V": 128}
    given: set[str] = set()
    for part in filter(None, s.split(",")):
        if "=" not in part:
            raise TaskError(f"shape spec {spec!r}: {part!r} is not KEY=VALUE (keys B, T, H, K, V)")
        k, v = (x.strip() for x in part.split("=", 1))
        if k not in SHAPE_KEYS:
            raise TaskError(f"shape spec {spec!r}: unknown dimension {k!r}; expected B, T, H, K, V")
        if k in given:
            raise TaskError(f"shape spec {spec!r}: {k} is given twice; give each of B, T, H, K, V once")
        given.add(k)
        try:
            dims[k] = int(v)
        except ValueError:
            raise TaskError(f"shape spec {spec!r}: {k} = {v!r}: expected an integer") from None
    missing = [k for k in ("B", "T", "H") if k not in dims]
    if missing:
        raise TaskError(f"shape spec {spec!r}: missing {', '.join(missing)}")
    name = name or Shape.default_name(**{k: dims[k] for k in SHAPE_KEYS})
    return parse_shape("shape spec", name, dims)


# --------------------------------------------------------------------------- discovery

def bundled_tasks_dir() -> Path:
    from importlib.resources import files

    return Path(str(files("kdatui.tasks")))


def resolve_task_path(ref: str | Path, cwd: Path | None = None) -> Path:
    """A task given as a path, or a name looked up in ./tasks then in the bundled tasks."""
    p = Path(ref)
    if p.suffix == ".toml" or p.exists() or "/" in str(ref):
        return p
    cwd = cwd or Path.cwd()
    for folder in (cwd / "tasks", bundled_tasks_dir()):
        cand = folder / f"{ref}.toml"
        if cand.exists():
            return cand
    raise TaskError(f"no task named {ref!r} (looked for tasks/{ref}.toml here and in the bundled tasks)")


def discover_tasks(cwd: Path | None = None) -> list[Path]:
    cwd = cwd or Path.cwd()
    seen: dict[str, Path] = {}
    for folder in (cwd / "tasks", bundled_tasks_dir()):
        if folder.is_dir():
            for p in sorted(folder.glob("*.toml")):
                seen.setdefault(p.stem, p)
    return list(seen.values())
