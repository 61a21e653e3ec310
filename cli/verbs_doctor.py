"""`kdatui doctor`: what this machine gives kdatui, each line with what to do when missing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from .common import EXIT_FAILED, EXIT_OK


def _check(name: str, ok: bool, detail: str, fix: str = "", needed: bool = True) -> dict:
    return {"name": name, "ok": ok, "detail": detail, "fix": "" if ok else fix, "needed": needed}


def _gpu() -> dict:
    try:
        import torch
    except ImportError:
        return _check("gpu", False, "torch is not installed", "pip install torch==2.13.0 (or your CUDA build)")
    if not torch.cuda.is_available():
        return _check("gpu", False, "no CUDA GPU visible: the CPU task runs through the Triton interpreter "
                                    "(timings there are not performance figures)",
                      "on a GPU machine: an NVIDIA driver and a CUDA build of torch", needed=False)
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    driver = ""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            driver = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                                    text=True, timeout=20).stdout.split()[0]
        except (OSError, subprocess.TimeoutExpired, IndexError):
            pass
    return _check("gpu", True, f"{len(names)} GPU{'s' * (len(names) > 1)}: {', '.join(names)}; CUDA "
                               f"{torch.version.cuda}" + (f", driver {driver}" if driver else ""))


def _import(name: str, module: str, fix: str, needed: bool = True, attr: str = "__version__") -> dict:
    try:
        mod = __import__(module, fromlist=["_"])
    except Exception as e:  # noqa: BLE001 - any failure to import is the answer
        return _check(name, False, f"{module} does not import: {type(e).__name__}: {str(e)[:120]}", fix, needed)
    return _check(name, True, f"{module} {getattr(mod, attr, '')}".strip())


def _fla() -> dict:
    from kdatui.engine.baselines import fla_available, package_version

    if fla_available():
        v = package_version("fla-core", missing="?")
        return _check("fla-core", True, f"fla-core {v}: the baseline is fla's chunk_kda")
    return _check("fla-core", False, "fla-core does not import: GPU runs time against the plain-torch kernel "
                                     "instead", "pip install -e '.[baseline]'", needed=False)


def _sandbox() -> dict:
    from kdatui.engine.sandbox import detect

    info = detect()
    if info.kind == "bwrap":
        return _check("sandbox", True, f"candidates and agent turns run under {info.describe()}")
    fix = "install bubblewrap (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap)"
    if info.kind == "uid":
        return _check("sandbox", True, f"executors run as an {info.describe()}; agent turns are not sandboxed", fix)
    return _check("sandbox", False, f"candidates are NOT sandboxed: {info.reason}", fix)


def _git() -> dict:
    git = shutil.which("git")
    if not git:
        return _check("git", False, "git is not on PATH: the frontier lives in git branches", "install git")
    v = subprocess.run([git, "--version"], capture_output=True, text=True).stdout.strip()
    return _check("git", True, v)


def _ray() -> dict:
    return _import("ray", "ray", "pip install -e '.[cluster]' (only for a Ray cluster backend)", needed=False)


def _agents() -> list[dict]:
    out = []
    for cli in ("claude", "codex", "gemini"):
        path = shutil.which(cli)
        out.append(_check(f"agent:{cli}", bool(path), path or f"{cli} is not on PATH",
                          f"npm install -g the {cli} CLI to use it as an agent", needed=False))
    return out


def collect() -> list[dict]:
    return [_check("python", True, sys.version.split()[0]), _gpu(),
            _import("torch", "torch", "pip install torch==2.13.0"),
            _import("triton", "triton", "pip install triton"), _fla(), _sandbox(), _git(), _ray(), *_agents()]


def cmd_doctor(args) -> int:
    checks = collect()
    bad = [c for c in checks if c["needed"] and not c["ok"]]
    if args.json:
        print(json.dumps({"ok": not bad, "checks": checks}, indent=2))
    else:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        t = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
        for col in ("", "what", "found", "to do"):
            t.add_column(col, overflow="fold")
        for c in checks:
            mark = "[green]ok[/]" if c["ok"] else ("[red]no[/]" if c["needed"] else "[yellow]--[/]")
            t.add_row(mark, c["name"], escape(c["detail"]), escape(c["fix"]))
        Console().print(t)
    return EXIT_OK if not bad else EXIT_FAILED


def register(sub) -> None:
    s = sub.add_parser("doctor", help="what this machine gives kdatui: GPU, fla-core, Triton, sandbox, git, Ray")
    s.add_argument("--json", action="store_true", help="print the checks as JSON")
    s.set_defaults(func=cmd_doctor)
