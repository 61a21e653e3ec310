"""The engine's event bus: one stream of everything that happens in a run, fanned out to
the connected clients (TUI, `kdatui status --follow`) and recorded durably.

Two sources feed it:
  * the store's own events (attempt proposed, admitted, pruned, ...), written inside the
    store's transactions: the bus only relays them after the commit;
  * the engine's high-rate events (agent output lines, evaluation progress): broadcast at
    once and written to the store in batches (one transaction per ~0.2 s), so a chatty agent
    costs one fsync a batch, not one a line.
Every event gets a sequence number and a one-line `text` for views that just print it.
A slow client never slows the run: its queue is bounded and drops (and counts) overflow.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from typing import Callable

RING = 5000  # events kept in memory for clients that (re)attach
FLUSH_S = 0.2
CLIENT_QUEUE = 50_000


def _ms(x) -> str:
    return f"{x:.3f} ms" if isinstance(x, (int, float)) else "-"


def describe(ev: dict) -> str:
    """A one-line human text for an event (the TUI log and `kdatui status --follow`)."""
    k = ev.get("kind", "")
    if "text" in ev and ev["text"]:
        return str(ev["text"])
    a = ev.get("attempt")
    if k == "attempt-proposed":
        return f"#{a} proposed {ev.get('name')} ({ev.get('family')}) from {ev.get('parent')}: {ev.get('reason', '')}"
    if k == "attempt-evaluating":
        return f"#{a} evaluating"
    if k == "attempt-evaluated":
        cells = "; ".join(f"{s} {c.get('verdict')}" + (f" {c['speedup']:.2f}x" if c.get("speedup") else "")
                          for s, c in (ev.get("shapes") or {}).items())
        why = f" — {ev['reason']}" if ev.get("reason") else ""
        return f"#{a} {ev.get('name', '')} {ev.get('verdict')}: {cells}{why}"
    if k == "admission-decision":
        return f"#{a} {'admit' if ev.get('admitted') else 'keep out'} {ev.get('name', '')}: {ev.get('reason', '')}"
    if k == "admitting":
        return f"#{a} committing {ev.get('name', '')} to frontier/{ev.get('task', '')}/{ev.get('name', '')}"
    if k == "admitted":
        return f"#{a} admitted {ev.get('name', '')} ({ev.get('family', '')})"
    if k == "attempt-error":
        return f"#{a} error: {ev.get('reason', '')}"
    if k == "note":
        return f"note to the agent: {ev.get('note', '')}"
    if k == "pruned":
        return f"pruned {ev.get('name')}: {ev.get('reason', ev.get('why', ''))}"
    if k.startswith("run-"):
        return f"run {k[4:]}" + (f": {ev['reason']}" if ev.get("reason") else "")
    extra = {key: v for key, v in ev.items() if key not in ("id", "seq", "ts", "at", "run", "kind", "text")}
    return f"{k} " + " ".join(f"{key}={v}" for key, v in list(extra.items())[:6])


class Subscriber:
    def __init__(self, backlog: list[dict]):
        self.queue: queue.Queue = queue.Queue(maxsize=CLIENT_QUEUE)
        self.backlog = backlog
        self.dropped = 0

    def put(self, ev: dict) -> None:
        try:
            self.queue.put_nowait(ev)
        except queue.Full:
            self.dropped += 1

    def get_batch(self, timeout: float = 0.5, limit: int = 1000) -> list[dict]:
        try:
            first = self.queue.get(timeout=timeout)
        except queue.Empty:
            return []
        batch = [first]
        while len(batch) < limit:
            try:
                batch.append(self.queue.get_nowait())
            except queue.Empty:
                break
        return batch


class EventBus:
    def __init__(self, store=None, run: Callable[[], str | None] = lambda: None):
        self.store = store
        self.run = run  # the current run id (it changes when the run is generalized)
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self.ring: deque = deque(maxlen=RING)
        self._subs: set[Subscriber] = set()
        self._unpersisted: list[dict] = []
        self._stop = threading.Event()
        self._writer = None
        if store is not None:
            store.subscribe(self._relay)
            self._writer = threading.Thread(target=self._flush_loop, name="event-writer", daemon=True)
            self._writer.start()

    # -------------------------------------------------------------- publishing

    def emit(self, kind: str, text: str = "", *, persist: bool = True, run: str | None = None, **data) -> dict:
        """A high-rate engine event: broadcast now, stored with the next batch."""
        ev = {"ts": time.time(), "run": run if run is not None else self.run(), "kind": kind, **data}
        ev["text"] = text or describe(ev)
        self._publish(ev, persist)
        return ev

    def _relay(self, ev: dict) -> None:
        """A store event, already committed: relay it with a text."""
        ev = dict(ev)
        ev.setdefault("text", describe(ev))
        self._publish(ev, persist=False)

    def _publish(self, ev: dict, persist: bool) -> None:
        with self._lock:
            ev["seq"] = next(self._seq)
            self.ring.append(ev)
            if persist and self.store is not None:
                self._unpersisted.append(ev)
            subs = list(self._subs)
        for s in subs:
            s.put(ev)

    # -------------------------------------------------------------- clients

    def subscribe(self, backlog: int = 500) -> Subscriber:
        with self._lock:
            past = list(self.ring)[-backlog:] if backlog > 0 else []
            sub = Subscriber(past)
            self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        with self._lock:
            self._subs.discard(sub)

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._subs)

    # -------------------------------------------------------------- persistence

    def flush(self) -> None:
        with self._lock:
            batch, self._unpersisted = self._unpersisted, []
        if batch and self.store is not None:
            try:
                self.store.add_events(batch)
            except Exception:  # the store is gone (shutdown): the events were broadcast already
                pass

    def _flush_loop(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        if self._writer is not None:
            self._writer.join(timeout=2)
        self.flush()
