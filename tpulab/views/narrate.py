"""Each event of a run in words for people: the one wording the headless printer and the lab share.

Lines are Rich markup, in which whatever came from outside (a device's name, an op's, a framework's
error) is escaped (`tpulab.base.safe`). The lab adds charts around them; it never words an event itself. Given the
terminal's width, a line is fitted to it: figures closer together, then the ones the summary
repeats left out, so that a line never wraps a word onto a line of its own.
"""

from __future__ import annotations

from tpulab import backends
from tpulab.backends import Backend
from tpulab.base import fmt, safe
from tpulab.base.figures import rows as figure_rows
from tpulab.engine.telemetry_summary import load_of
from tpulab.base.events import (
    OTHER_OPS,
    PHASE_BANDWIDTH,
    Allocated,
    Cancelled,
    Compiled,
    Epoch,
    Event,
    Failed,
    Log,
    Parallel,
    Profiled,
    Sample,
    Started,
    Step,
    Telemetry,
    Tracing,
)
from tpulab.engine.record import RunRecorder
from tpulab.engine.telemetry_summary import GPU_POOL_NOTE
from tpulab.views.profile import NAME_WIDTH, shorten
from tpulab.workloads.base import COMPILE, PHASE_COMPILED, PHASE_EAGER

SYNTHETIC_TAG = "  [yellow]\\[synthetic data][/]"
SYNTHETIC = ("[synthetic]", "yellow")  # what every step of a run on stand-in data ends with (short: there are many)
Cell = tuple[str, str]  # (plain text, Rich style or "")
NAMED_CALLS = (PHASE_EAGER, PHASE_COMPILED)  # first calls of a run's several programs (and each workload's `phases`)


def fitted(cells: list[Cell], width: int | None, spare: tuple[int, ...] = ()) -> str:
    """Cells in a line of Rich markup that fits `width`: two spaces apart, else one, else without the
    cells at `spare` (figures shown elsewhere too), one after another."""
    def length(cs: list[Cell], between: str) -> int:
        return len(between.join(text for text, _ in cs))

    shown, between = cells, "  "
    if width is not None and length(shown, between) > width:
        between = " "
        for i in spare:
            if length(shown, between) <= width:
                break
            shown = [c for c in shown if c is not cells[i]]
    return between.join(f"[{style}]{safe.markup(text)}[/]" if style else safe.markup(text) for text, style in shown)


def describe(event: Event, rec: RunRecorder, width: int | None = None) -> str | None:
    """The event as a line (or a few) for a person, or None when it has nothing to say; fitted to `width`."""
    w = rec.workload
    match event:
        case Started():
            return header(event, rec)
        case Compiled():
            what = "first predict call" if w.is_inference(event.phase) else \
                f"first {event.phase} call" if event.phase in (*NAMED_CALLS, *w.phases) else "first call"
            how = "compiled (cache)" if event.cache_hit else first_call(rec.backend)
            return fitted([(f"{what} ({how}, {event.steps} {w.unit}(s)): {fmt.seconds(event.seconds)}", ""),
                           ("not in the steady state", "dim")], width, spare=(1,))
        case Step() if event.phase == PHASE_BANDWIDTH:
            return None  # the copies timed before a run: its log line says what they measured
        case Step():
            own = step_words(event, rec)
            if own is None:
                return step_line(event, rec, width)
            return fitted(own, width, spare=(1,)) if own else None
        case Epoch():
            return epoch_line(event, rec, width)
        case Failed():
            return f"[red]failed: {safe.markup(event.error)}[/]"
        case Cancelled():
            return "[yellow]cancelled: what was measured is kept[/]"
        case Log():
            return safe.markup(event.text) or None  # the worker's words, or a framework's output
        case Tracing():
            return safe.markup(f"tracing {event.steps} more {w.unit}(s) for the profile (not timed)")
        case Profiled():
            return profiled_line(event, width)
        case Parallel():  # its processes' threads, the all-reduce probe, one process alone (not timed steps)
            return safe.markup("; ".join(f"{label}: {value}" for label, value in figure_rows((), event.figures))) or None
        case Allocated():
            return safe.markup(f"allocator peak: {allocator_words(event.allocated, event.reserved, event.limit)} "
                               f"(device {event.device})")
    return None


def step_words(event: Step, rec: RunRecorder) -> list[Cell] | None:
    """A step in its workload's own words (`Workload.step_cells`: [] for nothing), a run on stand-in data saying
    so after them; None for the step line every run prints. `rec` has taken this step last."""
    own = rec.workload.step_cells(event, rec.steps)
    return own + [SYNTHETIC] if own and event.synthetic else own


def packed(cells: list[Cell], width: int) -> str:
    """Cells on as many lines of at most `width` columns as they need, two spaces apart, none cut in two: a line
    in a box narrower than the terminal (the lab's, beside its log)."""
    lines: list[list[Cell]] = [[]]
    for cell in cells:
        if lines[-1] and len("  ".join(text for text, _ in [*lines[-1], cell])) > width:
            lines.append([])
        lines[-1].append(cell)
    return "\n".join(fitted(line, None) for line in lines)


def first_call(backend: str | None) -> str:
    """What a first call on `backend` does besides its work, as the backend says: 'trace + compile' (llama.cpp's:
    'load + warm-up', where nothing is traced or compiled)."""
    found = backends.registry().get(backend or "")
    return found.first_call if found is not None else Backend.first_call


def allocator_words(allocated: float, reserved: float | None, limit: float | None = None) -> str:
    """'3.0 GiB allocated, 4.0 GiB reserved of 80.0 GiB': what the run's tensors took, and the pool held for them."""
    return (f"{fmt.bytes_(allocated)} allocated" + (f", {fmt.bytes_(reserved)} reserved" if reserved is not None else "")
            + (f" of {fmt.bytes_(limit)}" if limit else ""))


def profiled_line(e: Profiled, width: int | None = None) -> str:
    """'profiled 3 steps (not timed)  top op fusion.12 41.0%  host gap 14.0%': the steps traced after the
    timed ones (the summary names the top ops)."""
    p = e.profile
    top = max((o for o in p.ops if o.name != OTHER_OPS), key=lambda o: o.seconds, default=None)
    cells: list[Cell] = [(f"profiled {p.steps} {'step' if p.steps == 1 else 'steps'} (not timed)", ""),
                         (f"top op {shorten(top.name, NAME_WIDTH)} {fmt.percent(top.share)}", "") if top
                         else ("no ops traced", "yellow"),
                         (f"host gap {fmt.percent(p.host_gap_share)}", "")]
    return fitted(cells, width)


def header(e: Started, rec: RunRecorder) -> str:
    d = e.device
    lines = [f"[bold]{safe.markup(rec.workload.title)}[/] " + safe.markup(f"on {d.kind.upper()} {d.name}"),
             safe.markup(f"{d.replicas} replica(s) ({d.strategy}" + (f", {d.hosts} hosts" if d.hosts > 1 else "")
                         + f"), {rec.workload.dtype_words(rec.params, e.dtype)}, "
                         f"{rec.workload.work_words(rec.params, e.per_replica_batch)}"),
             *([safe.markup(f"data: {e.dataset}")] if e.dataset else []),
             safe.markup(f"backend: {backend_line(e.backend, rec.backend_reason, e.versions)}")]
    if e.synthetic:
        lines.append(f"[yellow]SYNTHETIC DATA: {safe.markup(rec.workload.synthetic_warning())}[/]")
    if e.note:
        lines.append(f"[yellow]note: {safe.markup(e.note)}[/]")
    return "\n".join(lines)


def backend_line(backend: str, reason: str | None, versions: dict[str, str] | None) -> str:
    """'jax 0.10.2 (Keras 3.15.1): a TPU is present and ...'."""
    v = versions or {}
    keras = f" (Keras {v['keras']})" if v.get("keras") else ""
    return f"{backend} {v.get(backend, '')}".rstrip() + keras + (f": {reason}" if reason else "")


def pass_step(e: Step, rec: RunRecorder) -> str | None:
    """With --compile both, the pass a training step is of and its place there, 'eager step 3/4' then 'compiled step
    3/4' (each pass counts its own steps from 1: 'step 3/8' twice said neither), else None."""
    w, p = rec.workload, rec.params
    if p.get(COMPILE.name) != "both":
        return None
    each = w.total_steps(p) - w.total_steps({**p, COMPILE.name: "on"})  # the steps the eager pass adds: a pass's
    return f"{PHASE_EAGER if e.phase == PHASE_EAGER else PHASE_COMPILED} {w.unit} {e.step}/{each}"


def step_line(e: Step, rec: RunRecorder, width: int | None = None) -> str:
    """'step 3/16  298.4 ms  214.5 ex/s  105.7 GFLOP/s  loss 5.1826  accuracy 0.1198'; narrower, one space
    apart, then the GFLOP/s and then the examples/s give way (the summary has both)."""
    w = rec.workload
    predict = rec.workload.is_inference(e.phase)
    flops = rec.info.flops_per_step if rec.info and not predict else None  # training's FLOPs
    where = f"predict {w.unit} {e.step}" if predict else pass_step(e, rec) or f"{w.unit} {e.step}/{rec.steps_total}"
    cells: list[Cell] = [(where, ""), (fmt.seconds(e.seconds), ""), (fmt.rate(e.examples_per_s, "ex/s"), "")]
    cells += [(f"{flops / e.seconds / 1e9:.1f} GFLOP/s", "")] if flops else []
    cells += [(f"{m.label} {m.show(e.metrics[m.key])}", "") for m in w.metrics if m.key in e.metrics]
    cells += [("(warm-up)", "dim")] if e.warmup else []
    cells += [SYNTHETIC] if e.synthetic else []
    return fitted(cells, width, spare=(3, 2) if flops else (2,))


def epoch_line(e: Epoch, rec: RunRecorder, width: int | None = None) -> str:
    """'epoch 1: 5s, loss 0.5123, accuracy 0.8120, validation loss 0.4410, validation accuracy 0.8400';
    narrower, the validation figures on a line of their own."""
    w = rec.workload
    train = [f"{w.label(k)} {v:.4f}" for k, v in e.metrics.items() if not k.startswith("val_")]
    val = [f"{w.label(k)} {v:.4f}" for k, v in e.metrics.items() if k.startswith("val_")]
    tag = SYNTHETIC_TAG if e.synthetic else ""
    figures, rest = [f"epoch {e.epoch}: {fmt.duration(e.seconds)}", *train], val
    if width is None or len(", ".join([*figures, *val]) + ("  [synthetic data]" if tag else "")) <= width:
        figures, rest = figures + val, []
    return safe.markup(", ".join(figures)) + tag + ("\n  " + safe.markup(", ".join(rest)) if rest else "")


def step_status(e: Step, rec: RunRecorder) -> str:
    """The short form beside a progress bar: time per step and the first metric."""
    first = next((m for m in rec.workload.metrics if m.key in e.metrics), None)
    figure = f"  {first.label} {first.show(e.metrics[first.key])}" if first else ""
    return safe.markup(f"{fmt.seconds(e.seconds)}/{rec.workload.unit}{figure}") + (SYNTHETIC_TAG if e.synthetic else "")


def sample_line(s: Sample) -> str:
    """A telemetry sample in one short line: 'CPU 45% (worker 98% of a core, 1.2 GiB) | GPU0 80% 10.2/16.0 GiB 210 W'."""
    host = f"host {s.host}: " if s.host else ""
    worker = f"worker {fmt.pct(s.process)} of a core, {fmt.bytes_(s.rss)}" if s.process is not None or s.rss else ""
    parts = [f"CPU {fmt.pct(s.cpu)}" + (f" ({worker})" if worker else "")]
    for d in s.devices:
        figures = [fmt.pct(d.util) if d.util is not None else "",
                   f"duty {fmt.pct(d.duty_cycle)}" if d.duty_cycle is not None else "",
                   f"{fmt.bytes_(d.mem_used)}/{fmt.bytes_(d.mem_total)}" if d.mem_used is not None else "",
                   f"{d.power_w:.0f} W" if d.power_w is not None else ""]
        parts.append(f"{d.kind.upper()}{d.index} " + (" ".join(f for f in figures if f) or "-"))
    return f"[dim]{safe.markup(f'telemetry {host}' + ' | '.join(parts))}[/]"


def unavailable_lines(reasons: dict[str, str]) -> list[str]:
    return [f"[dim]{safe.markup(f'telemetry: {what} unavailable: {why}')}[/]" for what, why in reasons.items()]


UNRECORDED = "not recorded (telemetry off, or the run too short to sample it): whether other work used the machine is unknown"


def load_words(t: Telemetry | None) -> str:
    """What else used the machine while the run was timed: other processes' cores, the hypervisor's steal and the
    cores' clock, each where it was read; or that it was not recorded."""
    load = load_of(t)
    if t is None or load is None:
        return UNRECORDED
    steal = f"; steal {t.steal_mean:.0f}% (the hypervisor's, for other machines)" if t.steal_mean is not None else ""
    clock = f"; clock {t.freq_mean_mhz:,.0f} MHz" if t.freq_mean_mhz else ""
    return f"{load.words()}{steal}{clock}"


def telemetry_rows(t: Telemetry, unit: str = "step") -> list[tuple[str, str]]:
    """The telemetry summary as (name, value) rows of plain text: only the figures that were measured."""
    rows = []
    short = f"too short to sample: {t.span_s:.1f} s" if t.span_s is not None else "not sampled"  # no CPU figure
    if t.cpu_mean is not None or t.cpu_peak is not None:
        busiest = f", busiest core {fmt.pct(t.busiest_core_mean)}" if t.busiest_core_mean is not None else ""
        rows.append(("host CPU, all processes", f"mean {fmt.pct(t.cpu_mean)}, peak {fmt.pct(t.cpu_peak)} of "
                     f"{t.cores or '?'} core(s){busiest}"))
    elif "cpu" not in t.unavailable:
        rows.append(("host CPU, all processes", short))
    if t.process_mean is not None or t.rss_peak is not None:
        cpu = f"CPU mean {fmt.pct(t.process_mean)} of a core (peak {fmt.pct(t.process_peak)})" \
            if t.process_mean is not None or t.process_peak is not None else f"CPU {short}"
        rows.append(("this run's worker", f"{cpu}, memory peak {fmt.bytes_(t.rss_peak)}"))
    if t.host_mem_peak is not None:
        rows.append(("host memory", f"peak {fmt.bytes_(t.host_mem_peak)} of {fmt.bytes_(t.host_mem_total)}"))
    kind = (t.device_kind or "device").upper()
    if t.device_util_mean is not None:
        rows.append((f"{kind} utilisation", f"mean {fmt.pct(t.device_util_mean)}, peak {fmt.pct(t.device_util_peak)}"))
    if t.device_mem_peak is not None:
        pool = f" ({GPU_POOL_NOTE})" if t.device_kind == "gpu" else ""
        rows.append((f"{kind} memory", f"peak {fmt.bytes_(t.device_mem_peak)} of {fmt.bytes_(t.device_mem_total)}{pool}"))
    if t.allocated_peak is not None:
        rows.append(("allocator", f"peak {allocator_words(t.allocated_peak, t.reserved_peak)} (the framework's own "
                                  "count: what the run's tensors took)"))
    if t.power_mean_w is not None:
        rows.append((f"{kind} power", f"mean {t.power_mean_w:.0f} W"
                     + (f", temperature peak {t.temp_peak_c:.0f} C" if t.temp_peak_c is not None else "")))
    if t.energy_per_step_j is not None:
        per_example = f", {t.energy_per_example_j:.3g} J per example" if t.energy_per_example_j is not None else ""
        rows.append(("energy", f"{t.energy_per_step_j:.3g} J per {unit}{per_example}"))
    if t.host_cpu_mean:
        rows.append(("per-host CPU", ", ".join(f"host {i} {fmt.pct(x)}" for i, x in enumerate(t.host_cpu_mean))))
    for what, why in t.unavailable.items():
        rows.append((what, f"unavailable: {why}"))
    return rows
