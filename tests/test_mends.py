"""The lab's mends of Textual (`tpulab.lab.mends`) apply to the Textual installed: each replaces the method it was
written for, with the signature and state it reads. A Textual whose privates moved fails here, by name, rather
than as a lab that crashes on a key (pyproject.toml pins the range the mends were written for)."""

from __future__ import annotations

import inspect


def test_each_mend_replaces_the_method_it_was_written_for():
    from textual.widgets import OptionList
    from textual.widgets._select import SelectCurrent

    from tpulab.lab import mends

    assert OptionList._move_page is mends._move_page_when_laid_out
    assert SelectCurrent.update is mends._update_once_composed
    assert list(inspect.signature(mends._move_page).parameters) == ["self", "direction"]
    assert list(inspect.signature(mends._update).parameters) == ["self", "label"]
    assert isinstance(OptionList("a", "b")._index_to_line, dict)  # what the paging mend looks the option up in
