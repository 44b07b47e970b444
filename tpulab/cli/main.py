"""Command line: the lab by default; `--run NAME --no-ui` headless; and the commands, registered in one list.

Each command is one module that declares it (`tpulab.cli.command.Command`). The workload's flags come from
its parameter declarations. TensorFlow is never imported here.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from tpulab.base.version import __version__
from tpulab.cli import bench, calibrate, cards, detect, doctor, results, run, sweep, top
from tpulab.cli.command import DB, JSON, NO_SAVE, NO_UI, PRESET, TELEMETRY, Command, add_workload_flags
from tpulab.cli.usage import Parser

COMMANDS: tuple[Command, ...] = (run.COMMAND, sweep.COMMAND, detect.COMMAND, top.COMMAND, doctor.COMMAND,
                                 results.COMMAND, bench.COMMAND, cards.COMMAND, calibrate.COMMAND)


def _workload_named(argv: Sequence[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg in ("--run", "sweep") and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--run="):
            return arg.split("=", 1)[1]
    return None


def run_as_option(argv: list[str]) -> list[str]:
    """`tpulab run WORKLOAD ...` is `tpulab --run WORKLOAD ...`, every flag the same (when the command
    comes first, as a command does; alone, or before --help, it is the `run` command's usage)."""
    if argv[:1] == ["run"] and len(argv) > 1 and not argv[1].startswith("-"):
        return ["--run", *argv[1:]]
    return argv


def build_parser(workload_name: str | None = None, argv: Sequence[str] | None = None, as_run: bool = False) -> Parser:
    """The top level's flags (with the named workload's, after --run), then each command's parser (a sweep's
    with the named workload's flags, each taking a list). `as_run`: the command line said `tpulab run WORKLOAD`, so
    its usage, its help and its errors are that command's (the flags a run takes, the workload's among them)."""
    from tpulab.base.plugins import broken
    from tpulab.workloads import registry

    named = registry().get(workload_name) if workload_name else None
    as_run = as_run and named is not None
    p = Parser(prog=f"tpulab run {workload_name}" if as_run else "tpulab",
               description=f"{named.title}: {named.summary} The same as `tpulab --run {workload_name}`: add --no-ui "
               "to run headless, else the lab opens with the form filled." if as_run and named else
               "How fast is this machine for deep learning, and why. With no arguments, opens the lab (a terminal UI).",
               epilog="\n".join(b.line() for b in broken()) or None)
    if not as_run:
        p.add_argument("--version", action="version", version=f"tpulab {__version__}")
    p.add_argument("--run", metavar="WORKLOAD", choices=list(registry()), help=argparse.SUPPRESS if as_run else
                   f"workload to run: {', '.join(registry())} (`tpulab --run NAME --help` lists its parameters)")
    NO_UI.add(p, top=True)
    JSON.add(p, "print events as JSON lines; the last line is the result", top=True)
    PRESET.add(p, top=True)
    DB.add(p, top=True)
    NO_SAVE.add(p, top=True)
    TELEMETRY.add(p, top=True)
    p.add_argument("--repeat", dest="run_repeat", type=int, default=1, metavar="N",
                   help="with --run: run it N times, each in a fresh process, one after another, kept as one run whose "
                        "interval holds the spread between processes (a comparison then uses the noise floor for N); "
                        "default 1")
    mh = p.add_argument_group("joining a multi-host run", "JAX backend; on a TPU pod slice JAX finds its peers by "
                              "itself: run the same command on every host")  # (a title is never wrapped: a line)
    mh.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address, the same on every process")
    mh.add_argument("--num-processes", type=int, metavar="N", help="processes in the run, on all hosts")
    mh.add_argument("--process-id", type=int, metavar="I", help="this process: 0 keeps the record, 1..N-1 follow")
    mh.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                    help="a Ray cluster (its address; default: the one this machine belongs to): with --run and "
                         "--processes N, its processes start as Ray tasks (process 0 here); in the lab, the Runtime "
                         "tab's c makes the fleet card of every node (tpulab[ray])")
    mh.add_argument("--per-host", action="store_true",
                    help="with --ray: each process other than 0 on its own node (Ray's STRICT_SPREAD), refused at once "
                         "where the cluster has too few; default: spread where it can")
    mh.add_argument("--join-timeout", type=int, metavar="S", default=60,
                    help="seconds for every process to join before the run fails, naming who is missing; default 60")
    sweeping = "sweep" in (argv or ())
    if named is not None and not sweeping:
        add_workload_flags(p, named)
    if as_run:  # no command follows a run's flags; its usage names the command, its errors the program as ever
        p.set_defaults(command=None)
        p.usage = p.format_usage().removeprefix("usage: ").rstrip().replace("%", "%%")
        p.prog = "tpulab"
        return p
    commands = p.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_to(commands)
    if named is not None and sweeping:
        add_workload_flags(commands.choices[sweep.COMMAND.name], named, lists=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    argv = run_as_option(given)
    parser = build_parser(_workload_named(argv), argv, as_run=argv != given)
    args = parser.parse_args(argv)
    from tpulab.base import safe
    from tpulab.base.errors import EXIT_OK, TpulabError, UsageError

    if args.telemetry == "off":
        import os

        os.environ["TPULAB_TELEMETRY"] = "off"  # read by the workers this process starts
    try:
        if args.command is not None:
            return next(c for c in COMMANDS if c.name == args.command).run(args)
        if args.run and args.no_ui:
            return run.headless(args)
        if args.no_ui:
            raise UsageError("--no-ui needs --run WORKLOAD")
        if args.run and args.ray:
            raise UsageError("--ray with --run starts the run's processes headless: add --no-ui (without --run, the "
                             "lab's Runtime tab makes the fleet card of the cluster)")
        return open_lab(args)
    except TpulabError as e:  # the one place errors become exit codes: one line, no traceback
        parser.exit(e.exit_code, f"{parser.prog}: error: {safe.visible(e)}\n")
    except BrokenPipeError:
        return EXIT_OK


def open_lab(args: argparse.Namespace) -> int:
    """No command: the lab, its form filled from the flags when --run names a workload."""
    from tpulab.cli.apps import ended
    from tpulab.lab.app import TpulabApp

    report = run.fast_report()
    params = run.resolve_params(args, report) if args.run else None
    app = TpulabApp(workload=args.run, params=params, db=args.db, report=report, cluster=args.ray)
    app.run()
    return ended(app.failure.line() if app.failure else None)


if __name__ == "__main__":
    sys.exit(main())
