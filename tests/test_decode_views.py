"""A decode run shown: the lab at 80x24 (its token charts, prefill and decode apart; its lines; its
summary), the headless lines every 16 tokens, a comparison's columns and the notebook's object. The real
app and recorder, a replayed worker's events."""

from __future__ import annotations

import pytest
from rich.console import Console
from textual.widgets import Static

from tpulab.base import fmt
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.engine.store import compare
from tpulab.lab.app import TpulabApp
from tpulab.lab.panes.run import RunLog, RunPane
from tpulab.notebook.results import RunResult
from tpulab.views.console import RunPrinter, comparison_table, summary_rows
from tpulab.views.html import run_series
from tpulab.workloads.decode import DECODE

from .helpers import Replay, chart, cpu_only, decode_events, text, wait_for

TOKENS = [0.004 + 0.0001 * i for i in range(1, 33)]  # tokens 1..32, each 0.1 ms slower
P = {**DECODE.preset("smoke"), "device": "cpu", "backend": "jax"}


def recorded(tmp_path, tokens: list[float] = TOKENS):
    rec = RunRecorder(RunSpec(DECODE, P, "jax", "asked for", "cpu"), cpu_only(tmp_path))
    for e in decode_events(0.05, tokens, copy_s=0.01):
        rec.feed(e)
    return rec.record()


def test_headless_a_line_for_the_prefill_then_one_every_16_tokens(tmp_path):
    console = Console(record=True, width=80)
    rec = RunRecorder(RunSpec(DECODE, P, "jax", "asked for", "cpu"), cpu_only(tmp_path))
    printer = RunPrinter(rec, console)
    for e in decode_events(0.05, TOKENS, copy_s=0.01):
        rec.feed(e)
        printer(e)
    lines = console.export_text().splitlines()
    tokens = [line for line in lines if line.startswith(("prefill", "token"))]
    assert tokens[0].startswith("prefill (token 0)  50.0 ms: time to first token")
    assert [line.split()[1] for line in tokens[1:]] == ["16", "32"]
    assert "ITL p50 4.9 ms (tokens 1-16)" in tokens[1]  # the median of 4.1 ... 5.6 ms
    assert "ITL p50 6.5 ms (tokens 17-32)" in tokens[2]


def test_the_notebook_object_has_the_figures_and_the_latencies(tmp_path):
    result = RunResult(recorded(tmp_path))
    assert result.figures["ttft_s"] == pytest.approx(0.05)
    assert result.timed.tolist() == pytest.approx(TOKENS)  # every token's latency, by token
    assert result.figures["itl_p50"] == pytest.approx(0.00565)  # tokens 16 and 17
    html = result._repr_html_()
    assert "time to first token" in html and "inter-token latency" in html and "MBU" in html
    drawn = run_series(result.record)  # the HTML page's charts: each token's ms, prefill and decode apart
    assert drawn["ms per token, by token (prefill: token 0): prefill"][:2] == ([0.0], [50.0])
    assert drawn["ms per token, by token (prefill: token 0): decode"][0] == [float(i) for i in range(1, 33)]
    assert "measured by this run" in repr(result)


def test_a_comparison_shows_each_runs_tokens_per_s_and_latencies(tmp_path):
    """One tokens/s (the throughput's row), the latencies and MBU; none of the FLOP rates, which say
    nothing of a step bound by memory (GFLOP/s 0.0, a share of the peak)."""
    fast, slow = recorded(tmp_path), recorded(tmp_path, [2 * t for t in TOKENS])
    rows = {line.split("│")[1].strip(): line for line in text(comparison_table(compare([slow, fast]), 80)).splitlines()
            if line.count("│") >= 3}
    assert "tokens/s" in rows["throughput"] and "TTFT" in rows and "ITL p50" in rows and "MBU" in rows
    assert sum("tokens/s" in name for name in rows) == 0  # the throughput's row is the one tokens/s
    assert not {"GFLOP/s", "peak", "ceiling", "MFU"} & set(rows)


def test_the_log_names_the_prefills_and_the_steps_compile_apart_and_the_summary_shows_both(tmp_path):
    """Two first calls, each named by its program; no estimate line until there is an estimate."""
    console = Console(record=True, width=100)
    rec = RunRecorder(RunSpec(DECODE, P, "jax", "asked for", "cpu"), cpu_only(tmp_path))
    printer = RunPrinter(rec, console)
    for e in decode_events(0.05, TOKENS, copy_s=0.01):
        rec.feed(e)
        printer(e)
    lines = console.export_text().splitlines()
    firsts = [line for line in lines if line.startswith("first")]
    assert [line.split(" (")[0] for line in firsts] == ["first prefill call", "first decode call"]
    assert "1.000 s" in firsts[0] and "500.0 ms" in firsts[1]
    assert not any("about -" in line for line in lines)
    estimate = next(i for i, line in enumerate(lines) if line.startswith("estimate: about"))
    assert estimate > next(i for i, line in enumerate(lines) if line.startswith("prefill (token 0)"))
    summary = {name: value for name, value, _ in summary_rows(rec.record())}
    assert summary["first call (trace+compile)"] == "1.500 s (prefill 1.000 s, decode 500.0 ms)"


def test_the_summary_names_one_throughput_and_says_what_each_other_rate_and_the_end_to_end_count(tmp_path):
    """Issue 64, item 6: the run's throughput once (the batch's tokens over the decode steps' time), no inference
    rows repeating the token's time and rate (a decode run has no inference phase apart), a sequence's rate and the
    prefill's each saying what they count, and the end to end saying what it is the time of."""
    summary = {name: value for name, value, _ in summary_rows(recorded(tmp_path))}
    assert not [name for name in summary if name.startswith("inference")]
    rated = {name: value for name, value in summary.items() if "tokens/s" in value and not name.startswith("flag")}
    assert set(rated) == {"throughput", "tokens/s per sequence", "time to first token"}
    tpot = sum(TOKENS) / len(TOKENS)
    assert rated["throughput"].startswith(f"{fmt.rate(2 / tpot, 'tokens/s')} over the batch: the tokens the decode "
                                          "steps made over their time (batch / TPOT")
    assert rated["tokens/s per sequence"] == (f"{fmt.rate(1 / tpot, 'tokens/s')}: what each sequence's reader sees "
                                              "(1 / TPOT)")
    assert rated["time to first token"].endswith("tokens/s of prompt)")
    assert summary["end to end"] == (f"{(0.05 + sum(TOKENS)) * 1e3:.1f} ms: one generation, the prefill and 32 token "
                                     "steps (TTFT + 32 x TPOT)")


async def test_the_lab_charts_each_token_prefill_and_decode_apart(db, cpu_machine):
    app = TpulabApp(probe=False, report=cpu_machine, db=db)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await wait_for(pilot, lambda: bool(app.query(RunPane)), 5)
        app.query_one(RunPane).start(Replay("decode", app.report, decode_events(0.05, TOKENS, copy_s=0.01)))
        await wait_for(pilot, lambda: len(app.records) == 1, 10)
        ms = chart(app, "ms per token, by token (prefill: token 0)")
        assert ms.points("prefill") == [(0, 50.0)]
        assert [x for x, _ in ms.points("decode")] == list(range(1, 33))
        assert [y for _, y in ms.points("decode")[:2]] == pytest.approx([4.1, 4.2])
        rate = chart(app, "tokens/s over the batch, by token")
        assert rate.points("decode")[0][1] == pytest.approx(2 / 0.0041)  # the batch's 2 tokens per step
        log = "\n".join(map(str, app.query_one(RunLog).written))
        assert "token 16" not in log  # the lab charts the tokens, it does not log them
        await wait_for(pilot, lambda: "time to first token" in text(app.query_one("#run-summary", Static)), 5)
        assert app.records[0].summary.figures["mbu"] is not None


def test_a_kept_decode_run_reads_back_its_figures_and_tokens(tmp_path, store):
    kept = recorded(tmp_path)
    store.save(kept)
    again = store.get(kept.id)
    assert again.summary.figures == kept.summary.figures  # every figure, the ITL percentiles too
    assert RunResult(again).timed.tolist() == pytest.approx(TOKENS)


def test_the_summary_says_what_mbu_divides_by_and_how_far_to_trust_it(tmp_path):
    """No ceiling kept: MBU is against this run's own copies, with their interval (or too few for one), not
    comparable across runs, and the command that keeps a ceiling; a comparison marks such an MBU. A kept ceiling:
    MBU against it, the copies its check."""
    from tpulab.base.events import Device, RunRecord, Step
    from tpulab.engine.ceilings import Ceilings, KeptCeiling, key
    from tpulab.workloads.shared.kernels import Kernel

    events = decode_events(0.05, TOKENS)
    copy = Kernel("copy", "float32", 64).to_json()
    copies = [Step(step=i, seconds=0.01 + 0.0002 * i, phase="bandwidth", kernel=copy) for i in range(6)]
    kept = Ceilings()
    kept.kept[key(Device(kind="cpu", name="test CPU"), "memory")] = KeptCeiling(13e9, "ab12cd34" * 4, "jax", 256, 256,
                                                                                copy=True)

    def rows(events, ceilings=None) -> tuple[RunRecord, dict[str, str]]:
        rec = RunRecorder(RunSpec(DECODE, P, "jax", "asked for", "cpu"), cpu_only(tmp_path), ceilings)
        for e in events:
            rec.feed(e)
        r = rec.record()
        return r, {name: " ".join(value.split()) for name, value, _ in summary_rows(r)}

    own, said = rows(events[:1] + copies + events[1:])
    assert said["MBU"].endswith("measured by this run's own copies (their best; no ceiling is kept): not comparable "
                                "across runs, whose copies meet other load")
    assert said["this run's copies"].startswith("6 of 64 MiB, ") and ", 95% interval " in said["this run's copies"]
    assert said["keep a ceiling"] == ("`tpulab --run roofline --copy-mib 64` on a quiet machine: then every run's MBU "
                                      "is against that one bandwidth")
    few = rows(decode_events(0.05, TOKENS, copy_s=0.01))[1]["this run's copies"]
    assert few.startswith("3 of 64 MiB, ") and few.endswith("; too few copies for an interval (5 at least)")
    checked, said = rows(events[:1] + copies + events[1:], kept)
    assert "this machine's kept bandwidth ceiling (roofline run ab12cd34" in said["MBU"]
    assert "keep a ceiling" not in said
    assert said["this run's copies"].endswith(": a check of the ceiling")
    table = text(comparison_table(compare([own, checked]), 80))
    mbu = next(line for line in table.splitlines() if line.count("│") >= 3 and line.split("│")[1].strip() == "MBU")
    assert mbu.count("own copies") == 1 and len(mbu) <= 80


def test_a_schema_4_records_nested_decode_part_reads_as_its_figures(tmp_path):
    """Schema 4 kept decode's figures nested under `summary.decode` (`itl.p50`, `copies.count`): such a record, kept
    or imported, reads as this version's flat figures and shows as they do; a non-finite one is refused by name."""
    import math

    from tpulab.base import fmt
    from tpulab.engine.store import imported, load_record

    new = recorded(tmp_path)
    old = new.to_json()
    f = old["summary"].pop("figures")
    old["schema"] = 4
    old["summary"]["decode"] = {"ttft_s": f["ttft_s"], "itl": {"p50": f["itl_p50"], "p90": f["itl_p90"], "p99": None},
                                "mbu": f["mbu"], "copies": {"count": 1, "median": 2e9}, "joules_per_token": None}
    assert imported(old).summary.figures["itl_p50"] == f["itl_p50"]
    r = load_record(old)
    assert r.summary.figures == {"ttft_s": f["ttft_s"], "itl_p50": f["itl_p50"], "itl_p90": f["itl_p90"],
                                 "itl_p99": None, "mbu": f["mbu"], "copies_count": 1, "copies_median": 2e9,
                                 "joules_per_token": None}
    said = dict((name, value) for name, value, _ in summary_rows(r))
    assert said["inter-token latency"].startswith(f"p50 {fmt.seconds(f['itl_p50'])}")
    old["summary"]["decode"]["itl"]["p50"] = math.nan
    with pytest.raises(ValueError, match="^summary.figures.itl_p50 should be a finite number, found nan$"):
        imported(old)
