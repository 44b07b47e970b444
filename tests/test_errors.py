"""The one-line form of an error, the exit codes, and the errors a notebook user catches."""

from __future__ import annotations

import tpulab
from tpulab.base.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, EXIT_USAGE, TpulabError, UsageError, exit_code_of, one_line


def test_a_tpulab_error_speaks_for_itself_and_any_other_keeps_its_class_name():
    assert one_line(TpulabError("\n  Keras cannot see the input\nsecond line")) == "Keras cannot see the input"
    assert one_line(UsageError("batch_size must be an integer from 1 to 4096 (got 0)")) == (
        "batch_size must be an integer from 1 to 4096 (got 0)")
    assert one_line(ValueError("bad shape\n  more")) == "ValueError: bad shape"
    assert one_line(KeyError("x")) == "KeyError: 'x'"
    assert one_line(RuntimeError()) == "RuntimeError" and one_line(TpulabError()) == "TpulabError"


def test_a_runs_status_gives_its_exit_code():
    assert [exit_code_of(s) for s in ("finished", "failed", "cancelled", "running")] == [
        EXIT_OK, EXIT_FAILED, EXIT_CANCELLED, EXIT_FAILED]
    assert (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED) == (0, 1, 2, 130)


def test_the_command_line_returns_exit_codes_from_the_table_never_a_bare_number():
    """Every `return` of a command's exit code names it (EXIT_OK, ...): a bare 0 or 1 hides which it means."""
    import ast
    from pathlib import Path

    bare = [f"{path.name}:{node.lineno}" for path in sorted((Path(tpulab.__file__).parent / "cli").glob("*.py"))
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Return)
            and isinstance(node.value, ast.Constant) and type(node.value.value) is int]
    assert bare == []


def test_a_busy_accelerator_is_a_tpulab_error_and_still_a_runtime_error():
    busy = tpulab.AcceleratorBusy("this kernel initialised JAX, which now holds the TPU")
    assert isinstance(busy, TpulabError) and isinstance(busy, RuntimeError)
    assert busy.exit_code == EXIT_FAILED and one_line(busy) == str(busy)
