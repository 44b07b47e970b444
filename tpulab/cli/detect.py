"""`tpulab detect`: what hardware is here, and what each installed backend makes of it."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from tpulab.base.errors import EXIT_OK
from tpulab.cli.command import JSON, Command
from tpulab.cli.usage import Parser

if TYPE_CHECKING:
    from rich.console import Console

    from tpulab.machine.verdict import Verdict
    from tpulab.machine.detect import RuntimeReport


def probe_flags(p: argparse.ArgumentParser) -> None:
    """Whether detect and doctor ask each installed framework for its own view: seconds each, in a worker."""
    how = p.add_mutually_exclusive_group()
    how.add_argument("--fast", action="store_true", help="skip the frameworks (no import, no TPU initialisation)")
    how.add_argument("--deep", action="store_true", help="ask each installed framework for its view even where no "
                     "GPU or TPU was found (by default only where one was: seconds each)")


def probe_arguments(parser: Parser) -> None:
    """detect's and doctor's arguments: --json, and whether to probe the frameworks."""
    JSON.add(parser)
    probe_flags(parser)


def probe_frameworks(report: RuntimeReport) -> dict[str, dict[str, Any]]:
    """Each installed framework's own view (seconds each), saying on stderr which one is being probed:
    a spinner on a terminal, a line each elsewhere."""
    from rich.console import Console

    from tpulab.engine.worker import probe_installed

    err = Console(stderr=True)
    if not err.is_terminal:
        return probe_installed(report.packages, lambda title: err.print(f"probing {title}...", highlight=False))
    with err.status("probing the frameworks...") as status:
        return probe_installed(report.packages, lambda title: status.update(f"probing {title}..."))


def examine(args: argparse.Namespace) -> tuple[RuntimeReport, list[Verdict]]:
    """The machine (with the frameworks' own views where --deep, or an accelerator found, asks for them) and the
    verdicts on it."""
    from tpulab.engine.doctor import diagnose
    from tpulab.machine.detect import detect

    report = detect()
    if args.deep or not args.fast and report.accelerated:  # on a CPU alone, the frameworks would see what we saw
        report.frameworks = probe_frameworks(report)
    return report, diagnose(report)


def say_broken_plugins(console: Console) -> None:
    """A line for each plugin that failed to load, after what the command printed."""
    from tpulab.base import safe
    from tpulab.base.plugins import broken

    for b in broken():
        console.print(safe.text(f"plugin: {b.line()}", "yellow"))


def _detect(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpulab.backends import registry as backend_registry
    from tpulab.base.plugins import broken
    from tpulab.views.console import runtime_table

    report, verdicts = examine(args)
    if args.json:
        print(json.dumps({**report.to_dict(), "verdicts": [v.to_dict() for v in verdicts],
                          "plugins_failed": [b.line() for b in broken()]}, indent=1))
        return EXIT_OK
    console = Console()
    console.print(runtime_table(report, verdicts))
    installed = any(b.installed(report.packages) for b in backend_registry().values() if b.framework)
    if installed and not (report.frameworks or args.fast):
        console.print("The frameworks were not asked for their own views: with no GPU or TPU found they see this "
                      "CPU alone (seconds each to ask). tpulab detect --deep asks them.", highlight=False)
    say_broken_plugins(console)
    return EXIT_OK


COMMAND = Command("detect", "what hardware is here, and what each installed backend makes of it", _detect, probe_arguments)
