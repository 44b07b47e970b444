"""Running a workload: `tpulab --run WORKLOAD` (headless with --no-ui; else the lab, its form filled from the
flags), and `tpulab run WORKLOAD`, which `main` reads as that form, every flag the same."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from typing import TYPE_CHECKING, Any

from tpulab.base.errors import UsageError
from tpulab.cli.command import Command, flag_values
from tpulab.cli.usage import Parser

if TYPE_CHECKING:
    from tpulab.backends import Cluster
    from tpulab.machine.detect import RuntimeReport


def _arguments(parser: Parser) -> None:
    from tpulab.workloads import registry

    parser.add_argument("workload", choices=list(registry()), metavar="WORKLOAD", help=f"one of {', '.join(registry())}")


def _put_first(args: argparse.Namespace) -> int:
    """`run` after other options: `main` reads `run WORKLOAD` as --run WORKLOAD only where a command goes."""
    raise UsageError("put run first: tpulab run WORKLOAD [flags], or tpulab [flags] --run WORKLOAD")


COMMAND = Command("run", "run a workload: `tpulab run WORKLOAD [flags]` is `tpulab --run WORKLOAD [flags]`",
                  _put_first, _arguments,
                  description="The same as `tpulab --run WORKLOAD`: add --no-ui to run headless; "
                  "`tpulab run WORKLOAD --help` lists its parameters.")


def fast_report() -> RuntimeReport:
    """The machine as detection sees it, without a framework (what a test replaces with a machine of its own)."""
    from tpulab.machine.detect import detect

    return detect()


def resolve_params(args: argparse.Namespace, report: RuntimeReport) -> dict[str, Any]:
    """The form's parameters from the flags, checked (a `UsageError` names the flag and the allowed range);
    `auto` stays for the form to show (the run's spec decides it)."""
    from tpulab.workloads import get_workload
    from tpulab.workloads.base import Limits

    return get_workload(args.run).resolve(flag_values(args), Limits.of(report), args.preset)


def cluster_of(args: argparse.Namespace) -> Cluster | None:
    """The multi-host run this process joins: the explicit flags, else a TPU pod slice's own, else torchrun's
    (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: torch.distributed joins it from there), else none."""
    import os

    from tpulab.backends import Cluster

    given = [args.coordinator, args.num_processes, args.process_id]
    if not 1 <= args.join_timeout <= 3600:
        raise UsageError(f"--join-timeout must be an integer from 1 to 3600 (got {args.join_timeout})")
    if all(v is None for v in given):
        pod = Cluster.tpu_pod(os.environ) or Cluster.torchrun(os.environ)
        return dataclasses.replace(pod, join_timeout_s=args.join_timeout) if pod else None
    if any(v is None for v in given):
        raise UsageError("--coordinator, --num-processes and --process-id go together")
    if not 1 <= args.num_processes <= 4096 or not 0 <= args.process_id < args.num_processes:
        raise UsageError(f"--process-id must be an integer from 0 to --num-processes - 1 = {args.num_processes - 1} "
                         f"(got {args.process_id})")
    if ":" not in args.coordinator:
        raise UsageError(f"--coordinator must be HOST:PORT (got {args.coordinator!r})")
    return Cluster(args.coordinator, args.num_processes, args.process_id, join_timeout_s=args.join_timeout)


def headless(args: argparse.Namespace) -> int:
    """`--run WORKLOAD --no-ui`: the run's log (or its events as JSON lines) here, then its summary, kept."""
    from rich.console import Console

    from tpulab.base import safe
    from tpulab.base.errors import EXIT_FAILED, first_line
    from tpulab.engine.runner import run_job
    from tpulab.engine.spec import resolve
    from tpulab.engine.store import Store, StoreError, default_path
    from tpulab.views.console import RunPrinter, summary_table

    report = fast_report()
    cluster = cluster_of(args)
    given = flag_values(args)
    spec = resolve(args.run, given, report, args.preset, cluster, repeat=args.run_repeat)
    console = Console(stderr=args.json)
    if cluster is not None and spec.workload.processes(spec.params) > 1:
        raise UsageError("--processes starts local processes; it does not combine with joining a multi-host run")
    if args.ray is not None:
        if cluster is not None or spec.workload.processes(spec.params) < 2:
            raise UsageError("--ray starts --processes N's processes as Ray tasks: give --processes 2 or more (and no "
                             "--coordinator: Ray places them)")
        spec = dataclasses.replace(spec, ray=args.ray, per_host=args.per_host)
    elif args.per_host:
        raise UsageError("--per-host places --ray's processes: give --ray with it")
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
