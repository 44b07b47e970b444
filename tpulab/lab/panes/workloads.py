"""The workloads pane: pick a workload, set its parameters, see the plan, press Run."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any, Callable

from rich.table import Table
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Checkbox, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from tpulab.base import fmt, safe
from tpulab.base.errors import UsageError
from tpulab.base.plugins import WORKLOADS, discover
from tpulab.engine.estimate import Estimate, estimate, wanted
from tpulab.engine.runindex import RunRow, Wanted
from tpulab.engine.spec import MAX_REPEAT, resolve
from tpulab.engine.sweep import Grid, Sweep
from tpulab.lab.panes import lab
from tpulab.lab.panes.confirm import ConfirmRun
from tpulab.lab.widgets.param_form import NO_PRESET, ParamForm, explain
from tpulab.machine.detect import RuntimeReport
from tpulab.views.sweep import article_note, impossible_lines, point_count
from tpulab.workloads import registry
from tpulab.workloads.base import BACKEND, COMPILE, DEVICE, PROFILE, Limits, Params, Workload

# How a run is made, not what it computes: the form's stops for ctrl+o, after the sweep tick box
RUN_SETTINGS = tuple(spec.name for spec in (BACKEND, DEVICE, PROFILE, COMPILE))

OPEN_MARK = "▶ "
REPEAT_HELP = ("Run it this many times, each in a fresh process, one after another (--repeat): one run whose interval "
               "holds the spread between processes; a sweep runs each point this many times, interleaved")
ASK_OVER_S = 5 * 60  # a run or sweep estimated longer than this asks before it starts
Estimator = Callable[[Callable[[Wanted], list[RunRow]]], Estimate]  # an estimate from the store's candidates


def indented(mark: str, markup: str) -> Table:
    """An entry whose lines, wrapped ones too, all start after its mark ('Roofline: measured' / '  ceilings')."""
    grid = Table.grid()
    grid.add_column(width=len(mark), no_wrap=True)
    grid.add_column()
    grid.add_row(mark, markup)
    return grid


class WorkloadsPane(Horizontal):
    BINDINGS = [Binding("ctrl+o", "switches", "How the run is made: the sweep tick box, then backend, device, "
                        "profile and compile; again: the next", key_display="ctrl+o", show=False,
                        id="workloads.switches")]

    class RunRequested(Message):
        def __init__(self, workload: Workload, params: Params, repeat: int = 1) -> None:
            super().__init__()
            self.workload = workload
            self.params = params
            self.repeat = repeat

    class SweepRequested(Message):
        def __init__(self, sweep: Sweep) -> None:
            super().__init__()
            self.sweep = sweep

    def __init__(self, report: RuntimeReport, workload: str | None = None, params: Params | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report = report
        self.workload = registry()[workload] if workload else next(iter(registry().values()))
        self.initial_params = params
        self._replacing = asyncio.Lock()  # one form at a time: a quick second choice waits for the first
        self._planned = 0  # the latest plan: an estimate for an older one is dropped
        self.kept: dict[str, dict[str, str]] = {}  # each workload's form as last left, for this session

    def compose(self) -> ComposeResult:
        with Vertical(id="workload-side"):
            yield OptionList(*self._options(), id="workload-list")
            yield Static(self.workload.summary, id="explain")
        with Vertical(id="workload-main"):
            yield Checkbox("sweep: fields take lists, 32,64 or 16..1024", False, id="sweep-mode",
                           compact=True)
            yield ParamForm(self.workload, self.report, self.initial_params, id="param-form")
            yield Static(id="plan")
            with Horizontal(id="run-row"):
                yield Button("Run (ctrl+r)", id="run-button", variant="success", disabled=True, compact=True)
                yield Label("fresh processes", id="repeat-label")
                yield Input("1", id="repeat", type="integer", compact=True, tooltip=REPEAT_HELP)

    def _options(self) -> list[Option]:
        """One entry per workload; the open one is marked, so the list says which form is shown."""
        broken = [Option(f"[dim]{safe.markup(f'{b.name}: could not be loaded')}[/]\n  [dim]{safe.markup(b.error[:60])}[/]",
                         id=f"broken-{b.name}", disabled=True) for b in discover(WORKLOADS)[1]]
        return [Option(indented(OPEN_MARK if w is self.workload else "  ",
                                f"[b]{safe.markup(w.title)}[/b]\n{safe.markup(w.name)}"), id=w.name)
                for w in registry().values()] + broken

    def limits(self) -> Limits:
        return Limits.of(self.report)

    def action_switches(self) -> None:
        """The next of the run's settings, from anywhere in the tab: no Tab through every hyperparameter."""
        stops = [self.query_one("#sweep-mode"), *(w for name in RUN_SETTINGS for w in self.form.query(f"#param-{name}"))]
        stops = [c for c in stops if c.focusable]
        if stops:
            at = stops.index(self.app.focused) + 1 if self.app.focused in stops else 0
            stops[at % len(stops)].focus()

    @property
    def form(self) -> ParamForm:
        return self.query_one(ParamForm)

    @property
    def workload_list(self) -> OptionList:
        return self.query_one("#workload-list", OptionList)

    @property
    def sweeping(self) -> bool:
        return self.query_one("#sweep-mode", Checkbox).value

    async def _replace_form(self, values: dict[str, object] | None = None) -> None:
        async with self._replacing:
            preset: str | None = NO_PRESET
            for old in self.query(ParamForm):
                self.kept[old.workload.name] = old.text_values()
                # the form names the preset its values hold; where two hold them (conv's article is its defaults),
                # the one shown before stays
                preset = old.preset if old.workload is self.workload else preset
            await self.query(ParamForm).remove()
            form = ParamForm(self.workload, self.report, values, sweep=self.sweeping, id="param-form", preset=preset)
            await self.query_one("#workload-main").mount(form, after="#sweep-mode")

    async def select(self, name: str) -> None:
        if name == self.workload.name and self.query(ParamForm):
            return
        self.workload = registry()[name]
        await self._replace_form(self._for_mode(self.kept.get(name, {})))
        options = self.workload_list
        options.clear_options()
        options.add_options(self._options())
        options.highlighted = list(registry()).index(name)
        self.query_one("#explain", Static).update(self.workload.summary)

    def on_mount(self) -> None:
        self.workload_list.highlighted = list(registry()).index(self.workload.name)

    def refresh_limits(self, report: RuntimeReport) -> None:
        """A framework's view arrived: shard bounds and `auto` may change; keep what the user typed."""
        self.report = report
        for form in self.query(ParamForm):  # none while one is being replaced: the new one reads the report
            form.report = report
            form.revalidate()

    @on(OptionList.OptionSelected, "#workload-list")
    async def _selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            await self.select(event.option.id)

    @on(Checkbox.Changed, "#sweep-mode")
    async def _mode_changed(self, event: Checkbox.Changed) -> None:
        """Sweep mode keeps what was typed; back to a single run, a list keeps its first value."""
        event.stop()
        self.query_one("#run-button", Button).label = "Sweep (ctrl+r)" if event.value else "Run (ctrl+r)"
        await self._replace_form(self._for_mode(self.form.text_values()))

    def _for_mode(self, values: dict[str, str]) -> dict[str, object]:
        """A form's text for the mode now chosen: a sweep takes it as it is; a single run, each list's first value."""
        if self.sweeping:
            return dict(values)
        firsts = {k: v.split(",")[0].split("..")[0] for k, v in values.items()}
        return {k: self.workload.spec(k).parse(v) if v else self.workload.spec(k).default
                for k, v in firsts.items() if self._parses(k, v)}

    def _parses(self, name: str, text: object) -> bool:
        try:
            self.workload.spec(name).parse(text)
            return True
        except ValueError:
            return False

    async def open_configuration(self, workload: Workload, params: Params) -> None:
        """A configuration (a sweep's best) in the form, for a single run."""
        self.workload = workload
        switch = self.query_one("#sweep-mode", Checkbox)
        with switch.prevent(Checkbox.Changed):
            switch.value = False
        await self._replace_form(dict(params))
        self.query_one("#run-button", Button).label = "Run (ctrl+r)"
        self.workload_list.clear_options()
        self.workload_list.add_options(self._options())

    @on(ParamForm.Changed)
    def _changed(self, event: ParamForm.Changed) -> None:
        if event.form.workload is not self.workload or event.form.sweep != self.sweeping:
            return  # a form being replaced
        form = event.form
        ready = form.planned is not None if form.sweep else event.params is not None
        self.query_one("#run-button", Button).disabled = not ready
        self._planned += 1
        plan = self.query_one("#plan", Static)
        if form.sweep and form.planned is not None:
            sweep = form.planned
            grid, impossible = sweep.grid, form.impossible
            plan.update(self.sweep_plan(sweep, grid, impossible, "…"))
            self._estimate(sweep.estimate, lambda guess: self.sweep_plan(sweep, grid, impossible, guess))
        elif event.params is not None:
            p = dict(event.params)
            plan.update(self.plan(p, "…"))
            self._estimate(self._estimator(p), partial(self.plan, p))
        else:
            plan.update(f"[red]{len(event.errors)} value(s) to fix before running[/]")

    def _estimate(self, compute: Estimator,
                  render: Callable[[Estimate], str]) -> None:
        """The plan's estimate, from the kept runs in a thread; shown unless the plan changed since."""
        planned = self._planned

        def show(guess: Estimate) -> None:
            if planned == self._planned:
                self.query_one("#plan", Static).update(render(guess))

        lab(self).estimate_in_background(compute, show)

    @on(ParamForm.Explain)
    def _explain(self, event: ParamForm.Explain) -> None:
        self.query_one("#explain", Static).update(explain(event.spec))

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """Off the fields, the side says what the workload is again: a field's entry shows only while it is focused."""
        if not (event.widget.id or "").startswith("param-"):
            self.query_one("#explain", Static).update(self.workload.summary)

    @on(Button.Pressed, "#run-button")
    def _run(self) -> None:
        self.request_run()

    def request_run(self, ask: bool = False) -> None:
        """Run what the form holds, asking first when `ask` or when the estimate is over ASK_OVER_S. While a run, a
        sweep or the card is in flight, one line says so and how to stop it: no question about a run that cannot
        start."""
        if lab(self).busy():
            return
        form = self.form
        repeat = self.repeat()
        if repeat is None:
            return
        compute: Estimator
        if form.sweep and form.planned is not None:
            sweep, impossible = form.planned, form.impossible
            sweep.repeat = repeat
            grid = sweep.grid
            request: Message = self.SweepRequested(sweep)
            question = f"Sweep {self.workload.title} over {point_count(sweep.points)}?"
            compute, render = sweep.estimate, partial(self.sweep_plan, sweep, grid, impossible)
        elif not form.sweep and form.params is not None:
            p = dict(form.params)
            request = self.RunRequested(self.workload, p, repeat)
            question = f"Run {self.workload.title} with {self.workload.changed(p) or 'its defaults'}?"
            compute, render = self._estimator(p), partial(self.plan, p)
        else:
            name, error = next(iter(form.errors.items()), ("", "no combination of these values can run"))
            self.notify(safe.visible(f"{name.replace('_', ' ')}: {error}" if name else error), title="cannot run yet",
                        severity="error", timeout=10, markup=False)
            return
        lab(self).estimate_in_background(compute, lambda guess: self._go(request, question, render(guess), guess, ask))

    def repeat(self) -> int | None:
        """The fresh processes the field asks for; None, said in one line naming it, when out of range."""
        text = self.query_one("#repeat", Input).value.strip()
        if not text.isdigit() or not 1 <= int(text) <= MAX_REPEAT:
            self.notify(f"fresh processes: a whole number from 1 to {MAX_REPEAT} (got {text!r})", title="cannot run yet",
                        severity="error", timeout=10, markup=False)
            return None
        return int(text)

    def _send(self, request: Message) -> None:
        """The run or sweep goes; a sweep's form plans the next one afresh (a sweep runs once)."""
        self.post_message(request)
        if isinstance(request, self.SweepRequested):
            self.form.revalidate()

    def _go(self, request: Message, question: str, plan: str, guess: Estimate, ask: bool) -> None:
        long = guess.seconds is not None and guess.seconds > ASK_OVER_S
        if not (ask or long):
            self._send(request)
            return
        if long:
            question += f" It would take about {fmt.duration(guess.seconds)}."

        def answered(yes: bool | None) -> None:
            if yes:
                self._send(request)

        self.app.push_screen(ConfirmRun(question, plan), answered)

    def resolved(self, p: Params) -> Params:
        """The form's values as its run would run them (`auto` decided), or as given when it cannot run here."""
        try:
            return resolve(self.workload, p, self.report).params
        except UsageError:
            return p

    def _estimator(self, p: Params) -> Estimator:
        """The single run's estimate from the kept runs the store finds for it (called in a thread)."""
        w, limits, report, run = self.workload, self.limits(), self.report, self.resolved(p)
        return lambda found: estimate(w, run, limits, report, found(wanted(w, run, limits)))

    def sweep_plan(self, sweep: Sweep, grid: Grid, impossible: list[tuple[dict[str, object], str]],
                   guess: Estimate | str) -> str:
        skipped = "".join(f"\n[yellow]{line}[/]" for line in impossible_lines(impossible))
        note = f"\n[dim]{note}[/]" if (note := article_note(grid)) else ""
        return (f"sweep: {point_count(sweep.points)}, {grid.length()} | "
                f"estimate {guess}{skipped}{note}")

    def plan(self, p: Params, guess: Estimate | str) -> str:
        w = self.workload
        run = self.resolved(p)
        device = self.limits().device_for(run.get("device", "auto"))  # a workload may take no --device: auto
        steps = w.total_steps(run)
        flops = w.flops_per_step(run)
        batch, shards = w.batch_size(run), w.replicas(run)
        return (f"global batch {batch} = {batch // shards} per replica x {shards} "
                f"shard(s) on {device.upper()} via {self.form.backend(run)} | "
                f"{fmt.rate(flops, 'FLOP')} per {w.unit}, {steps} {w.unit}s | estimate {guess}")
