"""Headless output: a line per iteration or a progress bar with ETA, then the summary table.

Also the tables the results commands and the lab share: the runtime, a run's summary, a comparison.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from tpulab import backends
from tpulab.backends import Backend
from tpulab.base import fmt, safe
from tpulab.base.noise import Change
from tpulab.base.timing import summarize
from tpulab.base.events import Event, RunRecord, Sample, Started, Step, Summary, Telemetry
from tpulab.engine.telemetry_summary import load_of
from tpulab.engine.doctor import Verdict
from tpulab.engine.record import RunRecorder
from tpulab.engine.store import Comparison
from tpulab.machine.detect import RuntimeReport
from tpulab.views import profile as profile_view
from tpulab.views import roofline
from tpulab.views.narrate import (backend_line, describe, first_call, load_words, sample_line, step_status, telemetry_rows,
                                  unavailable_lines)
from tpulab.base.figures import rows as figure_rows
from tpulab.base.figures import throughput_of
from tpulab.workloads import registry
from tpulab.workloads.base import PHASE_COMPILED, PHASE_EAGER, Workload

ESTIMATE_AFTER = 3  # steady steps before the total-time estimate is printed: a quarter of the run's, 3 to 20
ESTIMATE_BY = 20
TELEMETRY_EVERY_S = 5.0  # a telemetry line this often, headless
LEVEL_STYLE = {"ok": "green", "info": "cyan", "warn": "yellow", "error": "red"}


class RunPrinter:
    """Prints a run's events as `narrate` words them; training runs on a terminal get a progress bar."""

    def __init__(self, recorder: RunRecorder, console: Console) -> None:
        self.recorder = recorder
        self.console = console
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.estimated = False
        self.sampled_at: float | None = None

    def __call__(self, event: Event) -> None:
        rec = self.recorder
        if isinstance(event, Sample):
            self._sample(event)
        elif isinstance(event, Step) and self.progress is not None and self.task is not None:
            self.progress.update(self.task, status=step_status(event, rec))
        else:
            line = describe(event, rec, self.console.width)
            if line is not None:
                self.console.print(line, highlight=False)
        if isinstance(event, Started) and rec.workload.trains and self.console.is_terminal:
            self.progress = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                                     TextColumn("ETA"), TimeRemainingColumn(), console=self.console)
            self.task = self.progress.add_task("train", total=event.steps_total, status="")
            self.progress.start()
        if isinstance(event, Step):
            self._estimate()
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=rec.steps_done())

    def _sample(self, s: Sample) -> None:
        """Reasons for what is unavailable at once; a short line every few seconds and at a phase's end."""
        for line in unavailable_lines(s.unavailable):
            self.console.print(line, highlight=False)
        now = s.t or 0.0
        if self.sampled_at is None or now - self.sampled_at >= TELEMETRY_EVERY_S or s.mark in ("compiled", "end"):
            if s.cpu is not None or s.devices:
                self.sampled_at = now
                self.console.print(sample_line(s), highlight=False)

    def _estimate(self) -> None:
        """Once, after the first steady steps: the time left. (Said, it costs nothing more per step.)"""
        rec = self.recorder
        total = rec.steps_total
        if self.estimated or not total or rec.steps_done() >= total:
            return
        steady = len(rec.steady_seconds())
        if steady >= min(max(ESTIMATE_AFTER, total // 4), ESTIMATE_BY):  # past the first steps' warm-up
            left = rec.eta_seconds()
            if left is None:  # no estimate yet: nothing said until there is one
                return
            self.estimated = True
            self.console.print(safe.text(f"estimate: about {fmt.duration(left)} more (at the latest "
                                         f"{len(rec.recent_steady())} steady {rec.workload.unit}s' median)"))

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def compile_text(s: Summary) -> str:
    """The first call's time; where a run compiles several programs apart, each: '1.50 s (prefill 1.00 s,
    decode 500.0 ms)'; an eager pass beside a compiled one (--compile both) runs the same steps another way, so
    the two first calls are said apart, never added: 'compiled 2.100 s, eager 11.2 ms (each pass's own)'."""
    called = s.compile_phases or {}
    if PHASE_EAGER in called:
        return (f"{PHASE_COMPILED} {fmt.seconds(called.get(PHASE_COMPILED))}, {PHASE_EAGER} "
                f"{fmt.seconds(called[PHASE_EAGER])} (each pass's own)")
    phases = ", ".join(f"{phase} {fmt.seconds(x)}" for phase, x in called.items())
    return fmt.seconds(s.compile_seconds) + (f" ({phases})" if phases else "")


def passes_rows(record: RunRecord, unit: str) -> list[tuple[str, str]]:
    """With --compile both, the run's figures are its compiled pass's: its steady time says so, and the eager pass's
    steady time is set beside it (the eager-vs-compiled flag compares the two)."""
    eager = summarize([x.seconds for x in record.steps if x.phase == PHASE_EAGER and not x.warmup])
    return [(f"steady {unit} time, {PHASE_COMPILED}", fmt.spread(record.summary.step_seconds)),
            (f"steady {unit} time, {PHASE_EAGER}", fmt.spread(eager))]


def model_rows(ident: dict[str, Any]) -> list[tuple[str, str]]:
    """A user's model and what it was trained with: 'model: mlp:build, 85,002 parameters (all trained), sha256
    ...', then its loss (and whose: the module's own, or chosen and why), its optimizer, how its example was read
    (inputs, targets), its batch (and where it came from) and how inference ran, where the worker said them."""
    count, trained = ident.get("parameters"), ident.get("trainable_parameters")
    said = f", {count:,} parameters" if isinstance(count, int) else ""
    if isinstance(count, int) and isinstance(trained, int):
        said += " (all trained)" if trained == count else f" ({trained:,} trained)"
    rows = [("model", f"{ident.get('name')}{said}, sha256 {ident.get('sha256') or '-'}")]
    if ident.get("loss"):
        rows.append(("loss", f"{ident['loss']}" + (f" ({ident['loss_by']})" if ident.get("loss_by") else "")))
    return rows + [(key.replace("_", " "), str(ident[key]))
                   for key in ("optimizer", "example_read_as", "batch_from", "inference", "built") if ident.get(key)]


def workload_of(record: RunRecord) -> Workload | None:
    return registry().get(record.workload)


def dtype_words(record: RunRecord) -> str:
    """The run's number formats, as its workload words them ('q4_0 weights, float32 cache'), else its dtype."""
    w = workload_of(record)
    return w.dtype_words(record.params, str(record.dtype)) if w and record.dtype else str(record.dtype)


FLAG_STYLES = {"beats-peak": "bold red"}  # above the hardware; any other flag: yellow (above a ceiling too: not a win)


def no_flops(backend: str | None) -> str:
    """Why the FLOPs of a step on `backend` are unknown, in that backend's words."""
    found = backends.registry().get(backend or "")
    return found.no_flops if found is not None else Backend.no_flops


def flop_rows(record: RunRecord) -> list[tuple[str, str | None]]:
    """The step's FLOP rate against the peak and the ceiling, and its intensity: left out by the caller for a
    workload whose steps no FLOPs describe (`flop_rates` off and none counted: a request to a server)."""
    s = record.summary
    return [
        ("achieved", fmt.rate((s.gflops_per_s or 0) * 1e9 or None, "FLOP/s") if s.flops_per_step
         else f"unavailable: FLOPs unknown ({no_flops(record.backend)})"),
        ("fraction of spec peak", f"{fmt.percent(s.peak_fraction)} of {fmt.rate(s.peak_flops, 'FLOP/s')}"
                                  f" ({s.peak_source or 'peak unknown'})"),
        ("fraction of ceiling", roofline.ceiling_text(s, record.dtype, dtype_words(record))),
        ("intensity", roofline.intensity_text(s)),
    ]


def summary_rows(record: RunRecord) -> list[tuple[str, str, str | None]]:
    """(figure, value, style) of a run's summary: the terminal's table and the notebook's HTML read these."""
    s = record.summary
    if record.status == "failed" and s.compile_seconds is None and not record.steps:
        return early_failure_rows(record)
    w = workload_of(record)
    unit = w.unit if w else "step"
    rows = [
        ("device", record.device_label()),
        ("backend", backend_line(record.backend, record.backend_reason, record.versions)),
        ("dtype", dtype_words(record)),
        ("batch", f"{record.batch} global, {record.per_replica_batch} per replica, "
                  f"{record.device.replicas if record.device else 1} shard(s)") if record.batch else None,
        ("problem size", w.size_words(record.params)) if w else None,
        ("data", record.dataset or "-"),
        ("note", record.note) if record.note else None,
        (f"first call ({'compiled (cache)' if s.cache_hit else first_call(record.backend).replace(' + ', '+')})",
         compile_text(s)),
        *(passes_rows(record, unit) if PHASE_EAGER in (s.compile_phases or {}) else
          [(f"steady {unit} time", fmt.spread(s.step_seconds))]),
        ("fresh processes", repeats_text(s.process_medians)) if s.process_medians else None,
        ("throughput", throughput_text(s, w)) if record.batch else None,
        *(flop_rows(record) if s.flops_per_step or w is None or w.flop_rates else []),
        *roofline.kernel_rows(record),
    ]
    if s.mfu is not None:
        rows.append(("MFU", f"{fmt.percent(s.mfu)} (model FLOPs by formula / peak of {record.dtype})"))
    if s.inference_step_seconds is not None or s.inference_compile_seconds is not None:
        rows += [("inference first call", fmt.seconds(s.inference_compile_seconds)),
                 ("inference step time", fmt.spread(s.inference_step_seconds)),
                 ("inference throughput", fmt.rate(s.inference_throughput, s.throughput_unit))]
    if record.model:
        rows[:0] = model_rows(record.model)
    if s.host_seconds:
        slowest = max(range(len(s.host_seconds)), key=lambda i: s.host_seconds[i])  # type: ignore[index]
        rows.append(("per-host step", ", ".join(f"host {i} {fmt.seconds(x)}" for i, x in enumerate(s.host_seconds))
                     + f"; slowest: host {slowest}"))
    for m in w.metrics if w else ():
        final = (s.final_metrics or {}).get(m.key)
        val = (s.validation or {}).get("val_" + m.key)
        if final is not None:
            rows.append((f"final {m.label}", m.show(final)))
        if val is not None:
            rows.append((f"validation {m.label}", m.show(val)))
    if w is None:  # a model tpulab does not declare (a FitTimer run): its metrics by Keras's names
        rows += [(f"final {k}", f"{v:.4f}") for k, v in (s.final_metrics or {}).items()]
        rows += [(f"validation {k.removeprefix('val_')}", f"{v:.4f}") for k, v in (s.validation or {}).items()]
    if s.figures:
        rows += w.figure_rows(s.figures) if w else figure_rows((), s.figures)
    rows.append(("beside this run", load_words(s.telemetry)))
    if s.probe is not None and s.probe.moved is not None:
        rows.append(("control probe", f"{fmt.seconds(s.probe.before_s)} before the run, {fmt.seconds(s.probe.after_s)} "
                                      f"after ({s.probe.moved:.2f}x; a numpy sort, no framework)"))
    if s.telemetry is not None:
        rows += telemetry_rows(s.telemetry, unit)
    if s.profile is not None:
        rows += profile_view.top_rows(s.profile)
    rows.append(("versions", ", ".join(f"{k} {v}" for k, v in (record.versions or {}).items()) or "-"))
    out: list[tuple[str, str, str | None]] = [(row[0], row[1], None) for row in rows if row and row[1]]
    out += [(f"flag: {f.code}", f.message, FLAG_STYLES.get(f.code, "yellow")) for f in s.flags]
    out += [(f"why: {f.code}", f.message, "cyan") for f in [*(s.telemetry.verdicts if s.telemetry else ()),
                                                             *(s.profile.verdicts if s.profile else ())]]
    if record.error:
        out.append(("error", record.error, "red"))
    return out


def throughput_text(s: Summary, w: Workload | None) -> str:
    """'1.2k examples/s'; where the workload's figures declare which rate it is, what that rate counts: '8.9k tokens/s
    over the batch: ...' (the one throughput a summary names)."""
    declared = throughput_of(w.figures) if w else None
    rate = fmt.rate(s.throughput or s.examples_per_s, s.throughput_unit)
    return f"{rate} {declared.throughput}" if declared is not None and rate != "-" else rate


def repeats_text(medians: list[float]) -> str:
    """'3 (--repeat): medians 780 us, 812 us, 795 us; 1.04x apart': each process's median and their spread."""
    ratio = f"; {max(medians) / min(medians):.2f}x apart" if min(medians) > 0 else ""
    return f"{len(medians)} (--repeat): medians {', '.join(fmt.seconds(m) for m in medians)}{ratio}; the interval is " \
        "drawn over them"


def early_failure_rows(record: RunRecord) -> list[tuple[str, str, str | None]]:
    """A run that failed before its first step: what ran where, and the error; no figures it never had."""
    device = record.device_label() if record.device else f"{record.params.get('device', '-')} (asked for)"
    rows: list[tuple[str, str, str | None]] = [
        ("device", device, None),
        ("backend", backend_line(record.backend, record.backend_reason, record.versions), None),
        ("error", record.error or "-", "red"),
    ]
    return [("model", str(record.model.get("name")), None), *rows] if record.model else rows


def summary_title(record: RunRecord) -> str:
    return f"{record.workload} run {record.short_id}: {record.status}"


def summary_table(record: RunRecord) -> Table:
    t = Table(title=safe.markup(summary_title(record)), show_header=False)
    t.add_column(style="bold")
    t.add_column()
    for name, value, style in summary_rows(record):
        t.add_row(safe.text(name, style or ""), safe.text(value, style or ""))
    return t


def runtime_rows(report: RuntimeReport, verdicts: list[Verdict], probing: bool = False) -> list[tuple[str, str]]:
    """(what, Rich markup) of the runtime: the terminal's table and the notebook's HTML read these. What the
    machine and the frameworks said is escaped: only the styles are markup."""
    rows: list[tuple[str, str]] = []
    c = report.cpu
    rows.append(("CPU", safe.markup(f"{c.model}: {c.logical_cores} logical cores, "
                                    f"{', '.join(c.features) or 'no SIMD flags'}, {fmt.bytes_(c.memory_bytes)} memory")))
    for i, g in enumerate(report.gpus):
        rows.append((f"GPU {i}", safe.markup(f"{g.name}, {fmt.bytes_(g.memory_bytes)}, compute "
                                             f"{g.compute_capability or '?'}, driver {g.driver or '?'} "
                                             f"(found by {g.found_by})")))
    if report.gpu_hardware and not report.gpus:
        rows.append(("GPU", f"{report.gpu_hardware} NVIDIA device(s) on the PCI bus, no driver"))
    if report.tpu:
        tp = report.tpu
        rows.append(("TPU", safe.markup(f"{tp.generation or 'unknown generation'}: {tp.chips} chip(s), "
                                        f"{tp.cores} core(s); found by {'; '.join(tp.found_by)}")))
    for name, info in backends.registry().items():
        if info.framework:
            rows.append((safe.markup(info.title), framework_view(name, report, probing)))
    rows.append(("Python", safe.markup(report.python + ("  (Colab)" if report.colab else ""))))
    rows.append(("default device", safe.markup(report.default_device.upper())))
    for v in verdicts:
        style = LEVEL_STYLE[v.level]
        rows.append((f"[{style}]{safe.markup(f'{v.level}: {v.device}')}[/]", f"[{style}]{safe.markup(v.message)}[/]" +
                     (f"\n  fix: [bold]{safe.markup(v.fix)}[/]" if v.fix else "")))
    return rows


def runtime_table(report: RuntimeReport, verdicts: list[Verdict], probing: bool = False) -> Table:
    t = Table(title="tpulab runtime", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    for name, value in runtime_rows(report, verdicts, probing):
        t.add_row(name, value)
    return t


def framework_view(name: str, report: RuntimeReport, probing: bool) -> str:
    """One framework's line (Rich markup): its own view when probed, else what is installed."""
    view = report.frameworks.get(name)
    pk = report.packages
    backend = backends.get(name)

    def keras(version: str | None) -> str:  # said only of a framework Keras runs on (llama.cpp uses none)
        return f" (Keras {version or '-'})" if backend.keras else ""

    if view and "error" in view:
        return f"[red]could not be probed: {safe.markup(view['error'])}[/]"
    if view:
        extra = f", platform {view['platform']}" if view.get("platform") else ""
        also = f"; {view['also']}" if view.get("also") else ""  # what only this framework says (its build...)
        own = next((view[d] for d in (name, *backend.distributions) if view.get(d)), "-")  # by its package's name
        return safe.markup(f"{own}{keras(view.get('keras'))}{extra}, {gpu_words(view)}, "
                           f"TPU cores: {view.get('tpu_cores', 0)}{also}")
    version = backend.version(pk)
    if not version:
        return "not installed: " + safe.markup(backend.install)
    return safe.markup(f"{version}{keras(pk.get('keras'))}; ") + (
        "probing in the background..." if probing else "its own view not probed")


def gpu_words(view: dict[str, Any]) -> str:
    """The GPUs a framework sees, after its build where it says whether that supports CUDA: a build flag said as
    one ('built with CUDA: True' on a machine without a GPU read as 'CUDA is available')."""
    gpus = ", ".join(g["name"] + (f" (cc {g['compute_capability']})" if g.get("compute_capability") else "")
                     for g in view.get("gpus", []))
    if "built_with_cuda" not in view:
        return f"GPUs: {gpus or 'none'}"
    build = "a build that supports CUDA" if view["built_with_cuda"] else "a CPU-only build"
    return f"{build}; GPUs: {gpus}" if gpus else f"{build}; no GPU visible here"


# --- comparisons ----------------------------------------------------------------------------
BASIS_FIGURE = {"time": "median", "GFLOP/s": "GFLOP/s", "examples/s": "throughput"}


FLOP_RATES = ("GFLOP/s", "peak", "ceiling", "MFU")  # what a workload without `flop_rates` leaves out


def flop_rates(r: RunRecord) -> bool:
    """Whether the run's workload is judged by its FLOP rates (one tpulab does not declare: yes)."""
    w = workload_of(r)
    return w is None or w.flop_rates


def comparison_columns(cmp: Comparison) -> list[tuple[str, list[str]]]:
    """(figure, one cell per run) in display order: the answer first (the speedup, then the figure it is
    the ratio of), the settings after, the other figures last."""
    w = registry().get(cmp.workload)
    headline = w.headline if w else None
    rs = cmp.records
    rates = [r.summary.throughput or r.summary.examples_per_s for r in rs]
    inference = [r.summary.inference_throughput for r in rs]
    prefix = fmt.prefix_of(rates + inference)  # one unit for the rates of every run
    figures: list[tuple[str, list[str]]] = [
        ("median", [fmt.median_ci(r.summary.step_seconds) for r in rs]),
        ("p10-p90", [fmt.p10_p90(r.summary.step_seconds) for r in rs]),
        ("throughput", [fmt.rate(x, r.summary.throughput_unit.replace("examples", "ex"), prefix)
                        for x, r in zip(rates, rs)]),
        ("GFLOP/s", [f"{r.summary.gflops_per_s:.1f}" if r.summary.gflops_per_s else "-" for r in rs]),
        ("peak", [fmt.percent(r.summary.peak_fraction) for r in rs]),
        ("ceiling", [roofline.ceiling_cell(r.summary) for r in rs]),
    ]
    if any(r.summary.mfu is not None for r in rs):
        figures.append(("MFU", [fmt.percent(r.summary.mfu) for r in rs]))
    if not any(flop_rates(r) for r in rs):  # rates that mean nothing for these workloads, unless the basis
        figures = [f for f in figures if f[0] not in FLOP_RATES or f[0] == BASIS_FIGURE[cmp.by]]
    if any(inference):
        figures.append(("inference", [fmt.rate(x, r.summary.throughput_unit.replace("examples", "ex"), prefix)
                                      for x, r in zip(inference, rs)]))
    models = [("model", [str((r.model or {}).get("name", "-")) for r in rs])] if any(r.model for r in rs) else []
    if headline is not None:
        figures.append((headline.label, [headline.show(r.metric(headline.key)) for r in rs]))
    basis = [f for f in figures if f[0] == BASIS_FIGURE[cmp.by]]
    verdict = [("verdict", ["(base)", *(verdict_cell(c) for c in cmp.changes[1:])])] if cmp.changes else []
    return [
        ("run", [r.short_id for r in rs]),
        ("speedup", [speedup_cell(x, c) for x, c in zip(cmp.speedups, cmp.changes or [None] * len(rs))]),
        *verdict,
        *basis,
        *models,
        ("device", [r.device_label() for r in rs]),
        ("backend", [r.backend for r in rs]),
        ("dtype", [dtype_words(r) for r in rs]),
        ("shards", [str(r.device.replicas if r.device else "-") for r in rs]),
        ("batch", [str(r.batch or "-") for r in rs]),
        *(f for f in figures if f not in basis),
        *own_columns(rs),
        *telemetry_columns(rs),
    ]


def own_columns(records: list[RunRecord]) -> list[tuple[str, list[str]]]:
    """The compared runs' own figures that their workloads set beside the rest (`Figure.compare`), a row each, when
    any run has it."""
    declared = {f.name: f for r in records if (w := workload_of(r)) for f in w.figures if f.compare}
    return [(f.label, [f.cell(r.summary.figures) for r in records]) for name, f in declared.items()
            if any(r.summary.figures.get(name) is not None for r in records)]


def speedup_cell(x: float | None, c: Change | None) -> str:
    """'1.20x [1.17x, 1.23x]': a speedup with its interval where its verdict has one."""
    return (f"{x:.2f}x {c.interval()}".strip() if c else f"{x:.2f}x") if x else "-"


def verdict_cell(c: Change | None) -> str:
    """The verdict's word, or why there is none: a ratio without an interval detects nothing."""
    return "-" if c is None else c.word if c.low is not None else "too few steps"


def telemetry_figures(t: Telemetry | None) -> dict[str, str]:
    """A run's telemetry summary in the short cells comparisons and sweeps show ('-': not measured): the host's CPU
    (all processes), the run's own (its worker's, of one core), and other processes' cores (a '!': disturbed)."""
    t = t or Telemetry()
    mem = t.device_mem_peak if t.device_mem_peak is not None else t.rss_peak
    load = load_of(t)
    return {"CPU all": fmt.pct(t.cpu_mean), "CPU run": fmt.pct(t.process_mean),
            "others": f"{load.other:.1f} c{'!' if load.busy else ''}" if load else "-",
            "dev util": fmt.pct(t.device_util_mean), "peak mem": fmt.bytes_(mem),
            "J/step": f"{t.energy_per_step_j:.3g}" if t.energy_per_step_j is not None else "-"}


def telemetry_columns(records: list[RunRecord], leave: tuple[str, ...] = ()) -> list[tuple[str, list[str]]]:
    """The telemetry figures that at least one of the runs has (less those named in `leave`)."""
    cells = [telemetry_figures(r.summary.telemetry) for r in records]
    names = [n for n in cells[0] if n not in leave] if cells else []
    return [(n, [c[n] for c in cells]) for n in names if any(c[n] != "-" for c in cells)]


def comparison_table(cmp: Comparison, width: int) -> Group:
    """The basis first, then the runs side by side when that fits `width`; else figures as rows and runs as
    columns, the speedup the first row."""
    cols = [(safe.text(name), [safe.text(c) for c in cells]) for name, cells in comparison_columns(cmp)]
    wide = Table()
    for name, _ in cols:
        wide.add_column(name, no_wrap=True)
    for i in range(len(cmp.records)):
        wide.add_row(*(cells[i] for _, cells in cols))
    table = wide
    if Measurement.get(Console(width=10_000), Console(width=10_000).options, wide).maximum > width:
        table = Table()
        table.add_column("", style="bold", no_wrap=True)
        for run_id in cols[0][1]:
            table.add_column(run_id, overflow="fold")
        for name, cells in cols[1:]:
            table.add_row(name, *cells, style="bold" if name.plain == "speedup" else None)
    warnings = [safe.text(f"warning: {w}", "yellow") for w in cmp.warnings]
    return Group(safe.text(cmp.header, "bold"), table, *warnings)
