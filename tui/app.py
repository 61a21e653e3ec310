"""kdatui's Textual app: a live supervisor of a run, and nothing but a client of the
engine's control socket (engine/protocol.py).

How events flow (dolphie / memray style, never one refresh per event):

    engine --events--> EventFeed thread --(one EventsPending per burst)--> app
    app: drains the feed at most every `flush_interval` (0.1 s): writes the loop log,
         shows eval progress in the header, and when a state-changing event came, asks
         for a fresh `snapshot`; the refresh worker re-arms only when it finished, so
         snapshots never overlap and a storm of events costs a few snapshots a second.
    snapshot --> MainScreen.show_snapshot: header, tree and matrix updated in place.

Commands (pause, prune, ...) go over a second, asyncio connection; the engine's answer
or error is shown as a notification and in the loop log.

Entry points for the CLI: `run_tui(socket_path)` and `KdaTuiApp(socket_path)` (or
`KdaTuiApp(client_factory=...)` to bring another client); `pick_task()` when no run is
live.
"""

from __future__ import annotations

import asyncio
import time
import tomllib
from functools import partial
from pathlib import Path
from typing import Callable

from textual.app import App

from kdatui.engine.paths import config_dir
from textual.screen import Screen

from .client import EngineClient, EngineError, EngineUnavailable, check_socket
from .commands import ACTIONS, ActionsProvider, bindings
from .messages import EngineLost, EventsPending, Selection
from .screens.candidate import CandidateScreen
from .screens.chart import ChartScreen
from .screens.dialogs import ConfirmDialog, EngineGoneDialog, GeneralizeDialog, PromptDialog
from .screens.help import HelpScreen
from .screens.main import MainScreen
from .widgets.header import RunHeader
from .widgets.loop import LoopLog

ENGINE_ACTIONS = frozenset({"pause", "resume", "prune", "archive", "generalize", "recheck", "note", "stop_run",
                            "restore", "refresh", "budget"})
DETACHED, STOPPED, LOST = "detached", "stopped", "lost"
# detached from a run that does not go on by itself: the CLI must not say "the run goes on"
DETACHED_FINISHED, DETACHED_PAUSED = "detached-finished", "detached-paused"
# Shapes offered by the generalize dialog besides typing one; the bundled general task's
# shapes when it loads, else these.
FALLBACK_COMMON = ["b1_t2048_h96", "b1_t4096_h96", "b1_t8192_h96", "b1_t16384_h96", "b1_t8192_h32",
                   "b1_t8192_h64", "b2_t4096_h96", "b2_t8192_h64"]


def default_socket_path(cwd: Path | None = None) -> Path | None:
    """The control socket of the git repo around `cwd` (it may not exist: no engine), or
    None outside a repo."""
    from kdatui.engine.gitrepo import FRONTIER_DIR, GitRepo
    from kdatui.engine.protocol import socket_path
    from kdatui.engine.store import FrontierError

    try:
        repo = GitRepo.open(cwd or Path.cwd())
    except FrontierError:
        return None
    try:
        return socket_path(repo.root / FRONTIER_DIR)
    finally:
        repo.close()


def load_keymap(path: Path | None = None) -> tuple[dict[str, str], str | None]:
    """The user's keymap: `[keymap]` in tui.toml, binding id -> key(s). Returns the map
    and a problem to show (a bad file never stops the TUI)."""
    path = path or config_dir() / "tui.toml"
    if not path.exists():
        return {}, None
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        return {}, f"{path}: ignored, not valid TOML: {e}"
    keymap = data.get("keymap", {})
    known = {a.id for a in ACTIONS if a.key}
    bad = [k for k, v in keymap.items() if k not in known or not isinstance(v, str)]
    if bad:
        return ({k: v for k, v in keymap.items() if k not in bad},
                f"{path}: [keymap] ignores {', '.join(map(repr, bad))}; ids are {', '.join(sorted(known))}")
    return dict(keymap), None


# On the CPU the Triton interpreter runs shapes like the CPU task's in seconds; the GPU
# task's shapes would take hours there.
CPU_COMMON = ["B=1,T=64,H=2,K=32,V=32", "B=1,T=200,H=2,K=32,V=32", "B=2,T=50,H=4,K=32,V=32",
              "B=1,T=128,H=2,K=64,V=64", "B=3,T=33,H=2,K=16,V=16"]


def common_shapes(device: str = "") -> list[tuple[str, str]]:
    """(name, label) of shapes worth offering when generalizing on `device`: small ones on
    the CPU, the bundled general task's on a GPU."""
    if device.lower().startswith("cpu"):
        from kdatui.engine.task import parse_shape_spec

        shapes = [parse_shape_spec(spec) for spec in CPU_COMMON]
        return [(s.name, f"{s.name:<19} {s.label()}") for s in shapes]
    try:
        from kdatui.engine.task import bundled_tasks_dir, load_task

        task = load_task(bundled_tasks_dir() / "kda_fwd_general.toml")
        return [(n, f"{n:<15} {s.label()}") for n, s in task.shapes.items()]
    except Exception:  # the dialog still takes typed shapes
        return [(n, n) for n in FALLBACK_COMMON]


def answer_text(cmd: str, result: dict) -> str:
    """The engine's answer to a command, in one line."""
    for key in ("text", "message", "summary"):
        if result.get(key):
            return str(result[key])
    plain = ", ".join(f"{k} {v}" for k, v in result.items() if not isinstance(v, (dict, list)))
    return f"{cmd}: {plain}" if plain else f"{cmd}: done"


class KdaTuiApp(App[str]):
    CSS_PATH = "kdatui.tcss"
    TITLE = "kdatui"
    BINDINGS = bindings()
    COMMANDS = App.COMMANDS | {ActionsProvider}

    def __init__(self, socket_path: str | Path | None = None, *,
                 client_factory: Callable[[], EngineClient] | None = None,
                 keymap: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wallclock: Callable[[], float] = time.time,
                 recent_attempts: int = 20, log_lines: int = 2000, backlog: int = 500,
                 flush_interval: float = 0.1, min_refresh: float = 0.25, status_interval: float = 5.0,
                 ansi_color: bool | None = None):
        super().__init__(ansi_color=ansi_color)
        self._backlog = backlog
        if client_factory is None:
            # `textual run --dev kdatui.tui.app:KdaTuiApp`: the engine of the repo here, if any
            socket_path = socket_path or default_socket_path()
            if socket_path is not None:
                client_factory = partial(EngineClient, socket_path, backlog=backlog, keep=log_lines)
        self.socket_path = str(socket_path) if socket_path else None
        self.client_factory = client_factory
        self.absent = False  # no engine was ever reached: the task picker is offered
        self.client: EngineClient | None = None
        self.clock = clock
        self.wallclock = wallclock
        self.recent_attempts = recent_attempts
        self.log_lines = log_lines
        self.flush_interval = flush_interval
        self.min_refresh = min_refresh
        self.status_interval = status_interval
        if keymap is None:
            keymap, self._keymap_problem = load_keymap()
        else:
            self._keymap_problem = None
        self._user_keymap = keymap
        self.snapshot: dict = {}
        self.lost: str | None = None
        self._stop_sent = False
        self._refresh_wanted = False
        self._refresh_urgent = False
        self._refreshing = False
        self._last_refresh = float("-inf")
        self._refresh_kick = asyncio.Event()
        self._last_flush = float("-inf")
        self._flush_timer = None
        # figures for tests and bench/tui.py
        self.stats = {"flushes": 0, "events": 0, "snapshots": 0, "requests": 0}

    # ------------------------------------------------------------------ screens

    def get_default_screen(self) -> Screen:
        return MainScreen()

    @property
    def main(self) -> MainScreen:
        return next(s for s in self.screen_stack if isinstance(s, MainScreen))

    @property
    def _live_main(self) -> MainScreen | None:
        """The main screen, or None while the app is closing (a timer or a worker can still
        fire then; it must do nothing rather than fail)."""
        if self._closing or self._closed:
            return None
        return next((s for s in self.screen_stack if isinstance(s, MainScreen)), None)

    @property
    def state(self) -> str:
        return (self.snapshot.get("status") or {}).get("state") or ""

    def on_mount(self) -> None:
        if self._user_keymap:
            self.set_keymap(self._user_keymap)
        if self._keymap_problem:
            self.notify(self._keymap_problem, severity="warning", timeout=10)
        self.set_interval(1.0, self._tick)
        self.set_interval(self.status_interval, self._poll_status)
        self.connect()

    async def on_unmount(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.stop()
        if self.client is not None:
            await self.client.close()

    # ------------------------------------------------------------------ connection

    def connect(self) -> None:
        self.run_worker(self._connect(), group="connect", exclusive=True)

    async def _connect(self) -> None:
        if self.client is not None:
            await self.client.close()
        if self.client_factory is None:
            self.no_engine("not in a git repository with a run (cd into the repo, or start one here)")
            return
        self.client = client = self.client_factory()
        try:
            await client.connect()
            snapshot = await client.request("snapshot")
        except (EngineUnavailable, EngineError) as e:
            if not self.snapshot and isinstance(e, EngineUnavailable):
                self.no_engine(str(e))  # never connected: nothing to lose, offer the tasks
            else:
                self.engine_lost(str(e))
            return
        main = self._live_main
        if main is None:
            return
        self.absent = False
        self.lost = None
        main.header.lost = None
        self.stats["snapshots"] += 1
        self.apply_snapshot(snapshot)
        client.subscribe(on_wake=self._wake)

    def _wake(self) -> None:
        """Called from the event thread, once per burst."""
        self.post_message(EventsPending())

    def engine_lost(self, why: str) -> None:
        main = self._live_main
        if self.lost is not None or main is None:
            return
        self.lost = why
        if self.client is not None:
            self.client.stop_events()
        main.header.lost = why
        main.loop.write_operator(f"engine gone: {why}", "gone")
        self.refresh_bindings()
        stopped = self._stop_sent or self.state in ("stopping", "stopped")
        self.push_screen(EngineGoneDialog(why, stopped=stopped), callback=partial(self._gone, stopped))

    def no_engine(self, why: str) -> None:
        """No engine runs here (the app was started without one, e.g. `textual run --dev`):
        say so and offer the tasks; picking one starts a run and connects to it."""
        main = self._live_main
        if main is None:
            return
        if not main.is_mounted or not main.query(LoopLog):
            self.call_after_refresh(self.no_engine, why)  # before the main screen composed
            return
        self.absent = True
        self.lost = why
        rest = why[len("no engine"):].strip() if why.startswith("no engine") else f": {why}"
        main.header.lost = f"no engine {rest}"
        main.loop.write_operator(f"no engine: {why}", "gone")
        self.refresh_bindings()
        from .screens.task_picker import TaskPickerScreen

        if not any(isinstance(s, TaskPickerScreen) for s in self.screen_stack):
            self.push_screen(TaskPickerScreen(), callback=self._picked)

    def _picked(self, path: Path | None) -> None:
        if path is None:
            self.notify("No engine: `kdatui run TASK` starts one (q quits).", severity="warning", timeout=8)
            return
        self.notify(f"starting a run of {path.stem}...", timeout=5)
        self.run_worker(partial(self._launch, path), thread=True, group="launch", exclusive=True)

    def _launch(self, path: Path) -> None:
        from kdatui.engine.launch import start_engine
        from kdatui.engine.store import FrontierError
        from kdatui.engine.task import TaskError

        try:
            start_engine(path)
        except (FrontierError, TaskError) as e:
            self.call_from_thread(self.notify, str(e), title="could not start a run", severity="error", timeout=10)
            return
        sock = default_socket_path()
        if sock is None:
            return

        def connect() -> None:
            self.socket_path = str(sock)
            self.client_factory = partial(EngineClient, sock, backlog=self._backlog, keep=self.log_lines)
            self.lost = None
            self.connect()

        self.call_from_thread(connect)

    def _gone(self, stopped: bool, choice: str | None) -> None:
        if choice == "quit":
            self.exit(STOPPED if stopped else LOST)
        elif choice == "reconnect":
            self.action_reconnect()

    def on_engine_lost(self, message: EngineLost) -> None:
        self.engine_lost(message.why)

    # ------------------------------------------------------------------ events and refresh

    def on_events_pending(self, _message: EventsPending) -> None:
        if self._flush_timer is not None:
            return  # a flush is already due: it takes these too
        delay = self._last_flush + self.flush_interval - time.monotonic()
        if delay > 0:
            self._flush_timer = self.set_timer(delay, self._flush_events)
        else:
            self._flush_events()

    def _flush_events(self) -> None:
        self._flush_timer = None
        self._last_flush = time.monotonic()
        main = self._live_main
        if self.client is None or main is None:
            return
        batch = self.client.drain()
        self.stats["flushes"] += 1
        self.stats["events"] += batch.received
        if batch.events:
            main.loop.write_events(batch.events, skipped=batch.received - len(batch.events))
        if batch.progress is not None:
            main.header.progress = batch.progress
        if batch.stale:
            self.request_refresh()
        if batch.lost:
            self.engine_lost(batch.lost)

    def request_refresh(self, urgent: bool = False) -> None:
        """Ask for a fresh snapshot. Refreshes never overlap (one loop, re-armed while
        wanted) and come at most every `min_refresh` seconds, except right after an
        operator's command (`urgent`), whose effect should show at once."""
        self._refresh_wanted = True
        if urgent:
            self._refresh_urgent = True
            self._refresh_kick.set()
        if not self._refreshing and self.lost is None and self.client is not None:
            self._refreshing = True
            self.run_worker(self._refresh_loop(), group="refresh")

    async def _refresh_loop(self) -> None:
        try:
            while self._refresh_wanted and self.lost is None:
                wait = self._last_refresh + self.min_refresh - time.monotonic()
                if wait > 0 and not self._refresh_urgent:
                    self._refresh_kick.clear()
                    try:  # an operator's command cuts the wait short
                        await asyncio.wait_for(self._refresh_kick.wait(), wait)
                    except asyncio.TimeoutError:
                        pass
                self._refresh_wanted = self._refresh_urgent = False
                self._last_refresh = time.monotonic()
                try:
                    snapshot = await self.client.request("snapshot")
                except EngineUnavailable as e:
                    self.engine_lost(str(e))
                    return
                except EngineError as e:
                    self.notify(f"snapshot: {e}", severity="error")
                    return
                self.stats["snapshots"] += 1
                self.apply_snapshot(snapshot)
        finally:
            self._refreshing = False

    def apply_snapshot(self, snapshot: dict) -> None:
        main = self._live_main
        if main is None:
            return
        before = self.state
        self.snapshot = snapshot
        main.show_snapshot(snapshot)
        for screen in self.screen_stack:
            if isinstance(screen, ChartScreen):
                screen.chart.show_curve(snapshot.get("curve"))
        if self.state != before:
            self.refresh_bindings()

    def _tick(self) -> None:
        main = self._live_main
        if main is not None and main.query(RunHeader):  # not while the screen is torn down
            main.header.tick()

    def _poll_status(self) -> None:
        if self.lost is None and self.client is not None and not self._refreshing and self.snapshot:
            self.run_worker(self._status(), group="status", exclusive=True)

    async def _status(self) -> None:
        try:
            status = await self.client.request("status")
        except EngineUnavailable as e:
            self.engine_lost(str(e))
            return
        except EngineError:
            return
        main = self._live_main
        if main is None:
            return
        before = self.state
        self.snapshot = {**self.snapshot, "status": status}
        main.header.set_status(status)
        if self.state != before:
            self.refresh_bindings()

    # ------------------------------------------------------------------ commands

    def send(self, cmd: str, **args):
        """Send a command in a worker; the answer shows as a notification and in the log."""
        return self.run_worker(self._send(cmd, args), group="commands")

    async def _send(self, cmd: str, args: dict) -> dict | None:
        main = self._live_main
        if main is None:
            return None
        log = main.loop
        shown = " ".join(f"{k}={v!r}" if not isinstance(v, list) else f"{k}={' '.join(map(str, v))}"
                         for k, v in args.items())
        log.write_operator(f"{cmd} {shown}".strip())
        self.stats["requests"] += 1
        if self.client is None:
            self.notify("not connected to the engine", severity="error")
            return None
        try:
            result = await self.client.request(cmd, **args)
        except EngineError as e:
            if self._live_main is None:
                return None
            self.notify(str(e), title=f"{cmd} refused", severity="error", timeout=8)
            log.write_operator(f"{cmd} refused: {e}", "refused")
            return None
        except EngineUnavailable as e:
            self.engine_lost(str(e))
            return None
        if self._live_main is None:
            return result
        text = answer_text(cmd, result)
        self.notify(text, title=cmd)
        log.write_operator(f"{cmd}: {text}" if not text.startswith(f"{cmd}:") else text, "engine")
        self.request_refresh(urgent=True)
        return result

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "details":
            return not isinstance(self._top, CandidateScreen)
        if action not in ENGINE_ACTIONS:
            return True
        state = self.state
        if action == "pause":
            return False if state == "paused" else (None if self.lost or state in ("stopping", "stopped") else True)
        if action == "resume":
            return (None if self.lost else True) if state == "paused" else False
        if self.lost is not None:
            return None
        if action == "stop_run" and state in ("stopping", "stopped"):
            return None
        return True

    def palette_allows(self, action: str) -> bool:
        return self.check_action(action, ()) is True

    # ------------------------------------------------------------------ selection

    @property
    def _top(self) -> Screen | None:
        return self.screen_stack[-1] if self.screen_stack else None

    @property
    def selection(self) -> Selection | None:
        screen = self._top
        if isinstance(screen, CandidateScreen):
            return screen.selection
        main = self._live_main
        return main.selection if main is not None else None

    def _member(self) -> str | None:
        sel = self.selection
        if sel is not None and sel.kind == "member":
            return sel.name
        return None

    def best_member(self) -> str | None:
        members = self.snapshot.get("members") or []
        return next((m["name"] for m in members if m.get("best")), members[0]["name"] if members else None)

    def open_details(self, selection: Selection) -> None:
        if isinstance(self._top, CandidateScreen) and self._top.selection == selection:
            return
        self.push_screen(CandidateScreen(selection))

    # ------------------------------------------------------------------ actions

    def action_pause(self) -> None:
        self.send("pause")

    def action_resume(self) -> None:
        self.send("resume")

    def action_prune(self) -> None:
        name = self._member()
        if name is None:
            self.notify("Select a frontier member first (in the tree or the matrix).", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.send("prune", name=name)

        self.push_screen(ConfirmDialog(
            f"Prune {name}?",
            f"Its branch moves to refs/kdatui/pruned/; nothing is deleted, and `restore {name}` brings it back.",
            yes="Prune"), confirmed)

    def action_archive(self) -> None:
        self.send("archive")

    def action_generalize(self) -> None:
        members = [m["name"] for m in self.snapshot.get("members") or []]
        source = self._member() or self.best_member()
        shapes = [s["name"] for s in self.snapshot.get("shapes") or []]

        def chosen(args: dict | None) -> None:
            if args:
                self.run_worker(self._generalize(args), group="commands")

        device = str((self.snapshot.get("status") or {}).get("device") or "")
        self.push_screen(GeneralizeDialog(members, source, common_shapes(device), shapes), chosen)

    async def _generalize(self, args: dict) -> None:
        """Say what generalize will do (the engine checks the member and the shapes at once),
        then do it (it waits for the re-check of every shape)."""
        if await self._send("generalize", {**args, "dry_run": True}) is not None:
            await self._send("generalize", args)

    def action_recheck(self) -> None:
        sel = self.selection
        if sel is None:
            self.notify("Select a member or an attempt first (in the tree or the matrix).", severity="warning")
            return
        self.send("recheck", name=sel.ref)

    def action_note(self) -> None:
        def written(text: str | None) -> None:
            if text:
                self.send("note", text=text)

        self.push_screen(PromptDialog("Note to the agent", "It goes into the agent's next prompt.",
                                      placeholder="e.g. try BV=32 on split"), written)

    def action_budget(self) -> None:
        def given(text: str | None) -> None:
            if text:
                self.send("budget", change=",".join(text.split()))

        st = self.snapshot.get("status") or {}
        b = st.get("budget") or {}
        now = ", ".join(x for x in ((f"{b['hours']:g} h" if b.get("hours") else ""),
                                    (f"{b['attempts']} attempts" if b.get("attempts") else "")) if x) or "no limit"
        self.push_screen(PromptDialog(
            "More budget", f"The run's budget is {now}. +2h or +20attempts adds; 8h sets. A finished run goes on.",
            placeholder="+2h  +20attempts"), given)

    def action_restore(self) -> None:
        def named(name: str | None) -> None:
            if name:
                self.send("restore", name=name)

        self.push_screen(PromptDialog("Restore a pruned member", "Its branch comes back onto the frontier.",
                                      placeholder="member name"), named)

    def action_details(self) -> None:
        sel = self.selection
        if sel is None:
            self.notify("Select a member or an attempt first (in the tree or the matrix).", severity="warning")
            return
        self.open_details(sel)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def detached_how(self) -> str:
        return {"finished": DETACHED_FINISHED, "paused": DETACHED_PAUSED}.get(self.state, DETACHED)

    def action_detach(self) -> None:
        """Leave; the engine stays (nothing is sent to it)."""
        self.exit(self.detached_how())

    async def action_quit(self) -> None:  # ctrl+q and the palette's quit: detach too
        self.exit(self.detached_how())

    def action_stop_run(self) -> None:
        def confirmed(yes: bool | None) -> None:
            if yes:
                self._stop_sent = True
                self.send("stop")

        run = (self.snapshot.get("status") or {}).get("run") or "the run"
        self.push_screen(ConfirmDialog(
            f"Stop {run}?",
            "The engine finishes or abandons the evaluation in progress and exits; the frontier and the store "
            "stay. Detaching (q) leaves it running instead.", yes="Stop the run"), confirmed)

    def action_chart(self) -> None:
        if not isinstance(self.screen, ChartScreen):
            self.push_screen(ChartScreen())

    def action_toggle_tree(self) -> None:
        main = self._live_main
        if main is not None:
            main.toggle_tree()

    def action_zoom(self) -> None:
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
        elif screen.focused is not None:
            screen.maximize(screen.focused, container=False)

    def action_refresh(self) -> None:
        self.request_refresh(urgent=True)

    def action_reconnect(self) -> None:
        self.lost = None
        self.refresh_bindings()
        self.connect()


def run_tui(socket_path: str | Path, **kwargs) -> str:
    """Attach the TUI to the engine listening on `socket_path` and return how it ended:
    "detached" (q: the run goes on), "stopped" (the run stopped, then quit) or "lost" (the
    engine went away). Raises EngineUnavailable (a message for the user) when no engine
    listens there."""
    check_socket(socket_path)
    return KdaTuiApp(socket_path, **kwargs).run() or DETACHED
