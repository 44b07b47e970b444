"""The keys and help screen: every binding the lab has, with what it does, read from the bindings themselves."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

Rows = list[tuple[str, str]]  # (keys, what they do)

# What no binding of the lab's own declares: Textual's keys, worded for this lab.
MOVING: Rows = [("alt+1 .. alt+5", "the tabs, from inside a text field too"),
                ("tab, shift+tab", "next, previous control (the focused one is coloured)"),
                ("arrows, PgUp, PgDn", "move in, or scroll, the focused list, table or pane"),
                ("home, end", "the top, the end of the focused pane"),
                ("ctrl+p", "the command palette: type help, glossary, choose conv...")]


def rows(bindings: list[BindingType]) -> Rows:
    """Each described binding: its shown key (or its first), and what it does (its tooltip says more)."""
    return [(b.key_display or b.key.split(",")[0], b.tooltip or b.description) for b in bindings
            if isinstance(b, Binding) and b.description]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close", id="help.close")]

    def __init__(self, sections: list[tuple[str, Rows]]) -> None:
        super().__init__()
        self.sections = [*sections, ("Moving around", MOVING)]

    def compose(self) -> ComposeResult:
        width = max(len(keys) for _, section in self.sections for keys, _ in section)
        lines = ["[b]Keys[/b]  (escape closes this; g opens the glossary of terms)"]
        for title, section in self.sections:
            lines.append(f"\n[b u]{title}[/]")
            lines += [f"[b]{keys:>{width}}[/b]  {what}" for keys, what in section]
        with VerticalScroll(id="help"):
            yield Static("\n".join(lines), id="help-text")
