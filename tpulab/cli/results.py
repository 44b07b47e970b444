"""`tpulab results`: list, show, compare, export, import, prune."""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Iterable, Iterator

from rich import box
from rich.console import Console
from rich.table import Table

from tpulab.base import fmt, safe
from tpulab.base.errors import EXIT_OK, NO_SPACE, UsageError, why_unwritten
from tpulab.base.events import RunRecord
from tpulab.engine.runindex import FILTERS, FilterError, RunFilter, make_filter
from tpulab.engine.store import Store, StoreError, compare, default_path, export_csv, export_json, read_export, row
from tpulab.views import listing
from tpulab.views import profile as profile_view
from tpulab.views.console import comparison_table, summary_title

SCREEN_LINES = 7  # what a listing prints besides its rows: header, rule, a footer of two lines, the prompt


def cmd_results(args: argparse.Namespace) -> int:
    """A store that cannot be used raises `StoreError`: the command line's one handler words it."""
    return ACTIONS[args.action](args, Store(args.db or default_path()), Console())


def filter_of(args: argparse.Namespace) -> RunFilter:
    """The filter flags shared by list, export and prune (absent when `results` runs its default list)."""
    return make_filter((), **{name: getattr(args, name, None) for name in FILTERS})


def _list(args, store: Store, console: Console) -> int:
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


def _show(args, store: Store, console: Console) -> int:
    from tpulab.views.console import summary_table
    from tpulab.views.roofline import roofline_view

    record = store.get(args.id)
    if args.profile:
        return show_ops(record, args.json, console)
    if args.json:
        print(json.dumps(record.to_json(), indent=1))
        return EXIT_OK
    console.print(summary_table(record))
    console.print(safe.text("parameters: " + ", ".join(f"{k}={v}" for k, v in record.params.items())))
    if record.device is not None:
        console.print(roofline_view(store.records(), record.device, console.width))
    return EXIT_OK



def show_ops(record: RunRecord, as_json: bool, console: Console) -> int:
    """The run's whole op table (its profile as JSON), or the line that says to profile it."""
    profile = profile_view.profile_of(record)
    if as_json:
        print(json.dumps(asdict(profile), indent=1))
    else:
        console.print(profile_view.ops_table(profile, f"ops of {summary_title(record)}"))
    return EXIT_OK


def compare_ops(records: list[RunRecord], as_json: bool, console: Console) -> int:
    """Where the time moved between the first run's ops and each other's."""
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


def _compare(args, store: Store, console: Console) -> int:
    if args.profile:
        return compare_ops([store.get(i) for i in args.ids], args.json, console)
    result = compare([store.get(i) for i in args.ids])
    if args.json:
        print(json.dumps({"workload": result.workload, "by": result.by, "header": result.header,
                          "warnings": result.warnings,
                          "rows": [{**row(r), "speedup": x} for r, x in zip(result.records, result.speedups)]},
                         indent=1))
        return EXIT_OK
    console.print(comparison_table(result, console.width))
    return EXIT_OK


@contextmanager
def written(path: Path) -> Iterator[Path]:
    """The path to write `path`'s new content to: a file beside it, renamed over it once whole, so that a failed
    write (a full disk) leaves what was there as it was; the failure said in one line, naming its cause."""
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


def export_ops(args, store: Store, console: Console) -> int:
    """One run's op table alone: CSV, a line per op; or its whole profile as JSON."""
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


def _export(args, store: Store, console: Console) -> int:
    """Runs by id, or sweeps by id with all their runs; everything when no id is given."""
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
    else:
        filt = filter_of(args)
        records = store.each_record(filt)  # streamed: an export of any size
        sweeps = [] if filt else store.sweeps()
    with written(args.output) as path:
        if args.format == "json":
            n = export_json(records, path, sweeps)
        else:
            rows = list(records)
            export_csv(rows, path)
            n = len(rows)
    carried = f" and {len(sweeps)} sweep(s)" if sweeps and args.format == "json" else ""
    console.print(f"exported {n} run(s){carried} to {args.output}", highlight=False)
    return EXIT_OK


def _import(args, store: Store, console: Console) -> int:
    done = store.import_records(read_export(args.file))
    console.print(f"from {args.file}: {done.runs} run(s) and {done.sweeps} sweep(s) added"
                  + (f", {done.present} already present" if done.present else ""), highlight=False)
    return EXIT_OK


def _sweep(args, store: Store, console: Console) -> int:
    """Sweeps listed, or one shown again: its table sorted by throughput, its findings and its chart."""
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


def _prune(args, store: Store, console: Console) -> int:
    """Runs matching the filters removed, after a question (--yes answers it), and the space reclaimed."""
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


def _report(args, store: Store, console: Console) -> int:
    from tpulab.views.report import report_page

    page = report_page(store, args.ids)
    with written(args.output) as path:
        path.write_text(page, encoding="utf-8")
    console.print(f"wrote {args.output} ({len(page) // 1024} KiB): it opens in any browser, no network needed",
                  highlight=False)
    return EXIT_OK


ACTIONS = {"list": _list, "prune": _prune, "show": _show, "compare": _compare, "export": _export, "import": _import,
           "sweep": _sweep, "report": _report}
