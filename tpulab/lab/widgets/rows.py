"""A table of rows (the kept runs, a sweep's points, the holders): Home and End move its cursor to the first and the
last row, as the keys help says. Textual's DataTable gives them to the columns, which a row cursor does not have,
so there they only scrolled sideways: a table that never scrolls sideways ignored them."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable


class RowTable(DataTable[str | Text]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("home", "scroll_top", "First row", tooltip="a table's first row (the kept runs, a sweep's points)",
                show=False),
        Binding("end", "scroll_bottom", "Last row", tooltip="a table's last row loaded (the kept runs load on as it "
                "nears the end)", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
