"""Candidates: a folder with `kernel.py` (and `IDEA.md`), or a single `.py` file, whose
module exposes `kda_forward` (KDA.md §1). Loading never trusts the candidate: imports of
the baseline libraries or of kdatui itself are rejected before anything runs."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

# Top-level modules a candidate may not import: the baselines (which would make the
# comparison meaningless) and kdatui itself (whose reference computes the answer).
FORBIDDEN_IMPORTS = {
    "fla": "imports the baseline library fla",
    "fla_core": "imports the baseline library fla-core",
    "flash_kda": "imports the baseline library flash_kda",
    "kdatui": "imports kdatui (a candidate must be self-contained)",
}


class CandidateError(Exception):
    """The candidate cannot be used as given. The message says why and where."""


@dataclass(frozen=True)
class CandidateFiles:
    root: Path  # the folder (or the file's folder)
    kernel: Path  # the module that defines kda_forward
    folder: bool  # a candidate folder (every .py in it is the candidate's), or a lone file

    @property
    def idea(self) -> Path:
        return self.root / "IDEA.md"


def locate(path: str | Path) -> CandidateFiles:
    p = Path(path)
    if p.is_dir():
        kernel = p / "kernel.py"
        if not kernel.exists():
            raise CandidateError(f"{p}: a candidate folder needs a kernel.py")
        return CandidateFiles(p, kernel, True)
    if p.suffix == ".py" and p.exists():
        return CandidateFiles(p.parent, p, False)
    if not p.exists():
        raise CandidateError(f"{p}: no such candidate (a folder with kernel.py, or a .py file)")
    raise CandidateError(f"{p}: not a candidate (a folder with kernel.py, or a .py file)")


def _imported_modules(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
        elif isinstance(node, ast.Call):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if fname in ("import_module", "__import__") and node.args:
                a = node.args[0]
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    yield a.value, node.lineno


def static_check(path: str | Path) -> list[str]:
    """Problems found without running anything: syntax errors and forbidden imports,
    across every .py file of the candidate. Empty when the candidate may run."""
    files = locate(path)
    sources = sorted(files.root.rglob("*.py")) if files.folder else [files.kernel]
    problems = []
    for src in sources:
        try:
            tree = ast.parse(src.read_text(), filename=str(src))
        except SyntaxError as e:
            problems.append(f"{src.name}:{e.lineno}: syntax error: {e.msg}")
            continue
        for mod, line in _imported_modules(tree):
            top = mod.split(".")[0]
            if top in FORBIDDEN_IMPORTS:
                problems.append(f"{src.name}:{line}: {FORBIDDEN_IMPORTS[top]} ({mod})")
    return problems


def load(path: str | Path) -> ModuleType:
    """Import the candidate's kernel module under a name unique to its path and content."""
    files = locate(path)
    problems = static_check(path)
    if problems:
        raise CandidateError("; ".join(problems))
    digest = hashlib.sha1(f"{files.kernel.resolve()}|{files.kernel.read_bytes()!r}".encode()).hexdigest()[:12]
    name = f"kdatui_candidate_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, files.kernel)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise CandidateError(f"{files.kernel}: import failed: {type(e).__name__}: {e}") from e
    if not callable(getattr(module, "kda_forward", None)):
        del sys.modules[name]
        raise CandidateError(f"{files.kernel}: defines no callable kda_forward")
    return module
