"""Helpers shared by the CLI verbs."""

from __future__ import annotations

import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UserError(Exception):
    """Printed as `kdatui: error: ...` with exit status 2."""


def rel_path(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def load_task_ref(ref: str):
    from kdatui.engine.task import load_task, resolve_task_path

    return load_task(resolve_task_path(ref))


def say_device(device: str, quiet: bool) -> None:
    if quiet:
        return
    if device == "cpu":
        print("device: cpu — no GPU here: Triton kernels run through the Triton interpreter "
              "(TRITON_INTERPRET=1); timings are not GPU figures", file=sys.stderr)
    else:
        import torch

        print(f"device: {torch.cuda.get_device_name()}", file=sys.stderr)




def frontier_dir(create: bool = False) -> Path:
    """The .frontier/ of the git repo around the current directory (a clear error outside
    a repo)."""
    from kdatui.engine.gitrepo import FRONTIER_DIR, GitRepo, ensure_frontier_dir

    repo = GitRepo.open(Path.cwd())
    try:
        root = repo.root
    finally:
        repo.close()
    return ensure_frontier_dir(root) if create else root / FRONTIER_DIR
