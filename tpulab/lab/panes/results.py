"""The results pane: kept runs, newest first, a page at a time; a filter; mark two or more to compare.

Every read of the store runs in a thread: the first page shows at once however many runs are kept,
the next is fetched as the cursor or the scroll nears the end of what is loaded. The rows are fitted to
the table's width as the CLI fits its listing: the id and the figures stay whole, descriptive cells give way.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.timer import Timer
from textual.widgets import Button, DataTable, Input, Static

from tpulab.base import fmt, safe
from tpulab.base.errors import UsageError
from tpulab.engine.ceilings import WORKLOAD
from tpulab.engine.runindex import FilterError, RunFilter, RunRow, parse_filter
from tpulab.engine.store import Comparison, Page, StoreError, compare
from tpulab.lab.panes import lab
from tpulab.lab.widgets.rows import RowTable
from tpulab.views import listing
from tpulab.views import profile as profile_view
from tpulab.views.console import comparison_table
from tpulab.views.roofline import POINTS, roofline_view

PAGE = 100  # rows fetched at a time
AHEAD = 20  # the next page is fetched when the cursor or the scroll comes this close to the end
FILTER_PAUSE_S = 0.2  # typing in the filter field: the store is asked once the keys pause this long
ROOFLINE_POINTS = POINTS  # the newest runs of a device drawn on its roofline
MARK = "*"  # a marked run, in a column of its own: it never takes a figure's room
NO_CARD = ("no machine card of your own yet: c on the Runtime tab makes one (or tpulab bench --quick); "
           "until then, the 2018 article's published cards:")


class ResultsPane(Vertical):
    BINDINGS = [  # said in the pane's own status line: the footer keeps the app's keys at 80 columns
        Binding("space", "toggle_mark", "Mark run", show=False, id="results.mark"),
        Binding("m", "compare", "Compare marked", show=False, id="results.compare"),
        Binding("r", "roofline", "Roofline of the run's device", show=False, id="results.roofline"),
        Binding("o", "ops", "Op table of a profiled run", show=False, id="results.ops"),
        Binding("k", "cards", "Machine cards, the newest beside the article", show=False, id="results.cards"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows: list[RunRow] = []  # what the table shows, newest first
        self._cells: list[tuple[str, ...]] = []  # their listing cells, whole
        self._shape: tuple[tuple[str, ...], list[int]] | None = None  # the columns shown and their widths
        self.total: int | None = None  # runs matching the filter, once counted
        self.marked: list[str] = []
        self.filter = RunFilter()
        self._after: tuple[str, int] | None = None  # where the next page starts; None: nothing further
        self._generation = 0  # a page from an older listing (another filter) is dropped
        self._loading = False
        self._typing: Timer | None = None

    def compose(self) -> ComposeResult:
        from tpulab.lab.widgets.charts import BarPlot  # the chart widgets load after the first paint (this pane is lazy)

        yield Input(placeholder="filter: conv, gpu, jax, failed, workload:conv since:7d sweep:ID",
                    id="results-filter", compact=True)
        yield Static("space marks a run, m compares the marked runs (the first marked is the baseline), r draws "
                     "the roofline of the run's device, o shows a profiled run's op table, k the machine cards",
                     id="results-help")
        yield RowTable(id="results-table", cell_padding=0)
        with Horizontal(id="compare-row"):
            with VerticalScroll(id="comparison-box"):  # takes the keys once shown: PageDown reads on, z zooms it
                yield Static(id="comparison")
            yield BarPlot(id="compare-chart")
        yield Button("Compare marked", id="compare-button", disabled=True)

    @property
    def table(self) -> DataTable[str | Text]:
        return self.query_one("#results-table", DataTable)

    def on_mount(self) -> None:
        self.query_one("#compare-chart").display = False
        self.query_one("#comparison-box").display = False  # nothing compared yet: not even its edge
        self.watch(self.table, "scroll_y", self._scrolled, init=False)
        self.reload()

    # --- loading ---------------------------------------------------------------------------------
    def reload(self, keep: int = 0) -> None:
        """The listing again from the newest run, with the filter (at least `keep` rows: what was loaded)."""
        self._generation += 1
        self._loading = True
        self._fetch(self._generation, self.filter, max(PAGE, keep), None)

    def _more(self) -> None:
        if self._after is not None and not self._loading:
            self._loading = True
            self._fetch(self._generation, self.filter, PAGE, self._after)

    @work(thread=True, exit_on_error=False, group="results-page")
    def _fetch(self, generation: int, filt: RunFilter, limit: int, after: tuple[str, int] | None) -> None:
        store = lab(self).store
        try:
            page = store.page(filt, limit, after)
            self.app.call_from_thread(self._arrived, generation, page, after is None)
            if after is None:  # counted after the first rows are shown, never before
                total = store.count(filt) if page.after is not None else len(page.rows)
                self.app.call_from_thread(self._counted, generation, total)
        except StoreError as e:
            self.app.call_from_thread(self.notify, safe.visible(e), title="results store", severity="error",
                                      timeout=15, markup=False)

    def _arrived(self, generation: int, page: Page, fresh: bool) -> None:
        if generation != self._generation:
            return
        start = 0 if fresh else len(self.rows)
        if fresh:
            self.table.clear()
            self.rows, self._cells = [], []
            self.total = None
        self.rows += page.rows
        self._cells += [listing.list_row(r) for r in page.rows]
        self._lay_out(start)
        self._after = page.after
        self._loading = False
        self._status()
        self._update_button()

    def _lay_out(self, start: int) -> None:
        """The rows from `start` on into the table, fitted to its width (one space between columns); when the
        fit changes (a wider cell arrived, the terminal was resized) every row is laid out again."""
        table = self.table
        width = table.scrollable_content_region.width or self.app.size.width
        fitted = fmt.fit([fmt.LIST_COLUMNS, *self._cells], width - len(MARK) - 2)
        shape = (fitted[0], [max(map(len, cells)) for cells in zip(*fitted)])
        if shape != self._shape:
            self._shape, start = shape, 0
            cursor, scroll = table.cursor_row, table.scroll_y
            table.clear(columns=True)
            table.add_column("", width=len(MARK) + 1)
            for name, w in zip(*shape):
                table.add_column(name, width=w + 1)

            def restore() -> None:  # the cursor and the scroll where they were
                table.move_cursor(row=cursor, animate=False, scroll=False)
                table.scroll_to(y=scroll, animate=False)

            self.call_after_refresh(restore)
        for run, cells in zip(self.rows[start:], fitted[1 + start:]):
            table.add_row(self._mark(run.id), *map(safe.text, cells), key=run.id)

    def _mark(self, run_id: str) -> str:
        return MARK if run_id in self.marked else ""

    def on_resize(self, event: events.Resize) -> None:
        # no rows are new: counted when it runs, since a page may arrive before then
        self.call_after_refresh(lambda: self._lay_out(len(self.rows)))

    def _counted(self, generation: int, total: int) -> None:
        if generation == self._generation:
            self.total = total
            self._status()

    def _status(self, problem: str | None = None) -> None:
        which = safe.markup(f" matching {self.filter.describe()}") if self.filter else ""
        counted = f"{len(self.rows):,} of {self.total:,}" if self.total is not None else f"{len(self.rows):,}"
        marked = f", [b]{len(self.marked)} marked[/b]" if self.marked else ""
        keys = ("space marks a run, m compares the marked (the first is the baseline), r draws the roofline, "
                "o shows the op table")
        key = f" | {listing.DISTURBED_KEY}" if any(r.disturbed for r in self.rows) else ""
        text = f"[red]{safe.markup(problem)}[/]" if problem else f"{counted} runs{which}{marked} | {keys}{key}"
        self.query_one("#results-help", Static).update(text)

    @on(DataTable.RowHighlighted, "#results-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.cursor_row >= len(self.rows) - AHEAD:
            self._more()

    def _scrolled(self, scroll_y: float) -> None:
        table = self.table
        if table.max_scroll_y - scroll_y < AHEAD:
            self._more()

    @on(Input.Changed, "#results-filter")
    def _filter_typed(self, event: Input.Changed) -> None:
        event.stop()
        if self._typing is not None:
            self._typing.stop()
        self._typing = self.set_timer(FILTER_PAUSE_S, lambda: self._apply_filter(event.value))

    def _apply_filter(self, text: str) -> None:
        try:
            filt = parse_filter(text)
        except FilterError as e:
            self._status(str(e))
            return
        if filt != self.filter:
            self.filter = filt
            self.reload()

    # --- marking and comparing -------------------------------------------------------------------
    def action_toggle_mark(self) -> None:
        table = self.table
        if not self.rows:
            return
        run_id = self.rows[table.cursor_row].id
        if run_id in self.marked:
            self.marked.remove(run_id)
        else:
            self.marked.append(run_id)
        table.update_cell(run_id, table.ordered_columns[0].key, self._mark(run_id))
        self._status()
        self._update_button()

    def action_roofline(self) -> None:
        """The measured ceilings of the highlighted run's device, its recent runs as points."""
        if self.rows:
            self._roofline(self.rows[self.table.cursor_row].id, self.size.width - 2)

    @work(thread=True, exclusive=True, exit_on_error=False, group="results-roofline")
    def _roofline(self, run_id: str, width: int) -> None:
        store = lab(self).store
        try:
            record = store.get(run_id, light=True)
            device = record.device
            if device is None:
                view: Any = f"run {record.short_id} has no device: nothing to draw"
            else:  # its rooflines (without their steps), and its newest runs as the index has them, whatever is kept
                rooflines = store.records(RunFilter(workload=WORKLOAD, device=device.kind), light=True)
                view = roofline_view([record, *rooflines], device, width, height=16,
                                     rows=store.on_roofline(device, ROOFLINE_POINTS))
        except StoreError as e:
            view = safe.text(e)
        self.app.call_from_thread(self._show_view, view)

    def action_ops(self) -> None:
        """The highlighted run's op table (a run profiled with --profile), or the line that says to profile it."""
        if self.rows:
            self._ops(self.rows[self.table.cursor_row].id)

    @work(thread=True, exclusive=True, exit_on_error=False, group="results-ops")
    def _ops(self, run_id: str) -> None:
        try:
            record = lab(self).store.get(run_id)
            view: Any = profile_view.ops_table(profile_view.profile_of(record), f"ops of {record.workload} run {record.short_id}")
        except (StoreError, UsageError) as e:
            view = safe.text(e)
        self.app.call_from_thread(self._show_view, view)

    def action_cards(self) -> None:
        self._cards()

    @work(thread=True, exclusive=True, exit_on_error=False, group="results-cards")
    def _cards(self) -> None:
        """The kept machine cards, and the newest set beside the 2018 article's machines (`tpulab cards compare
        this article`); with none kept yet, the article's cards themselves, and how to make one's own."""
        from rich.console import Group

        from tpulab.engine.article_cards import cards as article
        from tpulab.engine.card_compare import compare as compare_cards
        from tpulab.views import card as card_view

        try:
            kept = [c for c in lab(self).store.cards() if not c.published]
        except StoreError as e:
            self.app.call_from_thread(self._show_view, safe.text(e))
            return
        if not kept:
            said: Any = Group(safe.text(NO_CARD, "cyan"), *(card_view.terminal(c) for c in article()))
        else:
            said = Group(card_view.listing(kept), card_view.comparison_terminal(compare_cards([kept[0], *article()])))
        self.app.call_from_thread(self._show_view, said)

    def _show_view(self, view: Any) -> None:
        """A view of one run (its roofline, its op table) where a comparison shows, taking the keys, from its top
        (its headers), wherever the view before it was scrolled to."""
        self.query_one("#compare-chart").display = False
        box = self.query_one("#comparison-box")
        box.display = True
        self.query_one("#comparison", Static).update(view)
        self.call_after_refresh(self._cursor_in_view)
        box.scroll_home(animate=False, immediate=True)

    def _update_button(self) -> None:
        self.query_one("#compare-button", Button).disabled = len(self.marked) < 2

    @on(Button.Pressed, "#compare-button")
    def action_compare(self) -> None:
        self._open(list(self.marked))

    @work(thread=True, exit_on_error=False, group="results-compare")
    def _open(self, ids: list[str]) -> None:
        """The marked runs (a handful, by id), compared: read without their steps, whose times the store keeps apart."""
        store = lab(self).store
        try:
            records = [store.get(i, light=True) for i in ids]
            result = compare(records, floor=store.floor_for(records), timings=store.timed_repeats)
        except StoreError as e:
            self.app.call_from_thread(self.notify, safe.visible(e), severity="error", markup=False)
            return
        self.app.call_from_thread(self._show_comparison, result)

    def _show_comparison(self, result: Comparison) -> None:
        from tpulab.lab.widgets.charts import BarPlot

        chart = self.query_one("#compare-chart", BarPlot)
        chart.display = True
        # The table takes what the chart leaves; when that is too narrow it turns to runs as columns.
        self.query_one("#comparison", Static).update(comparison_table(result, max(40, self.size.width * 2 // 3 - 2)))
        box = self.query_one("#comparison-box")
        box.display = True
        box.focus()
        chart.show_bars(f"speedup vs the first run (x, by {result.by})",
                        [r.short_id for r in result.records], [x or 0 for x in result.speedups])
        self.call_after_refresh(self._cursor_in_view)

    def _cursor_in_view(self) -> None:
        """The table gave room to what opened below it: its cursor row is scrolled back into sight."""
        self.table.move_cursor(row=self.table.cursor_row, animate=False)
