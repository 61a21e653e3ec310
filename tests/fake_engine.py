"""A fake engine for the TUI's tests and bench: it speaks engine/protocol.py (newline
JSON on a Unix socket, replies by id, `subscribe` then a stream of events) over a
scripted state, in threads of the test process. No store, no git, no GPU: fast and
deterministic.

    with FakeEngine(demo_state()) as fake:
        app = KdaTuiApp(fake.path)
        ...
        fake.requests          # every request received, in order
        fake.emit("admitted", text="...")   # push an event to subscribers
        fake.fail["prune"] = "no member named x"   # script a refusal

It implements the `candidate` request the TUI needs ({"cmd": "candidate", "name": ...}
or {"cmd": "candidate", "attempt": id}) with the shape the TUI expects from the engine.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import os
import socket
import tempfile
import threading
import time

import pytest
from pathlib import Path

from kdatui.engine.protocol import SOCKET_NAME, encode
from kdatui.engine.task import TaskError, parse_shape_spec

T0 = 1_700_000_000.0  # a fixed epoch for deterministic timestamps

SHAPES = [
    {"name": "b1_t8192_h96", "dims": {"B": 1, "T": 8192, "H": 96, "K": 128, "V": 128}, "primary": True},
    {"name": "b1_t4096_h64", "dims": {"B": 1, "T": 4096, "H": 64, "K": 128, "V": 128}, "primary": False},
    {"name": "b2_t2048_h32", "dims": {"B": 2, "T": 2048, "H": 32, "K": 128, "V": 128}, "primary": False},
]
BASE_MS = {"b1_t8192_h96": 5.61, "b1_t4096_h64": 1.92, "b2_t2048_h32": 0.874}


def cell(shape: str, speedup: float | None, verdict: str = "PASS", noise: float = 0.02) -> dict:
    base = BASE_MS.get(shape, 1.0)
    if verdict not in ("PASS", "RACED") or speedup is None:  # a raced-out shape keeps its partial figure
        return {"verdict": verdict, "speedup": None, "ms": None, "baseline_ms": base, "noise": None}
    return {"verdict": verdict, "speedup": speedup, "ms": round(base / speedup, 4), "baseline_ms": base,
            "noise": noise}


def cells(speedups: dict[str, float | str | None]) -> dict:
    out = {}
    for shape, v in speedups.items():
        out[shape] = cell(shape, None, v) if isinstance(v, str) else cell(shape, v)
    return out


def demo_state() -> dict:
    """A run a few hours in: four members in two families, a dozen attempts, some failed."""
    members = [
        {"name": "fused-c64-w4", "family": "fused", "best": True, "attempt": 7,
         "why": "new best on b1_t8192_h96 (1.34x)", "idea": "fused chunk kernel, C=64, 4 warps",
         "cells": cells({"b1_t8192_h96": 1.34, "b1_t4096_h64": 1.12, "b2_t2048_h32": 0.92})},
        {"name": "fused-c32-w8", "family": "fused", "best": False, "attempt": 4,
         "why": "faster than fused-c64-w4 on b2_t2048_h32", "idea": "C=32 for short sequences",
         "cells": cells({"b1_t8192_h96": 1.05, "b1_t4096_h64": 1.01, "b2_t2048_h32": 1.18})},
        {"name": "split-bv64-c16", "family": "split", "best": False, "attempt": 9,
         "why": "first of family split", "idea": "split stages, BV=64, C=16, doubling inverse",
         "cells": cells({"b1_t8192_h96": 1.21, "b1_t4096_h64": 1.25, "b2_t2048_h32": 0.81})},
        {"name": "split-bv32-c16", "family": "split", "best": False, "attempt": 11,
         "why": "faster than split-bv64-c16 on b2_t2048_h32", "idea": "BV=32 raises occupancy",
         "cells": cells({"b1_t8192_h96": 1.02, "b1_t4096_h64": 0.99, "b2_t2048_h32": 1.07})},
    ]
    for m in members:
        m["branch"] = f"frontier/kda_fwd_demo/{m['name']}"
        m["sha"] = "3f2a9c1d07"
    verdicts = {
        1: ("fused", "fused-c64-w4", "admitted", "passed", {"b1_t8192_h96": 1.10, "b1_t4096_h64": 1.0,
                                                            "b2_t2048_h32": 0.9}),
        2: ("split", "split-bv128-c16", "failed", "failed", {"b1_t8192_h96": "FAIL", "b1_t4096_h64": "FAIL",
                                                             "b2_t2048_h32": "FAIL"}),
        3: ("split", "split-bv64-c32", "error", "error", {"b1_t8192_h96": "ERROR"}),
        4: ("fused", "fused-c32-w8", "admitted", "passed", {"b1_t8192_h96": 1.05, "b1_t4096_h64": 1.01,
                                                            "b2_t2048_h32": 1.18}),
        5: ("fused", "fused-c64-w8", "passed", "passed", {"b1_t8192_h96": 0.97, "b1_t4096_h64": 0.95,
                                                          "b2_t2048_h32": 0.88}),
        6: ("fused", "fused-c128-w4", "failed", "failed", {"b1_t8192_h96": 1.4, "b1_t4096_h64": "FLAKY",
                                                           "b2_t2048_h32": 1.0}),
        7: ("fused", "fused-c64-w4-s3", "admitted", "passed", {"b1_t8192_h96": 1.34, "b1_t4096_h64": 1.12,
                                                               "b2_t2048_h32": 0.92}),
        8: ("split", "split-bv64-c16-nt", "passed", "passed", {"b1_t8192_h96": 1.19, "b1_t4096_h64": 1.2,
                                                               "b2_t2048_h32": 0.8}),
        9: ("split", "split-bv64-c16", "admitted", "passed", {"b1_t8192_h96": 1.21, "b1_t4096_h64": 1.25,
                                                              "b2_t2048_h32": 0.81}),
        10: ("fused", "fused-c64-w4-ns", "passed", "passed", {"b1_t8192_h96": 1.33, "b1_t4096_h64": 1.10,
                                                              "b2_t2048_h32": 0.9}),
        11: ("split", "split-bv32-c16", "admitted", "passed", {"b1_t8192_h96": 1.02, "b1_t4096_h64": 0.99,
                                                               "b2_t2048_h32": 1.07}),
        12: ("fused", "fused-c64-w2", "evaluating", None, {"b1_t8192_h96": 1.29}),
    }
    attempts = []
    for aid, (family, name, status, verdict, sp) in verdicts.items():
        attempts.append({"id": aid, "family": family, "name": name, "status": status, "verdict": verdict,
                         "parent": "base" if aid < 4 else f"frontier/kda_fwd_demo/{family}-c64-w4",
                         "idea": f"{name}: a variation", "reason": f"try {name}", "cells": cells(sp)})
    status = {
        "run": "kda_fwd_demo-0001", "task": "kda_fwd_demo", "task_path": "tasks/kda_fwd_demo.toml",
        "state": "running", "why": "", "phase": "generalized", "agent": "builtin", "started": T0,
        "elapsed_s": 3 * 3600 + 25 * 60 + 7, "budget": {"hours": 6.0, "attempts": 0},
        "attempts": {"total": 12, "evaluated": 11, "admitted": 5}, "members": len(members),
        "best": {"name": "fused-c64-w4", "speedup": 1.34, "shape": "b1_t8192_h96"},
        "next_cleanup_s": 8 * 3600 + 34 * 60 + 53, "device": "NVIDIA H200",
        "current": {"attempt": 12, "stage": "timing", "detail": "trial 2/5 on b1_t4096_h64"}, "pid": 4242,
    }
    events = demo_events()
    return {"status": status, "shapes": copy.deepcopy(SHAPES), "members": members, "attempts": attempts,
            "baseline": "fla", "notes": [], "pruned": {}, "events": events,
            "curve": demo_curve(attempts, SHAPES)}


def demo_curve(attempts: list[dict], shapes: list[dict], device: str = "NVIDIA H200") -> dict:
    """The `curve` of a state's attempts, as the engine builds it (engine/curve.py): one
    point per evaluated attempt, ten minutes apart."""
    primary = next(s["name"] for s in shapes if s.get("primary"))
    points, best = [], None
    for i, a in enumerate(x for x in attempts if x.get("verdict")):
        c = (a.get("cells") or {}).get(primary) or {}
        sp = c.get("speedup") if c.get("verdict") == "PASS" else None
        kind = {"passed": "passed", "failed": "failed", "error": "error"}.get(a["verdict"], "failed")
        raised = kind == "passed" and sp is not None and (best is None or sp > best)
        best = sp if raised else best
        points.append({"attempt": a["id"], "t": 600.0 * (i + 1), "ts": T0 + 600.0 * (i + 1), "name": a["name"],
                       "family": a["family"], "kind": kind, "speedup": sp, "noise": c.get("noise"), "best": raised})
    return {"task": "kda_fwd_demo", "shape": primary, "baseline": "fla", "device": device, "points": points,
            "best": [[p["t"], p["speedup"]] for p in points if p["best"]]}


def reshaped_state(shapes: list[dict], *, device: str, base_ms: dict[str, float] | None = None,
                   baseline: str = "fla") -> dict:
    """demo_state() on other shapes (the first is the primary): each member and attempt
    keeps its speedups, spread over the new shapes in turn."""
    st = demo_state()
    old = [s["name"] for s in SHAPES]
    names = [s["name"] for s in shapes]
    base = base_ms or {n: 1.0 + i for i, n in enumerate(names)}

    def remap(cs: dict, k: int) -> dict:
        out = {}
        for i, n in enumerate(names):
            c = cs.get(old[i % len(old)])
            if c is None:
                continue
            c = dict(c)
            c["baseline_ms"] = base[n] * (1.0 + 0.07 * ((i + k) % 3))  # each timed against its own baseline run
            if c.get("speedup"):
                c["ms"] = round(c["baseline_ms"] / c["speedup"], 4)
            out[n] = c
        return out

    for k, row in enumerate([*st["members"], *st["attempts"]]):
        row["cells"] = remap(row["cells"], k)
    st["shapes"] = copy.deepcopy(shapes)
    st["baseline"] = baseline
    st["status"].update(device=device, phase=f"{len(shapes)} shapes")
    st["status"]["best"]["shape"] = names[0]
    st["curve"] = demo_curve(st["attempts"], shapes, device=device)
    return st


CPU_SHAPES = [
    {"name": "b1_t100_h2_k32_v32", "dims": {"B": 1, "T": 100, "H": 2, "K": 32, "V": 32}, "primary": True},
    {"name": "b2_t64_h2_k64_v64", "dims": {"B": 2, "T": 64, "H": 2, "K": 64, "V": 64}, "primary": False},
    {"name": "b2_t37_h3_k32_v32", "dims": {"B": 2, "T": 37, "H": 3, "K": 32, "V": 32}, "primary": False},
]


def cpu_state() -> dict:
    """The CPU task's three shapes, interpreter-sized timings, device cpu."""
    return reshaped_state(CPU_SHAPES, device="cpu (Triton interpreter)", baseline="torch",
                          base_ms={"b1_t100_h2_k32_v32": 348.0, "b2_t64_h2_k64_v64": 212.0,
                                   "b2_t37_h3_k32_v32": 125.0})


def eight_shapes_state() -> dict:
    dims = [(1, 8192, 96), (1, 2048, 96), (1, 4096, 96), (1, 16384, 96), (1, 8192, 32), (1, 8192, 64),
            (2, 4096, 96), (2, 8192, 64)]
    shapes = [{"name": f"b{b}_t{t}_h{h}", "dims": {"B": b, "T": t, "H": h, "K": 128, "V": 128}, "primary": i == 0}
              for i, (b, t, h) in enumerate(dims)]
    return reshaped_state(shapes, device="NVIDIA H200", base_ms={s["name"]: 0.4 * (i + 1) for i, s in
                                                                  enumerate(shapes)})


def demo_events() -> list[dict]:
    rows = [
        ("run-started", {"text": "run kda_fwd_demo-0001 started: task kda_fwd_demo, agent builtin"}),
        ("attempt-proposed", {"attempt": 9, "text": "#9 split-bv64-c16 proposed: split stages, BV=64"}),
        ("eval-progress", {"attempt": 9, "shape": "b1_t8192_h96", "stage": "checks", "i": 1, "n": 10,
                           "label": "random"}),
        ("eval-progress", {"attempt": 9, "shape": "b1_t8192_h96", "stage": "checks", "i": 2, "n": 10,
                           "label": "saturated"}),
        ("attempt-evaluated", {"attempt": 9, "text": "#9 PASS: 1.21x on b1_t8192_h96, 1.25x, 0.81x"}),
        ("admitted", {"attempt": 9, "text": "split-bv64-c16 admitted: first of family split"}),
        ("agent-output", {"line": "builtin: family split has 1 member; exploring BV=32"}),
        ("attempt-proposed", {"attempt": 10, "text": "#10 fused-c64-w4-ns proposed: no software pipelining"}),
        ("attempt-evaluated", {"attempt": 10, "text": "#10 PASS: 1.33x on b1_t8192_h96"}),
        ("rejected", {"attempt": 10, "text": "#10 rejected: fused-c64-w4 is as fast on every shape"}),
        ("attempt-proposed", {"attempt": 11, "text": "#11 split-bv32-c16 proposed: BV=32 raises occupancy"}),
        ("attempt-evaluated", {"attempt": 11, "text": "#11 PASS: 1.02x on b1_t8192_h96, 0.99x, 1.07x"}),
        ("admitted", {"attempt": 11, "text": "split-bv32-c16 admitted: faster than split-bv64-c16 on b2_t2048_h32"}),
        ("note", {"text": "operator: try BV=32 on split"}),
        ("attempt-proposed", {"attempt": 12, "text": "#12 fused-c64-w2 proposed: 2 warps"}),
        ("attempt-evaluating", {"attempt": 12, "text": "#12 evaluating on 3 shapes"}),
        ("eval-progress", {"attempt": 12, "shape": "b1_t4096_h64", "stage": "timing", "i": 2, "n": 5,
                           "label": "trial"}),
    ]
    return [{"seq": i + 1, "ts": T0 + 60 * i, "run": "kda_fwd_demo-0001", "kind": k, **d}
            for i, (k, d) in enumerate(rows)]


def big_state(n_attempts: int = 1000, n_events: int = 100_000) -> dict:
    """The bench's store: 1,000 attempts and 100,000 events (snapshot gives the last 50)."""
    st = demo_state()
    fams = ["fused", "split"]
    attempts = []
    for aid in range(1, n_attempts + 1):
        fam = fams[aid % 2]
        failed = aid % 7 == 0
        sp = {s["name"]: ("FAIL" if failed else round(0.8 + (aid * 37 % 60) / 100, 2)) for s in SHAPES}
        attempts.append({"id": aid, "family": fam, "name": f"{fam}-v{aid}", "status": "failed" if failed else "passed",
                         "verdict": "failed" if failed else "passed", "parent": "base", "idea": "", "reason": "",
                         "cells": cells(sp)})
    st["attempts"] = attempts
    st["status"]["attempts"] = {"total": n_attempts, "evaluated": n_attempts, "admitted": 4}
    kinds = ["agent-output", "eval-progress", "attempt-proposed", "attempt-evaluated"]
    st["events"] = [{"seq": i + 1, "ts": T0 + i * 0.1, "run": "kda_fwd_demo-0001", "kind": kinds[i % 4],
                     "attempt": i // 4, "text": f"event {i}"} for i in range(n_events)]
    return st


def candidate_detail(state: dict, name: str | None = None, attempt: int | None = None) -> dict:
    """The `candidate` result: idea, parent, checks (CheckReport dicts per shape), timings
    (PairedTiming dicts per shape, with trial_ms), diff against the parent, kernel source."""
    if name is not None:
        m = next((m for m in state["members"] if m["name"] == name), None)
        if m is None:
            raise LookupError(f"no member named {name!r}; members: {', '.join(x['name'] for x in state['members'])}")
        src = next((a for a in state["attempts"] if a["id"] == m.get("attempt")), {})
        title, family, parent, row = m["name"], m["family"], src.get("parent", "base"), m
        extra = {"branch": m.get("branch"), "sha": m.get("sha"), "status": "member", "why": m.get("why")}
    else:
        a = next((a for a in state["attempts"] if a["id"] == attempt), None)
        if a is None:
            raise LookupError(f"no attempt {attempt}")
        title, family, parent, row = f"#{a['id']} {a['name']}", a["family"], a.get("parent", "base"), a
        extra = {"status": a.get("status"), "branch": f"kdatui/scratch/{a['id']}"}
    checks, timings = [], {}
    for shape in state["shapes"]:
        s = shape["name"]
        c = (row.get("cells") or {}).get(s)
        verdict = (c or {}).get("verdict") or "ERROR"
        results = [{"probe": p, "verdict": "PASS" if verdict == "PASS" or p != "strong" else verdict,
                    "reason": "" if verdict == "PASS" or p != "strong" else "max_rel 0.31 > rtol 0.05",
                    "max_abs": 1.5e-3, "max_rel": 2.0e-3, "rms_ratio": 4.1e-4, "output": "o", "seconds": 0.5}
                   for p in ("random", "saturated", "strong", "boundary")]
        checks.append({"candidate": title, "task": state["status"]["task"], "shape": s, "dims": shape["dims"],
                       "device": state["status"]["device"], "harness": "1", "results": results, "seconds": 2.0,
                       "verdict": verdict})
        if c and c.get("speedup"):
            base, ms = c["baseline_ms"], c["ms"]
            timings[s] = {"baseline": {"median_ms": base, "spread": 0.012, "trial_ms": [base * f for f in
                                                                                          (0.99, 1.0, 1.01)]},
                          "candidate": {"median_ms": ms, "spread": 0.018, "trial_ms": [ms * f for f in
                                                                                       (1.01, 1.0, 0.99)]},
                          "speedup": c["speedup"], "trials": 3, "repeats": 10, "timer": "cuda_event",
                          "flush_l2": True}
        else:
            timings[s] = None
    diff = (f"diff --git a/candidates/kda_fwd_demo/kernel.py b/candidates/kda_fwd_demo/kernel.py\n"
            f"--- a/candidates/kda_fwd_demo/kernel.py\n+++ b/candidates/kda_fwd_demo/kernel.py\n"
            f"@@ -10,7 +10,7 @@ import triton.language as tl\n"
            f" FAMILY = \"{family}\"\n-CHUNK = 32\n+CHUNK = 64\n NUM_WARPS = 4\n")
    kernel = (f"\"\"\"{title}: KDA forward, family {family}.\"\"\"\nimport triton\nimport triton.language as tl\n\n"
              f"FAMILY = \"{family}\"\nCHUNK = 64\nNUM_WARPS = 4\n\n\ndef kda_forward(q, k, v, g, beta, **kw):\n"
              f"    ...\n")
    return {"name": title, "family": family, "parent": parent,
            "idea": (f"# {title}\n\nFamily **{family}**. {row.get('idea') or ''}\n\n"
                     "Expects to gain on the primary shape."),
            "checks": checks, "timings": timings, "diff": diff, "kernel": kernel, **extra}


class FakeEngine:
    """A threaded Unix-socket server speaking the control protocol over `state`."""

    def __init__(self, state: dict | None = None, *, backlog_limit: int | None = None, path: Path | None = None):
        self.state = state if state is not None else demo_state()
        self.events: list[dict] = self.state.pop("events", [])
        # short: a socket path is at most 108 bytes, pytest's tmp_path can be longer
        self._dir = None if path else tempfile.mkdtemp(prefix="kdf", dir="/tmp")
        self.path = Path(path) if path else Path(self._dir) / SOCKET_NAME
        self.requests: list[dict] = []
        self.fail: dict[str, str] = {}  # cmd -> error to answer with
        self.delay: dict[str, float] = {}  # cmd -> seconds to wait before answering
        self.exit_on_stop = True
        self.backlog_limit = backlog_limit
        self._lock = threading.RLock()
        self._subscribers: list[tuple[socket.socket, threading.Lock]] = []
        self._conns: list[socket.socket] = []
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._seq = len(self.events)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "FakeEngine":
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(self.path))
        os.chmod(self.path, 0o600)
        srv.listen(16)
        self._server = srv
        self._thread = threading.Thread(target=self._accept, name="fake-engine", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """The engine goes away: the socket closes, every connection drops."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()
        with self._lock:
            conns = list(self._conns)
            self._subscribers.clear()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def __enter__(self) -> "FakeEngine":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._dir:
            try:
                os.rmdir(self._dir)
            except OSError:
                pass

    # ------------------------------------------------------------------ scripting

    def commands(self, cmd: str) -> list[dict]:
        return [r for r in self.requests if r.get("cmd") == cmd]

    def emit(self, kind: str, **data) -> dict:
        with self._lock:
            self._seq += 1
            ev = {"seq": self._seq, "ts": data.pop("ts", time.time()), "run": self.state["status"]["run"],
                  "kind": kind, **data}
            self.events.append(ev)
            subs = list(self._subscribers)
        line = encode({"event": ev})
        for sock, lock in subs:
            self._send(sock, lock, line)
        return ev

    def emit_many(self, events: list[tuple[str, dict]]) -> None:
        """Several events in one write per subscriber (a burst)."""
        with self._lock:
            out = []
            for kind, data in events:
                self._seq += 1
                ev = {"seq": self._seq, "ts": data.pop("ts", time.time()), "run": self.state["status"]["run"],
                      "kind": kind, **data}
                self.events.append(ev)
                out.append(encode({"event": ev}))
            subs = list(self._subscribers)
        blob = b"".join(out)
        for sock, lock in subs:
            self._send(sock, lock, blob)

    def _send(self, sock: socket.socket, lock: threading.Lock, data: bytes) -> None:
        try:
            with lock:
                sock.sendall(data)
        except OSError:
            with self._lock:
                self._subscribers = [s for s in self._subscribers if s[0] is not sock]

    # ------------------------------------------------------------------ serving

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        send_lock = threading.Lock()
        buf = b""
        try:
            while not self._closed.is_set():
                chunk = conn.recv(1 << 16)
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    req = json.loads(line)
                    self._handle(conn, send_lock, req)
        except OSError:
            return
        finally:
            with self._lock:
                self._subscribers = [s for s in self._subscribers if s[0] is not conn]
                if conn in self._conns:
                    self._conns.remove(conn)
            try:
                conn.close()
            except OSError:
                pass

    def _handle(self, conn: socket.socket, lock: threading.Lock, req: dict) -> None:
        cmd = req.get("cmd")
        rid = req.get("id")
        with self._lock:
            self.requests.append(req)
        if cmd in self.delay:
            time.sleep(self.delay[cmd])
        if cmd == "subscribe":
            with self._lock:
                n = int(req.get("backlog", 500))
                if self.backlog_limit is not None:
                    n = min(n, self.backlog_limit)
                backlog = self.events[-n:] if n > 0 else []
                blob = encode({"id": rid, "ok": True, "result": {"backlog": len(backlog)}})
                blob += b"".join(encode({"event": ev}) for ev in backlog)
                # registered under the lock, so no live event slips between backlog and stream
                self._subscribers.append((conn, lock))
                self._send(conn, lock, blob)
            return
        after = None
        try:
            if cmd in self.fail:
                raise LookupError(self.fail[cmd])
            result, after = self._answer(cmd, req)
            reply = {"id": rid, "ok": True, "result": result}
        except (LookupError, ValueError, TaskError) as e:
            reply = {"id": rid, "ok": False, "error": str(e)}
        self._send(conn, lock, encode(reply))
        if after:
            after()

    # ------------------------------------------------------------------ commands

    def snapshot(self) -> dict:
        st = self.state
        return {"status": copy.deepcopy(st["status"]), "shapes": copy.deepcopy(st["shapes"]),
                "members": copy.deepcopy(st["members"]), "attempts": copy.deepcopy(st["attempts"][-50:]),
                "baseline": st["baseline"], "notes": list(st["notes"]), "curve": copy.deepcopy(st.get("curve") or {})}

    def _set_state(self, state: str, why: str = "") -> None:
        self.state["status"]["state"] = state
        self.state["status"]["why"] = why

    def _answer(self, cmd: str, req: dict):
        st = self.state
        status = st["status"]
        with self._lock:
            if cmd == "status":
                return copy.deepcopy(status), None
            if cmd == "snapshot":
                return self.snapshot(), None
            if cmd == "pause":
                if status["state"] != "running":
                    raise ValueError(f"the run is {status['state']}, not running")
                self._set_state("paused", "paused by the operator")
                return {"state": "paused", "text": "paused: no new attempt starts"}, lambda: self.emit(
                    "run-paused", text="run paused by the operator")
            if cmd == "resume":
                if status["state"] != "paused":
                    raise ValueError(f"the run is {status['state']}, not paused")
                self._set_state("running")
                return {"state": "running", "text": "resumed"}, lambda: self.emit("run-resumed", text="run resumed")
            if cmd == "stop":
                self._set_state("stopping", "stopped by the operator")

                def stopped():
                    self.emit("run-stopping", text="run stopping: asked by the operator")
                    self._set_state("stopped", "stopped by the operator")
                    self.emit("run-stopped", text="run stopped")
                    if self.exit_on_stop:
                        threading.Timer(0.05, self.stop).start()
                return {"state": "stopping", "text": "stopping after the current evaluation"}, stopped
            if cmd == "note":
                text = str(req.get("text") or "").strip()
                if not text:
                    raise ValueError("a note needs text")
                st["notes"].append(text)
                return {"notes": len(st["notes"]), "text": "noted: the agent reads it in its next prompt"}, \
                    lambda: self.emit("note", text=f"operator note: {text}")
            if cmd == "budget":
                change = str(req.get("change") or "")
                if not change:
                    raise ValueError("budget: say how much, e.g. +2h")
                resumed = status["state"] == "finished"
                if resumed:
                    self._set_state("running")
                return {"resumed": resumed, "text": f"budget {change}" + ("; the run goes on" if resumed else "")}, \
                    lambda: self.emit("budget-changed", text=f"budget changed: {change}")
            if cmd == "curve":
                return copy.deepcopy(st.get("curve") or {}), None
            if cmd == "prune":
                name = req.get("name")
                m = next((m for m in st["members"] if m["name"] == name), None)
                if m is None:
                    raise LookupError(f"no member named {name!r}")
                st["members"].remove(m)
                st["pruned"][name] = m
                status["members"] = len(st["members"])
                ref = f"refs/kdatui/pruned/{status['task']}/{name}"
                return {"name": name, "ref": ref, "text": f"pruned {name} -> {ref}"}, lambda: self.emit(
                    "pruned", name=name, text=f"{name} pruned by the operator")
            if cmd == "restore":
                name = req.get("name")
                m = st["pruned"].pop(name, None)
                if m is None:
                    raise LookupError(f"no pruned member named {name!r}")
                st["members"].append(m)
                status["members"] = len(st["members"])
                return {"name": name, "text": f"restored {name}"}, lambda: self.emit(
                    "restored", name=name, text=f"{name} restored")
            if cmd == "archive":
                path = f"~/.local/share/kdatui/archive/demo/{status['run']}"
                return {"moved": 3, "archive": path, "text": f"archived 3 scratch branches to {path}"}, \
                    lambda: self.emit("archived", text="archived 3 scratch branches")
            if cmd == "generalize":
                src = req.get("from")
                if not any(m["name"] == src for m in st["members"]):
                    raise LookupError(f"no member named {src!r} to generalize from")
                shapes = req.get("shapes") or []
                if not shapes:
                    raise ValueError("generalize needs at least one shape")
                parsed = [parse_shape_spec(s) for s in shapes]
                task = f"{status['task']}_gen"
                if req.get("dry_run"):
                    plan = f"generalize {status['task']}/{src} to {len(st['shapes']) + len(parsed)} shapes"
                    return {"plan": plan, "text": plan}, None
                return {"task": task, "path": f"tasks/{task}.toml", "run": f"{task}-0001",
                        "shapes": [p.name for p in parsed],
                        "text": f"wrote tasks/{task}.toml with {len(parsed)} more shapes; rechecking {src}"}, \
                    lambda: self.emit("generalized",
                                      text=f"generalized from {src}: {', '.join(p.name for p in parsed)}")
            if cmd == "recheck":
                name = str(req.get("name") or "")
                if name.startswith("attempt:"):
                    aid = int(name.split(":", 1)[1])
                    if not any(a["id"] == aid for a in st["attempts"]):
                        raise LookupError(f"no attempt {aid}")
                elif not any(m["name"] == name for m in st["members"]):
                    raise LookupError(f"no member named {name!r}")
                return {"queued": name, "text": f"recheck of {name} queued"}, lambda: self.emit(
                    "rechecked", text=f"recheck of {name} queued")
            if cmd == "candidate":
                if req.get("name") is not None:
                    return candidate_detail(st, name=req["name"]), None
                if req.get("attempt") is not None:
                    return candidate_detail(st, attempt=int(req["attempt"])), None
                raise ValueError("candidate needs a name or an attempt")
        raise ValueError(f"unknown command {cmd!r}")


# ============================================================================ test helpers

def use_utc(monkeypatch) -> None:
    """Event times render in UTC, whatever the machine's zone (undo with time.tzset()
    after monkeypatch.undo())."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def aio(fn):
    """Run an async test in its own event loop (no pytest-asyncio needed)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))
    return run


def make_app(fake: FakeEngine, **kw):
    """The app on the fake's socket, clocks frozen, no user keymap."""
    from kdatui.tui.app import KdaTuiApp

    kw.setdefault("keymap", {})
    kw.setdefault("clock", lambda: 100.0)
    kw.setdefault("wallclock", lambda: T0 + 3600)
    return KdaTuiApp(fake.path, **kw)


async def until(pilot, cond, timeout: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def settled(app) -> bool:
    """The first snapshot is shown, the event backlog written, no refresh or flush due."""
    return bool(app.snapshot) and app.main.loop.written > 0 and not app._refreshing and app._flush_timer is None


async def ready(pilot):
    await until(pilot, lambda: settled(pilot.app), what="the first snapshot and the event backlog")


# ---------------------------------------------------------------------------- fixtures
# Imported by the TUI test modules: `from fake_engine import fake, utc`.

@pytest.fixture(autouse=True)
def utc(monkeypatch):
    use_utc(monkeypatch)
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def fake():
    with FakeEngine(demo_state()) as engine:
        yield engine
