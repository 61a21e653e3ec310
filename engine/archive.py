"""Archive and cleanup: move what a long run leaves behind out of the repo, losing nothing.

One pass over a run (`archive_run`, on demand or from the run loop's timer):
  - every finished attempt's worktree: uncommitted work is committed onto its scratch
    branch (a snapshot), the worktree is removed, and the branch moves to
    refs/kdatui/archive/<run>/<attempt>;
  - attempt logs are packed into <archive>/<run>/<stamp>/logs.tar.gz, then removed;
  - events older than `keep_events_s` are written to <stamp>/events.jsonl, then removed
    from the store and from the run's events.jsonl;
  - <stamp>/attempts.json keeps the archived attempts with their evaluations;
  - <archive>/<run>/INDEX.toml gains one [[archive]] entry saying what went where.
The frontier and its branches are not touched. `restore_attempt` brings an attempt's
worktree (and its log) back.

<archive> is $KDATUI_ARCHIVE_DIR/<repo>, else ~/.local/share/kdatui/archive/<repo>
(XDG_DATA_HOME honoured): outside the agent's working tree.

Each step is idempotent and ordered so that an interrupted pass loses nothing (copy
before delete); the next pass completes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import tarfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tomli_w

from .frontier import Frontier
from .gitrepo import archive_ref, scratch_branch
from .paths import archive_root  # noqa: F401  (archive_root is part of this module's API)
from .store import IN_FLIGHT, Attempt, FrontierError

KEEP_EVENTS_S = 3600.0  # the live log keeps the last hour; older history moves out


def run_archive_dir(fr: Frontier, run_id: str) -> Path:
    return archive_root() / fr.repo.name / run_id


@dataclass
class ArchiveReport:
    run: str
    folder: Path | None = None  # the dated folder of this pass (None: nothing to archive)
    worktrees: list[dict] = field(default_factory=list)  # {"attempt", "ref", "snapshot", "status"}
    logs: list[str] = field(default_factory=list)
    events: int = 0
    index: Path | None = None

    @property
    def empty(self) -> bool:
        return not (self.worktrees or self.logs or self.events)

    def lines(self) -> list[str]:
        if self.empty:
            return [f"run {self.run}: nothing to archive"]
        out = [f"run {self.run}: archived to {self.folder}"]
        for w in self.worktrees:
            snap = f", uncommitted work saved as {w['snapshot'][:12]}" if w.get("snapshot") else ""
            out.append(f"  attempt {w['attempt']} ({w['status']}): worktree removed, branch -> {w['ref']}{snap}")
        if self.logs:
            out.append(f"  {len(self.logs)} attempt log(s) -> {self.folder / 'logs.tar.gz'}")
        if self.events:
            out.append(f"  {self.events} event(s) -> {self.folder / 'events.jsonl'}")
        out.append(f"  index: {self.index}")
        return out


def cleanup(fr: Frontier, run_id: str | None = None, *, keep_events_s: float = KEEP_EVENTS_S,
            now: float | None = None) -> list[ArchiveReport]:
    """Archive one run, or every run of the store."""
    runs = [run_id] if run_id else [r.id for r in fr.store.runs()]
    if run_id and fr.store.run(run_id) is None:
        raise FrontierError(f"no run {run_id!r} in {fr.store.path}")
    return [archive_run(fr, r, keep_events_s=keep_events_s, now=now) for r in runs]


def next_cleanup(fr: Frontier, run_id: str, every_hours: float) -> float:
    """When the run loop should next call `archive_run` (epoch seconds)."""
    run = fr.store.run(run_id)
    if run is None:
        raise FrontierError(f"no run {run_id!r}")
    return (run.last_cleanup or run.created) + every_hours * 3600.0


def cleanup_due(fr: Frontier, run_id: str, every_hours: float, now: float | None = None) -> bool:
    return (now or time.time()) >= next_cleanup(fr, run_id, every_hours)


def archive_run(fr: Frontier, run_id: str, *, keep_events_s: float = KEEP_EVENTS_S,
                now: float | None = None) -> ArchiveReport:
    now = time.time() if now is None else now
    report = ArchiveReport(run=run_id)
    with fr.locked():
        base = run_archive_dir(fr, run_id)
        folder = _dated_folder(base, now)
        archived: list[Attempt] = []
        for att in fr.store.attempts(run=run_id):
            if att.status in IN_FLIGHT or not (att.worktree or _is_scratch(att.branch)):
                continue
            report.worktrees.append(archive_attempt(fr, att))
            archived.append(fr.attempt(att.id))
        finished = {a.id for a in fr.store.attempts(run=run_id) if a.status not in IN_FLIGHT}
        logs = [p for p in sorted((fr.store.runs_dir / run_id / "logs").glob("*.log"))
                if p.stem.isdigit() and int(p.stem) in finished]
        old_events = fr.store.events(run_id, before=now - keep_events_s)
        if not (report.worktrees or logs or old_events):
            fr.store.update_run(run_id, last_cleanup=now)
            return report
        folder.mkdir(parents=True, exist_ok=True)
        report.folder = folder
        entry: dict = {"at": _iso(now), "folder": folder.name, "repo": str(fr.repo.root)}
        if archived:
            _write(folder / "attempts.json", json.dumps(
                [{**asdict(a), "evaluations": [e.data for e in fr.store.evaluations(a.id)]} for a in archived],
                indent=2, default=str))
            entry["attempts_file"] = f"{folder.name}/attempts.json"
        if report.worktrees:
            entry["worktrees"] = [{k: v for k, v in w.items() if v is not None} for w in report.worktrees]
        if logs:
            with tarfile.open(folder / "logs.tar.gz", "w:gz") as tar:
                for p in logs:
                    tar.add(p, arcname=p.name)
            _fsync(folder / "logs.tar.gz")
            for p in logs:
                p.unlink()
            report.logs = [p.name for p in logs]
            entry["logs"] = {"file": f"{folder.name}/logs.tar.gz", "members": report.logs}
        if old_events:
            _write(folder / "events.jsonl", "".join(json.dumps(e, default=str) + "\n" for e in old_events))
            fr.store.delete_events([e["id"] for e in old_events])
            _drop_jsonl_before(fr.store.events_path(run_id), now - keep_events_s)
            report.events = len(old_events)
            entry["events"] = {"file": f"{folder.name}/events.jsonl", "count": len(old_events),
                               "before": _iso(now - keep_events_s)}
        report.index = _append_index(base, entry)
        with fr.store.transaction():
            fr.store.update_run(run_id, last_cleanup=now)
            fr.store.event(run_id, "archived", folder=str(folder), worktrees=len(report.worktrees),
                           logs=len(report.logs), events=report.events, index=str(report.index))
    return report


def archive_attempt(fr: Frontier, att: Attempt) -> dict:
    """Snapshot, remove the worktree, move the scratch branch to the archive refs. Safe to
    repeat after an interruption at any step."""
    repo = fr.repo
    wt = fr.worktree_path(att)
    snapshot = None
    if wt is not None and wt.exists():
        snapshot = repo.snapshot_worktree(
            wt, f"kdatui: snapshot of attempt {att.id} ({att.name}, {att.status}) before archiving")
        repo.remove_worktree(wt)
    else:
        repo.git.worktree("prune")
    target = archive_ref(att.run, att.id)
    scratch = att.branch if _is_scratch(att.branch) else scratch_branch(att.run, att.id)
    tip = repo.ref_sha(scratch)
    if tip is not None:
        existing = repo.ref_sha(target)
        move = ("update", target, tip, existing) if existing else ("create", target, tip)
        repo.update_refs([move, ("delete", scratch, tip)], message=f"kdatui: archive attempt {att.id}")
    elif repo.ref_sha(target) is None:
        raise FrontierError(f"attempt {att.id}: neither its branch {scratch} nor {target} exists")
    status = att.status if att.status in ("admitted", "pruned", "archived") else "archived"
    with fr.store.transaction():
        fr.store.update_attempt(att.id, worktree=None, branch=target, status=status)
        fr.store.event(att.run, "attempt-archived", attempt=att.id, ref=target, snapshot=snapshot)
    return {"attempt": att.id, "ref": target, "snapshot": snapshot, "status": att.status}


def restore_attempt(fr: Frontier, attempt_id: int) -> Attempt:
    """Bring an archived attempt back: its scratch branch, its worktree, its log."""
    with fr.locked():
        att = fr.attempt(attempt_id)
        if not (att.branch or "").startswith("refs/kdatui/archive/"):
            raise FrontierError(f"attempt {att.id} is not archived (branch {att.branch})")
        sha = fr.repo.ref_sha(att.branch)
        if sha is None:
            raise FrontierError(f"attempt {att.id}: its archive ref {att.branch} is missing")
        branch = scratch_branch(att.run, att.id)
        if fr.repo.ref_sha(branch):
            raise FrontierError(f"branch {branch} exists already")
        fr.repo.update_refs([("create", branch, sha), ("delete", att.branch, sha)],
                            message=f"kdatui: restore attempt {att.id}")
        wt = fr.worktrees_dir / str(att.id)
        fr.repo.add_worktree(wt, branch)
        log = _restore_log(fr, att)
        status = (att.verdict or "error") if att.status == "archived" else att.status
        with fr.store.transaction():
            fr.store.update_attempt(att.id, worktree=wt.relative_to(fr.repo.root).as_posix(), branch=branch,
                                    status=status)
            fr.store.event(att.run, "attempt-restored", attempt=att.id, branch=branch,
                           log=str(log) if log else None)
        return fr.attempt(att.id)


def read_index(fr: Frontier, run_id: str) -> list[dict]:
    path = run_archive_dir(fr, run_id) / "INDEX.toml"
    if not path.exists():
        return []
    return tomllib.loads(path.read_text()).get("archive", [])


def _restore_log(fr: Frontier, att: Attempt) -> Path | None:
    name = f"{att.id}.log"
    for entry in reversed(read_index(fr, att.run)):
        logs = entry.get("logs", {})
        if name in logs.get("members", []):
            dest = fr.log_path(att)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(run_archive_dir(fr, att.run) / logs["file"], "r:gz") as tar:
                member = tar.getmember(name)
                f = tar.extractfile(member)
                dest.write_bytes(f.read())
            return dest
    return None


def _is_scratch(branch: str | None) -> bool:
    return bool(branch) and branch.startswith("kdatui/scratch/")


def _dated_folder(base: Path, now: float) -> Path:
    stem = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    folder, n = base / stem, 1
    while folder.exists():
        n += 1
        folder = base / f"{stem}-{n}"
    return folder


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _append_index(base: Path, entry: dict) -> Path:
    path = base / "INDEX.toml"
    doc = tomllib.loads(path.read_text()) if path.exists() else {
        "note": "what kdatui archived for this run: worktrees (git refs), attempt logs and event history"}
    doc.setdefault("archive", []).append(entry)
    _write(path, tomli_w.dumps(doc))
    return path


def _drop_jsonl_before(path: Path, cutoff: float) -> None:
    """Rewrite events.jsonl in place without the lines before `cutoff`, under the lock the
    appenders take, so a concurrent append is never lost to a file replace."""
    if not path.exists():
        return
    with open(path, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        keep = []
        for line in f.readlines():
            try:
                if json.loads(line).get("ts", cutoff) < cutoff:
                    continue
            except json.JSONDecodeError:
                pass  # not ours to judge: keep it
            keep.append(line)
        f.seek(0)
        f.writelines(keep)
        f.truncate()
        f.flush()
