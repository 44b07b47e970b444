"""Asks before a run starts: what it will run, and for how long, when the user may not expect it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmRun(ModalScreen[bool]):
    """Dismissed with True (Enter or y: run it) or False (Escape or n)."""

    BINDINGS = [Binding("enter,y", "answer(True)", "Run it", id="confirm.yes"),
                Binding("escape,n", "answer(False)", "Don't", id="confirm.no")]

    def __init__(self, question: str, plan: str) -> None:
        super().__init__()
        self.question, self.plan = question, plan

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="confirm"):
            yield Static(f"[b]{self.question}[/b]\n\n{self.plan}\n\n"
                         "[b]enter[/b] or [b]y[/b] runs it, [b]escape[/b] or [b]n[/b] does not", id="confirm-text")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
