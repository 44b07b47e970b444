"""Each event of a run in words for people: the one wording the headless printer and the lab share.

Lines are Rich markup. The lab adds charts around them; it never words an event itself.
"""

from __future__ import annotations

from tpulab.core import fmt
from tpulab.core.events import Cancelled, Compiled, Epoch, Event, Failed, Log, Started, Step
from tpulab.core.record import PREDICT, RunRecorder

SYNTHETIC_TAG = "  [yellow]\\[synthetic data][/]"


def describe(event: Event, rec: RunRecorder) -> str | None:
    """The event as a line (or a few) for a person, or None when it has nothing to say."""
    w = rec.workload
    tag = SYNTHETIC_TAG if event.synthetic else ""
    match event:
        case Started():
            return header(event, rec)
        case Compiled():
            what = "first predict call" if event.phase == PREDICT else "first call"
            return (f"{what} (trace + compile, {event.steps} {w.unit}(s)): {fmt.seconds(event.seconds)}  "
                    "[dim]reported apart from the steady state[/]")
        case Step():
            return step_line(event, rec) + tag
        case Epoch():
            figures = ", ".join(f"{w.label(k)} {v:.4f}" for k, v in event.metrics.items())
            return f"epoch {event.epoch}: {fmt.duration(event.seconds)}" + (f", {figures}" if figures else "") + tag
        case Failed():
            return f"[red]failed: {event.error}[/]"
        case Cancelled():
            return "[yellow]cancelled: what was measured is kept[/]"
        case Log():
            return event.text or None
    return None


def header(e: Started, rec: RunRecorder) -> str:
    d = e.device
    lines = [f"[bold]{rec.workload.title}[/] on {d.kind.upper()} {d.name} ({d.replicas} replica(s), {d.strategy}"
             + (f", {d.hosts} hosts" if d.hosts > 1 else "") + f"), {e.dtype}, global batch "
             f"{rec.workload.batch_size(rec.params)} = {e.per_replica_batch} per replica"
             + (f", data: {e.dataset}" if e.dataset else ""),
             f"backend: {backend_line(e.backend, rec.backend_reason, e.versions)}"]
    if e.synthetic:
        lines.append("[yellow]SYNTHETIC DATA: random images and labels; accuracy is meaningless[/]")
    if e.note:
        lines.append(f"[yellow]note: {e.note}[/]")
    return "\n".join(lines)


def backend_line(backend: str, reason: str | None, versions: dict[str, str] | None) -> str:
    """'jax 0.10.2 (Keras 3.15.1): a TPU is present and ...'."""
    v = versions or {}
    keras = f" (Keras {v['keras']})" if v.get("keras") else ""
    return f"{backend} {v.get(backend, '')}".rstrip() + keras + (f": {reason}" if reason else "")


def step_line(e: Step, rec: RunRecorder) -> str:
    w = rec.workload
    predict = e.phase == PREDICT
    flops = rec.info.flops_per_step if rec.info and not predict else None  # training's FLOPs
    gflops = f"  {flops / e.seconds / 1e9:.1f} GFLOP/s" if flops else ""
    figures = "".join(f"  {m.label} {m.show(e.metrics[m.key])}" for m in w.metrics if m.key in e.metrics)
    warm = " [dim](warm-up)[/]" if e.warmup else ""
    where = f"predict {w.unit} {e.step}" if predict else f"{w.unit} {e.step}/{rec.steps_total}"
    return (f"{where}  {fmt.seconds(e.seconds)}  "
            f"{fmt.rate(e.examples_per_s, 'ex/s')}{gflops}{figures}{warm}")


def step_status(e: Step, rec: RunRecorder) -> str:
    """The short form beside a progress bar: time per step and the first metric."""
    first = next((m for m in rec.workload.metrics if m.key in e.metrics), None)
    figure = f"  {first.label} {first.show(e.metrics[first.key])}" if first else ""
    return f"{fmt.seconds(e.seconds)}/{rec.workload.unit}{figure}" + (SYNTHETIC_TAG if e.synthetic else "")
