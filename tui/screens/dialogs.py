"""Modal dialogs: confirm, a one-line prompt (note, restore), generalize, engine gone.

Every dialog works from the keyboard alone: enter confirms, escape cancels, and the
first field has focus."""

from __future__ import annotations

import re

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Select, SelectionList, Static

from kdatui.engine.task import TaskError, parse_shape_spec


class ConfirmDialog(ModalScreen[bool]):
    """Yes or no. `y` confirms, `n` or escape declines; No has focus so a stray enter
    does not stop a run."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, title: str, message: str, yes: str = "Yes", danger: bool = True):
        super().__init__()
        self.title_text = title
        self.message = message
        self.yes = yes
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(self.message, classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.yes} (y)", variant="error" if self.danger else "primary", id="yes",
                             compact=True)
                yield Button("No (n)", id="no", compact=True)

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class PromptDialog(ModalScreen[str | None]):
    """One line of text: a note to the agent, a member to restore."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(self, title: str, hint: str, placeholder: str = "", value: str = ""):
        super().__init__()
        self.title_text = title
        self.hint = hint
        self.placeholder = placeholder
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(self.hint, classes="dialog-hint")
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")
            yield Static("", classes="dialog-error", id="prompt-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Send (enter)", variant="primary", id="ok", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def _submit(self) -> None:
        text = self.query_one(Input).value.strip()
        if not text:
            self.query_one("#prompt-error", Static).update("Type something first (escape cancels).")
            return
        self.dismiss(text)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._submit()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ok":
            self._submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


def split_specs(text: str) -> list[str]:
    """Shapes typed in one line: separated by spaces or semicolons (a `B=1,T=4096,H=64`
    spec has commas of its own)."""
    return [s for s in re.split(r"[\s;]+", text.strip()) if s]


def check_specs(specs: list[str]) -> str | None:
    """The first problem with the typed shapes, in the engine's words, or None."""
    for s in specs:
        try:
            parse_shape_spec(s)
        except TaskError as e:
            return str(e)
    return None


class GeneralizeDialog(ModalScreen[dict | None]):
    """Pick the source member and the shapes to add, and whether the search moves to the
    new task; returns the `generalize` arguments {"from": member, "shapes": [...],
    "continue_search": bool} or None."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="generalize.cancel"),
        Binding("ctrl+g", "submit", "Generalize", id="generalize.submit"),
    ]

    def __init__(self, members: list[str], source: str | None, common: list[tuple[str, str]],
                 task_shapes: list[str]):
        super().__init__()
        self.members = members
        self.source = source
        self.common = [(name, label) for name, label in common if name not in task_shapes]
        self.task_shapes = task_shapes

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog dialog-wide", id="generalize"):
            yield Label("Generalize: a new task with more shapes", classes="dialog-title")
            yield Static(Text.assemble(("the task has ", "dim"), ", ".join(self.task_shapes) or "-"),
                         classes="dialog-hint")
            with Horizontal(classes="field"):
                yield Label("from member ", classes="field-label")
                options = [(m, m) for m in self.members]
                yield Select(options, value=self.source if self.source in self.members else Select.BLANK,
                             allow_blank=not self.members, id="gen-source", prompt="no member yet", compact=True)
            yield Label("add shapes (space ticks, tab moves on)", classes="field-label")
            yield SelectionList[str](*[(label, name) for name, label in self.common], id="gen-common")
            yield Label("or type them (b1_t4096_h64  B=2,T=2048,H=32; spaces between):", classes="field-label")
            yield Input(placeholder="b1_t4096_h64 B=2,T=2048,H=32", id="gen-typed", compact=True)
            yield Checkbox("then continue the search on the new task (untick: stay on this one)", value=True,
                           id="gen-continue", compact=True)
            yield Static("", classes="dialog-error", id="gen-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Generalize (ctrl+g)", variant="primary", id="ok", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def on_mount(self) -> None:
        target = self.query_one("#gen-common") if self.common else self.query_one("#gen-typed")
        target.focus()

    @on(Input.Changed, "#gen-typed")
    def _typed(self, event: Input.Changed) -> None:
        problem = check_specs(split_specs(event.value))
        self.query_one("#gen-error", Static).update(problem or "")

    def chosen(self) -> dict | None:
        error = self.query_one("#gen-error", Static)
        typed = split_specs(self.query_one("#gen-typed", Input).value)
        problem = check_specs(typed)
        if problem:
            error.update(problem)
            return None
        shapes = list(self.query_one("#gen-common", SelectionList).selected) + typed
        if not shapes:
            error.update("Pick or type at least one shape to add.")
            return None
        source = self.query_one("#gen-source", Select).value
        if source is Select.BLANK or not source:
            error.update("The frontier has no member to start from yet.")
            return None
        return {"from": source, "shapes": shapes,
                "continue_search": self.query_one("#gen-continue", Checkbox).value}

    def action_submit(self) -> None:
        result = self.chosen()
        if result is not None:
            self.dismiss(result)

    @on(Input.Submitted, "#gen-typed")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ok":
            self.action_submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class EngineGoneDialog(ModalScreen[str]):
    """The engine stopped answering. Quit, reconnect (after a restart), or stay and read."""

    BINDINGS = [
        Binding("q", "choose('quit')", "Quit", id="gone.quit"),
        Binding("r", "choose('reconnect')", "Reconnect", id="gone.reconnect"),
        Binding("escape", "choose('stay')", "Stay", id="gone.stay"),
    ]

    def __init__(self, why: str, stopped: bool = False):
        super().__init__()
        self.why = why
        self.stopped = stopped

    def compose(self) -> ComposeResult:
        title = "The run stopped" if self.stopped else "The engine went away"
        body = (f"{self.why}\n\nThe screen keeps the last state it saw. "
                + ("" if self.stopped else "If the run was restarted, reconnect. "))
        with Vertical(classes="dialog"):
            yield Label(title, classes="dialog-title")
            yield Static(body, classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Quit (q)", variant="primary", id="quit", compact=True)
                yield Button("Reconnect (r)", id="reconnect", compact=True)
                yield Button("Stay (esc)", id="stay", compact=True)

    def on_mount(self) -> None:
        self.query_one("#quit", Button).focus()

    def action_choose(self, what: str) -> None:
        self.dismiss(what)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "stay")
