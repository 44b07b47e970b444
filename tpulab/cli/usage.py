"""A mistyped command line, named for what it is: the unknown option or value, and the nearest known one.

argparse alone blames the token after an unknown option (`--bach-size 8` reads as the command
'8'), so each level of the command line is read once before argparse does, left to right, as
argparse would: its options (and their values) and its positionals, down to the sub-command,
whose own parser then reads the rest.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from tpulab.base.errors import EXIT_USAGE, did_you_mean

NUMBER = re.compile(r"-\d+(\.\d*)?")  # a negative number is a value, never an option


class Parser(argparse.ArgumentParser):
    """One line for a bad command line, exit code 2, no usage dump; unknown options and choices are named
    with the nearest known one."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:  # argparse's check of a choice
        if action.choices is not None and value not in action.choices:  # named for what was typed, not the flag
            names = [str(c) for c in action.choices]
            noun = action.metavar.lower() if isinstance(action.metavar, str) and action.metavar.isalpha() \
                else action.dest.replace("_", " ")
            near = did_you_mean(str(value), names)
            raise argparse.ArgumentError(None, f"unknown {noun} {value!r}" + (near or f" (choose from {', '.join(names)})"))

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        args = list(sys.argv[1:] if args is None else args)
        try:
            self.read_ahead(args)
        except argparse.ArgumentError as e:
            self.error(str(e))
        return super().parse_known_args(args, namespace)

    def read_ahead(self, args: list[str]) -> None:
        """This level's options known and its choices valid, in order; a sub-command reads its own rest."""
        positionals = [a for a in self._actions if not a.option_strings]
        i = 0
        while i < len(args):
            token = args[i]
            if token == "--":
                return
            if token.startswith("-") and token != "-" and not NUMBER.fullmatch(token):
                name, has_value, _ = token.partition("=")
                action = self.option(name)
                attached = has_value or not name.startswith("--") and len(name) > 2  # --db=X, -oX
                if action is not None and action.nargs != 0 and not attached and i + 1 < len(args):
                    i += 1
                    if action.type is None:
                        self._check_value(action, args[i])
            elif positionals:
                action = positionals[0]
                if action.type is None:
                    self._check_value(action, token)
                if action.nargs == argparse.PARSER:
                    return
                if action.nargs in (None, 1, argparse.OPTIONAL):
                    positionals.pop(0)
            i += 1

    def option(self, name: str) -> argparse.Action | None:
        """The action of an option, or of the one option it abbreviates; an unknown option is an error here."""
        strings = {s: a for a in self._actions for s in a.option_strings}
        if name in strings:
            return strings[name]
        if not name.startswith("--") and name[:2] in strings:  # -oFILE: a short option and its value
            return strings[name[:2]]
        starting = [s for s in strings if s.startswith(name) and name.startswith("--")]
        if len(starting) == 1:
            return strings[starting[0]]
        if starting:
            return None  # ambiguous: argparse names the candidates
        raise argparse.ArgumentError(None, f"unknown option {name}{did_you_mean(name, strings)}")
