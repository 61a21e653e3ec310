"""`kdatui` with no live run: list the task files (./tasks, then the bundled ones) and
return the one chosen, so the CLI can start a run of it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Label, OptionList, Static
from textual.widgets.option_list import Option

from kdatui.engine.task import TaskError, discover_tasks, load_task


@dataclass
class TaskEntry:
    path: Path
    name: str
    summary: str
    error: str = ""


def task_entries(paths: list[Path]) -> list[TaskEntry]:
    out = []
    for p in paths:
        try:
            t = load_task(p)
        except TaskError as e:
            out.append(TaskEntry(p, p.stem, "", error=str(e)))
            continue
        shapes = len(t.shapes)
        budget = f"{t.search.budget_hours:g}h" if t.search.budget_hours else "no time limit"
        out.append(TaskEntry(p, t.name, f"{shapes} shape{'s' * (shapes != 1)}, primary {t.primary_shape}, "
                                        f"baseline {t.bench.baseline}, {budget}. {t.description}".strip()))
    return out


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _option(entry: TaskEntry, index: int) -> Option:
    if entry.error:
        prompt = Text.assemble((entry.name, "bold red"), "\n", (entry.error, "red"))
        return Option(prompt, id=str(index), disabled=True)
    prompt = Text.assemble((entry.name, "bold"), ("  " + _shown(entry.path), "dim"), "\n", (entry.summary, "dim"))
    return Option(prompt, id=str(index))


class TaskPickerScreen(Screen[Path | None]):
    BINDINGS = [Binding("escape,q", "cancel", "Cancel", id="picker.cancel")]

    def __init__(self, paths: list[Path] | None = None, cwd: Path | None = None):
        super().__init__()
        self.entries = task_entries(paths if paths is not None else discover_tasks(cwd))

    def compose(self) -> ComposeResult:
        yield Label("No run is live here. Start one: pick a task (enter), or escape.", id="picker-title")
        if self.entries:
            options: list[Option | None] = []
            for i, e in enumerate(self.entries):
                options += [None, _option(e, i)] if options else [_option(e, i)]
            yield OptionList(*options, id="picker-list")
        else:
            yield Static("No task files found (./tasks/*.toml or the bundled tasks).", id="picker-empty")
        yield Footer()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.entries[int(event.option.id)].path)

    def action_cancel(self) -> None:
        self.dismiss(None)


class TaskPickerApp(App[Path | None]):
    """A tiny app around TaskPickerScreen: `TaskPickerApp().run()` returns a path or None."""

    CSS_PATH = "../kdatui.tcss"
    TITLE = "kdatui: start a run"

    def __init__(self, paths: list[Path] | None = None, cwd: Path | None = None):
        super().__init__()
        self.paths = paths
        self.cwd = cwd

    def on_mount(self) -> None:
        self.push_screen(TaskPickerScreen(self.paths, self.cwd), callback=self.exit)


def pick_task(cwd: Path | None = None) -> Path | None:
    """Show the task picker in the terminal; the chosen task file, or None."""
    return TaskPickerApp(cwd=cwd).run()
