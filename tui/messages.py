"""Messages the TUI's parts send each other (posting style: all in one place).

Flow: the event thread posts `EventsPending` (once per burst, thread-safe); the app
drains the feed at most ~10 times a second, writes the loop log, and asks for a fresh
snapshot when a state-changing event arrived. `EngineLost` comes from the event thread
or from a failed request. Widgets report the operator's selection with `Selected`.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass(frozen=True)
class Selection:
    """What the operator points at: a frontier member, an attempt, or the baseline."""

    kind: str  # "member" | "attempt" | "baseline"
    name: str = ""  # member name (or the attempt's candidate name)
    attempt: int | None = None

    @property
    def ref(self) -> str:
        """How the protocol names it (`recheck`): a member name or `attempt:<id>`."""
        return self.name if self.kind == "member" else f"attempt:{self.attempt}"

    @property
    def label(self) -> str:
        return self.name if self.kind == "member" else f"attempt #{self.attempt} {self.name}".rstrip()

    def candidate_args(self) -> dict:
        """The arguments of the `candidate` request."""
        return {"name": self.name} if self.kind == "member" else {"attempt": self.attempt}


class EventsPending(Message):
    """Posted by the event thread: events are waiting in the feed's buffer (at most one
    is in flight per drain, so a flood of events never floods the message queue)."""


class EngineLost(Message):
    """The engine stopped answering (closed, crashed, or the run stopped)."""

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why


class Selected(Message):
    """The tree or the matrix moved its cursor onto a candidate (None: the baseline, or a
    family node)."""

    def __init__(self, selection: Selection | None, source=None) -> None:
        super().__init__()
        self.selection = selection
        self.source = source


class OpenDetails(Message):
    """The operator pressed enter on a candidate (tree or matrix)."""

    def __init__(self, selection: Selection) -> None:
        super().__init__()
        self.selection = selection
