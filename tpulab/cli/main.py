"""Command line: the TUI by default; `--run NAME --no-ui` headless; detect, doctor, results.

The workload's flags come from its parameter declarations. TensorFlow is never imported here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from tpulab.base.version import __version__
from tpulab.cli.usage import Parser

if TYPE_CHECKING:
    from tpulab.backends import Cluster
    from tpulab.machine.detect import RuntimeReport
    from tpulab.workloads.base import Workload

METAVARS = {int: "N", float: "X", str: "PATH"}


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


def add_workload_flags(parser: argparse.ArgumentParser, w: Workload, lists: bool = False) -> None:
    """One flag per declared parameter; with `lists`, each takes a comma list (or a doubling range)."""
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
            ranged = ", or a doubling range like 16..1024" if spec.kind is int else ""
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


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def add_filter_flags(a: argparse.ArgumentParser, workloads: list[str]) -> None:
    """The filters `results list`, `export` and `prune` share (the lab's filter field takes them as key:value)."""
    from tpulab.backends import registry as backend_registry
    from tpulab.base.events import STATUSES

    g = a.add_argument_group("filters (each narrows the selection)")
    g.add_argument("--workload", choices=workloads)
    g.add_argument("--device", metavar="DEVICE", help="a kind (cpu, gpu, tpu) or part of the device's name")
    g.add_argument("--backend", choices=tuple(backend_registry()))
    g.add_argument("--status", choices=STATUSES)
    g.add_argument("--sweep", metavar="ID", help="the runs of a sweep (its id or first characters)")
    g.add_argument("--since", metavar="WHEN", help="started at or after: 2026-11-01, 2026-11-01T14:00, 7d, 12h")
    g.add_argument("--before", metavar="WHEN", help="started before: a date, a time or an age, as --since")


def build_parser(workload_name: str | None = None, argv: Sequence[str] | None = None) -> Parser:
    from tpulab.base.plugins import broken
    from tpulab.workloads import registry

    p = Parser(prog="tpulab", description="How fast is this machine for deep learning, and why. "
               "With no arguments, opens the lab (a terminal UI).",
               epilog="\n".join(b.line() for b in broken()) or None)
    p.add_argument("--version", action="version", version=f"tpulab {__version__}")
    p.add_argument("--run", metavar="WORKLOAD", choices=list(registry()),
                   help=f"workload to run: {', '.join(registry())} (`tpulab --run NAME --help` lists its parameters)")
    p.add_argument("--no-ui", action="store_true", help="run headless in this terminal, without the lab")
    p.add_argument("--json", action="store_true", help="print events as JSON lines; the last line is the result")
    p.add_argument("--preset", help="start from a preset of the workload's parameters")
    p.add_argument("--db", type=Path, help="results database (default: $TPULAB_HOME/results.db or the user data dir)")
    p.add_argument("--no-save", action="store_true", help="do not keep this run in the results database")
    p.add_argument("--telemetry", choices=("on", "off"), default="on",
                   help="sample CPU, memory and the device's utilisation beside the steps; default on")
    mh = p.add_argument_group("joining a multi-host run (JAX backend; on a TPU pod slice JAX finds its peers by "
                              "itself: run the same command on every host)")
    mh.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address, the same on every process")
    mh.add_argument("--num-processes", type=int, metavar="N", help="processes in the run, on all hosts")
    mh.add_argument("--process-id", type=int, metavar="I", help="this process: 0 keeps the record, 1..N-1 follow")
    mh.add_argument("--join-timeout", type=int, metavar="S", default=60,
                    help="seconds for every process to join before the run fails, naming who is missing; default 60")
    sweeping = "sweep" in (argv or ())
    if workload_name in registry() and not sweeping:
        add_workload_flags(p, registry()[workload_name])

    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", help="run a workload: `tpulab run WORKLOAD [flags]` is `tpulab --run WORKLOAD [flags]`",
                   description="The same as `tpulab --run WORKLOAD`: add --no-ui to run headless; "
                   "`tpulab run WORKLOAD --help` lists its parameters.").add_argument(
        "workload", choices=list(registry()), metavar="WORKLOAD", help=f"one of {', '.join(registry())}")
    sw = sub.add_parser("sweep", help="run a grid of a workload's parameters and find the fastest configuration",
                        description="Every parameter flag takes a comma list (--batch-size 32,64,128) or, for "
                        "integers, a doubling range (--batch-size 16..1024). Each point is a run, kept in the "
                        "results with the sweep's id; the article's configuration is run too when the grid lacks it "
                        "and holds the article's other values.")
    sw.add_argument("workload", choices=list(registry()), help=f"one of {', '.join(registry())}")
    sw.add_argument("--steps", type=int, default=None, help="timed steps per point (training: one epoch of this many "
                    "steps, no validation); the first call is extra and excluded; default 12")
    sw.add_argument("--repeat", type=int, default=1, help="runs per point, to show the spread; default 1")
    sw.add_argument("--max-minutes", type=float, default=None, help="stop after the point running at this budget")
    sw.add_argument("--max-itl", type=float, default=None, metavar="MS", help="a decode sweep names, per prompt "
                    "length, the largest batch whose inter-token latency (p50) stays within this many ms")
    sw.add_argument("--preset", help="start from a preset of the workload's parameters")
    sw.add_argument("--json", action="store_true", dest="json",
                    help="print a JSON line per finished point, then the sweep's summary")
    sw.add_argument("--db", type=Path, dest="db", default=argparse.SUPPRESS)
    sw.add_argument("--no-save", action="store_true", help="do not keep the sweep or its runs")
    sw.add_argument("--no-ui", action="store_true", help="accepted for symmetry: a sweep from the command line "
                    "always runs headless (the lab's Sweep tab is the other way)")
    sw.add_argument("--telemetry", choices=("on", "off"), default="on", dest="telemetry",
                    help="sample CPU, memory and the device's utilisation beside the steps; default on")
    if workload_name in registry() and sweeping:
        add_workload_flags(sw, registry()[workload_name], lists=True)
    d = sub.add_parser("detect", help="what hardware is here, and what each installed backend makes of it")
    d.add_argument("--json", action="store_true", dest="json")
    probe_flags(d)
    top = sub.add_parser("top", help="live CPU, memory and device utilisation of every device detected, and the "
                         "processes holding each accelerator, without a run",
                         description="Never holds a device a run may need: no framework is imported. q quits, ? shows the keys.")
    top.add_argument("--json", action="store_true", dest="json", help="a JSON line per sample on stdout")
    top.add_argument("--count", type=int, metavar="N", help="take N samples, then exit (default: until q, or Ctrl+C with --json)")
    top.add_argument("--interval", type=float, metavar="S", default=1.0, help="seconds between samples; default 1")
    doc = sub.add_parser("doctor", help="why an accelerator is not used, and the command that fixes it")
    doc.add_argument("--json", action="store_true", dest="json")
    probe_flags(doc)

    r = sub.add_parser("results", help="list, show, compare, export, import and prune kept runs")
    r.add_argument("--db", type=Path, dest="db", default=argparse.SUPPRESS)
    r.add_argument("--json", action="store_true", dest="json", default=argparse.SUPPRESS)
    rs = r.add_subparsers(dest="action", metavar="ACTION")
    for name, helptext in (("list", "runs, newest first"), ("show", "one run in full"),
                           ("compare", "runs side by side, with speedups against the first"),
                           ("sweep", "sweeps, newest first, or one again: its table, findings and chart"),
                           ("export", "runs (and sweeps, whole) to a file"),
                           ("import", "runs and sweeps from an exported JSON file"),
                           ("report", "runs (compared) or sweeps as one self-contained HTML page to share"),
                           ("prune", "remove the runs a filter picks, and reclaim their space")):
        a = rs.add_parser(name, help=helptext)
        a.add_argument("--db", type=Path, dest="db", default=argparse.SUPPRESS)
        if name in ("list", "export", "prune"):
            add_filter_flags(a, list(registry()))
        if name in ("list", "show", "compare", "sweep"):
            a.add_argument("--json", action="store_true", dest="json", default=argparse.SUPPRESS)
        if name in ("show", "compare", "export"):
            a.add_argument("--profile", action="store_true", dest="profile", help={
                "show": "the run's whole profile, op by op (a run profiled with --profile)",
                "compare": "where the time moved: ops matched by name, then by category, each against the first",
                "export": "one run's profile alone, its op table (a run profiled with --profile)"}[name])
        if name == "show":
            a.add_argument("id")
        elif name == "sweep":
            a.add_argument("id", nargs="?", help="a sweep's id (or its first characters); none lists them")
        elif name == "compare":
            a.add_argument("ids", nargs="+", metavar="ID")
        elif name == "export":
            a.add_argument("ids", nargs="*", metavar="ID", help="runs or sweeps to export (default: all)")
            a.add_argument("--format", choices=("json", "csv"), default="json")
            a.add_argument("-o", "--output", type=Path, required=True)
        elif name == "import":
            a.add_argument("file", type=Path)
        elif name == "report":
            a.add_argument("ids", nargs="+", metavar="ID", help="runs or sweeps (their ids or first characters)")
            a.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.html", help="the page to write")
        elif name == "list":
            a.add_argument("--limit", type=positive, metavar="N",
                           help="the newest N runs (default: what fits the screen)")
            a.add_argument("--all", action="store_true", help="every run")
        elif name == "prune":
            a.add_argument("--all", action="store_true", help="every run, when no filter is given")
            a.add_argument("--yes", action="store_true", help="do not ask first (for scripts)")
    r.set_defaults(action="list")
    from tpulab.cli.cards import add_parsers

    add_parsers(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = run_as_option(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser(_workload_named(argv), argv)
    args = parser.parse_args(argv)
    from tpulab.base import safe
    from tpulab.base.errors import EXIT_OK, TpulabError

    if getattr(args, "telemetry", "on") == "off":
        import os

        os.environ["TPULAB_TELEMETRY"] = "off"  # read by the workers this process starts
    try:
        if args.command == "run":  # after other options: first, run_as_option has made it --run
            parser.error("put run first: tpulab run WORKLOAD [flags], or tpulab [flags] --run WORKLOAD")
        if args.command == "top":
            from tpulab.cli.top import cmd_top
            return cmd_top(args, parser)
        if args.command in ("detect", "doctor"):
            return cmd_detect(args)
        if args.command == "sweep":
            from tpulab.cli.sweep import cmd_sweep
            return cmd_sweep(args)
        if args.command == "results":
            from tpulab.cli.results import cmd_results
            return cmd_results(args)
        if args.command in ("bench", "cards"):
            from tpulab.cli.cards import cmd_bench, cmd_cards
            return cmd_bench(args) if args.command == "bench" else cmd_cards(args)
        if args.run and args.no_ui:
            return cmd_run(args)
        if args.no_ui:
            parser.error("--no-ui needs --run WORKLOAD")
        report = fast_report()
        params = resolve_params(args, report) if args.run else None
        from tpulab.lab.app import TpulabApp
        from tpulab.cli.apps import ended
        app = TpulabApp(workload=args.run, params=params, db=args.db, report=report)
        app.run()
        return ended(app.failure.line() if app.failure else None)
    except TpulabError as e:  # the one place errors become exit codes: one line, no traceback
        parser.exit(e.exit_code, f"{parser.prog}: error: {safe.visible(e)}\n")
    except BrokenPipeError:
        return EXIT_OK


def probe_flags(p: argparse.ArgumentParser) -> None:
    """Whether detect and doctor ask each installed framework for its own view: seconds each, in a worker."""
    how = p.add_mutually_exclusive_group()
    how.add_argument("--fast", action="store_true", help="skip the frameworks (no import, no TPU initialisation)")
    how.add_argument("--deep", action="store_true", help="ask each installed framework for its view even where no "
                     "GPU or TPU was found (by default only where one was: seconds each)")


def fast_report() -> RuntimeReport:
    from tpulab.machine.detect import detect

    return detect()


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


def cmd_detect(args: argparse.Namespace) -> int:
    from tpulab.backends import registry as backend_registry
    from tpulab.base.errors import EXIT_OK
    from tpulab.engine.doctor import diagnose
    from tpulab.views.console import framework_view, runtime_table

    report = fast_report()
    if args.deep or not args.fast and report.accelerated:  # on a CPU alone, the frameworks would see what we saw
        report.frameworks = probe_frameworks(report)
    from tpulab.base.plugins import broken

    verdicts = diagnose(report)
    failed = [b.line() for b in broken()]
    if args.json:
        out: Any = ({"verdicts": [v.to_dict() for v in verdicts]} if args.command == "doctor"
                    else {**report.to_dict(), "verdicts": [v.to_dict() for v in verdicts], "plugins_failed": failed})
        print(json.dumps(out, indent=1))
        return EXIT_OK
    from rich.console import Console

    from tpulab.base import safe
    console = Console()
    if args.command == "doctor":
        from tpulab.views.console import LEVEL_STYLE
        for v in verdicts:
            about = f" ({v.framework})" if v.framework else ""
            console.print(f"[{LEVEL_STYLE[v.level]}]{v.level}[/] {safe.markup(f'{v.device}{about}: {v.message}')}",
                          highlight=False)
            if v.fix:
                console.print(f"  fix: [bold]{safe.markup(v.fix)}[/]", highlight=False)
        if not verdicts:
            console.print("ok: nothing to fix")
        for name, backend in backend_registry().items():  # each missing one beside the command that installs it
            if not backend.installed(report.packages):
                console.print(f"{safe.markup(backend.title)}: {framework_view(name, report, False)}", highlight=False)
    else:
        console.print(runtime_table(report, verdicts))
        installed = any(b.installed(report.packages) for b in backend_registry().values())
        if installed and not (report.frameworks or args.fast):
            console.print("The frameworks were not asked for their own views: with no GPU or TPU found they see this "
                          "CPU alone (seconds each to ask). tpulab detect --deep asks them.", highlight=False)
    for line in failed:
        console.print(safe.text(f"plugin: {line}", "yellow"))
    return EXIT_OK


def resolve_params(args: argparse.Namespace, report: RuntimeReport) -> dict[str, Any]:
    """The form's parameters from the flags, checked (a `UsageError` names the flag and the allowed range);
    `auto` stays for the form to show (the run's spec decides it)."""
    from tpulab.workloads import get_workload
    from tpulab.workloads.base import Limits

    return get_workload(args.run).resolve(flag_values(args), Limits.of(report), args.preset)


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The workload's parameters as given on the command line (None: not given)."""
    return {name: getattr(args, name) for name in args.workload_params}


def cluster_of(args: argparse.Namespace) -> Cluster | None:
    """The multi-host run this process joins: the explicit flags, else a TPU pod slice's own, else none."""
    import os

    from tpulab.backends import Cluster
    from tpulab.base.errors import UsageError

    given = [args.coordinator, args.num_processes, args.process_id]
    if not 1 <= args.join_timeout <= 3600:
        raise UsageError(f"--join-timeout must be an integer from 1 to 3600 (got {args.join_timeout})")
    if all(v is None for v in given):
        pod = Cluster.tpu_pod(os.environ)
        return dataclasses.replace(pod, join_timeout_s=args.join_timeout) if pod else None
    if any(v is None for v in given):
        raise UsageError("--coordinator, --num-processes and --process-id go together")
    if not 1 <= args.num_processes <= 4096 or not 0 <= args.process_id < args.num_processes:
        raise UsageError(f"--process-id must be an integer from 0 to --num-processes - 1 = {args.num_processes - 1} "
                         f"(got {args.process_id})")
    if ":" not in args.coordinator:
        raise UsageError(f"--coordinator must be HOST:PORT (got {args.coordinator!r})")
    return Cluster(args.coordinator, args.num_processes, args.process_id, join_timeout_s=args.join_timeout)


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpulab.base import safe

    from tpulab.base.errors import EXIT_FAILED, UsageError, first_line
    from tpulab.engine.runner import run_job
    from tpulab.engine.spec import resolve
    from tpulab.engine.store import Store, StoreError, default_path
    from tpulab.views.console import RunPrinter, summary_table

    report = fast_report()
    cluster = cluster_of(args)
    given = flag_values(args)
    spec = resolve(args.run, given, report, args.preset, cluster)
    console = Console(stderr=args.json)
    if cluster is not None and spec.workload.processes(spec.params) > 1:
        raise UsageError("--processes starts local processes; it does not combine with joining a multi-host run")
    run = run_job(spec, report, args.db or default_path(), kept=not args.no_save)
    printer = RunPrinter(run.recorder, console)
    store = None if args.no_save or run.following else Store(args.db or default_path())
    if run.following and cluster is not None:
        console.print(f"process {cluster.process_id} of {cluster.processes}: following process 0, which prints "
                      "and keeps the record", highlight=False)

    def on_sigint(signum, frame):
        if run.handle is not None and run.handle.cancel_requested:
            console.print("[red]killing the run[/]")
        else:
            console.print("[yellow]stopping after the current step (Ctrl+C again to kill)[/]")
        run.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        for event in run.events():
            if args.json:
                print(json.dumps(event.to_json()), flush=True)
            else:
                printer(event)
    finally:
        printer.close()
        signal.signal(signal.SIGINT, previous)
    record = run.recorder.record()
    if run.following:
        if record.status == "failed":
            console.print(safe.text(f"tpulab: this process failed: {record.error}", "red"))
        return run.exit_code
    if args.json:
        print(json.dumps({"event": "result", **record.to_json()}), flush=True)
    else:
        console.print(summary_table(record))
    if store is not None:
        try:
            store.save(record)
            console.print(f"kept as run {record.short_id} in {store.path}", highlight=False)
        except StoreError as e:  # the figures are on screen; a --json run's record is its output's last line
            later = "; its record is the last line of the output: save the output to a file, then `tpulab results import FILE`"
            print(f"tpulab: error: run {record.short_id} was not kept: {e}{later if args.json else ''}",
                  file=sys.stderr, flush=True)
            return run.exit_code or EXIT_FAILED
    if record.status == "failed" and args.json:  # without --json, the log and the summary said it already
        print(f"tpulab: the run failed: {safe.visible(first_line(record.error or ''))}", file=sys.stderr)  # whole in the record
    return run.exit_code


if __name__ == "__main__":
    sys.exit(main())
