"""`tpulab results`: list, show, compare, sweep, export, import, report and prune kept runs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from tpulab.base import fmt, safe
from tpulab.base.errors import EXIT_OK, NO_SPACE, UsageError, why_unwritten
from tpulab.base.events import RunRecord, SweepRecord
from tpulab.cli.command import DB, JSON, Command, add_fail_on, on_store
from tpulab.cli.usage import Parser
from tpulab.engine.mlflow_export import EXPERIMENT

if TYPE_CHECKING:
    from rich.console import Console

    from tpulab.engine.card import Card
    from tpulab.engine.runindex import RunFilter
    from tpulab.engine.store import Store

SCREEN_LINES = 7  # what a listing prints besides its rows: header, rule, a footer of two lines, the prompt


def positive(text: str) -> int:
    """`--limit N`'s type: argparse's own line names the flag and what it got."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def add_filter_flags(a: argparse.ArgumentParser) -> None:
    """The filters `results list`, `export` and `prune` share (the lab's filter field takes them as key:value)."""
    from tpulab.backends import registry as backend_registry
    from tpulab.base.events import STATUSES
    from tpulab.workloads import registry

    g = a.add_argument_group("filters (each narrows the selection)")
    g.add_argument("--workload", choices=list(registry()))
    g.add_argument("--device", metavar="DEVICE", help="a kind (cpu, gpu, tpu) or part of the device's name")
    g.add_argument("--backend", choices=tuple(backend_registry()))
    g.add_argument("--status", choices=STATUSES)
    g.add_argument("--sweep", metavar="ID", help="the runs of a sweep (its id or first characters)")
    g.add_argument("--since", metavar="WHEN", help="started at or after: 2026-11-01, 2026-11-01T14:00, 7d, 12h")
    g.add_argument("--before", metavar="WHEN", help="started before: a date, a time or an age, as --since")


def filter_of(args: argparse.Namespace) -> RunFilter:
    """The filter flags shared by list, export and prune (absent when `results` runs its default list)."""
    from tpulab.engine.runindex import FILTERS, make_filter

    return make_filter((), **{name: getattr(args, name, None) for name in FILTERS})


def _list_arguments(a: Parser) -> None:
    DB.add(a)
    add_filter_flags(a)
    JSON.add(a)
    a.add_argument("--limit", type=positive, metavar="N", help="the newest N runs (default: what fits the screen)")
    a.add_argument("--all", action="store_true", help="every run")


def _list(args: argparse.Namespace, store: Store, console: Console) -> int:
    from rich import box
    from rich.table import Table

    from tpulab.views import listing

    filt = filter_of(args)
    limit = None if getattr(args, "all", False) else getattr(args, "limit", None) or \
        max(5, console.size.height - SCREEN_LINES)
    page = store.page(filt, limit)
    total = store.count(filt) if page.after is not None else len(page.rows)
    which = f" matching {filt.describe()}" if filt else ""
    more = f"newest {len(page.rows)} of {total:,} runs{which}: --limit N or --all for more (filters: --help)"
    if args.json:
        print(json.dumps(store.listing_json(page.rows), indent=1))
        if len(page.rows) < total:
            print(f"tpulab: {more}", file=sys.stderr)
        return EXIT_OK
    if not page.rows:
        console.print(f"no runs{which} in {store.path}" if filt else
                      f"no runs kept yet in {store.path}: try `tpulab --run conv --no-ui --preset smoke`",
                      highlight=False)
        return EXIT_OK
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0)
    header, *rows = fmt.fit([fmt.LIST_COLUMNS, *(listing.list_row(r) for r in page.rows)], console.width)
    for col in header:
        t.add_column(col, no_wrap=True)
    for cells in rows:
        t.add_row(*map(safe.text, cells))
    console.print(t)
    if any(r.disturbed for r in page.rows):
        console.print(listing.DISTURBED_KEY, highlight=False)
    console.print(more if len(page.rows) < total else f"{total:,} run(s){which} in {store.path}, newest first",
                  highlight=False)
    return EXIT_OK


def _show_arguments(a: Parser) -> None:
    DB.add(a)
    JSON.add(a)
    a.add_argument("--profile", action="store_true", help="the run's whole profile, op by op (a run profiled with --profile)")
    a.add_argument("id")


def _show(args: argparse.Namespace, store: Store, console: Console) -> int:
    """One run: its summary and its device's roofline, read without its steps (but as JSON: the record whole)."""
    from tpulab.engine.ceilings import WORKLOAD
    from tpulab.engine.runindex import RunFilter
    from tpulab.views.console import summary_table
    from tpulab.views.roofline import POINTS, roofline_view

    record = store.get(args.id, light=not args.json)
    if args.profile:
        return show_ops(record, args.json, console)
    if args.json:
        print(json.dumps(record.to_json(), indent=1))
        return EXIT_OK
    if record.status == "failed" and record.summary.compile_seconds is None:
        record = store.get(record.id)  # a run that failed early is told by its steps (`summary_rows`)
    console.print(summary_table(record))
    console.print(safe.text("parameters: " + ", ".join(f"{k}={v}" for k, v in record.params.items())))
    if record.device is not None:  # the ceilings of its device's rooflines, and its newest runs as the index has them
        rooflines = store.records(RunFilter(workload=WORKLOAD, device=record.device.kind), light=True)
        console.print(roofline_view([record, *rooflines], record.device, console.width,
                                    rows=store.on_roofline(record.device, POINTS)))
    return EXIT_OK


def show_ops(record: RunRecord, as_json: bool, console: Console) -> int:
    """The run's whole op table (its profile as JSON), or the line that says to profile it."""
    from tpulab.views import profile as profile_view
    from tpulab.views.console import summary_title

    profile = profile_view.profile_of(record)
    if as_json:
        print(json.dumps(asdict(profile), indent=1))
    else:
        console.print(profile_view.ops_table(profile, f"ops of {summary_title(record)}"))
    return EXIT_OK


def compare_ops(records: list[RunRecord], as_json: bool, console: Console) -> int:
    """Where the time moved between the first run's ops and each other's."""
    from tpulab.views import profile as profile_view

    first, *others = records
    if not others:
        raise UsageError("compare --profile needs two runs or more: the first is A, each other B")
    if as_json:
        print(json.dumps([{"a": first.id, "b": r.id, "moves": [{**asdict(m), "delta": m.delta,
                                                                 "share_change": m.share_change}
                                                                for m in profile_view.op_moves(profile_view.profile_of(first),
                                                                                      profile_view.profile_of(r))]}
                          for r in others], indent=1))
        return EXIT_OK
    for r in others:
        console.print(profile_view.moves_table(first, r))
    return EXIT_OK


def _compare_arguments(a: Parser) -> None:
    DB.add(a)
    JSON.add(a)
    a.add_argument("--profile", action="store_true",
                   help="where the time moved: ops matched by name, then by category, each against the first")
    add_fail_on(a)
    a.add_argument("ids", nargs="+", metavar="ID")


def _compare(args: argparse.Namespace, store: Store, console: Console) -> int:
    from tpulab.engine.gate import enforce, gate_json, of_runs, passed
    from tpulab.engine.store import compare, row
    from tpulab.views.console import comparison_table

    fail_on = getattr(args, "fail_on", None)
    if args.profile:
        if fail_on:
            raise UsageError("--fail-on gates the runs' verdicts, which --profile does not draw: give one of them")
        return compare_ops([store.get(i) for i in args.ids], args.json, console)
    records = [store.get(i, light=True) for i in args.ids]  # the steps' times are kept apart: no record is read whole
    result = compare(records, floor=store.floor_for(records), timings=store.timed_repeats)
    verdicts = of_runs(result)
    if args.json:
        print(json.dumps({"workload": result.workload, "by": result.by, "header": result.header,
                          "warnings": result.warnings,
                          "rows": [{**row(r), "speedup": x, "change": asdict(c) if c is not None else None}
                                   for r, x, c in zip(result.records, result.speedups, result.changes)],
                          "verdicts": [v.to_json() for v in verdicts],
                          "gate": gate_json(verdicts, fail_on) if fail_on else None},
                         indent=1))
    else:
        console.print(comparison_table(result, console.width))
    enforce(verdicts, fail_on)
    if fail_on and not args.json:
        console.print(safe.text(passed(verdicts, fail_on)))
    return EXIT_OK


@contextmanager
def written(path: Path) -> Iterator[Path]:
    """The path to write `path`'s new content to: a file beside it, renamed over it once whole, so that a failed
    write (a full disk) leaves what was there as it was; the failure said in one line, naming its cause."""
    from tpulab.engine.store import StoreError

    if path.exists() and not path.is_file():  # a device or a pipe (-o /dev/stdout) is written as it is
        yield path
        return
    part = path.with_name(f".{path.name}.part")
    try:
        yield part
        os.replace(part, path)
    except OSError as e:
        why = why_unwritten(path, e.strerror or str(e), e.errno)
        free = "free some space there, or " if why == NO_SPACE else ""
        raise StoreError(f"cannot write {path}: {why}; nothing was written: {free}choose another -o FILE") from None
    finally:
        part.unlink(missing_ok=True)  # gone once renamed; what a failed write left of it


def export_ops(args: argparse.Namespace, store: Store, console: Console) -> int:
    """One run's op table alone: CSV, a line per op; or its whole profile as JSON."""
    from tpulab.views import profile as profile_view

    if len(args.ids) != 1:
        raise UsageError("export --profile writes one run's profile: give one run's ID")
    record = store.get(args.ids[0])
    profile = profile_view.profile_of(record)
    with written(args.output) as path:
        if args.format == "csv":
            profile_view.write_csv(profile, path)
        else:
            path.write_text(json.dumps(asdict(profile), indent=1), encoding="utf-8")
    console.print(f"exported the op table of run {record.short_id} ({len(profile.ops)} ops) to {args.output}",
                  highlight=False)
    return EXIT_OK


def _export_arguments(a: Parser) -> None:
    DB.add(a)
    add_filter_flags(a)
    a.add_argument("--profile", action="store_true",
                   help="one run's profile alone, its op table (a run profiled with --profile)")
    a.add_argument("ids", nargs="*", metavar="ID", help="runs or sweeps to export (default: all)")
    a.add_argument("--format", choices=("json", "csv", "mlflow"), default="json",
                   help="json lines or CSV, to -o FILE; mlflow: into an MLflow tracking store, a sweep as the parent of "
                        "its runs (pip install 'tpulab[mlflow]')")
    a.add_argument("-o", "--output", type=Path, help="the file to write (json and csv)")
    a.add_argument("--tracking-uri", metavar="URI",
                   help="--format mlflow: the tracking store (default: MLflow's own, $MLFLOW_TRACKING_URI or a local "
                        "store in this folder)")
    a.add_argument("--experiment", metavar="NAME", default=EXPERIMENT,
                   help=f"--format mlflow: the MLflow experiment the runs join (default: {EXPERIMENT})")


def _export(args: argparse.Namespace, store: Store, console: Console) -> int:
    """Runs by id, or sweeps by id with all their runs; everything when no id is given (the machine cards too)."""
    from tpulab.engine.store import StoreError, export_csv, export_json

    mlflow = args.format == "mlflow"
    if mlflow and (args.output or args.profile):
        raise UsageError(f"--format mlflow writes to a tracking store, not a file: drop "
                         f"{'-o' if args.output else '--profile'} (--tracking-uri URI names the store)")
    if not mlflow and (args.tracking_uri or args.experiment != EXPERIMENT):
        raise UsageError("--tracking-uri and --experiment go with --format mlflow")
    if not mlflow and args.output is None:
        raise UsageError(f"export --format {args.format} needs -o FILE, the file to write")
    if args.profile:
        return export_ops(args, store, console)
    records: Iterable[RunRecord]
    if args.ids:
        chosen: list[RunRecord] = []
        sweeps = []
        for i in args.ids:
            try:
                chosen.append(store.get(i))
            except StoreError:
                sweep = store.get_sweep(i)  # not a run: a sweep, carried whole, or the error names both
                sweeps.append(sweep)
                chosen += store.sweep_runs(sweep).values()
        records = chosen
        cards = []
    else:
        filt = filter_of(args)
        records = store.each_record(filt)  # streamed: an export of any size
        sweeps = [] if filt else store.sweeps()
        cards = [] if filt else store.cards()  # a history moved whole keeps its cards
    if mlflow:
        return to_mlflow(args, records, store.sweeps(), cards, console)  # a sweep is sent where one of its runs is
    with written(args.output) as path:
        if args.format == "json":
            n = export_json(records, path, sweeps, cards)
        else:
            rows = list(records)
            export_csv(rows, path)
            n = len(rows)
    carried = [f"{len(x)} {what}(s)" for x, what in ((sweeps, "sweep"), (cards, "card")) if x and args.format == "json"]
    console.print(safe.text(f"exported {listed([f'{n} run(s)', *carried])} to {args.output}"))
    return EXIT_OK


def to_mlflow(args: argparse.Namespace, records: Iterable[RunRecord], sweeps: list[SweepRecord], cards: list[Card],
              console: Console) -> int:
    """The runs into MLflow, each sweep of theirs as their parent; what was added, and how to open the store."""
    from tpulab.engine.mlflow_export import send

    sent = send(records, sweeps, cards, tracking_uri=args.tracking_uri, experiment=args.experiment)
    added = listed([f"{sent.runs} run(s)", *(f"{n} {what}(s)" for n, what in ((sent.sweeps, "sweep"), (sent.cards, "card"))
                                             if n)])
    there = f" ({sent.present} already there)" if sent.present else ""
    console.print(safe.text(f"exported {added} to MLflow experiment {sent.experiment!r} at {sent.uri}{there}"))
    console.print(safe.text(sent.how_to_open()))
    return EXIT_OK


def _import_arguments(a: Parser) -> None:
    DB.add(a)
    a.add_argument("file", type=Path)


def _import(args: argparse.Namespace, store: Store, console: Console) -> int:
    from tpulab.engine.store import read_export

    done = store.import_records(read_export(args.file))
    cards = [f"{done.cards} card(s)"] if done.cards else []
    console.print(safe.text(f"from {args.file}: {listed([f'{done.runs} run(s)', f'{done.sweeps} sweep(s)', *cards])} "
                            "added" + (f", {done.present} already present" if done.present else "")))
    return EXIT_OK


def listed(parts: list[str]) -> str:
    """'3 run(s), 1 sweep(s) and 2 card(s)'."""
    return " and ".join(filter(None, [", ".join(parts[:-1]), parts[-1]]))


def _sweep_arguments(a: Parser) -> None:
    DB.add(a)
    JSON.add(a)
    a.add_argument("id", nargs="?", help="a sweep's id (or its first characters); none lists them")


def _sweep(args: argparse.Namespace, store: Store, console: Console) -> int:
    """Sweeps listed, or one shown again: its table sorted by throughput, its findings and its chart."""
    from rich import box
    from rich.table import Table

    from tpulab.views.sweep import sweep_report, sweep_summary_json

    if not args.id:
        sweeps = store.sweeps()
        if args.json:
            print(json.dumps([{"id": s.id, "workload": s.workload, "started_at": s.started_at, "status": s.status,
                               "axes": s.axes} for s in sweeps], indent=1))
            return EXIT_OK
        if not sweeps:
            console.print(f"no sweeps kept yet in {store.path}: try `tpulab sweep conv --preset smoke "
                          "--batch-size 4,8 --shards 1,2`")
            return EXIT_OK
        t = Table(title=f"sweeps in {store.path}, newest first", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=0)
        for col in ("id", "started", "workload", "status", "points", "swept"):
            t.add_column(col, no_wrap=col != "swept")
        for s in sweeps:
            t.add_row(*map(safe.text, (s.short_id, s.started_at[5:16].replace("T", " "), s.workload, s.status,
                                       str(len(s.points)), ", ".join(f"{k} {len(v)}" for k, v in s.axes.items()))))
        console.print(t)
        return EXIT_OK
    sweep = store.get_sweep(args.id)
    runs = store.sweep_runs(sweep)
    if args.json:
        print(json.dumps(sweep_summary_json(sweep, runs), indent=1))
        return EXIT_OK
    console.print(sweep_report(sweep, runs, console.width))
    return EXIT_OK


def _prune_arguments(a: Parser) -> None:
    DB.add(a)
    add_filter_flags(a)
    a.add_argument("--all", action="store_true", help="every run, when no filter is given")
    a.add_argument("--yes", action="store_true", help="do not ask first (for scripts)")


def _prune(args: argparse.Namespace, store: Store, console: Console) -> int:
    """Runs matching the filters removed, after a question (--yes answers it), and the space reclaimed."""
    from tpulab.engine.runindex import FilterError

    filt = filter_of(args)
    if not filt and not args.all:
        raise FilterError("prune removes the runs a filter picks: give --workload, --device, --backend, --status, "
                          "--sweep, --since or --before (or --all for every run)")
    n = store.count(filt)
    which = f" matching {filt.describe()}" if filt else ""
    if not n:
        console.print(f"no runs{which} in {store.path}: nothing to remove", highlight=False)
        return EXIT_OK
    if not args.yes:
        print(f"remove {n:,} run(s){which} from {store.path}? [y/N] ", end="", flush=True)
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            console.print("nothing removed" + ("" if answer else " (no answer; --yes answers for scripts)"),
                          highlight=False)
            return EXIT_OK  # declining is an answer, not a failure
    removed, reclaimed = store.prune(filt)
    console.print(f"removed {removed:,} run(s){which}; {reclaimed / 2**20:.1f} MiB reclaimed, "
                  f"{store.size() / 2**20:.1f} MiB left in {store.path}", highlight=False)
    return EXIT_OK


def _report_arguments(a: Parser) -> None:
    DB.add(a)
    a.add_argument("ids", nargs="+", metavar="ID", help="runs or sweeps (their ids or first characters)")
    a.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.html", help="the page to write")


def _report(args: argparse.Namespace, store: Store, console: Console) -> int:
    from tpulab.views.report import report_page

    page = report_page(store, args.ids)
    with written(args.output) as path:
        path.write_text(page, encoding="utf-8")
    console.print(f"wrote {args.output} ({len(page) // 1024} KiB): it opens in any browser, no network needed",
                  highlight=False)
    return EXIT_OK


def _arguments(parser: Parser) -> None:
    DB.add(parser)
    JSON.add(parser)


COMMAND = Command("results", "list, show, compare, export, import and prune kept runs", None, _arguments, actions=(
    Command("list", "runs, newest first", on_store(_list), _list_arguments),
    Command("show", "one run in full", on_store(_show), _show_arguments),
    Command("compare", "runs side by side, with speedups against the first", on_store(_compare), _compare_arguments),
    Command("sweep", "sweeps, newest first, or one again: its table, findings and chart", on_store(_sweep),
            _sweep_arguments),
    Command("export", "runs (and sweeps, whole) to a file", on_store(_export), _export_arguments),
    Command("import", "runs and sweeps from an exported JSON file", on_store(_import), _import_arguments),
    Command("report", "runs (compared) or sweeps as one self-contained HTML page to share", on_store(_report),
            _report_arguments),
    Command("prune", "remove the runs a filter picks, and reclaim their space", on_store(_prune), _prune_arguments)))
