"""Text from outside is text: a shared results file whose every field is hostile prints literally, on the
real command line under a pseudo-terminal, in the lab, in the notebook's HTML and in the report; no
escape sequence, bell or C1 control from the record reaches the output."""

from __future__ import annotations

import io
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import Static

from tpulab.base import safe
from tpulab.base.events import Flag, OpRow, Profile, RunRecord, SweepPoint, SweepRecord
from tpulab.engine.store import Store, compare, export_json
from tpulab.lab.app import TpulabApp
from tpulab.notebook.results import ComparisonResult, RunList, RunResult
from tpulab.views import profile as profile_view
from tpulab.views.console import summary_table

from .helpers import in_a_terminal, make_record, results_tab, text, type_into, wait_for

MARKUP = "[bold red]X[/bold red]"
OSC = "\x1b]0;pwned\x07"  # retitles the terminal
CSI = "\x1b[31m"  # recolours it
C1 = "\x9b31m"  # the same in one byte
HOSTILE = f"{MARKUP} OSC{OSC} CSI{CSI}red C1{C1} BEL\x07 DEL\x7f NUL\x00 <script>alert(1)</script> $\\oops$"
SHOWN = (MARKUP, "OSC\\x1b]0;pwned\\x07", "CSI\\x1b[31mred", "C1\\x9b31m", "BEL\\x07", "DEL\\x7f", "NUL\\x00")
LONG = "op" + "x" * 9_950 + HOSTILE  # a 10,000-character op name
RICH_SGR = re.compile(r"\x1b\[[0-9;]*m")  # Rich's own colours: the only escape sequences allowed out
WIDE = (300, 60)


def hostile_profile(other_name: str) -> Profile:
    return Profile(steps=3, step_seconds=0.01, host_gap=0.001, host_gap_share=0.1, profiler=HOSTILE, where=HOSTILE,
                   trace_path=HOSTILE, no_flops=HOSTILE, against=HOSTILE,
                   ops=[OpRow(name=HOSTILE, type=HOSTILE, category=HOSTILE, calls=1, seconds=0.006, share=0.6,
                              bound=HOSTILE),
                        OpRow(name=other_name, type="dot", category="matmul/conv", calls=1, seconds=0.003, share=0.3)],
                   verdicts=[Flag(HOSTILE, HOSTILE)])


def hostile_record(other_name: str) -> RunRecord:
    """A run as an export from elsewhere may hold it: every field a person reads is hostile."""
    r = make_record(median=0.012, backend="jax", profile=hostile_profile(other_name))
    assert r.device is not None
    r.device = replace(r.device, name=HOSTILE)
    r.workload, r.dataset, r.note, r.backend_reason, r.error = HOSTILE, HOSTILE, HOSTILE, HOSTILE, HOSTILE
    r.params = {**r.params, "data": HOSTILE}
    r.versions = {"jax": HOSTILE}
    r.model = {"name": HOSTILE, "path": HOSTILE, "sha256": HOSTILE}
    r.summary.flags = [Flag("beats-peak", HOSTILE), Flag(HOSTILE, HOSTILE)]
    r.summary.peak_source = HOSTILE
    r.summary.figures = {HOSTILE: HOSTILE, f"n{HOSTILE}": 1.5}  # a workload's own, not installed here: by name
    return r


def hostile_sweep(records: list[RunRecord]) -> SweepRecord:
    """A sweep over a hostile parameter, its values hostile, its runs `records`."""
    axis = f"axis_{HOSTILE}"
    return SweepRecord(id="5ee" + "0" * 29, workload=HOSTILE, started_at=records[0].started_at, status="finished",
                       axes={axis: [HOSTILE, "b"]}, base={}, steps=4, stopped=HOSTILE,
                       points=[SweepPoint(values={axis: v}, runs=[r.id]) for v, r in zip((HOSTILE, "b"), records)])


@pytest.fixture
def imported(tmp_path) -> tuple[Path, list[str]]:
    """Two hostile runs and a sweep of them, written in tpulab's export format and imported by the real
    command into this test's home; the runs' ids."""
    records = [hostile_record("dot.1"), hostile_record(LONG)]
    path = tmp_path / "shared.json"
    export_json(records, path, [hostile_sweep(records)])
    out = terminal("results", "import", str(path))
    assert "2 run(s)" in out, out
    return path, [r.id[:8] for r in records]


def terminal(*args: str, size: tuple[int, int] = WIDE) -> str:
    """What the real command writes to a pseudo-terminal `size` wide and high (a user's xterm), as text."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM")}
    code, out = in_a_terminal(*args, env={**env, "TERM": "xterm-256color"}, size=size)
    assert code == 0, out
    return out


def no_control_from_the_record(out: str) -> None:
    """Nothing in `out` a terminal would obey but Rich's own colours; the record's controls shown visibly."""
    assert "\x1b]" not in out and "\x07" not in out and "\x00" not in out and "\x7f" not in out
    assert not re.search("[\x80-\x9f]", out), "a C1 control reached the terminal"
    assert "\x1b" not in RICH_SGR.sub("", out), "an escape sequence that is not a Rich colour reached the terminal"
    plain = RICH_SGR.sub("", out)
    for literal in SHOWN:
        assert literal in plain, literal
    assert "<script>alert(1)</script>" in plain


# --- the one helper ------------------------------------------------------------------------------
@pytest.mark.parametrize("char, shown", [("\x1b", "\\x1b"), ("\x07", "\\x07"), ("\x00", "\\x00"), ("\x08", "\\x08"),
                                         ("\r", "\\x0d"), ("\x0b", "\\x0b"), ("\x1f", "\\x1f"), ("\x7f", "\\x7f"),
                                         ("\x80", "\\x80"), ("\x9b", "\\x9b"), ("\x9f", "\\x9f"),
                                         ("\u202e", "\\u202e"), ("\u2066", "\\u2066")])
def test_every_control_character_is_shown_not_obeyed(char, shown):
    assert safe.visible(f"a{char}b") == f"a{shown}b"
    assert safe.text(f"a{char}b").plain == f"a{shown}b"
    assert safe.html(f"a{char}b") == f"a{shown}b"


def test_newline_tab_and_printable_text_are_kept_as_they_are():
    kept = "line one\n\tline two: ünïcode, 中文, emoji 🙂, a non-breaking\u00a0space"
    assert safe.visible(kept) == kept
    assert safe.visible(42) == "42"


def test_markup_is_printed_as_written_on_a_terminal():
    out = Console(file=io.StringIO(), width=200, record=True, force_terminal=True)
    out.print(f"[green]{safe.markup(MARKUP)}[/]", safe.text(MARKUP))
    shown = out.export_text()
    assert shown.count(MARKUP) == 2
    assert safe.markup("\\") == "\\\\"  # a trailing backslash does not escape the closing tag around it


def test_html_is_escaped_with_quotes():
    assert safe.html('<script>alert("1")</script>&\x1b') == "&lt;script&gt;alert(&quot;1&quot;)&lt;/script&gt;&amp;\\x1b"


# --- the command line under a pseudo-terminal ----------------------------------------------------
def test_results_show_prints_every_field_literally(imported):
    _, (a, _) = imported
    out = terminal("results", "show", a)
    no_control_from_the_record(out)


def test_results_show_ops_prints_the_op_table_literally(imported):
    _, (a, b) = imported
    no_control_from_the_record(terminal("results", "show", a, "--profile"))
    long_one = terminal("results", "show", b, "--profile")
    no_control_from_the_record(long_one)
    assert "opxxxxxxxx" in long_one  # the 10,000-character name, shortened to the width


def test_results_compare_ops_and_the_listing_print_literally(imported):
    _, (a, b) = imported
    no_control_from_the_record(terminal("results", "compare", a, b, "--profile"))
    no_control_from_the_record(terminal("results", "compare", a, b))
    listing = terminal("results", "list")
    plain = RICH_SGR.sub("", listing)
    assert "\x1b" not in plain and "\x07" not in listing and not re.search("[\x80-\x9f]", listing)
    assert all(i in plain for i in (a, b)) and "[bold red]X" in plain


def test_a_kept_sweep_prints_literally(imported):
    no_control_from_the_record(terminal("results", "sweep", "5ee00000"))
    listed = RICH_SGR.sub("", terminal("results", "sweep"))
    assert "\x1b" not in listed and MARKUP in listed


# --- the notebook and the report -----------------------------------------------------------------
def html_is_inert(page: str) -> None:
    assert "<script>" not in page and "\x1b" not in page and "\x07" not in page
    assert not re.search("[\x80-\x9f]", page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    for literal in SHOWN:
        assert literal in page, literal


def test_the_notebook_html_and_the_report_hold_escaped_text(imported, tmp_path):
    _, (a, b) = imported
    store = Store(Path(os.environ["TPULAB_HOME"]) / "results.db")
    runs = [store.get(a), store.get(b)]
    html_is_inert(RunResult(runs[0])._repr_html_())
    html_is_inert(RunResult(runs[1])._repr_html_())
    html_is_inert(ComparisonResult(compare(runs, across_workloads=True))._repr_html_())
    html_is_inert(RunList([RunResult(r) for r in runs], "runs")._repr_html_())
    page = tmp_path / "report.html"
    terminal("results", "report", a, b, "5ee00000", "-o", str(page))
    html_is_inert(page.read_text(encoding="utf-8"))


def test_a_repl_repr_holds_no_control(imported):
    _, (a, _) = imported
    store = Store(Path(os.environ["TPULAB_HOME"]) / "results.db")
    shown = repr(RunResult(store.get(a)))
    assert "\x1b" not in shown and MARKUP in shown


# --- the lab ---------------------------------------------------------------------------------------
async def test_the_lab_lists_the_record_and_shows_its_ops_literally(imported, cpu_machine):
    _, (a, b) = imported
    app = TpulabApp(probe=False, db=Path(os.environ["TPULAB_HOME"]) / "results.db", report=cpu_machine)
    async with app.run_test(size=(240, 50)) as pilot:
        table = await results_tab(pilot, 2)
        rows = [table.render_line(1 + i).text for i in range(2)]
        for row in rows:
            assert "[bold red]X[/bold red]" in row and "\x1b" not in row, row
        table.move_cursor(row=[r.id[:8] for r in app.query_one("ResultsPane").rows].index(a))
        await pilot.press("o")
        shown = app.query_one("#comparison")
        await wait_for(pilot, lambda: "ops of" in text(shown, 240), 10)
        op_pane = text(shown, 240)
        assert "\x1b" not in op_pane and "\x07" not in op_pane and not re.search("[\x80-\x9f]", op_pane)
        for literal in SHOWN:
            assert literal in op_pane, literal


async def test_a_field_that_quotes_what_was_typed_shows_it_literally(db, cpu_machine):
    """The form's error quotes the value: `[/]` typed in a field once ended the lab (a markup error)."""
    app = TpulabApp(probe=False, db=db, report=cpu_machine)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        await type_into(pilot, app, "batch_size", "[/]")
        error = app.query_one("#error-batch_size", Static)
        await wait_for(pilot, lambda: bool(error.display), 5)
        assert "(got '[/]')" in text(error)
        await pilot.press("ctrl+r")  # the notice that says what to fix quotes it too
        await pilot.pause()
        assert app.is_running


def test_the_views_hold_no_control_at_80_columns():
    """The terminal's tables of such a record, rendered as a terminal would, at the narrowest width."""
    record = hostile_record(LONG)
    out = Console(width=80, record=True, force_terminal=True, color_system="256", file=io.StringIO())
    out.print(summary_table(record), profile_view.ops_table(profile_view.profile_of(record), "ops"),
              profile_view.moves_table(record, hostile_record("dot.1")))
    written = out.export_text(styles=True)
    assert "\x1b" not in RICH_SGR.sub("", written) and "\x07" not in written
