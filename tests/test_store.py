"""The run store: schema and migration, WAL, transactions, events in SQLite and in
events.jsonl, evaluations with their full record, several writers at once."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest
from frontier_support import SHAPES, evaluation

from kdatui.engine.store import SCHEMA_VERSION, Store, StoreError


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / ".frontier") as st:
        yield st


def test_a_new_store_is_wal_and_at_the_current_schema(store, tmp_path):
    assert store.schema_version() == SCHEMA_VERSION
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"schema_version", "runs", "tasks", "attempts", "evaluations", "frontier", "events"} <= tables


def test_reopening_keeps_the_data_and_does_not_migrate_twice(tmp_path):
    with Store(tmp_path) as st:
        st.add_run("r1", "kt", task_path=None, agent="builtin", base_commit="abc")
    with Store(tmp_path) as st:
        assert st.schema_version() == SCHEMA_VERSION
        assert st.run("r1").base_commit == "abc"


def test_a_store_from_a_newer_kdatui_is_refused_with_a_message(tmp_path):
    with Store(tmp_path) as st:
        st.conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 5,))
    with pytest.raises(StoreError, match=r"written by a newer kdatui .* upgrade kdatui"):
        Store(tmp_path)


def test_an_empty_database_file_is_migrated_from_version_zero(tmp_path):
    sqlite3.connect(tmp_path / "kdatui.db").close()
    with Store(tmp_path) as st:
        assert st.schema_version() == SCHEMA_VERSION


def test_events_go_to_the_store_and_to_events_jsonl_line_by_line(store):
    store.event("r1", "note", text="first")
    path = store.events_path("r1")
    # flushed per line: visible to a reader before the store is closed
    assert [json.loads(x)["text"] for x in path.read_text().splitlines()] == ["first"]
    store.event("r1", "note", text="second")
    store.event(None, "pruned", name="x")
    assert [e["text"] for e in store.events("r1")] == ["first", "second"]
    assert json.loads(store.events_path(None).read_text())["name"] == "x"
    assert path.parent.name == "r1" and store.events_path(None).parent.name == "operator"


def test_a_rolled_back_transaction_leaves_no_rows_and_no_jsonl_lines(store):
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.add_run("r1", "kt", task_path=None, agent="a", base_commit=None)
            store.event("r1", "run-started")
            raise RuntimeError("killed half-way")
    assert store.run("r1") is None and store.events() == []
    assert not store.events_path("r1").exists()


def test_listeners_see_events_only_after_the_commit(store):
    seen = []
    store.subscribe(lambda ev: seen.append(ev["kind"]))
    with store.transaction():
        store.event("r1", "a")
        assert seen == []
    assert seen == ["a"]


def test_attempt_status_is_checked(store):
    att = store.add_attempt(run=None, task="kt", family="split", name="split-a", parent="base", parent_sha=None)
    assert att.status == "proposed"
    with pytest.raises(StoreError, match="expected one of proposed"):
        store.update_attempt(att.id, status="done")


def test_evaluations_keep_the_figures_and_the_full_record(store):
    att = store.add_attempt(run=None, task="kt", family="split", name="split-a", parent="base", parent_sha=None)
    store.add_evaluations(att.id, "kt", [evaluation(SHAPES["p"], 1.5, noise=0.03),
                                         evaluation(SHAPES["q"], None, verdict="FAIL")])
    store.add_evaluations(att.id, "kt", [evaluation(SHAPES["p"], 1.6, noise=0.01)])  # a recheck
    latest = store.evaluations(att.id, "kt")
    assert [(e.shape, e.verdict, e.speedup) for e in latest] == [("q", "FAIL", None), ("p", "PASS", 1.6)]
    p = latest[1]
    assert p.baseline_ms == 2.0 and p.candidate_ms == pytest.approx(2.0 / 1.6) and p.noise == 0.01
    full = p.evaluation()
    assert full.timing.speedup == 1.6 and full.checks.results[1].probe == "random"
    assert len(store.evaluations(att.id, history=True)) == 3


def test_only_one_live_member_per_name(store):
    att = store.add_attempt(run=None, task="kt", family="split", name="split-a", parent="base", parent_sha=None)
    store.add_member(task="kt", name="split-a", family="split", branch="frontier/kt/split-a", attempt=att.id,
                     why="w", state="member", sha="a" * 40)
    with pytest.raises(StoreError, match="UNIQUE"):
        store.add_member(task="kt", name="split-a", family="split", branch="frontier/kt/split-a",
                         attempt=att.id, why="w", state="member", sha="b" * 40)


def test_two_writers_on_one_store_do_not_lose_writes(tmp_path):
    Store(tmp_path).close()
    errors = []

    def writer(tag):
        try:
            with Store(tmp_path) as st:
                for i in range(40):
                    with st.transaction():
                        st.event("r", "tick", writer=tag, i=i)
        except Exception as e:  # pragma: no cover - the failure is reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in ("a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with Store(tmp_path) as st:
        assert len(st.events("r")) == 120
        assert len(st.events_path("r").read_text().splitlines()) == 120
