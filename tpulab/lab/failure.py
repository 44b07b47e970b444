"""When an app of the lab fails: its traceback goes to a file under tpulab's home, the command line says one line.

Textual restores the terminal whatever happens, then prints what it kept: a traceback with its locals, screens
long. Here that traceback is written to a file instead, and the app's `failure` says in one line what failed,
where, and where the file is; the command line prints it and exits 1 (`tpulab.cli.main`).
"""

from __future__ import annotations

import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from textual.app import App

from tpulab.base.errors import one_line
from tpulab.base.home import home


@dataclass(frozen=True)
class Failure:
    subject: str  # what failed: 'the lab', 'top'
    what: str  # the error in one line: 'KeyError: 1'
    where: str  # the innermost frame: '_option_list.py:1002 in _move_page'
    path: Path | None  # its whole traceback, None if no file could be written

    def line(self) -> str:
        kept = f"the traceback is in {self.path}" if self.path else "its traceback could not be written"
        return f"{self.subject} failed: {self.what} ({self.where}); {kept}"


def keep_traceback(error: BaseException, subject: str, name: str) -> Failure:
    """The error's traceback written to tpulab's home (crashes/NAME-TIME.txt), else the temporary folder."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else "no frame"
    text = "".join(traceback.format_exception(error))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for folder in (home() / "crashes", Path(tempfile.gettempdir()) / "tpulab-crashes"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{name}-{stamp}-{id(error):x}.txt"
            path.write_text(text)
            return Failure(subject, one_line(error), where, path)
        except OSError:
            continue
    return Failure(subject, one_line(error), where, None)


class FailsInOneLine(App[None]):
    """An app whose unhandled error ends it with return code 1, its traceback in a file, `failure` saying so."""

    SUBJECT = "the app"  # what the one line says failed
    FAILURE_NAME = "app"  # the traceback file's first word

    def __init__(self) -> None:
        super().__init__()
        self.failure: Failure | None = None

    def _handle_exception(self, error: Exception) -> None:  # Textual's one door for an error no handler caught
        if self.failure is None:
            self.failure = keep_traceback(error, self.SUBJECT, self.FAILURE_NAME)
            try:
                self.failed(self.failure)
            except Exception as e:  # noqa: BLE001 - the app is failing already: the first error is the one said
                if self.failure.path is not None:
                    with self.failure.path.open("a") as f:
                        f.write("\nthen, keeping what was in flight:\n" + "".join(traceback.format_exception(e)))
        super()._handle_exception(error)  # return code 1; the app closes and Textual restores the terminal
        self._exit_renderables.clear()  # not printed: the file holds the traceback, the command line the one line

    def failed(self, failure: Failure) -> None:
        """What must not be lost when the app fails (a run in flight): kept here, before the app closes."""
