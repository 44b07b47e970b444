"""The glossary: every term the article explains, and the ones tpulab adds, in one place."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tpulab.base.glossary import GLOSSARY


class GlossaryScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,g", "dismiss", "Close", id="glossary.close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="glossary"):
            yield Static("[b]Glossary[/b]  (escape closes)")
            for term, text in sorted(GLOSSARY.items(), key=lambda item: item[0].lower()):
                yield Static(f"[b]{term}[/b]: {text}", classes="term")
