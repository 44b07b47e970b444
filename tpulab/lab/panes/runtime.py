"""The runtime pane: what will run where, what to fix if an accelerator is idle, and this machine's card.

`c` runs the machine card's quick suite (`tpulab bench --quick`) in the background, its progress and each
finished entry shown as they come; `c` again stops it, keeping the card so far as partial. The card is kept in
the results like one made from the command line (`tpulab cards`). Given a Ray cluster (`tpulab --ray`), `c` makes
the fleet card instead (`tpulab bench --ray --quick`): each node's progress, then the fleet against its median.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from tpulab.base import fmt, safe
from tpulab.base.errors import TpulabError, first_line
from tpulab.engine.doctor import diagnose
from tpulab.lab.panes import lab
from tpulab.machine.detect import RuntimeReport
from tpulab.views import card as card_view
from tpulab.views.console import runtime_table

if TYPE_CHECKING:
    from tpulab.engine.bench_run import Bench, Progress
    from tpulab.engine.card import Card, Fleet
    from tpulab.engine.fleet import FleetBench, FleetProgress

CARD_HINT = "c: this machine's card (tpulab bench --quick, about 3 minutes)"
FLEET_HINT = "c: the fleet card, a quick card on every node of the Ray cluster at {} (tpulab bench --ray --quick)"


class RuntimePane(VerticalScroll, can_focus=True):
    BINDINGS = [Binding("c", "card", "Machine card", show=False, id="runtime.card")]

    bench: Bench | FleetBench | None = None  # the card being made (a fleet's, given a cluster)
    progress: tuple[str, ...] = ()  # its progress line, then a line per finished entry

    def compose(self) -> ComposeResult:
        yield Static(id="runtime-report")
        yield Static(id="runtime-status")
        yield Static(id="runtime-card")

    def on_mount(self) -> None:
        self.show(lab(self).report, probing=lab(self).probing)

    def on_unmount(self) -> None:
        if self.bench is not None:
            self.bench.cancel()

    def show(self, report: RuntimeReport, probing: bool) -> None:
        self.query_one("#runtime-report", Static).update(runtime_table(report, diagnose(report), probing))
        failed = [f"{name}: {view['error']}" for name, view in report.frameworks.items() if "error" in view]
        status = ("frameworks: probing in the background..." if probing else
                  "; ".join(failed) if failed else "frameworks probed: details above.")
        cluster = lab(self).cluster
        hint = FLEET_HINT.format(cluster) if cluster else CARD_HINT
        self.query_one("#runtime-status", Static).update(safe.text(f"{status}\n{hint}"))

    @property
    def making_card(self) -> bool:
        return self.bench is not None

    def action_card(self) -> None:
        if self.bench is not None:
            self.bench.cancel()
            self.notify("stopping the card after the current step: it is kept as partial")
            return
        if lab(self).busy():  # beside a run, each would measure the other
            return
        from tpulab.engine.bench_run import Bench
        from tpulab.engine.fleet import FleetBench

        self.progress = ()
        cluster = lab(self).cluster
        if cluster:
            from tpulab.engine import bench

            self.bench = FleetBench(lab(self).store.path, cluster, quick=True, budget_s=bench.SUITE.budget(quick=True),
                                    on_progress=lambda p: self.app.call_from_thread(self._fleet_progressed, p))
            self._card_line(safe.text(f"the fleet card of {cluster}: connecting...", "cyan"))
            self._fleet(self.bench)
            return
        try:  # made here, so that the card counts as going from this key on
            self.bench = Bench(lab(self).report, lab(self).store.path, "auto", quick=True,
                               on_progress=lambda p: self.app.call_from_thread(self._progressed, p))
        except TpulabError as e:
            self._card_line(safe.text(f"the card failed: {first_line(str(e))}", "red"))
            return
        self._card_line(safe.text("the machine card: starting...", "cyan"))
        self._bench(self.bench)

    @work(thread=True, exclusive=True, exit_on_error=False, group="runtime-card")
    def _fleet(self, fleet: FleetBench) -> None:
        try:
            made, cards = fleet.run()
        except TpulabError as e:
            self.app.call_from_thread(self._card_line, safe.text(f"the fleet card failed: {first_line(str(e))}",
                                                                 "red"))
            return
        finally:
            self.bench = None
        self.app.call_from_thread(self._fleet_done, made, cards)

    def _fleet_progressed(self, p: FleetProgress) -> None:
        """The fleet's time left, then a line per node: its latest news."""
        head = f"the fleet card: at most {fmt.duration(p.eta or 0.0)} left (c stops every node's card)"
        nodes = dict(line.split(": ", 1) for line in self.progress[1:])
        nodes[f"  {p.node}"] = p.line
        self.progress = (head, *(f"{k}: {v}" for k, v in nodes.items()))
        self._card_line(Group(*(safe.text(line, "cyan" if line is head else "") for line in self.progress)))

    def _fleet_done(self, made: Fleet, cards: list[Card]) -> None:
        from tpulab.engine.fleet_view import analyse
        from tpulab.views import fleet as fleet_view

        self._card_line(Group(fleet_view.terminal(analyse(made, cards)), safe.text(
            f"kept as fleet {made.short_id}: `tpulab cards fleet {made.short_id}`", "cyan")))

    @work(thread=True, exclusive=True, exit_on_error=False, group="runtime-card")
    def _bench(self, bench: Bench) -> None:
        try:
            made = bench.run()
        except TpulabError as e:
            self.app.call_from_thread(self._card_line, safe.text(f"the card failed: {first_line(str(e))}", "red"))
            return
        finally:
            self.bench = None
        self.app.call_from_thread(self._done, made)

    def _progressed(self, p: Progress) -> None:
        if p.finished is not None:
            e = p.finished
            said = f"{card_view.figure(e.median)} {e.unit or ''}" if e.status == "ok" else f"{e.status}: {e.reason}"
            self.progress = (*self.progress, f"  {e.name}: {said}")
            head = self.progress[0]
        else:
            head = (f"{p.count()} {p.what}: {fmt.duration(p.elapsed)} in, at most "
                    f"{fmt.duration(p.eta)} left (c stops it)")
            self.progress = (head, *self.progress[1:])
        self._card_line(Group(*(safe.text(line, "cyan" if line is head else "") for line in self.progress)))

    def _done(self, made: Card) -> None:
        self._card_line(Group(card_view.terminal(made), safe.text(f"kept as card {made.short_id}: "
                                                                    "`tpulab cards compare this article`", "cyan")))

    def _card_line(self, shown: object) -> None:
        self.query_one("#runtime-card", Static).update(shown)  # type: ignore[arg-type]
