"""The lab's panes. Each reads the app's state through `lab()`, typed."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.widget import Widget

if TYPE_CHECKING:
    from tpulab.lab.app import TpulabApp


def lab(widget: Widget) -> TpulabApp:
    """The running tpulab app, typed (a pane is only ever mounted in it)."""
    return cast("TpulabApp", widget.app)
