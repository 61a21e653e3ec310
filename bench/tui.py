"""How responsive the TUI stays under load (issue 7): with an engine holding 1,000 attempts
and 100,000 events, the main screen opens in <= 2 s, and a key press is answered in
<= 100 ms while events stream at 1,000 per second.

The engine is tests/fake_engine.py (the control protocol over a Unix socket, in threads
of this process, so the figures include the fake's own work on the same cores). The TUI
runs headless through App.run_test(), which still lays out and renders every frame.

    python bench/tui.py                 # prints the figures
    python bench/tui.py --rate 2000 --presses 60 --json out.json

Measured:
  open      from constructing the app until the first snapshot and the event backlog
            (500 of the 100,000) are in and the frame showing them is composed
  local key `down` in the matrix: from the key event (as the terminal driver delivers
            it) to the first frame composed after the cursor moved
  engine key `p` (pause, then resume): from the key event to the first frame composed
            after the engine answered, the snapshot came back and the state changed

Frames are counted at App._display, where the compositor's update goes to the terminal
(headless here: composed and rendered, not written).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_engine import FakeEngine, big_state  # noqa: E402

from textual import events  # noqa: E402

from kdatui.tui.app import KdaTuiApp  # noqa: E402

OPEN_LIMIT_S = 2.0
KEY_LIMIT_MS = 100.0


class Streamer(threading.Thread):
    """Emits `rate` events a second in 100 small bursts, like an engine mid-run: agent
    output, evaluation progress, and now and then an attempt lands (a snapshot refresh)."""

    def __init__(self, fake: FakeEngine, rate: int):
        super().__init__(daemon=True)
        self.fake = fake
        self.rate = rate
        self.sent = 0
        self.stop_flag = threading.Event()

    def run(self) -> None:
        per_tick = max(1, self.rate // 100)
        start = time.perf_counter()
        tick = 0
        while not self.stop_flag.is_set():
            burst = []
            for j in range(per_tick):
                n = self.sent + j
                if n % 100 == 0:
                    burst.append(("attempt-evaluated", {"attempt": n // 100, "text": f"#{n // 100} PASS 1.1x"}))
                elif n % 5 == 0:
                    burst.append(("eval-progress", {"attempt": n // 100, "shape": "b1_t8192_h96", "stage": "trial",
                                                    "i": n % 7, "n": 7, "label": "timing"}))
                else:
                    burst.append(("agent-output", {"line": f"agent: step {n}: trying BV={16 << (n % 3)}"}))
            self.fake.emit_many(burst)
            self.sent += per_tick
            tick += 1
            delay = start + tick / 100 - time.perf_counter()
            if delay > 0:
                time.sleep(delay)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def send_key(app, key: str) -> None:
    """A key as the terminal driver delivers it (what pilot.press does, without its wait
    for the whole process to go idle, which never happens while events stream)."""
    event = events.Key(key, key if len(key) == 1 else None)
    event.set_sender(app)
    app._driver.send_message(event)


async def answered(app, frames: list[float], changed, t0: float, timeout: float = 5.0) -> float:
    """Milliseconds from t0 until `changed()` holds and a frame showing it was composed."""
    deadline = time.perf_counter() + timeout
    while not changed():
        if time.perf_counter() > deadline:
            raise TimeoutError("the key was not answered")
        await asyncio.sleep(0.0005)
    t_changed = time.perf_counter()
    while not frames or frames[-1] < t_changed:
        if time.perf_counter() > deadline:
            raise TimeoutError("no frame after the change")
        await asyncio.sleep(0.0005)
    first = next(f for f in frames if f >= t_changed)
    return (first - t0) * 1e3


async def measure(fake: FakeEngine, rate: int, presses: int, size: tuple[int, int]) -> dict:
    frames: list[float] = []
    t0 = time.perf_counter()
    app = KdaTuiApp(fake.path, keymap={})
    display = app._display

    def counted_display(screen, renderable):  # every frame the compositor hands out
        if renderable is not None:
            frames.append(time.perf_counter())
            del frames[:-1000]
        display(screen, renderable)

    app._display = counted_display
    async with app.run_test(size=size) as pilot:
        deadline = time.perf_counter() + 30
        while not (app.snapshot and app.main.loop.written >= 400 and not app._refreshing):
            if time.perf_counter() > deadline or app._exception is not None:
                raise RuntimeError(f"the main screen did not open: {app._exception or 'timeout'}")
            await asyncio.sleep(0.002)
        t_ready = time.perf_counter()
        await asyncio.sleep(0.1)  # a frame still due after the last change counts
        drawn = [f for f in frames if f <= t_ready + 0.1]
        open_s = max(t_ready, drawn[-1] if drawn else t_ready) - t0

        streamer = Streamer(fake, rate)
        streamer.start()
        await asyncio.sleep(1.0)  # let the stream reach its pace
        stats0 = dict(app.stats)
        t_stream = time.perf_counter()

        local_ms, engine_ms = [], []
        app.main.matrix.focus()
        await pilot.pause(0.05)
        for i in range(presses):
            key = "down" if (i // 10) % 2 == 0 else "up"
            before = app.main.matrix.cursor_row
            t = time.perf_counter()
            send_key(app, key)
            local_ms.append(await answered(app, frames, lambda: app.main.matrix.cursor_row != before, t))
            await asyncio.sleep(0.05)
            if i % 3 == 0:
                want = "paused" if app.state == "running" else "running"
                t = time.perf_counter()
                send_key(app, "p")
                engine_ms.append(await answered(app, frames, lambda: app.state == want, t))
                await asyncio.sleep(0.05)

        elapsed = time.perf_counter() - t_stream
        streamer.stop_flag.set()
        streamer.join()
        stats = {k: app.stats[k] - stats0[k] for k in app.stats}
        written = app.main.loop.written
    return {
        "attempts_in_store": 1000, "events_in_store": 100_000, "size": list(size),
        "open_s": round(open_s, 3),
        "stream_rate_per_s": round(streamer.sent / (elapsed + 1.0), 1),
        "received_per_s": round(stats["events"] / elapsed, 1),
        "flushes_per_s": round(stats["flushes"] / elapsed, 1),
        "snapshots_per_s": round(stats["snapshots"] / elapsed, 1),
        "log_lines_written": written,
        "local_key_ms": {"median": round(statistics.median(local_ms), 1), "p95": round(pct(local_ms, 0.95), 1),
                         "max": round(max(local_ms), 1), "n": len(local_ms)},
        "engine_key_ms": {"median": round(statistics.median(engine_ms), 1), "p95": round(pct(engine_ms, 0.95), 1),
                          "max": round(max(engine_ms), 1), "n": len(engine_ms)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=1000, help="events per second while keys are pressed")
    ap.add_argument("--presses", type=int, default=40, help="key presses to time")
    ap.add_argument("--attempts", type=int, default=1000)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--size", default="120x40", help="terminal size WxH")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    size = tuple(int(x) for x in args.size.split("x"))
    with FakeEngine(big_state(args.attempts, args.events)) as fake:
        r = asyncio.run(measure(fake, args.rate, args.presses, size))
    r["attempts_in_store"], r["events_in_store"] = args.attempts, args.events
    ok_open = r["open_s"] <= OPEN_LIMIT_S
    ok_key = r["local_key_ms"]["p95"] <= KEY_LIMIT_MS and r["engine_key_ms"]["p95"] <= KEY_LIMIT_MS
    print(f"kdatui TUI bench: store of {args.attempts} attempts and {args.events} events, terminal {args.size}")
    print(f"  main screen open           {r['open_s']:.3f} s   (limit {OPEN_LIMIT_S} s)  {'ok' if ok_open else 'SLOW'}")
    print(f"  events streamed            {r['stream_rate_per_s']:.0f}/s; app received {r['received_per_s']:.0f}/s "
          f"in {r['flushes_per_s']:.1f} batches/s, {r['snapshots_per_s']:.1f} snapshots/s")
    lk, ek = r["local_key_ms"], r["engine_key_ms"]
    print(f"  key, local (matrix down)   median {lk['median']:.1f} ms  p95 {lk['p95']:.1f} ms  max {lk['max']:.1f} ms"
          f"  (n={lk['n']}: key to the frame that shows the moved cursor)")
    print(f"  key, engine (p pause)      median {ek['median']:.1f} ms  p95 {ek['p95']:.1f} ms  max {ek['max']:.1f} ms"
          f"  (n={ek['n']}: request, answer, snapshot, header, repaint)")
    print(f"  verdict: {'PASS' if ok_open and ok_key else 'FAIL'} (limits: open <= {OPEN_LIMIT_S} s, "
          f"p95 key <= {KEY_LIMIT_MS:.0f} ms)")
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
    return 0 if ok_open and ok_key else 1


if __name__ == "__main__":
    sys.exit(main())
