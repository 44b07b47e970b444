"""The one error base: every error tpulab explains to a user carries its message and its exit code.

The command line maps them to exit codes in one place (`tpulab.cli.main.main`); the lab and the
Python API show the message. Anything else that escapes is a bug, and keeps its traceback.
"""

from __future__ import annotations

EXIT_FAILED = 1
EXIT_USAGE = 2


class TpulabError(Exception):
    """Something the user can act on: the message names what is wrong and the way out."""

    exit_code = EXIT_FAILED


class UsageError(TpulabError, ValueError):
    """A bad value or combination on the command line, in the form or in an API call (exit code 2)."""

    exit_code = EXIT_USAGE
