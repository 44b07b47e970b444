"""Headless output: a line per iteration or a progress bar with ETA, then the summary table."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from . import fmt
from .record import RunRecorder
from .runtime.doctor import Verdict
from .runtime.detect import RuntimeReport
from .workloads.base import Event, Workload

ESTIMATE_AFTER = 3  # steady steps before the total-time estimate is printed
SYNTHETIC_TAG = "  [yellow]\\[synthetic data][/]"
LEVEL_STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "error": "red"}


class RunPrinter:
    """Turns a run's events into lines for a person; a line per step for short runs, a bar for training."""

    def __init__(self, workload: Workload, recorder: RunRecorder, console: Console) -> None:
        self.workload = workload
        self.recorder = recorder
        self.console = console
        self.progress: Progress | None = None
        self.task = None
        self.estimated = False

    def __call__(self, event: Event) -> None:
        kind = event.get("event")
        rec = self.recorder
        if kind == "started":
            self._started(event)
        elif kind == "compiled":
            self.console.print(f"first call (trace + compile, {event.get('steps', 1)} {self.workload.unit}(s)): "
                               f"{fmt.seconds(event['seconds'])}  [dim]reported apart from the steady state[/]")
        elif kind == "step":
            self._step(event)
        elif kind == "epoch":
            m = event.get("metrics", {})
            val = m.get("val_sparse_categorical_accuracy")
            self.console.print(f"epoch {event['epoch']}: {fmt.duration(event['seconds'])}, loss {m.get('loss', 0):.4f}, "
                               f"accuracy {m.get('sparse_categorical_accuracy', 0):.4f}"
                               + (f", validation accuracy {val:.4f}" if val is not None else "")
                               + (SYNTHETIC_TAG if event.get("synthetic") else ""))
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=rec.steps_done())

    def _started(self, e: Event) -> None:
        rec = self.recorder
        d = e["device"]
        self.console.print(f"[bold]{self.workload.title}[/] on {d['kind'].upper()} {d['name']} "
                           f"({d['replicas']} replica(s), {d['strategy']}), {e['dtype']}, global batch "
                           f"{rec.params['batch_size']} = {e['per_replica_batch']} per replica"
                           + (f", data: {e['dataset']}" if e.get("dataset") else ""))
        if e.get("synthetic"):
            self.console.print("[yellow]SYNTHETIC DATA: random images and labels; accuracy is meaningless[/]")
        if e.get("note"):
            self.console.print(f"[yellow]note: {e['note']}[/]")
        if self.workload.unit == "step" and self.console.is_terminal:
            self.progress = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                                     TextColumn("ETA"), TimeRemainingColumn(), console=self.console)
            self.task = self.progress.add_task("train", total=e["steps_total"], status="")
            self.progress.start()

    def _step(self, e: Event) -> None:
        rec = self.recorder
        total = rec.info.get("steps_total")
        flops = rec.info.get("flops_per_step")
        gflops = flops / e["seconds"] / 1e9 if flops else None
        warm = " [dim](warm-up)[/]" if e.get("warmup") else ""
        metrics = e.get("metrics") or {}
        loss = f"  loss {metrics['loss']:.4f}" if "loss" in metrics else ""
        acc = metrics.get("sparse_categorical_accuracy")
        line = (f"{self.workload.unit} {e['step']}/{total}  {fmt.seconds(e['seconds'])}  "
                f"{fmt.rate(e.get('examples_per_s'), 'ex/s')}  {gflops or 0:.1f} GFLOP/s{loss}"
                + (f"  accuracy {acc:.3f}" if acc is not None else "") + warm
                + (SYNTHETIC_TAG if e.get("synthetic") else ""))
        if self.progress is not None:
            self.progress.update(self.task, status=f"{fmt.seconds(e['seconds'])}/step{loss}"
                                 + (SYNTHETIC_TAG if e.get("synthetic") else ""))
        else:
            self.console.print(line, highlight=False)
        steady = len(rec.steady_seconds())
        if not self.estimated and steady >= ESTIMATE_AFTER and total and rec.steps_done() < total:
            self.estimated = True
            self.console.print(f"estimate: about {fmt.duration(rec.eta_seconds())} more "
                               f"(from the first {steady} steady {self.workload.unit}s)")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def summary_table(record: dict[str, Any], unit: str) -> Table:
    s = record["summary"]
    t = Table(title=f"{record['workload']} run {record['id'][:8]}: {record['status']}", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    p = record["params"]
    rows = [
        ("device", fmt.device(record)),
        ("dtype", str(record.get("dtype"))),
        ("batch", f"{p.get('batch_size')} global, {record.get('per_replica_batch')} per replica, "
                  f"{p.get('shards')} shard(s)"),
        ("data", record.get("dataset") or "-"),
        ("first call (trace+compile)", fmt.seconds(s.get("compile_seconds"))),
        (f"steady {unit} time", fmt.spread(s.get("step_seconds"))),
        ("throughput", fmt.rate(s.get("examples_per_s"), "examples/s")),
        ("achieved", fmt.rate((s.get("gflops_per_s") or 0) * 1e9 or None, "FLOP/s")),
        ("fraction of peak", f"{fmt.percent(s.get('peak_fraction'))} of {fmt.rate(s.get('peak_flops'), 'FLOP/s')}"
                             f" ({s.get('peak_source') or 'peak unknown'})"),
    ]
    m = s.get("final_metrics") or {}
    if "loss" in m:
        rows.append(("final loss / accuracy", f"{m['loss']:.4f} / {m.get('sparse_categorical_accuracy', 0):.4f}"))
    val = (s.get("validation") or {}).get("val_sparse_categorical_accuracy")
    if val is not None:
        rows.append(("validation accuracy", f"{val:.4f}"))
    versions = record.get("versions") or {}
    rows.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items()) or "-"))
    for name, value in rows:
        t.add_row(name, value)
    for f in s.get("flags", []):
        style = "bold red" if f["code"] == "beats-peak" else "yellow"
        t.add_row(f"[{style}]flag: {f['code']}[/]", f"[{style}]{f['message']}[/]")
    if record.get("error"):
        t.add_row("[red]error[/]", f"[red]{record['error']}[/]")
    return t


def runtime_table(report: RuntimeReport, verdicts: list[Verdict]) -> Table:
    t = Table(title="tpulab runtime", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    c = report.cpu
    t.add_row("CPU", f"{c.model}: {c.logical_cores} logical cores, {', '.join(c.features) or 'no SIMD flags'}, "
                     f"{fmt.bytes_(c.memory_bytes)} memory")
    for i, g in enumerate(report.gpus):
        t.add_row(f"GPU {i}", f"{g.name}, {fmt.bytes_(g.memory_bytes)}, compute {g.compute_capability or '?'}, "
                              f"driver {g.driver or '?'} (found by {g.found_by})")
    if report.gpu_hardware and not report.gpus:
        t.add_row("GPU", f"{report.gpu_hardware} NVIDIA device(s) on the PCI bus, no driver")
    if report.tpu:
        tp = report.tpu
        t.add_row("TPU", f"{tp.generation or 'unknown generation'}: {tp.chips} chip(s), {tp.cores} core(s); "
                         f"found by {'; '.join(tp.found_by)}")
    tf = report.tensorflow
    if tf and "error" not in tf:
        gpus = ", ".join(f"{g['name']} (cc {g['compute_capability']})" for g in tf.get("gpus", [])) or "none"
        t.add_row("TensorFlow", f"{tf.get('tensorflow')} (Keras {tf.get('keras')}), built with CUDA: "
                                f"{tf.get('built_with_cuda')}, GPUs: {gpus}, TPU cores: {tf.get('tpu_cores', 0)}")
    elif tf:
        t.add_row("TensorFlow", f"[red]could not be probed: {tf['error']}[/]")
    else:
        pk = report.packages
        t.add_row("TensorFlow", f"{pk.get('tensorflow') or 'not installed'} (Keras {pk.get('keras') or '-'}); "
                                "TensorFlow's own view not probed")
    t.add_row("Python", report.python + ("  (Colab)" if report.colab else ""))
    t.add_row("default device", report.default_device.upper())
    for v in verdicts:
        style = LEVEL_STYLE[v.level]
        t.add_row(f"[{style}]{v.level}: {v.device}[/]", f"[{style}]{v.message}[/]" +
                  (f"\n  fix: [bold]{v.fix}[/]" if v.fix else ""))
    return t


def comparison_table(result: dict[str, Any]) -> Group:
    """Runs side by side with speedups against the first, then the warnings."""
    t = Table(title=f"{result['workload']}: speedup = first run's median time / this run's")
    for col in ("run", "device", "dtype", "shards", "batch", "median", "p10-p90", "throughput", "GFLOP/s", "peak",
                "accuracy", "speedup"):
        t.add_column(col, no_wrap=col == "run")
    for row in result["rows"]:
        r = row["record"]
        s = r["summary"]
        st = s.get("step_seconds") or {}
        val = (s.get("validation") or {}).get("val_sparse_categorical_accuracy")
        acc = val if val is not None else (s.get("final_metrics") or {}).get("sparse_categorical_accuracy")
        t.add_row(r["id"][:8], fmt.device(r), str(r.get("dtype")), str(r["params"].get("shards")),
                  str(r["params"].get("batch_size")), fmt.seconds(st.get("median")),
                  f"{fmt.seconds(st.get('p10'))}-{fmt.seconds(st.get('p90'))}",
                  fmt.rate(s.get("examples_per_s"), "ex/s"),
                  f"{s['gflops_per_s']:.1f}" if s.get("gflops_per_s") else "-", fmt.percent(s.get("peak_fraction")),
                  f"{acc:.3f}" if acc is not None else "-",
                  f"{row['speedup']:.2f}x" if row["speedup"] else "-")
    warnings = [Text(f"warning: {w}", style="yellow") for w in result["warnings"]]
    return Group(t, *warnings)
