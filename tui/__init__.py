"""kdatui's terminal UI: a Textual app that is only a client of the engine's control
socket (engine/protocol.py). Entry points for the CLI:

    from kdatui.tui import run_tui, pick_task
    how = run_tui(socket_path)     # "detached" (| "-finished" | "-paused") | "stopped" | "lost";
                                   # raises EngineUnavailable
    task = pick_task()             # no live run: a task file chosen by the user, or None

`KdaTuiApp(socket_path, ...)` is the app itself (tests: `client_factory=`, `clock=`);
`KdaTuiApp()` alone (`textual run --dev kdatui.tui.app:KdaTuiApp`) finds the engine of the
repo around the current directory, or says there is none and offers the tasks.
Imports are lazy so `kdatui.tui.client` stays cheap.
"""

from __future__ import annotations

__all__ = ["KdaTuiApp", "TaskPickerApp", "pick_task", "run_tui"]


def __getattr__(name: str):
    if name in ("KdaTuiApp", "run_tui"):
        from . import app

        return getattr(app, name)
    if name in ("TaskPickerApp", "pick_task"):
        from .screens import task_picker

        return getattr(task_picker, name)
    raise AttributeError(name)
