"""The repo kdatui runs in, as the candidate store (GitPython).

kdatui never commits on the user's checked-out branch and never touches the user's
working tree: attempts live in worktrees under `.frontier/worktrees/`, and frontier
commits are built with a private index file (read-tree, update-index, write-tree,
commit-tree) and published with one atomic `update-ref --stdin`. So a dirty main tree
matters only where kdatui branches from the user's last commit (and says so), and a
ref move (prune, restore, archive) is all-or-nothing.

Layout:
  .frontier/                                 run state, ignored except README and .gitignore
  .frontier/worktrees/<attempt>/             one worktree per attempt
  refs/heads/kdatui/scratch/<run>/<attempt>  the attempt's scratch branch
  refs/heads/frontier/<task>/<name>          a frontier member
  refs/kdatui/pruned/<task>/<name>           a pruned member (restorable)
  refs/kdatui/archive/<run>/<attempt>        an archived scratch branch
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from .store import FrontierError

FRONTIER_DIR = ".frontier"
FRONTIER_GITIGNORE = """\
# kdatui run state: the store, event logs, worktrees, the control socket.
# Only this file and README.md are tracked.
*
!.gitignore
!README.md
"""
FRONTIER_README = """\
# .frontier/ — kdatui run state

kdatui keeps the state of a run in the repo it runs in, here. None of it is tracked
except this README and `.gitignore`:

| path | what |
| --- | --- |
| `kdatui.db` | the run store (SQLite, WAL): runs, attempts, evaluations, frontier, events |
| `runs/<run>/events.jsonl` | every event of a run, one JSON object a line |
| `index.toml` | a readable view of the frontier, regenerated from the store |
| `worktrees/<attempt>/` | one git worktree per attempt |
| `control.sock` | the engine's control socket (mode 0600) |
| `config.toml` | per-repo overrides |

The frontier itself lives in git: branches `frontier/<task>/<name>`; pruned members under
`refs/kdatui/pruned/`, archived scratch branches under `refs/kdatui/archive/`.
"""
ZERO_SHA = "0" * 40
# Frontier commits carry who made them, independent of the user's git config (which a
# fresh machine or CI may not have).
IDENTITY = {
    "GIT_AUTHOR_NAME": "kdatui",
    "GIT_AUTHOR_EMAIL": "kdatui@localhost",
    "GIT_COMMITTER_NAME": "kdatui",
    "GIT_COMMITTER_EMAIL": "kdatui@localhost",
}
TRAILER = re.compile(r"^(Kdatui-[A-Za-z-]+):\s*(.*)$", re.M)


class RepoError(FrontierError):
    """Not a usable git repository, or a git operation failed; the message says what to do."""


class DirtyTreeError(RepoError):
    pass


def candidate_dir(task: str) -> str:
    """Where a task's candidate sits on every branch of that task (so `git diff` between two
    members compares two kernels line by line)."""
    return f"candidates/{task}"


def scratch_branch(run: str, attempt: int) -> str:
    return f"kdatui/scratch/{run}/{attempt}"


def frontier_branch(task: str, name: str) -> str:
    return f"frontier/{task}/{name}"


def pruned_ref(task: str, name: str) -> str:
    return f"refs/kdatui/pruned/{task}/{name}"


def archive_ref(run: str, attempt: int) -> str:
    return f"refs/kdatui/archive/{run}/{attempt}"


def heads(branch: str) -> str:
    return branch if branch.startswith("refs/") else f"refs/heads/{branch}"


def ensure_frontier_dir(root: Path) -> Path:
    """Create `.frontier/` with its .gitignore and README on first use. In a repo that does
    not track them (a user's own repo), `.frontier/` also goes into .git/info/exclude — a
    local ignore, never committed — so kdatui leaves no untracked clutter at all."""
    d = Path(root) / FRONTIER_DIR
    created = not d.exists()
    d.mkdir(exist_ok=True)
    for name, text in ((".gitignore", FRONTIER_GITIGNORE), ("README.md", FRONTIER_README)):
        p = d / name
        if not p.exists():
            p.write_text(text)
    if created:
        _exclude_locally(Path(root))
    return d


def _exclude_locally(root: Path) -> None:
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", f"{FRONTIER_DIR}/README.md"], cwd=root,
                             capture_output=True).returncode == 0
    if tracked:
        return
    git_dir = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=root, capture_output=True,
                             text=True).stdout.strip()
    if not git_dir:
        return
    exclude = (root / git_dir / "info" / "exclude") if not Path(git_dir).is_absolute() else Path(git_dir) / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if f"/{FRONTIER_DIR}/" not in lines:
        with open(exclude, "a") as f:
            f.write(f"/{FRONTIER_DIR}/\n")


@dataclass
class StatusEntry:
    code: str  # two-letter porcelain code
    path: str


class GitRepo:
    """The main worktree of a repo and the git operations kdatui needs."""

    def __init__(self, repo: git.Repo):
        self.repo = repo
        self.root = Path(repo.working_tree_dir)
        self.git = repo.git

    @classmethod
    def open(cls, path: str | Path = ".") -> "GitRepo":
        path = Path(path)
        try:
            repo = git.Repo(path, search_parent_directories=True)
        except (InvalidGitRepositoryError, NoSuchPathError):
            raise RepoError(f"{path.resolve()}: not a git repository; kdatui keeps candidates as git "
                            f"branches, so run it inside a git repo (or `git init` and make a first "
                            f"commit)") from None
        if repo.bare:
            raise RepoError(f"{repo.git_dir}: a bare repository; kdatui needs a working tree")
        # From inside an attempt's worktree, the repo is still the main one.
        common = Path(repo.git.rev_parse("--git-common-dir"))
        if not common.is_absolute():
            common = (Path(repo.working_tree_dir) / common).resolve()
        if common.name == ".git" and common.parent.resolve() != Path(repo.working_tree_dir).resolve():
            repo.close()
            repo = git.Repo(common.parent)
        if not repo.head.is_valid():
            raise RepoError(f"{repo.working_tree_dir}: the repository has no commits yet; kdatui "
                            f"branches candidates from a commit, so make a first commit "
                            f"(e.g. `git commit --allow-empty -m init`)")
        return cls(repo)

    @property
    def name(self) -> str:
        return self.root.name

    # ---------------------------------------------------------------- refs

    def head_commit(self) -> str:
        return self.repo.head.commit.hexsha

    def sha(self, rev: str) -> str | None:
        """The commit `rev` names, or None."""
        try:
            return self.git.rev_parse("--verify", "-q", f"{rev}^{{commit}}")
        except GitCommandError:
            return None

    def ref_sha(self, ref: str) -> str | None:
        """The commit at exactly this ref (no DWIM), or None."""
        try:
            return self.git.rev_parse("--verify", "-q", f"{heads(ref)}^{{commit}}")
        except GitCommandError:
            return None

    def refs(self, prefix: str) -> dict[str, str]:
        out = self.git.for_each_ref("--format=%(refname) %(objectname)", prefix)
        return dict(line.split(" ", 1) for line in out.splitlines() if line)

    def check_ref_name(self, ref: str) -> None:
        try:
            self.git.check_ref_format(heads(ref))
        except GitCommandError:
            raise RepoError(f"{ref!r} is not a valid git ref name (no '..', no leading '.', no "
                            f"'.lock' ending, no spaces or ~^:?*[\\)") from None

    def update_refs(self, ops: list[tuple], message: str = "kdatui") -> None:
        """Apply ref updates atomically: all or none. Each op is ("update", ref, new, old),
        ("create", ref, new) or ("delete", ref, old); `old` guards against a concurrent move."""
        lines = []
        for op in ops:
            kind, ref, *vals = op
            lines.append(" ".join([kind, heads(ref), *[v for v in vals if v]]))
        with tempfile.TemporaryFile() as f:
            f.write(("\n".join(lines) + "\n").encode())
            f.seek(0)
            try:
                self.git.update_ref("-m", message, "--stdin", istream=f)
            except GitCommandError as e:
                raise RepoError(f"git update-ref failed ({'; '.join(lines)}): {_stderr(e)}") from None

    def is_ancestor(self, a: str, b: str) -> bool:
        try:
            self.git.merge_base("--is-ancestor", a, b)
            return True
        except GitCommandError:
            return False

    def trailers(self, sha: str) -> dict[str, str]:
        return dict(TRAILER.findall(self.git.log("-1", "--format=%B", sha)))

    def show_file(self, rev: str, path: str) -> str | None:
        try:
            return self.git.show(f"{rev}:{path}")
        except GitCommandError:
            return None

    def diff(self, a: str, b: str, *paths: str) -> str:
        return self.git.diff(a, b, "--", *paths)

    # ---------------------------------------------------------------- working trees

    def status(self, cwd: Path | None = None) -> list[StatusEntry]:
        """Changes to tracked files (staged or not) of the main tree or a worktree."""
        args = ("--porcelain=v1", "--untracked-files=no", "-z")
        if cwd:
            with git.Repo(cwd) as wt:
                out = wt.git.status(*args)
        else:
            out = self.git.status(*args)
        entries, parts = [], out.split("\0")
        i = 0
        while i < len(parts):
            item = parts[i]
            i += 1
            if not item:
                continue
            code, path = item[:2], item[3:]
            if code[0] in "RC":
                i += 1  # the rename's source path follows
            entries.append(StatusEntry(code, path))
        return entries

    def is_tracked(self, path: str | Path) -> bool:
        """Whether git tracks the file (it is in the index)."""
        try:
            rel = Path(path).resolve().relative_to(self.root.resolve())
        except ValueError:
            return False
        return bool(self.git.ls_files("--", str(rel)).strip())

    def require_clean(self, why: str, cwd: Path | None = None, ignore_prefix: str | None = None) -> None:
        dirty = [e.path for e in self.status(cwd)
                 if not e.path.startswith(f"{FRONTIER_DIR}/")
                 and not (ignore_prefix and e.path.startswith(ignore_prefix))]
        if dirty:
            shown = ", ".join(dirty[:8]) + (f" and {len(dirty) - 8} more" if len(dirty) > 8 else "")
            where = cwd or self.root
            raise DirtyTreeError(f"{where}: uncommitted changes to tracked files ({shown}); {why}")

    def add_worktree(self, path: Path, branch: str, start: str | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if start is None:  # the branch exists
                self.git.worktree("add", str(path), branch)
            else:
                self.git.worktree("add", "-b", branch, str(path), start)
        except GitCommandError as e:
            raise RepoError(f"cannot create the worktree {path} on {branch}: {_stderr(e)}") from None

    def add_detached_worktree(self, path: Path, commit: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.git.worktree("add", "--detach", str(path), commit)
        except GitCommandError as e:
            raise RepoError(f"cannot create the worktree {path} at {commit[:12]}: {_stderr(e)}") from None

    def remove_worktree(self, path: Path) -> None:
        if path.exists():
            try:
                self.git.worktree("remove", "--force", "--force", str(path))
            except GitCommandError:
                shutil.rmtree(path, ignore_errors=True)
        self.git.worktree("prune")

    def snapshot_worktree(self, path: Path, message: str) -> str | None:
        """Commit everything in a worktree (tracked changes and new files that .gitignore
        does not exclude) onto its branch, so removing the worktree loses nothing. Returns
        the new commit, or None when there was nothing to commit."""
        if not path.exists():
            return None
        with git.Repo(path) as repo:
            wt = repo.git
            wt.add("-A", "--", ".", ":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc")
            if not wt.status("--porcelain", "--untracked-files=no"):
                return None
            try:
                wt.execute(["git", "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", message],
                           env=IDENTITY)
            except GitCommandError as e:
                raise RepoError(f"cannot snapshot the worktree {path}: {_stderr(e)}") from None
            return wt.rev_parse("HEAD")

    def worktree_head(self, path: Path) -> str:
        with git.Repo(path) as repo:
            return repo.git.rev_parse("HEAD")

    def close(self) -> None:
        self.repo.close()

    # ---------------------------------------------------------------- commits

    def commit_files(self, parents: list[str], files: dict[str, bytes], message: str,
                     replace_dir: str | None = None) -> str:
        """A commit whose tree is the first parent's, with `replace_dir` emptied and `files`
        (path -> content) written; built with a private index, so neither the user's index
        nor any working tree is touched. Returns the commit sha (no ref points to it yet)."""
        with tempfile.TemporaryDirectory(prefix="kdatui-index-") as d:
            env = {**IDENTITY, "GIT_INDEX_FILE": os.path.join(d, "index")}
            try:
                self.git.read_tree(parents[0], env=env)
                if replace_dir:
                    self.git.rm("--cached", "-r", "-q", "--ignore-unmatch", "--", replace_dir, env=env)
                for path, data in sorted(files.items()):
                    blob = self._write_blob(data)
                    self.git.update_index("--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
                tree = self.git.write_tree(env=env)
                args = [tree]
                for p in parents:
                    args += ["-p", p]
                with tempfile.TemporaryFile() as msg:
                    msg.write(message.encode())
                    msg.seek(0)
                    return self.git.commit_tree(*args, "--no-gpg-sign", "-F", "-", env=env, istream=msg)
            except GitCommandError as e:
                raise RepoError(f"cannot build the commit: {_stderr(e)}") from None

    def _write_blob(self, data: bytes) -> str:
        with tempfile.TemporaryFile() as f:
            f.write(data)
            f.seek(0)
            return self.git.hash_object("-w", "--stdin", istream=f)


def _stderr(e: GitCommandError) -> str:
    text = (e.stderr or "").strip().replace("stderr: ", "").strip("'\n ")
    return " ".join(text.split()) or str(e).splitlines()[0]


def read_folder(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file under `folder` (relative paths), without caches and the skipped names."""
    out = {}
    if not folder.is_dir():
        return out
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or "__pycache__" in p.parts or p.suffix == ".pyc" or p.name in skip:
            continue
        out[p.relative_to(folder).as_posix()] = p.read_bytes()
    return out
