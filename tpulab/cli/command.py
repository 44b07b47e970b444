"""What a command of the command line is, and the options several commands share, each declared once.

A command module declares one `Command` (its name, help, arguments and handler together); `main` registers
them in one list. A command module imports what its handler needs inside the handler: building the parser
imports every command module, and `tpulab --help` or `tpulab results` should not wait for the rest.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tpulab.base.errors import EXIT_FAILED, EXIT_NO_VERDICT, did_you_mean
from tpulab.cli.usage import Parser

if TYPE_CHECKING:
    from rich.console import Console

    from tpulab.engine.store import Store
    from tpulab.workloads.base import Workload

Handler = Callable[[argparse.Namespace], int]


def no_arguments(parser: Parser) -> None:
    """A command (or action) that takes no arguments of its own."""


@dataclass(frozen=True)
class Command:
    """One command (`tpulab detect`) or one action of a command (`tpulab results list`), declared whole."""

    name: str
    help: str  # its line in the list of commands
    handler: Handler | None  # None: a command of actions, which runs the action named
    arguments: Callable[[Parser], None] = no_arguments
    description: str | None = None  # what its own --help says above its flags
    actions: tuple[Command, ...] = ()  # `results list`, `cards show`...: the first is the default

    def add_to(self, commands: argparse._SubParsersAction[Parser]) -> None:
        """Its parser among `commands`, with its arguments, and its actions' parsers below it."""
        parser = commands.add_parser(self.name, help=self.help, description=self.description)
        self.arguments(parser)
        if self.actions:
            actions = parser.add_subparsers(dest="action", metavar="ACTION")
            for action in self.actions:
                action.add_to(actions)
            parser.set_defaults(action=self.actions[0].name)

    def run(self, args: argparse.Namespace) -> int:
        """Its exit code; a `TpulabError` it raises becomes one line and that error's exit code in `main`."""
        if self.handler is None:
            return next(a for a in self.actions if a.name == args.action).run(args)
        return self.handler(args)


@dataclass(frozen=True)
class Shared:
    """An option of the top level that commands take too. A command's copy has no default of its own (argparse
    would let it overwrite the value given before the command): `tpulab --db X results` is `tpulab results --db X`."""

    flag: str
    help: str
    options: dict[str, Any] = field(default_factory=dict)  # argparse's: action, type, choices, the top level's default

    def add(self, parser: argparse.ArgumentParser, help: str | None = None, *, top: bool = False) -> None:
        """The option on a command's parser (with `top`, on the top level's), its help said for it if given."""
        options = self.options if top else {**self.options, "default": argparse.SUPPRESS}
        parser.add_argument(self.flag, help=help or self.help, **options)


DB = Shared("--db", "results database (default: $TPULAB_HOME/results.db or the user data dir)", {"type": Path})
JSON = Shared("--json", "print JSON rather than text", {"action": "store_true"})
NO_UI = Shared("--no-ui", "run headless in this terminal, without the lab", {"action": "store_true"})
PRESET = Shared("--preset", "start from a preset of the workload's parameters")
NO_SAVE = Shared("--no-save", "do not keep this run in the results database", {"action": "store_true"})
TELEMETRY = Shared("--telemetry", "sample CPU, memory and the device's utilisation beside the steps; default on",
                   {"choices": ("on", "off"), "default": "on"})


def add_fail_on(parser: argparse.ArgumentParser) -> None:
    """`--fail-on`, the regression gate `results compare` and `cards compare` share (`tpulab.engine.gate`)."""
    from tpulab.engine.gate import GATES

    def word(text: str) -> str:  # argparse's line then names the flag, and what it takes
        if text not in GATES:
            raise argparse.ArgumentTypeError(f"must be {' or '.join(GATES)} (got {text!r}){did_you_mean(text, GATES)}")
        return text

    parser.add_argument("--fail-on", type=word, choices=tuple(GATES),
                        help=f"a regression gate for CI: exit {EXIT_FAILED} when a figure is detectably slower than "
                             "the first's (changed: slower or faster), with one line naming it, its ratio and interval; "
                             "no difference detected passes; a figure with no verdict (disturbed, too few steps) "
                             f"exits {EXIT_NO_VERDICT}, saying why")


def on_store(action: Callable[[argparse.Namespace, Store, Console], int]) -> Handler:
    """An action on the results database `--db` names, printing to the terminal (a store that cannot be used
    raises `StoreError`, which `main` words)."""
    def handler(args: argparse.Namespace) -> int:
        from rich.console import Console

        from tpulab.engine.store import Store, default_path

        return action(args, Store(args.db or default_path()), Console())
    return handler


METAVARS = {int: "N", float: "X", str: "PATH"}


def add_workload_flags(parser: argparse.ArgumentParser, w: Workload, lists: bool = False) -> None:
    """One flag per declared parameter; with `lists` (a sweep), each takes a comma list (or a doubling range)."""
    g = parser.add_argument_group(f"{w.name} parameters", w.summary + " Presets: " + ", ".join(w.presets) + ".")
    parser.set_defaults(workload_params=tuple(spec.name for spec in w.params))  # what `flag_values` reads
    set_by_sweep: set[str] = set()
    if lists:
        from tpulab.engine.sweep import DEFAULT_STEPS

        set_by_sweep = w.set_by_sweeps(DEFAULT_STEPS)
    for spec in w.params:
        if spec.name in set_by_sweep:  # accepted, so that the sweep can say why it refuses it; not offered
            g.add_argument(spec.flag, dest=spec.name, default=None, help=argparse.SUPPRESS)
            continue
        extra = f" [{spec.unit}]" if spec.unit else ""
        said = f": {spec.why_not}" if isinstance(spec.why_not, str) and spec.why_not else ""
        only = f" ({'/'.join(spec.only)} only{said})" if spec.only else ""
        help_text = f"{spec.help}{extra}{only}; {spec.allowed()}; default {spec.show(spec.default) or 'none'}"
        if lists and spec.axis:
            ranged = {int: ", or a doubling range like 16..1024", float: ", or a doubling range like 0.5..8"}.get(
                spec.kind, "")
            g.add_argument(spec.flag, dest=spec.name, default=None, metavar="LIST",
                           help=f"{help_text}; a comma list{ranged}")
        elif spec.kind is bool:
            g.add_argument(spec.flag, dest=spec.name, action=argparse.BooleanOptionalAction, default=None,
                           help=help_text)
        else:
            g.add_argument(spec.flag, dest=spec.name, default=None,
                           metavar="{" + ",".join(spec.choices) + "}" if spec.choices
                           else spec.name.upper() if spec.form else METAVARS[spec.kind],
                           help=help_text)


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The workload's parameters as given on the command line (None: not given)."""
    return {name: getattr(args, name) for name in args.workload_params}
