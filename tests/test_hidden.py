"""A framework's unused extras, kept out while it loads (tpulab.base.hidden), and importable again after."""

from __future__ import annotations

import sys

import pytest

from tpulab.base.hidden import hidden


def test_a_hidden_module_fails_to_import_inside_the_block_and_imports_after(tmp_path, monkeypatch):
    (tmp_path / "extra.py").write_text("DRAWN = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "extra", raising=False)
    with hidden("extra"):
        with pytest.raises(ImportError):
            import extra  # noqa: F401 - as a framework's optional import meets it
    import extra

    assert extra.DRAWN
    monkeypatch.delitem(sys.modules, "extra")


def test_a_module_already_imported_stays_as_it_was():
    with hidden("json"):
        import json
    assert sys.modules["json"] is json and json.dumps([]) == "[]"
