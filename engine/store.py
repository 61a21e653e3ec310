"""The run store: SQLite in `.frontier/kdatui.db` (WAL) for runs, attempts, evaluations,
frontier membership and events; every event is also appended to
`.frontier/runs/<run>/events.jsonl`.

The store is the source of truth for run state; git holds the candidates. Writes happen in
short `BEGIN IMMEDIATE` transactions (retried while another process holds the write
lock), so a process killed at any point leaves the last committed state. The two places
where the store and git must agree (a frontier member and its commit) use a two-phase
protocol in `frontier.py`; the CHECK constraints here make the end states impossible to
get wrong: a member row without a commit sha cannot exist.

Opening migrates the schema (table `schema_version`); a store written by a newer kdatui is
refused with a message rather than misread.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from .timing import noise_of

DB_NAME = "kdatui.db"
BUSY_TIMEOUT_S = 15.0
BEGIN_RETRIES = 6  # on top of the busy timeout: a second chance for long write bursts
OPERATOR_RUN = "operator"  # events.jsonl folder of events that belong to no run (CLI actions)

ATTEMPT_STATUSES = ("proposed", "evaluating", "passed", "failed", "error", "admitting", "admitted",
                    "archived", "pruned")
IN_FLIGHT = ("proposed", "evaluating", "admitting")
MEMBER_STATES = ("admitting", "member", "pruning", "pruned", "restoring", "replaced")
LIVE_STATES = ("member", "pruning", "restoring")  # the branch frontier/<task>/<name> is theirs
RUN_STATES = ("running", "paused", "stopped")


class FrontierError(Exception):
    """A store, git or frontier problem a user can act on; the message is one line."""


class StoreError(FrontierError):
    pass


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


# Each entry upgrades the schema by one version; never edit a released entry, append one.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            task TEXT NOT NULL,
            task_path TEXT,
            agent TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL DEFAULT 'running' CHECK (state IN """ + _in(RUN_STATES) + """),
            base_commit TEXT,
            pid INTEGER,
            host TEXT,
            last_cleanup REAL,
            created REAL NOT NULL,
            updated REAL NOT NULL)""",
        """CREATE TABLE tasks (
            name TEXT PRIMARY KEY,
            path TEXT,
            primary_shape TEXT NOT NULL,
            shapes TEXT NOT NULL,
            max_per_family INTEGER NOT NULL DEFAULT 3,
            updated REAL NOT NULL)""",
        """CREATE TABLE attempts (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run TEXT REFERENCES runs(id),
            task TEXT NOT NULL,
            parent TEXT NOT NULL DEFAULT '',
            parent_sha TEXT,
            family TEXT NOT NULL,
            name TEXT NOT NULL,
            worktree TEXT,
            branch TEXT,
            status TEXT NOT NULL CHECK (status IN """ + _in(ATTEMPT_STATUSES) + """),
            verdict TEXT,
            idea TEXT NOT NULL DEFAULT '',
            reason TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL,
            updated REAL NOT NULL)""",
        "CREATE INDEX attempts_run ON attempts(run, status)",
        """CREATE TABLE evaluations (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            attempt INTEGER NOT NULL REFERENCES attempts(id),
            task TEXT NOT NULL,
            shape TEXT NOT NULL,
            verdict TEXT NOT NULL,
            candidate_ms REAL,
            baseline_ms REAL,
            speedup REAL,
            noise REAL,
            json TEXT NOT NULL,
            created REAL NOT NULL)""",
        "CREATE INDEX evaluations_attempt ON evaluations(attempt, task, shape)",
        """CREATE TABLE frontier (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            task TEXT NOT NULL,
            name TEXT NOT NULL,
            family TEXT NOT NULL,
            branch TEXT NOT NULL,
            sha TEXT,
            ref TEXT,
            attempt INTEGER NOT NULL REFERENCES attempts(id),
            state TEXT NOT NULL CHECK (state IN """ + _in(MEMBER_STATES) + """),
            why TEXT NOT NULL DEFAULT '',
            best INTEGER NOT NULL DEFAULT 0,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            CHECK (state = 'admitting' OR sha IS NOT NULL))""",
        # one live member per name and task; one admission in flight per name and task
        "CREATE UNIQUE INDEX frontier_live ON frontier(task, name) WHERE state IN " + _in(LIVE_STATES),
        "CREATE UNIQUE INDEX frontier_admitting ON frontier(task, name) WHERE state = 'admitting'",
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run TEXT,
            ts REAL NOT NULL,
            kind TEXT NOT NULL,
            json TEXT NOT NULL)""",
        "CREATE INDEX events_run ON events(run, ts)",
    ],
    [  # 2: a run keeps its budget and the time it has run across restarts
        "ALTER TABLE runs ADD COLUMN spent_s REAL NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN budget_hours REAL",
        "ALTER TABLE runs ADD COLUMN budget_attempts INTEGER",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)


# --------------------------------------------------------------------------- records

@dataclass
class Run:
    id: str
    task: str
    task_path: str | None
    agent: str
    state: str
    base_commit: str | None
    pid: int | None
    host: str | None
    last_cleanup: float | None
    created: float
    updated: float
    spent_s: float = 0.0  # seconds the run has been running (paused and finished time excluded)
    budget_hours: float | None = None  # the run's budget (0: no limit), None before it was recorded
    budget_attempts: int | None = None


@dataclass
class TaskInfo:
    name: str
    path: str | None
    primary_shape: str
    shapes: dict[str, dict]  # name -> dims, in the task's order
    max_per_family: int
    updated: float


@dataclass
class Attempt:
    id: int
    run: str | None
    task: str
    parent: str  # what it branched from: "base", or a frontier branch name
    parent_sha: str | None
    family: str
    name: str
    worktree: str | None
    branch: str | None  # scratch branch, or its archive ref once archived
    status: str
    verdict: str | None  # passed / failed / error once evaluated; survives archiving
    idea: str
    reason: str
    created: float
    updated: float


@dataclass
class ShapeEvaluation:
    """One stored evaluation row: the figures the policy and the views need, and the full
    `Evaluation.to_dict()` in `data`."""

    attempt: int
    task: str
    shape: str
    verdict: str
    candidate_ms: float | None
    baseline_ms: float | None
    speedup: float | None
    noise: float | None
    data: dict = field(default_factory=dict)
    created: float = 0.0

    def evaluation(self):
        from .records import Evaluation  # imports torch: only when a full record is asked for

        return Evaluation.from_dict(self.data)


@dataclass
class Member:
    id: int
    task: str
    name: str
    family: str
    branch: str  # refs/heads/frontier/<task>/<name>, short form
    sha: str | None
    ref: str | None  # where the commit is kept now: the branch, or a pruned ref
    attempt: int
    state: str
    why: str
    best: bool
    created: float
    updated: float


def _row(cls, row: sqlite3.Row):
    d = dict(row)
    if cls is Member:
        d["best"] = bool(d["best"])
    if cls is TaskInfo:
        d["shapes"] = json.loads(d["shapes"])
    return cls(**d)


# --------------------------------------------------------------------------- the store

class Store:
    """Owns the SQLite connection and the events.jsonl files of one `.frontier/` folder.
    Thread-safe (one connection behind a lock); several processes may open the same store."""

    def __init__(self, frontier_dir: str | Path):
        self.dir = Path(frontier_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / DB_NAME
        self.runs_dir = self.dir / "runs"
        self._lock = threading.RLock()
        self._depth = 0
        self._pending: list[dict] = []
        self._listeners: list[Callable[[dict], None]] = []
        try:
            self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                        check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise StoreError(f"{self.path}: cannot switch SQLite to WAL mode (got {mode})")
            # FULL: a commit survives power loss too; the store records decisions git follows.
            self.conn.execute("PRAGMA synchronous = FULL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: cannot open the run store: {e}") from None

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _migrate(self) -> None:
        with self.transaction():
            self.conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = self.conn.execute("SELECT version FROM schema_version").fetchone()
            version = row[0] if row else 0
            if row is None:
                self.conn.execute("INSERT INTO schema_version (version) VALUES (0)")
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path}: written by a newer kdatui (schema {version}, this "
                                 f"kdatui knows {SCHEMA_VERSION}); upgrade kdatui")
            for v in range(version, SCHEMA_VERSION):
                for stmt in MIGRATIONS[v]:
                    self.conn.execute(stmt)
                self.conn.execute("UPDATE schema_version SET version = ?", (v + 1,))

    def schema_version(self) -> int:
        return self.conn.execute("SELECT version FROM schema_version").fetchone()[0]

    # ---------------------------------------------------------------- transactions

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (nested calls join the outer one). Events recorded inside
        reach events.jsonl and the listeners only after the commit."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self.conn
                finally:
                    self._depth -= 1
                return
            self._begin()
            self._depth = 1
            try:
                yield self.conn
            except BaseException:
                self._pending.clear()
                self.conn.execute("ROLLBACK")
                raise
            else:
                self.conn.execute("COMMIT")
                pending, self._pending = self._pending, []
            finally:
                self._depth = 0
        for ev in pending:
            self._append_jsonl(ev)
            for fn in list(self._listeners):
                try:
                    fn(ev)
                except Exception:  # a broken listener (a closed TUI) must not break the run
                    pass

    def _begin(self) -> None:
        delay = 0.05
        for attempt in range(BEGIN_RETRIES):
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                if attempt == BEGIN_RETRIES - 1:
                    raise StoreError(f"{self.path}: the store stayed locked by another process for "
                                     f"over {BUSY_TIMEOUT_S * BEGIN_RETRIES:.0f} s") from None
                time.sleep(delay)
                delay *= 2

    # ---------------------------------------------------------------- events

    def subscribe(self, fn: Callable[[dict], None]) -> Callable[[], None]:
        """Call `fn(event)` after every committed event; returns the unsubscribe function."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn)

    def event(self, run: str | None, kind: str, **data: Any) -> dict:
        ts = time.time()
        with self.transaction():
            cur = self.conn.execute("INSERT INTO events (run, ts, kind, json) VALUES (?, ?, ?, ?)",
                                    (run, ts, kind, json.dumps(data, default=str)))
            ev = {"id": cur.lastrowid, "run": run, "ts": ts,
                  "at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts)), "kind": kind, **data}
            self._pending.append(ev)
        return ev

    def add_events(self, events: list[dict]) -> None:
        """Record a batch of events the engine has already broadcast (agent output, progress):
        one transaction and one append per events.jsonl for the batch; listeners are not
        called again. Each event carries run, ts, kind and its data."""
        if not events:
            return
        meta = ("run", "ts", "kind", "seq", "id", "at")
        rows = [(e.get("run"), e["ts"], e["kind"], json.dumps({k: v for k, v in e.items() if k not in meta},
                                                               default=str)) for e in events]
        with self.transaction():
            self.conn.executemany("INSERT INTO events (run, ts, kind, json) VALUES (?, ?, ?, ?)", rows)
        by_run: dict = {}
        for e in events:
            by_run.setdefault(e.get("run"), []).append(json.dumps(e, default=str) + "\n")
        for run, lines in by_run.items():
            self._append_lines(run, lines)

    def events_path(self, run: str | None) -> Path:
        return self.runs_dir / (run or OPERATOR_RUN) / "events.jsonl"

    def _append_jsonl(self, ev: dict) -> None:
        self._append_lines(ev["run"], [json.dumps(ev, default=str) + "\n"])

    def _append_lines(self, run: str | None, lines: list[str]) -> None:
        path = self.events_path(run)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            # another process may be rewriting the file (archive): take its lock
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write("".join(lines))
            f.flush()

    def events(self, run: str | None = ..., *, kinds: tuple[str, ...] = (), before: float | None = None,
               limit: int | None = None) -> list[dict]:
        sql, args = "SELECT * FROM events WHERE 1", []
        if run is not ...:
            sql += " AND run IS ?"
            args.append(run)
        if kinds:
            sql += f" AND kind IN ({', '.join('?' * len(kinds))})"
            args.extend(kinds)
        if before is not None:
            sql += " AND ts < ?"
            args.append(before)
        sql += " ORDER BY id"
        if limit:
            sql = f"SELECT * FROM ({sql} DESC LIMIT {int(limit)}) ORDER BY id"
        out = []
        for r in self.conn.execute(sql, args):
            out.append({"id": r["id"], "run": r["run"], "ts": r["ts"], "kind": r["kind"],
                        **json.loads(r["json"])})
        return out

    def delete_events(self, ids: list[int]) -> None:
        with self.transaction():
            self.conn.executemany("DELETE FROM events WHERE id = ?", [(i,) for i in ids])

    # ---------------------------------------------------------------- tasks

    def register_task(self, task) -> None:
        shapes = {n: s.dims() for n, s in task.shapes.items()}
        with self.transaction():
            self.conn.execute(
                "INSERT INTO tasks (name, path, primary_shape, shapes, max_per_family, updated) "
                "VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET path = COALESCE(excluded.path, path), "
                "primary_shape = excluded.primary_shape, shapes = excluded.shapes, "
                "max_per_family = excluded.max_per_family, updated = excluded.updated",
                (task.name, str(Path(task.path).resolve()) if task.path else None, task.primary_shape,
                 json.dumps(shapes), task.search.max_members_per_family, time.time()))

    def task(self, name: str) -> TaskInfo | None:
        r = self.conn.execute("SELECT * FROM tasks WHERE name = ?", (name,)).fetchone()
        return _row(TaskInfo, r) if r else None

    # ---------------------------------------------------------------- runs

    def add_run(self, run_id: str, task: str, *, task_path: str | None, agent: str,
                base_commit: str | None, pid: int | None = None, host: str | None = None) -> Run:
        now = time.time()
        with self.transaction():
            self.conn.execute(
                "INSERT INTO runs (id, task, task_path, agent, state, base_commit, pid, host, created, updated) "
                "VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                (run_id, task, task_path, agent, base_commit, pid, host, now, now))
        return self.run(run_id)

    def run(self, run_id: str) -> Run | None:
        r = self.conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _row(Run, r) if r else None

    def runs(self) -> list[Run]:
        return [_row(Run, r) for r in self.conn.execute("SELECT * FROM runs ORDER BY created")]

    def update_run(self, run_id: str, **fields: Any) -> None:
        self._update("runs", "id", run_id, fields)

    # ---------------------------------------------------------------- attempts

    def add_attempt(self, *, run: str | None, task: str, family: str, name: str, parent: str,
                    parent_sha: str | None, idea: str = "", reason: str = "") -> Attempt:
        now = time.time()
        with self.transaction():
            cur = self.conn.execute(
                "INSERT INTO attempts (run, task, parent, parent_sha, family, name, status, idea, reason, "
                "created, updated) VALUES (?, ?, ?, ?, ?, ?, 'proposed', ?, ?, ?, ?)",
                (run, task, parent, parent_sha, family, name, idea, reason, now, now))
        return self.attempt(cur.lastrowid)

    def attempt(self, attempt_id: int) -> Attempt | None:
        r = self.conn.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
        return _row(Attempt, r) if r else None

    def attempts(self, *, run: str | None = ..., status: tuple[str, ...] = (), task: str | None = None) -> list[Attempt]:
        sql, args = "SELECT * FROM attempts WHERE 1", []
        if run is not ...:
            sql += " AND run IS ?"
            args.append(run)
        if status:
            sql += f" AND status IN ({', '.join('?' * len(status))})"
            args.extend(status)
        if task is not None:
            sql += " AND task = ?"
            args.append(task)
        return [_row(Attempt, r) for r in self.conn.execute(sql + " ORDER BY id", args)]

    def update_attempt(self, attempt_id: int, **fields: Any) -> None:
        if "status" in fields and fields["status"] not in ATTEMPT_STATUSES:
            raise StoreError(f"attempt status {fields['status']!r}: expected one of {', '.join(ATTEMPT_STATUSES)}")
        self._update("attempts", "id", attempt_id, fields)

    # ---------------------------------------------------------------- evaluations

    def add_evaluations(self, attempt_id: int, task: str, evaluations: list) -> None:
        """Store `Evaluation` records (or their dicts) of one attempt, all or none."""
        now = time.time()
        rows = []
        for ev in evaluations:
            d = ev if isinstance(ev, dict) else ev.to_dict()
            t = d.get("timing") or None
            cand = (t or {}).get("candidate") or {}
            base = (t or {}).get("baseline") or {}
            noise = noise_of(t)
            rows.append((attempt_id, task, d["shape"], d["verdict"], cand.get("median_ms"),
                         base.get("median_ms"), (t or {}).get("speedup"), noise,
                         json.dumps(d, default=str), now))
        with self.transaction():
            self.conn.executemany(
                "INSERT INTO evaluations (attempt, task, shape, verdict, candidate_ms, baseline_ms, speedup, "
                "noise, json, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def evaluations(self, attempt_id: int, task: str | None = None, *, history: bool = False) -> list[ShapeEvaluation]:
        """The latest evaluation per shape (every one with `history`), in the order made."""
        sql, args = "SELECT * FROM evaluations WHERE attempt = ?", [attempt_id]
        if task is not None:
            sql += " AND task = ?"
            args.append(task)
        rows = self.conn.execute(sql + " ORDER BY id", args).fetchall()
        out: dict[Any, ShapeEvaluation] = {}
        for i, r in enumerate(rows):
            key = i if history else (r["task"], r["shape"])
            out.pop(key, None)  # re-insert so the order is that of the latest
            out[key] = ShapeEvaluation(attempt=r["attempt"], task=r["task"], shape=r["shape"],
                                       verdict=r["verdict"], candidate_ms=r["candidate_ms"],
                                       baseline_ms=r["baseline_ms"], speedup=r["speedup"], noise=r["noise"],
                                       data=json.loads(r["json"]), created=r["created"])
        return list(out.values())

    # ---------------------------------------------------------------- frontier membership

    def add_member(self, *, task: str, name: str, family: str, branch: str, attempt: int, why: str,
                   state: str = "admitting", sha: str | None = None, ref: str | None = None) -> Member:
        now = time.time()
        with self.transaction():
            try:
                cur = self.conn.execute(
                    "INSERT INTO frontier (task, name, family, branch, sha, ref, attempt, state, why, best, "
                    "created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
                    (task, name, family, branch, sha, ref, attempt, state, why, now, now))
            except sqlite3.IntegrityError as e:
                raise StoreError(f"frontier {task}/{name}: {e}") from None
        return self.member_by_id(cur.lastrowid)

    def member_by_id(self, member_id: int) -> Member | None:
        r = self.conn.execute("SELECT * FROM frontier WHERE id = ?", (member_id,)).fetchone()
        return _row(Member, r) if r else None

    def members(self, task: str | None = None, *, states: tuple[str, ...] = ("member",),
                name: str | None = None) -> list[Member]:
        sql = f"SELECT * FROM frontier WHERE state IN ({', '.join('?' * len(states))})"
        args: list[Any] = list(states)
        if task is not None:
            sql += " AND task = ?"
            args.append(task)
        if name is not None:
            sql += " AND name = ?"
            args.append(name)
        return [_row(Member, r) for r in self.conn.execute(sql + " ORDER BY id", args)]

    def tasks_with_members(self) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT DISTINCT task FROM frontier WHERE state = 'member' ORDER BY task")]

    def update_member(self, member_id: int, **fields: Any) -> None:
        if "best" in fields:
            fields["best"] = int(bool(fields["best"]))
        self._update("frontier", "id", member_id, fields)

    def delete_member(self, member_id: int) -> None:
        with self.transaction():
            self.conn.execute("DELETE FROM frontier WHERE id = ?", (member_id,))

    # ---------------------------------------------------------------- helpers

    def _update(self, table: str, key: str, value: Any, fields: dict[str, Any]) -> None:
        if not fields:
            return
        fields = {**fields, "updated": time.time()}
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction():
            try:
                cur = self.conn.execute(f"UPDATE {table} SET {cols} WHERE {key} = ?", (*fields.values(), value))
            except sqlite3.IntegrityError as e:
                raise StoreError(f"{table} {value}: {e}") from None
            if cur.rowcount != 1:
                raise StoreError(f"{table}: no row {key} = {value!r}")


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped: common where PID 1 reaps nothing) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
