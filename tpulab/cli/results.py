"""`tpulab results`: list, show, compare, export, import."""

from __future__ import annotations

import argparse
import json
import sys

from rich import box
from rich.console import Console
from rich.table import Table

from tpulab.core import fmt
from tpulab.views.console import comparison_table
from tpulab.core.store import Store, StoreError, compare, default_path, export_csv, export_json, read_export, row


def cmd_results(args: argparse.Namespace) -> int:
    store = Store(args.db or default_path())
    console = Console()
    try:
        return ACTIONS[args.action](args, store, console)
    except StoreError as e:
        print(f"tpulab: {e}", file=sys.stderr)
        return 1


def _list(args, store: Store, console: Console) -> int:
    records = store.records()
    if args.json:
        print(json.dumps([row(r) for r in records], indent=1))
        return 0
    if not records:
        console.print(f"no runs kept yet in {store.path}: try `tpulab --run conv --no-ui --preset smoke`")
        return 0
    t = Table(title=f"runs in {store.path}, newest first", box=box.SIMPLE_HEAD, pad_edge=False,
              padding=0)
    for col in fmt.LIST_COLUMNS:
        t.add_column(col, no_wrap=True)
    for r in records:
        t.add_row(*fmt.list_row(r))
    console.print(t)
    return 0


def _show(args, store: Store, console: Console) -> int:
    from tpulab.views.console import summary_table
    from tpulab.views.roofline import roofline_view

    record = store.get(args.id)
    if args.json:
        print(json.dumps(record.to_json(), indent=1))
        return 0
    console.print(summary_table(record))
    console.print("parameters: " + ", ".join(f"{k}={v}" for k, v in record.params.items()), highlight=False)
    if record.device is not None:
        console.print(roofline_view(store.records(), record.device, console.width))
    return 0



def _compare(args, store: Store, console: Console) -> int:
    result = compare([store.get(i) for i in args.ids])
    if args.json:
        print(json.dumps({"workload": result.workload, "by": result.by, "header": result.header,
                          "warnings": result.warnings,
                          "rows": [{**row(r), "speedup": x} for r, x in zip(result.records, result.speedups)]},
                         indent=1))
        return 0
    console.print(comparison_table(result, console.width))
    return 0


def _export(args, store: Store, console: Console) -> int:
    """Runs by id, or sweeps by id with all their runs; everything when no id is given."""
    if args.ids:
        records, sweeps = [], []
        for i in args.ids:
            try:
                records.append(store.get(i))
            except StoreError:
                sweep = store.get_sweep(i)  # not a run: a sweep, carried whole, or the error names both
                sweeps.append(sweep)
                records += store.sweep_runs(sweep).values()
    else:
        records, sweeps = store.records(), store.sweeps()
    try:
        if args.format == "json":
            export_json(records, args.output, sweeps)
        else:
            export_csv(records, args.output)
    except OSError as e:
        raise StoreError(f"cannot write {args.output}: {e.strerror}; choose another -o FILE") from None
    carried = f" and {len(sweeps)} sweep(s)" if sweeps and args.format == "json" else ""
    console.print(f"exported {len(records)} run(s){carried} to {args.output}", highlight=False)
    return 0


def _import(args, store: Store, console: Console) -> int:
    exported = read_export(args.file)
    added, skipped = store.import_records(exported)
    sweeps = f" and {len(exported.sweeps)} sweep(s)" if exported.sweeps else ""
    console.print(f"imported {added} run(s){sweeps} from {args.file}"
                  + (f", {skipped} already present" if skipped else ""), highlight=False)
    return 0


def _sweep(args, store: Store, console: Console) -> int:
    """Sweeps listed, or one shown again: its table sorted by throughput, its findings and its chart."""
    from tpulab.views.sweep import sweep_report, sweep_summary_json

    if not args.id:
        sweeps = store.sweeps()
        if args.json:
            print(json.dumps([{k: s[k] for k in ("id", "workload", "started_at", "status", "axes")}
                              for s in sweeps], indent=1))
            return 0
        if not sweeps:
            console.print(f"no sweeps kept yet in {store.path}: try `tpulab sweep conv --preset smoke "
                          "--batch-size 4,8 --shards 1,2`")
            return 0
        t = Table(title=f"sweeps in {store.path}, newest first", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=0)
        for col in ("id", "started", "workload", "status", "points", "swept"):
            t.add_column(col, no_wrap=col != "swept")
        for s in sweeps:
            t.add_row(s["id"][:8], s["started_at"][5:16].replace("T", " "), s["workload"], s["status"],
                      str(len(s["points"])), ", ".join(f"{k} {len(v)}" for k, v in s["axes"].items()))
        console.print(t)
        return 0
    sweep = store.get_sweep(args.id)
    runs = store.sweep_runs(sweep)
    if args.json:
        print(json.dumps(sweep_summary_json(sweep, runs), indent=1))
        return 0
    console.print(sweep_report(sweep, runs, console.width))
    return 0


ACTIONS = {"list": _list, "show": _show, "compare": _compare, "export": _export, "import": _import,
           "sweep": _sweep}
