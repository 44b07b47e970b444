"""The workloads pane: pick a workload, set its parameters, see the plan, press Run."""

from __future__ import annotations


from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, OptionList, Static
from textual.widgets.option_list import Option

from .. import fmt
from ..runtime.detect import RuntimeReport
from ..runtime.peaks import device_peak
from ..widgets.param_form import ParamForm, explain
from ..workloads import WORKLOADS
from ..workloads.base import Limits, Params, Workload

ASSUMED_PEAK_FRACTION = 0.25  # for an estimate before any run of this workload was kept
STARTUP_S = 8.0  # worker start and TensorFlow import


class WorkloadsPane(Horizontal):
    class RunRequested(Message):
        def __init__(self, workload: Workload, params: Params) -> None:
            super().__init__()
            self.workload = workload
            self.params = params

    def __init__(self, report: RuntimeReport, workload: str | None = None, params: Params | None = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.report = report
        self.workload = WORKLOADS[workload] if workload else next(iter(WORKLOADS.values()))
        self.initial_params = params

    def compose(self) -> ComposeResult:
        with Vertical(id="workload-side"):
            yield OptionList(*[Option(f"[b]{w.title}[/b]\n{w.name}", id=w.name) for w in WORKLOADS.values()],
                             id="workload-list")
            yield Static(self.workload.summary, id="explain")
        with Vertical(id="workload-main"):
            yield ParamForm(self.workload, self.limits(), self.initial_params, id="param-form")
            yield Static(id="plan")
            yield Button("Run (ctrl+r)", id="run-button", variant="success", disabled=True, compact=True)

    def limits(self) -> Limits:
        return Limits(self.report.max_shards(), self.report.default_device)

    @property
    def form(self) -> ParamForm:
        return self.query_one(ParamForm)

    async def select(self, name: str) -> None:
        if name == self.workload.name and self.query(ParamForm):
            return
        self.workload = WORKLOADS[name]
        await self.form.remove()
        await self.query_one("#workload-main").mount(ParamForm(self.workload, self.limits(), id="param-form"),
                                                     before=0)
        self.query_one("#workload-list", OptionList).highlighted = list(WORKLOADS).index(name)
        self.query_one("#explain", Static).update(self.workload.summary)

    def on_mount(self) -> None:
        self.query_one("#workload-list", OptionList).highlighted = list(WORKLOADS).index(self.workload.name)

    def refresh_limits(self, report: RuntimeReport) -> None:
        """TensorFlow's view arrived: shard bounds may change; keep what the user typed."""
        self.report = report
        form = self.form
        form.limits = self.limits()
        form.revalidate()

    @on(OptionList.OptionSelected, "#workload-list")
    async def _selected(self, event: OptionList.OptionSelected) -> None:
        await self.select(event.option.id)

    @on(ParamForm.Changed)
    def _changed(self, event: ParamForm.Changed) -> None:
        if event.form.workload is not self.workload:
            return  # a form being replaced
        self.query_one("#run-button", Button).disabled = event.params is None
        self.query_one("#plan", Static).update(self.plan(event.params) if event.params else
                                               f"[red]{len(event.errors)} value(s) to fix before running[/]")

    @on(ParamForm.Explain)
    def _explain(self, event: ParamForm.Explain) -> None:
        self.query_one("#explain", Static).update(explain(event.spec))

    @on(Button.Pressed, "#run-button")
    def _run(self) -> None:
        self.request_run()

    def request_run(self) -> None:
        if self.form.params is not None:
            self.post_message(self.RunRequested(self.workload, dict(self.form.params)))

    def plan(self, p: Params) -> str:
        w = self.workload
        device = self.limits().device_for(p["device"])
        steps = w.total_steps(p)
        flops = w.flops_per_step(p)
        rate, basis = self._rate(w, device, p)
        estimate = f"~{fmt.duration(STARTUP_S + steps * flops / rate)} ({basis})" if rate else "unknown"
        return (f"global batch {p['batch_size']} = {p['batch_size'] // p['shards']} per replica x {p['shards']} "
                f"shard(s) on {device.upper()} | {fmt.rate(flops, 'FLOP')} per {w.unit}, {steps} {w.unit}s | "
                f"estimate {estimate}")

    def _rate(self, w: Workload, device: str, p: Params) -> tuple[float | None, str]:
        for r in self.app.records:  # the newest kept run of this workload on this device
            s = r.get("summary") or {}
            if (r["workload"] == w.name and r["status"] == "finished" and s.get("gflops_per_s")
                    and (r.get("device") or {}).get("kind") == device):
                return s["gflops_per_s"] * 1e9, f"at the {s['gflops_per_s']:.1f} GFLOP/s of run {r['id'][:8]}"
        name = {"gpu": (self.report.gpus[0].name if self.report.gpus else ""),
                "tpu": (self.report.tpu.generation if self.report.tpu else "")}.get(device, "")
        peak = device_peak(device, name or "", w.compute_dtype(p), p["shards"], self.report.cpu)
        if peak is None:
            return None, ""
        return peak.flops * ASSUMED_PEAK_FRACTION, f"assuming {ASSUMED_PEAK_FRACTION:.0%} of peak"
