"""The keys and help screen: every binding the lab has, with what it does, read from the bindings themselves."""

from __future__ import annotations

import unicodedata
from typing import Iterable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Static

from tpulab.lab.widgets.rows import RowTable

Rows = list[tuple[str, str]]  # (keys, what they do)


def key_text(binding: Binding) -> str:
    """A binding's keys as the help shows them: its own display, else every key it takes ('escape, ?, q')."""
    return binding.key_display or ", ".join(_named(k.strip()) for k in binding.key.split(","))


def _named(key: str) -> str:
    """A key named for a character by its character (question_mark: ?); the others by name (escape, f1, space)."""
    try:
        char = unicodedata.lookup(key.replace("_", " ").upper())
    except KeyError:
        return key
    return char if char.isprintable() and not char.isspace() and len(key) > 1 else key


def rows(bindings: Iterable[BindingType]) -> Rows:
    """Each described binding: its keys, and what it does (its tooltip says more)."""
    return [(key_text(b), b.tooltip or b.description) for b in bindings if isinstance(b, Binding) and b.description]


# What no binding of the lab's own declares: Textual's keys, worded for this lab.
MOVING: Rows = [("alt+1..5", "the tabs, from inside a text field too"),
                ("tab", "the next control (the focused one is coloured); shift+tab: the previous"),
                ("arrows, PgDn", "move in, or scroll, the focused list, table or pane; PgUp, home, end too"),
                *rows(RowTable.BINDINGS),
                ("ctrl+p", "the command palette: type help, glossary, choose conv...")]


def widget_rows(widget: type[Widget], where: str) -> Rows:
    """The keys a Textual widget takes that its arrows do not already say (Enter, space), read from its bindings."""
    return [(b.key.replace(",", ", "), f"{b.description}: {where}") for b in widget.BINDINGS
            if isinstance(b, Binding) and any(k in b.key.split(",") for k in ("enter", "space"))]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close", id="help.close")]

    def __init__(self, sections: list[tuple[str, Rows]]) -> None:
        super().__init__()
        self.sections = [*sections, ("Moving around", MOVING)]

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(justify="right", style="bold", no_wrap=True)
        table.add_column()  # what a key does wraps under itself, never under the keys
        for title, section in self.sections:
            table.add_row("", Text(f"\n{title}", style="bold underline"))
            for keys, what in section:
                table.add_row(keys, what)
        with VerticalScroll(id="help"):
            yield Static("[b]Keys[/b]  (escape closes this; g opens the glossary of terms)")
            yield Static(table, id="help-text")
