"""The sandbox around untrusted code: a candidate's executor and a coding agent's turn.

DESIGN.md "Trust": candidates and coding agents are untrusted, the person who starts a run
is not. The process boundary keeps a candidate away from the checks and the timer of its
own evaluation (they run in the judge, another process); the sandbox keeps it away from
everything else it could read, write or reach:

  bwrap  (bubblewrap, Debian's `bubblewrap`): the root file system read-only, a private
         /tmp, /dev with only the GPU's nodes, a fresh /proc of a private PID namespace
         (it cannot see, signal or trace the judge), no network; hidden behind empty
         tmpfs: the home directory (but for the Python installation in it), kdatui's config
         and data dirs (the holdout salt, the archive), and the repo's `.frontier/` (the
         store, the control socket, every worktree); writable: a scratch dir of its own.
         As root, every capability is dropped.
  uid    no bwrap (or it is refused), but this process is root: the executor runs as an
         unprivileged uid (nobody) in a fresh network namespace; it cannot read the salt
         (mode 0600) or `.frontier/` (made 0700), and cannot signal the judge.
  none   neither: the code runs as this user, with a warning that stays visible
         (`kdatui check`/`bench` output, the TUI header, `kdatui doctor`).

`detect()` decides once per process which applies and why (bwrap is tried on a real
command, since a present binary can still be refused by the kernel), and every executor
and agent turn of the process uses that. KDATUI_SANDBOX=none|uid|bwrap forces a kind (for
tests; a forced kind that cannot work is reported as refused, not silently replaced).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("bwrap", "uid", "none")
NOBODY = 65534
# What an executor's environment keeps of ours (everything else, API keys included, stays out).
EXECUTOR_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
                "LD_LIBRARY_PATH", "PYTHONPATH", "TRITON_INTERPRET", "TRITON_PTXAS_PATH",
                "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "NVIDIA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                "NVSHMEM_DISABLE_NVLS", "KDATUI_TEST_CHILD_TAG")


@dataclass(frozen=True)
class SandboxInfo:
    kind: str  # "bwrap", "uid" or "none"
    reason: str = ""  # why not a stronger kind (empty for bwrap)
    bwrap: str = ""  # the bwrap binary used

    @property
    def sandboxed(self) -> bool:
        return self.kind != "none"

    @property
    def warning(self) -> str:
        """The line a user must see when candidates are not sandboxed (empty otherwise)."""
        return "" if self.sandboxed else f"candidates not sandboxed: {self.reason}"

    def describe(self) -> str:
        if self.kind == "bwrap":
            return f"bubblewrap ({self.bwrap})"
        if self.kind == "uid":
            return f"unprivileged uid {NOBODY} (no bubblewrap: {self.reason})"
        return f"none: {self.reason}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "reason": self.reason, "warning": self.warning, "describe": self.describe()}


def _bwrap_binary() -> str | None:
    return os.environ.get("KDATUI_BWRAP") or shutil.which("bwrap")


def _try_bwrap(binary: str) -> str:
    """Empty if bwrap can build the sandbox we use here; else why not (its own words)."""
    argv = [binary, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent"]
    if os.geteuid() == 0:
        argv += ["--cap-drop", "ALL"]
    try:
        p = subprocess.run(argv + ["true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{binary} could not run: {e}"
    if p.returncode != 0:
        said = (p.stderr or p.stdout).strip().splitlines()
        return f"{binary} refused a sandbox: {said[-1] if said else f'exit status {p.returncode}'}"
    return ""


@functools.lru_cache(maxsize=None)
def _detect(forced: str) -> SandboxInfo:
    binary = _bwrap_binary()
    why = "bubblewrap is not installed (apt install bubblewrap, or your system's package)" if not binary else ""
    if binary and forced in ("", "bwrap"):
        why = _try_bwrap(binary)
        if not why:
            return SandboxInfo("bwrap", "", binary)
    if forced == "bwrap":
        return SandboxInfo("none", f"KDATUI_SANDBOX=bwrap but {why}")
    if forced == "none":
        return SandboxInfo("none", "KDATUI_SANDBOX=none")
    if os.geteuid() == 0:
        return SandboxInfo("uid", why)
    if forced == "uid":
        return SandboxInfo("none", f"KDATUI_SANDBOX=uid needs root; {why}")
    return SandboxInfo("none", why)


def detect() -> SandboxInfo:
    forced = os.environ.get("KDATUI_SANDBOX", "").strip().lower()
    if forced and forced not in KINDS:
        return SandboxInfo("none", f"KDATUI_SANDBOX={forced!r} is not one of {', '.join(KINDS)}")
    return _detect(forced)


# --------------------------------------------------------------------------- what to hide

def hidden_dirs(repos: list[Path] | None = None) -> list[Path]:
    """Directories untrusted code must not see: kdatui's config, data (archive) and cache
    dirs, and each repo's `.frontier/` (store, control sockets, worktrees)."""
    from .paths import archive_root, cache_dir, config_dir, data_dir

    out = [config_dir(), data_dir(), archive_root(), cache_dir()]
    for r in repos or []:
        out.append(Path(r) / ".frontier")
    return [p.resolve() for p in out]


def _python_paths() -> list[Path]:
    """What the Python running us needs to run another interpreter: its prefixes and the
    import path (site-packages, a PYTHONPATH)."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.executable).parent}
    for p in sys.path:
        if p and Path(p).exists():
            paths.add(Path(p))
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if p and Path(p).exists():
            paths.add(Path(p))
    try:
        paths.add(Path(os.path.realpath(sys.executable)).parent.parent)
    except OSError:
        pass
    return sorted(paths)


def _ro_binds(paths, roots: list[Path]) -> list[str]:
    """bwrap arguments binding read-only again each of `paths` that exists and lies under one
    of `roots` (a tmpfs over them would hide what the sandboxed command needs to run)."""
    out = []
    for p in sorted({Path(q).resolve() for q in paths}):
        if p.exists() and any(_under(p, r) for r in roots):
            out += ["--ro-bind", str(p), str(p)]
    return out


def _under(p: Path, root: Path) -> bool:
    try:
        p.relative_to(root)
        return True
    except ValueError:
        return False


def gpu_device_nodes() -> list[str]:
    return sorted(f"/dev/{d}" for d in os.listdir("/dev") if d.startswith("nvidia")) if os.path.isdir("/dev") else []


# --------------------------------------------------------------------------- executors

@dataclass
class Launch:
    """How to start one sandboxed process: argv (bwrap's wrapping included), environment,
    and a preexec function for the uid fallback."""

    argv: list[str]
    env: dict[str, str]
    preexec: object = None
    info: SandboxInfo = field(default_factory=lambda: SandboxInfo("none"))
    # where the sandboxed process sees its folders (differs from the host paths under bwrap)
    candidate_at: str = ""
    scratch_at: str = ""


def executor_env(base: dict[str, str], scratch: str, device: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k in EXECUTOR_ENV}
    env.update(HOME=scratch, TMPDIR="/tmp" if os.path.isdir("/tmp") else scratch, PYTHONUNBUFFERED="1",
               PYTHONDONTWRITEBYTECODE="1", TRITON_CACHE_DIR=str(Path(scratch) / "triton-cache"),
               XDG_CACHE_HOME=str(Path(scratch) / "cache"), XDG_CONFIG_HOME=str(Path(scratch) / "config"))
    return device_env(env, device)


def device_env(env: dict[str, str], device: str) -> dict[str, str]:
    """An executor's environment for its device: on the CPU no GPU, Triton through the
    interpreter, one intra-op thread (the interpreter's tiles are small); on a GPU the
    compiler, never the interpreter."""
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["TRITON_INTERPRET"] = "1"
        env.setdefault("OMP_NUM_THREADS", "1")
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def executor_launch(cmd: list[str], *, candidate_dir: Path, scratch_dir: Path, device: str,
                    env: dict[str, str], repos: list[Path] | None = None, readable: list[Path] = (),
                    info: SandboxInfo | None = None) -> Launch:
    """Start `cmd` (an interpreter and the runner script) as a candidate's executor: the
    candidate folder read-only, `scratch_dir` writable, the rest as the module docstring says.
    `readable` names extra host paths the command itself needs (the runner script)."""
    info = info or detect()
    candidate_dir, scratch_dir = Path(candidate_dir).resolve(), Path(scratch_dir).resolve()
    if info.kind == "bwrap":
        # bound at their own paths: a destination that exists needs no directory made (the root is
        # read-only), one under a tmpfs (/tmp, a hidden dir) gets one there
        cand_at, scratch_at = str(candidate_dir), str(scratch_dir)
        wrap = [info.bwrap, "--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", "/tmp"]
        if device != "cpu":
            for node in gpu_device_nodes():
                wrap += ["--dev-bind", node, node]
        home = Path.home().resolve()
        hidden_home = str(home) != "/" and home.is_dir()
        if hidden_home:
            wrap += ["--tmpfs", str(home)]
        # what Python needs from under a hidden home or the private /tmp (a PYTHONPATH there)
        wrap += _ro_binds(_python_paths() + list(readable), [home, Path("/tmp")] if hidden_home else [Path("/tmp")])
        for d in hidden_dirs(repos):
            if d.is_dir() and not (str(home) != "/" and _under(d, home)):
                wrap += ["--tmpfs", str(d)]
        if os.path.isdir("/run/user"):
            wrap += ["--tmpfs", "/run/user"]  # session sockets (dbus, ssh and gpg agents)
        wrap += ["--ro-bind", str(candidate_dir), cand_at, "--bind", str(scratch_dir), scratch_at,
                 "--chdir", scratch_at]
        # the empty dirs over what is hidden take no writes either (the binds inside keep theirs)
        for d in ([home] if hidden_home else []) + [d for d in hidden_dirs(repos) if d.is_dir()]:
            if not (hidden_home and d != home and _under(d, home)):
                wrap += ["--remount-ro", str(d)]
        if os.geteuid() == 0:
            wrap += ["--cap-drop", "ALL"]
        return Launch(wrap + ["--"] + cmd, executor_env(env, scratch_at, device), None, info, cand_at, scratch_at)
    if info.kind == "uid":
        for d in (candidate_dir, scratch_dir):
            _chown_tree(d, NOBODY)
            _let_traverse(Path(d).parent)
        for d in hidden_dirs(repos):
            if d.is_dir():
                os.chmod(d, 0o700)  # root's; nobody cannot list or read it
        return Launch(cmd, executor_env(env, str(scratch_dir), device), _drop_to_nobody, info,
                      str(candidate_dir), str(scratch_dir))
    return Launch(cmd, executor_env(env, str(scratch_dir), device), None, info, str(candidate_dir), str(scratch_dir))


def _let_traverse(d: Path) -> None:
    """Others may pass through `d` and every parent of it inside the temporary directory
    (not list them): a private dir on the way (mkdtemp's 0700) would stop nobody at its door.
    Nothing outside the temporary directory is touched."""
    top = Path(tempfile.gettempdir()).resolve()
    d = Path(d).resolve()
    while d != top and _under(d, top):
        mode = d.stat().st_mode
        if not mode & 0o001:
            os.chmod(d, (mode & 0o7777) | 0o111)
        d = d.parent


def _chown_tree(root: Path, uid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        os.chown(dirpath, uid, uid)
        for f in filenames:
            os.chown(os.path.join(dirpath, f), uid, uid)


def _drop_to_nobody() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare(0x40000000)  # CLONE_NEWNET: no network (best effort)
    except Exception:  # noqa: BLE001
        pass
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


# --------------------------------------------------------------------------- agent turns

def agent_launch(argv: list[str], *, worktree: Path, env: dict[str, str], network: bool = True,
                 extra_binds: list[str] = (), info: SandboxInfo | None = None) -> Launch:
    """Start a coding agent's command for one turn: its worktree writable; the repo's own
    tree and git directory read-only but for the worktree's administrative folder (index,
    HEAD), so `git status` and `git diff` work while no ref (a frontier branch) can move; the
    store, the salt, the archive and every other worktree hidden; the home directory stays
    writable (the CLI's own logins and sessions live there); network as configured (coding
    CLIs need their API). `extra_binds` are host paths bound read-write at their own place
    (the engine's agent socket)."""
    info = info or detect()
    worktree = Path(worktree).resolve()
    if info.kind != "bwrap":
        return Launch(list(argv), env, None, info)  # the uid fallback cannot keep a CLI's own config usable
    admin = _worktree_admin_dir(worktree)
    repo = admin.parents[2] if admin is not None and admin.parent.name == "worktrees" else None
    wrap = [info.bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    if not network:
        wrap.append("--unshare-net")
    # what the command runs from, if it lives under /tmp (a venv, a PATH entry, a script named
    # on its command line, kdatui itself for the `kdatui check` inside the turn): read-only again
    prog = shutil.which(argv[0]) if argv else None
    needed = _python_paths() + [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    needed.append(Path(__file__).resolve().parents[1])  # the installed kdatui (an editable install: its checkout)
    if prog:
        needed.append(Path(prog).parent)
    needed += [Path(a) for a in argv[1:] if a.startswith("/") and len(a) < 4096]
    wrap += _ro_binds(needed, [Path("/tmp")])
    home = Path.home().resolve()
    if str(home) != "/" and home.is_dir():
        wrap += ["--bind", str(home), str(home)]
    if repo is not None:
        wrap += ["--ro-bind", str(repo), str(repo)]
    for d in hidden_dirs([repo] if repo is not None else []):
        if d.is_dir():
            wrap += ["--tmpfs", str(d)]
    wrap += ["--bind", str(worktree), str(worktree)]
    if admin is not None:
        wrap += ["--bind", str(admin), str(admin)]
    for host in extra_binds:
        wrap += ["--bind", str(host), str(host)]
    if os.geteuid() == 0:
        wrap += ["--cap-drop", "ALL"]
    wrap += ["--chdir", str(worktree)]
    return Launch(wrap + ["--"] + list(argv), env, None, info)


def _worktree_admin_dir(worktree: Path) -> Path | None:
    """`.git/worktrees/<name>` of a linked worktree (its `.git` file says where)."""
    dotgit = worktree / ".git"
    try:
        text = dotgit.read_text().strip()
    except (OSError, IsADirectoryError):
        return None
    if not text.startswith("gitdir:"):
        return None
    p = Path(text.split(":", 1)[1].strip())
    return (worktree / p).resolve() if not p.is_absolute() else p
