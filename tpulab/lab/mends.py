"""Mends to Textual 8.2 (the range pyproject.toml accepts; tests/test_mends.py fails where one no longer applies),
each a crash of the app it ended. Imported by the lab's app, once.

An OptionList (the workload list, the command palette's list, a Select's choices) pages by its laid-out
lines. With no room inside it (not laid out yet: PageUp in the same breath as the palette opens, or
squeezed to no height) it has none, and PageUp or PageDown raised KeyError. Here, with no line for the
highlighted option, paging does nothing. (Still so in Textual 8.2.8 and its main branch; not yet reported
upstream: an OptionList of height 0 with an option highlighted, given PageDown, reproduces it.)

A Select sets its value as it mounts, and shows it in its SelectCurrent's label, which that widget composes
as it mounts in turn: on a loaded machine the form rebuilt (sweep mode, another backend) mounted a Select
whose SelectCurrent had not composed its label yet, and the lookup raised NoMatches. Here the label is
shown once it is there. (Reported upstream as Textualize/textual#6581, open in 8.2.8.)
"""

from __future__ import annotations

from textual.css.query import NoMatches
from textual.widgets import OptionList
from textual.widgets._select import SelectCurrent

_move_page = OptionList._move_page
_update = SelectCurrent.update


def _move_page_when_laid_out(self: OptionList, direction: int) -> None:
    if (self.highlighted or 0) in self._index_to_line:
        _move_page(self, direction)  # type: ignore[arg-type]


def _update_once_composed(self: SelectCurrent, label: object) -> None:
    try:
        _update(self, label)  # type: ignore[arg-type]
    except NoMatches:  # its label not composed yet: after the messages waiting, it is
        self.call_later(_update_once_composed, self, label)


setattr(OptionList, "_move_page", _move_page_when_laid_out)  # noqa: B010 - a method replaced, as mypy allows
setattr(SelectCurrent, "update", _update_once_composed)  # noqa: B010
