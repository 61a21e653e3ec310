"""Planting a test candidate: the planted kernels of tests/candidates/ wrap the plain-torch
candidate, which must travel with them (a candidate is self-contained: in the sandbox it
sees its own folder and nothing of the repo). `planted(name)` makes a candidate folder with
the planted file under its own name (so reasons name it), a kernel.py that imports its
kda_forward, and torch_chunked.py beside them. A planted file that needs no helper is
returned as it is."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "tests" / "candidates"
TORCH_CHUNKED = ROOT / "kernels" / "kda" / "torch_chunked.py"
SPLIT = ROOT / "kernels" / "kda" / "split.py"
_DIR: Path | None = None


ATTACKS = ROOT / "tests" / "attack_candidates"


def attack(name: str, text: str | None = None) -> str:
    """An attack candidate of tests/attack_candidates/ as a folder: the attack (or `text`, an
    attack the test wrote) under its own name, kernel.py importing its kda_forward, and the
    honest kernel it wraps."""
    global _DIR
    if _DIR is None:
        planted("memo_fingerprint")  # makes the folder
    folder = _DIR / f"attack-{name}"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(text if text is not None else (ATTACKS / f"{name}.py").read_text())
    (folder / "kernel.py").write_text(f"from {name} import kda_forward  # noqa: F401\n")
    shutil.copy(ATTACKS / "_honest.py", folder / "_honest.py")
    shutil.copy(TORCH_CHUNKED, folder / "torch_chunked.py")
    shutil.copy(ATTACKS / "_split.py", folder / "_split.py")
    shutil.copy(SPLIT, folder / "split.py")
    return str(folder)


def planted(name: str, source: Path | None = None) -> str:
    global _DIR
    if _DIR is None:
        _DIR = Path(tempfile.mkdtemp(prefix="kdatui-planted-"))
        atexit.register(shutil.rmtree, _DIR, True)
    src = source or CANDIDATES / f"{name}.py"
    assert src.exists(), src
    text = src.read_text()
    if "torch_chunked.py" not in text:
        return str(src)
    folder = _DIR / name
    folder.mkdir(exist_ok=True)
    (folder / f"{src.stem}.py").write_text(text)
    (folder / "kernel.py").write_text(f"from {src.stem} import kda_forward  # noqa: F401\n")
    shutil.copy(TORCH_CHUNKED, folder / "torch_chunked.py")
    return str(folder)
