"""The workloads pane: pick a workload, set its parameters, see the plan, press Run."""

from __future__ import annotations

from typing import Any


from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, OptionList, Static
from textual.widgets.option_list import Option

from ..estimate import estimate
from ..runtime.detect import RuntimeReport
from ..widgets.param_form import ParamForm, explain
from ..workloads import WORKLOADS
from ..workloads.base import Limits, Params, Workload
from . import lab

OPEN_MARK = "▶ "


class WorkloadsPane(Horizontal):
    class RunRequested(Message):
        def __init__(self, workload: Workload, params: Params) -> None:
            super().__init__()
            self.workload = workload
            self.params = params

    def __init__(self, report: RuntimeReport, workload: str | None = None, params: Params | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report = report
        self.workload = WORKLOADS[workload] if workload else next(iter(WORKLOADS.values()))
        self.initial_params = params

    def compose(self) -> ComposeResult:
        with Vertical(id="workload-side"):
            yield OptionList(*self._options(), id="workload-list")
            yield Static(self.workload.summary, id="explain")
        with Vertical(id="workload-main"):
            yield ParamForm(self.workload, self.limits(), self.initial_params, id="param-form")
            yield Static(id="plan")
            yield Button("Run (ctrl+r)", id="run-button", variant="success", disabled=True, compact=True)

    def _options(self) -> list[Option]:
        """One entry per workload; the open one is marked, so the list says which form is shown."""
        return [Option(f"[b]{OPEN_MARK if w is self.workload else '  '}{w.title}[/b]\n  {w.name}", id=w.name)
                for w in WORKLOADS.values()]

    def limits(self) -> Limits:
        return Limits.of(self.report)

    @property
    def form(self) -> ParamForm:
        return self.query_one(ParamForm)

    @property
    def workload_list(self) -> OptionList:
        return self.query_one("#workload-list", OptionList)

    async def select(self, name: str) -> None:
        if name == self.workload.name and self.query(ParamForm):
            return
        self.workload = WORKLOADS[name]
        await self.form.remove()
        await self.query_one("#workload-main").mount(ParamForm(self.workload, self.limits(), id="param-form"),
                                                     before=0)
        options = self.workload_list
        options.clear_options()
        options.add_options(self._options())
        options.highlighted = list(WORKLOADS).index(name)
        self.query_one("#explain", Static).update(self.workload.summary)

    def on_mount(self) -> None:
        self.workload_list.highlighted = list(WORKLOADS).index(self.workload.name)

    def refresh_limits(self, report: RuntimeReport) -> None:
        """A framework's view arrived: shard bounds and `auto` may change; keep what the user typed."""
        self.report = report
        form = self.form
        form.limits = self.limits()
        form.revalidate()

    @on(OptionList.OptionSelected, "#workload-list")
    async def _selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
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
        from .. import fmt

        w = self.workload
        limits = self.limits()
        device = limits.device_for(p["device"])
        steps = w.total_steps(p)
        flops = w.flops_per_step(p)
        guess = estimate(w, p, limits, self.report, lab(self).records)
        return (f"global batch {p['batch_size']} = {p['batch_size'] // p['shards']} per replica x {p['shards']} "
                f"shard(s) on {device.upper()} via {limits.backend_for(p['backend'])} | "
                f"{fmt.rate(flops, 'FLOP')} per {w.unit}, {steps} {w.unit}s | estimate {guess}")
