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


class UserCodeError(TpulabError):
    """The user's own code raised: the message is their traceback (their frames only), kept whole."""

    whole = True  # a run's error keeps every line, not just the first


def out_of_memory(e: BaseException) -> bool:
    """Whether a framework's error says the device ran out of memory (XLA's RESOURCE_EXHAUSTED, TensorFlow's
    ResourceExhaustedError, CUDA's out of memory)."""
    text = f"{type(e).__name__}: {e}"
    return any(s in text for s in ("RESOURCE_EXHAUSTED", "ResourceExhausted", "Out of memory", "out of memory",
                                   "OOM when allocating"))
