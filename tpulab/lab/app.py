"""The lab: runtime, workloads, run and results tabs over tpulab's engine.

The app never imports a framework: the runtime tab paints from the fast probes at once, each
framework's view arrives from a worker process, and every run streams from its own worker.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any, Callable, Iterable

from textual import events, on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.lazy import Lazy
from textual.screen import Screen
from textual.widget import Widget
from textual.containers import ScrollableContainer
from textual.widgets import Checkbox, Footer, Header, Input, OptionList, Select, TabbedContent, TabPane

from tpulab import backends
from tpulab.base import safe
from tpulab.base.errors import UsageError
from tpulab.base.events import RunRecord
from tpulab.engine.estimate import Estimate
from tpulab.engine.runindex import RunRow, Wanted
from tpulab.engine.runner import Run, Standby
from tpulab.engine.store import Store, StoreError, default_path
from tpulab.engine.sweep import Sweep
from tpulab.lab import mends  # noqa: F401 - Textual's OptionList pages safely before it is laid out
from tpulab.lab.failure import Failure, FailsInOneLine
from tpulab.lab.panes import Candidates
from tpulab.lab.panes.glossary import GlossaryScreen
from tpulab.lab.panes.confirm import ConfirmRun
from tpulab.lab.panes.help import HelpScreen, Rows, rows, widget_rows
from tpulab.lab.panes.results import ResultsPane
from tpulab.lab.panes.run import RunPane
from tpulab.lab.panes.runtime import RuntimePane
from tpulab.lab.panes.sweep import SweepPane
from tpulab.lab.panes.workloads import WorkloadsPane
from tpulab.lab.widgets.param_form import ParamForm
from tpulab.machine.detect import RuntimeReport, detect
from tpulab.workloads import registry
from tpulab.workloads.base import Workload

TABS = ("runtime", "workloads", "run", "results", "sweep")
# alt+1..alt+5 switch tabs from anywhere, a text field included. Most terminals send alt+1 as Esc 1,
# which Textual reads as the character ¡ (as macOS types it): those characters are the same keys.
SENT_FOR_ALT = ("inverted_exclamation_mark", "trade_mark_sign", "pound_sign", "cent_sign", "infinity")
ALT_TABS = {**{f"alt+{i}": tab for i, tab in enumerate(TABS, 1)}, **dict(zip(SENT_FOR_ALT, TABS))}

# What takes the focus when a tab opens, so arrows and Enter work at once.
FIRST_CONTROL = {"runtime": "#runtime-pane", "workloads": "#workload-list", "run": "#run-log",
                 "sweep": "#sweep-table", "results": "#results-table"}
# Each tab's pane, whose bindings `?` lists under the tab (with the app's whose id starts with the tab's name: run.)
PANES: dict[str, type[Widget]] = {"runtime": RuntimePane, "workloads": WorkloadsPane, "run": RunPane,
                                  "results": ResultsPane, "sweep": SweepPane}
DIALOGS: tuple[tuple[str, type[Screen[Any]]], ...] = (
    ("The question before a run", ConfirmRun), ("The glossary", GlossaryScreen), ("These keys", HelpScreen))


def pane_of(widget: Widget) -> Widget:
    """What z zooms for the focused widget: the pane it scrolls in (a list, a table, a log, the form), never a
    button or a field alone; a control in no such pane zooms its tab's whole pane."""
    for w in widget.ancestors_with_self:
        if isinstance(w, Widget) and (isinstance(w, ScrollableContainer) and not isinstance(w, Input)
                                      or isinstance(w.parent, TabPane)):
            return w
    return widget


class TpulabApp(FailsInOneLine):
    TITLE = "tpulab"
    SUBJECT, FAILURE_NAME = "the lab", "lab"
    SUB_TITLE = "how fast is this machine for deep learning, and why"
    CSS_PATH = Path(__file__).with_name("tpulab.tcss")  # absolute, so subclasses elsewhere find it
    BINDINGS = [  # the footer shows those with show=True, in this order: what matters most first
        Binding("ctrl+r", "start_run", "Start run", tooltip="start the form's run or sweep; from another tab it says "
                "first what it will run", id="run.start"),
        Binding("x", "cancel_run", "Cancel", tooltip="stop the run after its current step (a sweep: after its point); "
                "x again kills the run", id="run.cancel"),
        Binding("q", "quit", "Quit", id="app.quit"),
        Binding("question_mark,f1,h", "help", "Help", key_display="?", tooltip="these keys (h too; F1 from a text field)",
                id="app.help"),
        Binding("z", "zoom", "Zoom", tooltip="the focused pane fills the screen; z or escape: back", id="app.zoom"),
        *(Binding(str(i), f"show_tab('{tab}')", f"{tab.capitalize()} tab (outside a text field)", show=False,
                  id=f"tab.{tab}") for i, tab in enumerate(TABS, 1)),
        Binding("g", "glossary", "Glossary of terms", show=False, id="app.glossary"),
        Binding("escape", "leave", "Leave a text field (it keeps what was typed); close a panel, a zoom or a dialog",
                show=False, id="app.close"),
        Binding("slash", "filter", "Filter the kept runs (Results tab)", key_display="/", show=False,
                id="app.filter"),
        Binding("ctrl+t", "change_theme", "Theme", show=False, id="app.theme"),
    ]

    def __init__(self, workload: str | None = None, params: dict[str, Any] | None = None, db: Path | None = None,
                 probe: bool = True, report: RuntimeReport | None = None, cluster: str | None = None) -> None:
        super().__init__()
        self.report = report or detect()
        self.cluster = cluster  # a Ray cluster's address (`tpulab --ray`): the Runtime tab's card is its fleet's
        self.initial_workload = workload
        self.initial_params = params  # from the command line: the form opens with them
        self.probe = probe
        self.probing = probe
        self.store = Store(db or default_path())
        self.records: list[RunRecord] = []  # this session's runs, newest first (the results pane pages the store)
        self.standby = Standby()  # a worker for the form's backend, its framework imported before Enter
        self.wanted: tuple[Workload, dict[str, Any]] | None = None  # the form's last valid single run
        # Kept at hand: whether work is going is asked on every change of the form, and a query walks every widget
        # of the lab (7 ms each here)
        self.run_pane, self.sweep_pane = RunPane(id="run-pane"), SweepPane(id="sweep-pane")
        self.runtime_pane = RuntimePane(id="runtime-pane")

    def compose(self) -> ComposeResult:
        initial = "workloads" if self.initial_workload else "runtime"
        panes = {"runtime": self.runtime_pane,
                 "workloads": WorkloadsPane(self.report, self.initial_workload, self.initial_params,
                                            id="workloads-pane"),
                 "run": self.run_pane, "results": ResultsPane(id="results-pane"), "sweep": self.sweep_pane}
        yield Header()
        with TabbedContent(initial=initial, id="tabs"):
            for tab, pane in panes.items():
                with TabPane(tab.capitalize(), id=tab):
                    # Hidden tabs mount after the first paint; each pane reads the app's state on mount.
                    yield pane if tab == initial else Lazy(pane)
        yield Footer()

    async def on_event(self, event: events.Event) -> None:
        """alt+N before any widget sees it: a text field would type it (no binding outranks a field's keys)."""
        if isinstance(event, events.Key) and event.key in ALT_TABS and len(self.screen_stack) == 1:
            event.stop()
            self.action_show_tab(ALT_TABS[event.key])
            return
        await super().on_event(event)

    def on_unmount(self) -> None:
        self.standby.drop()  # no worker outlives the lab

    def failed(self, failure: Failure) -> None:
        """The run in flight is stopped now, and what it measured is kept (cancelled, the failure its reason)."""
        for pane in self.screen_stack[0].query(RunPane):
            record = pane.abandon(f"the lab failed: {failure.what}")
            if record is not None:
                self.store.save(record)

    def on_mount(self) -> None:
        # Each time the tabs' screen is laid out (a tab shown, a zoom, a pane resized), the focus is checked.
        self.screen.screen_layout_refresh_signal.subscribe(self, self._focus_in_sight, immediate=True)
        if self.probe:
            self.probe_frameworks()
        # Everything built at start-up lives as long as the app: keep it out of the garbage
        # collector's full scans, which otherwise stall the UI for a tenth of a second mid-run.
        self.set_timer(2.0, gc.freeze)

    # --- background work --------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="probe")
    def probe_frameworks(self, fresh: bool = False) -> None:
        """Each installed framework's view, one after another (only one process may hold a TPU)."""
        from tpulab.engine.worker import probe

        if fresh:
            self.report = detect()
        names = [name for name, info in backends.registry().items()
                 if info.installed(self.report.packages) and info.framework]
        for i, name in enumerate(names):
            view = probe(name)
            self.call_from_thread(self._probed, name, view, i == len(names) - 1)
        if not names:
            self.call_from_thread(self._probed, None, {}, True)

    def _probed(self, name: str | None, view: dict[str, Any], last: bool) -> None:
        if name is not None:
            self.report.frameworks[name] = view
        self.probing = not last
        for runtime in self.query(RuntimePane):
            runtime.show(self.report, probing=self.probing)
        if "error" not in view:
            for workloads in self.query(WorkloadsPane):
                workloads.refresh_limits(self.report)

    @work(thread=True, exit_on_error=False, group="store")
    def save_record(self, record: RunRecord) -> None:
        try:
            self.store.save(record)
        except StoreError as e:
            self.call_from_thread(self.notify, str(e), title="run not kept", severity="error", timeout=15)
            return
        self.call_from_thread(self._saved)

    def _saved(self) -> None:
        for pane in self.query(ResultsPane):
            pane.reload(keep=len(pane.rows))

    def keep_record(self, record: RunRecord) -> None:
        """A finished run: saved in the background, then listed."""
        self.records.insert(0, record)
        self.save_record(record)

    def list_record(self, record: RunRecord) -> None:
        """A run kept already (a sweep's point, by `Sweep.drive`): listed."""
        self.records.insert(0, record)
        self._saved()

    def estimate_in_background(self, compute: Callable[[Candidates], Estimate],
                               then: Callable[[Estimate], None]) -> None:
        """An estimate from the kept runs, computed in a thread (its queries never hold a keystroke up)."""
        def candidates(wanted: Wanted) -> list[RunRow]:
            try:
                return self.store.candidates(wanted)
            except StoreError:
                return []  # an unreadable store was named when the results pane opened it

        def task() -> None:
            guess = compute(candidates)
            self.call_from_thread(then, guess)

        self.run_worker(task, thread=True, exit_on_error=False, group="estimate")

    @work(thread=True, exit_on_error=False, group="store")
    def keep_sweep(self, sweep: Sweep) -> None:
        try:
            self.store.save_sweep(sweep.record())
        except StoreError as e:
            self.call_from_thread(self.notify, str(e), title="sweep not kept", severity="error", timeout=15)

    async def open_configuration(self, workload: Workload, params: dict[str, Any]) -> None:
        self.action_show_tab("workloads")
        await self.query_one(WorkloadsPane).open_configuration(workload, params)

    def _focus_in_sight(self, screen: Screen) -> None:
        """A widget out of sight (on a hidden tab, outside a zoom, of no size) never keeps the focus: the keys
        would go where no one sees them (a list of no height fails on PageUp). The open tab's first control takes
        it, or none does."""
        focused = screen.focused
        if focused is None:
            return
        zoom = screen.maximized

        def in_sight(widget: Widget) -> bool:  # laid out with room inside, in the zoom, displayed, visible, enabled
            return (widget.region.area > 0 and widget.size.area > 0
                    and (zoom is None or zoom in widget.ancestors_with_self) and widget in screen.focus_chain)

        if in_sight(focused):
            return
        tab = screen.query_one("#tabs", TabbedContent).active
        found = [w for w in screen.query(FIRST_CONTROL[tab]) if in_sight(w)] if tab in FIRST_CONTROL else []
        screen.set_focus(found[0] if found else None)

    # --- actions -----------------------------------------------------------------------------
    def action_show_tab(self, tab: str) -> None:
        self.screen_stack[0].minimize()  # a zoom would keep the tab out of sight, and the keys with it
        self.query_one("#tabs", TabbedContent).active = tab
        self._focus_first(tab)

    @on(TabbedContent.TabActivated)
    def _tab_opened(self, event: TabbedContent.TabActivated) -> None:
        """Focus follows the tab: its first control takes the keys (lazy panes mount first)."""
        tab = event.pane.id or ""
        self.call_after_refresh(self._focus_first, tab)

    def _focus_first(self, tab: str) -> None:
        tabs = self.query_one("#tabs", TabbedContent)
        pane = tabs.get_pane(tab)
        if tabs.active != tab or (self.focused is not None and pane in self.focused.ancestors):
            return  # another tab opened since, or the user is already working in this one
        found = self.query(FIRST_CONTROL[tab]) if tab in FIRST_CONTROL else None
        if found:
            target: Widget = found.first()
            target.focus()
        elif tab in FIRST_CONTROL:  # a lazy pane not mounted yet: try after the next refresh
            self.call_after_refresh(self._focus_first, tab)

    def action_leave(self) -> None:
        """Out of a text field, to its tab's first control (a table, a list): in a field every letter is typed (q
        too), so Escape is the way back to the lab's keys; the field keeps its text. Elsewhere it closes the keys
        panel (a zoom and the dialogs take Escape before the lab does)."""
        if isinstance(self.focused, Input) and len(self.screen_stack) == 1:
            tab = self.query_one("#tabs", TabbedContent).active
            found = self.query(FIRST_CONTROL[tab]) if tab in FIRST_CONTROL else None
            self.set_focus(found.first() if found else None)
        else:
            self.action_hide_help_panel()

    def action_glossary(self) -> None:
        self.push_screen(GlossaryScreen())

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.help_sections()))

    def help_sections(self) -> list[tuple[str, Rows]]:
        """Every key the lab takes, read from the bindings themselves (so the list cannot fall behind them): the
        app's, each tab's (its pane's, and the app's named for it: ctrl+r and x are the Run tab's from anywhere),
        then each dialog's."""
        def of_tab(b: BindingType) -> str | None:
            tab = ((b.id or "") if isinstance(b, Binding) else "").split(".")[0]
            return tab if tab in PANES else None

        widgets = {"workloads": widget_rows(OptionList, "the workload list") + widget_rows(Checkbox, "a tick box, "
                   "on/off field") + widget_rows(Select, "a choice: opens its list")}
        tabs = [(f"{tab.capitalize()} tab", rows(b for b in self.BINDINGS if of_tab(b) == tab)
                 + rows(pane.BINDINGS) + widgets.get(tab, [])) for tab, pane in PANES.items()]
        return [("Everywhere", rows(b for b in self.BINDINGS if of_tab(b) is None)), *tabs,
                *((title, rows(dialog.BINDINGS)) for title, dialog in DIALOGS)]

    def action_zoom(self) -> None:
        """The focused pane fills the screen; again (or escape) puts it back."""
        if self.screen.maximized is not None:
            self.screen.minimize()
        elif self.focused is not None:
            self.screen.maximized = pane_of(self.focused)  # containers too (Textual's maximize skips those)

    def action_filter(self) -> None:
        self.action_show_tab("results")
        self._focus_when_mounted("#results-filter")

    def _focus_when_mounted(self, selector: str) -> None:
        found = self.query(selector)
        if found:
            found.first().focus()
        else:  # a lazy pane mounts after the next refresh
            self.call_after_refresh(self._focus_when_mounted, selector)

    def action_start_run(self) -> None:
        """From the form, the run starts (asking first if it is long); from elsewhere, it says what it runs first."""
        in_form = self.query_one("#tabs", TabbedContent).active == "workloads"
        self.query_one(WorkloadsPane).request_run(ask=not in_form)

    def action_cancel_run(self) -> None:
        """Cancels what is running: the run, or the sweep (after its current point)."""
        if self.sweep_pane.running:
            self.sweep_pane.stop()
        else:
            self.run_pane.cancel()

    def _work_going(self) -> bool:
        """A run, a sweep or the machine card: each measures this machine, so none starts beside another."""
        return self.run_pane.running or self.sweep_pane.running or self.runtime_pane.making_card

    def busy(self) -> bool:
        """Says what is going, and how to stop it, when something is."""
        if self.runtime_pane.making_card:
            self.notify("The machine card is being made: c on the Runtime tab stops it.", severity="warning")
            return True
        if self._work_going():
            self.notify("A run or sweep is in progress: cancel it first (x).", severity="warning")
            return True
        return False

    @on(WorkloadsPane.RunRequested)
    def _run_requested(self, event: WorkloadsPane.RunRequested) -> None:
        from tpulab.engine.runner import run_job
        from tpulab.engine.spec import resolve

        if self.busy():
            return
        try:
            spec = resolve(event.workload, event.params, self.report, repeat=event.repeat)
            run = run_job(spec, self.report, self.store.path, standby=self.standby)
        except UsageError as e:  # a framework missing, or a value the decided backend cannot take
            self.notify(safe.visible(e), title="cannot run", severity="error", timeout=15, markup=False)
            return
        self.action_show_tab("run")
        self._start_run(run)

    def _start_run(self, run: Run) -> None:
        """The run on the Run tab, whose pane mounts after the first paint: asked for before (ctrl+r as the lab opens
        on a workload's form), it starts once the pane is there."""
        if not self.run_pane.is_mounted:
            self.call_after_refresh(self._start_run, run)
            return
        self.run_pane.start(run)

    @on(WorkloadsPane.SweepRequested)
    def _sweep_requested(self, event: WorkloadsPane.SweepRequested) -> None:
        if self.busy():
            return
        self.action_show_tab("sweep")
        self.call_after_refresh(self._start_sweep, event.sweep)

    def _start_sweep(self, sweep: Sweep) -> None:
        """The sweep the form planned (`tpulab.engine.sweep.plan`), driven by the Sweep tab."""
        panes = self.query(SweepPane)
        if not panes:  # the lazy pane mounts after this refresh
            self.call_after_refresh(self._start_sweep, sweep)
            return
        panes.first().start(sweep)

    @on(RunPane.Ended)
    def _run_finished(self, event: RunPane.Ended) -> None:
        if event.run is not self.query_one(RunPane).run:
            return
        record = event.record
        self.keep_record(record)
        severity: Any = {"finished": "information", "cancelled": "warning"}.get(record.status, "error")
        if self.query_one("#tabs", TabbedContent).active != "run":  # there, the summary says it: no toast over it
            self.notify(f"run {record.short_id} {record.status}", severity=severity)
        self.prestart()

    @on(ParamForm.Changed)
    def _form_changed(self, event: ParamForm.Changed) -> None:
        if not event.form.sweep and event.params is not None:
            self.wanted = (event.form.workload, dict(event.params))
            self.prestart()

    def prestart(self) -> None:
        """Keep a worker ready for the form's run while nothing runs (a run's CPU is the run's alone)."""
        from tpulab.base.errors import TpulabError
        from tpulab.engine.spec import resolve

        if self.wanted is None or self._work_going():
            return
        try:
            self.standby.want(resolve(*self.wanted, self.report), self.report)
        except TpulabError:
            self.standby.drop()  # this configuration cannot run here: Enter says why

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for w in registry().values():
            yield SystemCommand(f"Choose {w.title}", f"open the {w.name} form",
                                lambda name=w.name: self._choose(name))
        yield SystemCommand("Start run", "run the workload with the form's values", self.action_start_run)
        yield SystemCommand("Cancel run", "stop after the current step; again to kill", self.action_cancel_run)
        yield SystemCommand("Sweep mode", "let the form's fields hold lists, then sweep the grid", self._sweep_mode)
        yield SystemCommand("Open the sweep's best", "its configuration in the form, for a single run",
                            lambda: self.run_worker(self.query_one(SweepPane).action_open_best()))
        yield SystemCommand("Detect again", "probe the frameworks' view of the hardware again", self._redetect)
        yield SystemCommand("Glossary", "the terms the article explains: batch, pooling, ELU, ...",
                            self.action_glossary)
        yield SystemCommand("Help", "every key and what it does (? or F1)", self.action_help)
        yield SystemCommand("Compare marked runs", "on the results tab",
                            lambda: self.query_one(ResultsPane).action_compare())

    def _sweep_mode(self) -> None:
        self.action_show_tab("workloads")
        switch = self.query_one("#sweep-mode", Checkbox)
        switch.value = not switch.value

    def _choose(self, name: str) -> None:
        self.action_show_tab("workloads")
        self.run_worker(self.query_one(WorkloadsPane).select(name))

    def _redetect(self) -> None:
        if self.busy():  # a probe may initialise the TPU a run holds
            return
        self.probing = True
        for pane in self.query(RuntimePane):
            pane.show(self.report, probing=True)
        self.probe_frameworks(fresh=True)
