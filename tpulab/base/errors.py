"""The one error base, the exit codes and the one-line form of an error.

Every error tpulab explains to a user carries its message and its exit code. The command line
maps them to exit codes in one place (`tpulab.cli.main.main`); the lab and the Python API show the
message. Anything else that escapes is a bug, and keeps its traceback.
"""

from __future__ import annotations

import difflib
import errno
import shutil
from collections.abc import Iterable
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1  # a run failed, or nothing came of a command
EXIT_USAGE = 2  # a bad value or command line: nothing ran
EXIT_NO_VERDICT = 3  # a regression gate (`compare --fail-on`) could not judge a figure: none was found slower
EXIT_CANCELLED = 130  # stopped by the user (Ctrl+C's 128 + SIGINT)

STATUS_EXIT = {"finished": EXIT_OK, "failed": EXIT_FAILED, "cancelled": EXIT_CANCELLED}


def exit_code_of(status: str) -> int:
    """A run's exit code from its final status (a run that did not end cleanly failed)."""
    return STATUS_EXIT.get(status, EXIT_FAILED)


class TpulabError(Exception):
    """Something the user can act on: the message names what is wrong and the way out."""

    exit_code = EXIT_FAILED


class UsageError(TpulabError, ValueError):
    """A bad value or combination on the command line, in the form or in an API call (exit code 2)."""

    exit_code = EXIT_USAGE


class UserCodeError(TpulabError):
    """The user's own code raised: the message is their traceback (their frames only), kept whole."""

    whole = True  # a run's error keeps every line, not just the first


class AcceleratorBusy(TpulabError, RuntimeError):
    """This process holds the accelerator a run needs, so no worker could open it (a RuntimeError too, as it
    always was)."""


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """'; did you mean --batch-size?' for the nearest known word, or '' when none is near: one wording of a typo's
    fix for the command line and the Python API alike."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def first_line(text: str) -> str:
    """The first line of a text that holds anything, stripped ('' for none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def one_line(e: BaseException) -> str:
    """An error in one line: a tpulab error's own first line (its message speaks for itself); any other
    error's first line after its class name ('KeyError: x'), which says what went wrong."""
    first = first_line(str(e))
    if isinstance(e, TpulabError):
        return first or type(e).__name__
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def out_of_memory(e: BaseException) -> bool:
    """Whether a framework's error says the device ran out of memory (XLA's RESOURCE_EXHAUSTED, TensorFlow's
    ResourceExhaustedError, CUDA's out of memory)."""
    text = f"{type(e).__name__}: {e}"
    return any(s in text for s in ("RESOURCE_EXHAUSTED", "ResourceExhausted", "Out of memory", "out of memory",
                                   "OOM when allocating"))


NO_SPACE = "no space left on device"
LITTLE_FREE = 1 << 20  # bytes: a write that fails where less than this is free failed for want of space


def why_unwritten(path: Path, said: str, code: int | None = None) -> str:
    """Why a write at `path` failed, named by its cause so that the user knows what to free: no space left on its
    filesystem (ENOSPC, or a bare I/O error where next to nothing is free: SQLite's "disk I/O error" on a full
    disk), the file size limit (EFBIG: ulimit -f), else what the system said (`code`: the errno, when known)."""
    if code == errno.ENOSPC or code is None and _free(path) < LITTLE_FREE:
        return NO_SPACE
    if code == errno.EFBIG or code is None and _size_limited():
        return "file too large for the file size limit (ulimit -f)"
    return said


def _free(path: Path) -> float:
    """Bytes free to this user on the filesystem that holds `path` (or would: its nearest existing folder)."""
    for folder in (path, *path.parents):
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return float("inf")


def _size_limited() -> bool:
    import resource  # POSIX only, as the file size limit is

    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY
