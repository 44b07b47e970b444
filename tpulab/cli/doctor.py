"""`tpulab doctor`: why an accelerator is not used, and the command that fixes it."""

from __future__ import annotations

import argparse
import json

from tpulab.base.errors import EXIT_OK
from tpulab.cli.command import Command
from tpulab.cli.detect import examine, probe_arguments, say_broken_plugins


def _doctor(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpulab.backends import registry as backend_registry
    from tpulab.base import safe
    from tpulab.views.console import LEVEL_STYLE, framework_view

    report, verdicts = examine(args)
    if args.json:
        print(json.dumps({"verdicts": [v.to_dict() for v in verdicts]}, indent=1))
        return EXIT_OK
    console = Console()
    for v in verdicts:
        about = f" ({v.framework})" if v.framework else ""
        console.print(f"[{LEVEL_STYLE[v.level]}]{v.level}[/] {safe.markup(f'{v.device}{about}: {v.message}')}",
                      highlight=False)
        if v.fix:
            console.print(f"  fix: [bold]{safe.markup(v.fix)}[/]", highlight=False)
    if not verdicts:
        console.print("ok: nothing to fix")
    for name, backend in backend_registry().items():  # each missing one beside the command that installs it
        if not backend.installed(report.packages) and backend.framework:
            console.print(f"{safe.markup(backend.title)}: {framework_view(name, report, False)}", highlight=False)
    say_broken_plugins(console)
    return EXIT_OK


COMMAND = Command("doctor", "why an accelerator is not used, and the command that fixes it", _doctor, probe_arguments)
