"""The lab's apps end as commands do: a failure is one line on stderr and exit code 1 (its traceback in a file)."""

from __future__ import annotations

import sys

from tpulab.base.errors import EXIT_FAILED, EXIT_OK


def ended(failed: str | None) -> int:
    """The exit code of an app that ended, `failed` saying why it failed (None: it did not)."""
    if failed is None:
        return EXIT_OK
    print(f"tpulab: {failed}", file=sys.stderr, flush=True)
    return EXIT_FAILED
