"""A mend to Textual 8.2's OptionList: the workload list, the command palette's list, a Select's choices.

An OptionList pages by its laid-out lines. With no room inside it (not laid out yet: PageUp in the same breath as
the palette opens, or squeezed to no height) it has none, and PageUp or PageDown raised KeyError, which ended the
app. Here, with no line for the highlighted option, paging does nothing. Imported by the lab's app, once.
"""

from __future__ import annotations

from textual.widgets import OptionList

_move_page = OptionList._move_page


def _move_page_when_laid_out(self: OptionList, direction: int) -> None:
    if (self.highlighted or 0) in self._index_to_line:
        _move_page(self, direction)  # type: ignore[arg-type]


setattr(OptionList, "_move_page", _move_page_when_laid_out)  # noqa: B010 - a method replaced, as mypy allows
