"""The reference line: the card runs llama.cpp beside the framework on the entries that declare its formats, judges
it by the bandwidth the card measured, shows "framework X, llama.cpp Y (f32), Z (q4_0); limit W", compares it across
cards, and says what it would add where the bindings are missing."""

from __future__ import annotations

import io
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from rich.console import Console

from tpulab.engine import bench
from tpulab.engine.bench_run import Bench
from tpulab.engine.card import CardEntry
from tpulab.engine.card_compare import compare
from tpulab.engine.store import Store
from tpulab.machine.detect import RuntimeReport, detect, probe_packages
from tpulab.views import card as view

from .helpers import cpu_only, kept_roofline, run_cli

FORMATS = (bench.Variant("f32", {"weight_format": "f32"}), bench.Variant("q4_0", {"weight_format": "q4_0"}))
DECODE = bench.Suite("test", 1, ceilings=bench.Entry("roofline", {"preset": "smoke"}, {}, (), ()), repeats=1, entries=(
    bench.Entry("decode", {"preset": "smoke", "gen_len": 12, "context": 64}, {},
                (bench.Headline("decode-b2", **bench.TOKENS),), ("gen_len",), reference=FORMATS),))


def here(root: Path, **packages: str | None) -> RuntimeReport:
    """A machine with no accelerator and this host's packages (those given, as given: None is not installed)."""
    return cpu_only(root, packages={**probe_packages(), **packages})


def said(renderable: object) -> str:
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(renderable)
    return " ".join(console.export_text().split())


@pytest.mark.slow
def test_the_card_runs_llamacpp_beside_the_framework_at_each_format_against_the_machines_bandwidth(tmp_path):
    """The torch entry's roofline is one kept on this CPU (20 GB/s, reused as --quick does): llama.cpp's lines are
    judged by it too (an engine has no roofline), and q4_0's token reads about a quarter of f32's weight bytes."""
    db = tmp_path / "r.db"
    store = Store(db)
    store.save(kept_roofline("torch", version("torch"), sys.version.split()[0], cpu=detect().cpu.model))
    made = Bench(here(tmp_path / "m"), db, "torch", suite=DECODE,
                 budget_s=40, reuse_ceilings=True).run()
    assert made.references == {} and made.backends == ["torch"]
    framework, *lines = made.entries
    assert (framework.name, framework.backend, framework.reference) == ("decode-b2", "torch", None)
    assert [(e.name, e.backend, e.reference, e.variant, e.status) for e in lines] == [
        ("decode-b2 llama.cpp f32", "llamacpp", "decode-b2", "f32", "ok"),
        ("decode-b2 llama.cpp q4_0", "llamacpp", "decode-b2", "q4_0", "ok")]
    records = {e.variant: store.get(e.run_id) for e in lines if e.run_id}
    for e in [framework, *lines]:  # MBU against the one bandwidth this machine was measured at
        record = store.get(e.run_id) if e.run_id else None
        assert record is not None and record.summary.figure("figures.bandwidth") == 20e9
        assert e.ceiling_fraction == pytest.approx(record.summary.figure("figures.mbu"), rel=1e-6)
    f32, q4 = (records[v].summary.figure("figures.weight_bytes_per_token_step") for v in ("f32", "q4_0"))
    assert q4 < f32 / 3 and records["q4_0"].params["weight_format"] == "q4_0"
    shown = said(view.terminal(made))  # each figure with its interval, of its own limit (q4_0's: its own bytes)
    assert "decode-b2 tokens/s, each of its limit at this bandwidth for its own weight bytes: torch " in shown
    for e in [framework, *lines]:
        assert e.median and e.ceiling_fraction
        assert f"{view.median_ci(e)} of {view.figure(e.median / e.ceiling_fraction)}" in shown
    assert "against torch" in shown


def test_without_the_bindings_the_card_says_what_the_line_would_add_and_how_to_install_it(tmp_path):
    made = Bench(here(tmp_path / "m", xllamacpp=None), tmp_path / "r.db", "torch", suite=DECODE)
    assert made.references == []
    why = made.card.references["llamacpp"]
    assert why.startswith("llama.cpp is not installed: its line would add the tokens/s people get from llama.cpp")
    assert "(f32, q4_0)" in why and "pip install 'tpulab[llamacpp]'" in why
    assert " ".join(why.split()) in said(view.terminal(made.card)) and why in view.markdown(made.card)


def test_backend_all_runs_every_framework_and_the_engine_as_reference_lines_only(tmp_path):
    made = Bench(here(tmp_path / "m"), tmp_path / "r.db", "all", suite=DECODE)
    assert "llamacpp" not in made.backends and made.references == ["llamacpp"]
    none = bench.Suite("test", 1, ceilings=DECODE.ceilings, entries=(bench.Entry("conv", {}, {}, (), ()),))
    assert Bench(here(tmp_path / "m"), tmp_path / "r.db", "torch", suite=none).references == []


def beside(tf: float, q4: float, q4_spread: float, disturbed: str | None) -> list[CardEntry]:
    """TensorFlow's decode-b8 at 90% of its own limit, and llama.cpp's q4_0 line: its token reads about a seventh of
    float32's weight bytes, so its own limit is seven times TensorFlow's; its steps `q4_spread` apart."""
    def steps(rate: float, spread: float) -> list[list[float]]:
        return [[1 / rate * (1 + spread * ((7 * i + k) % 11 / 10 - 0.5)) for i in range(20)] for k in range(2)]

    return [CardEntry(name="decode-b8", workload="decode", backend="tensorflow", status="ok", unit="tokens/s",
                      median=tf, low=tf * 0.98, high=tf * 1.02, n=40, ceiling_kind="memory", ceiling_fraction=0.9,
                      samples=steps(tf, 0.04), disturbed=disturbed),
            CardEntry(name="decode-b8 llama.cpp q4_0", workload="decode", backend="llamacpp", status="ok",
                      unit="tokens/s", median=q4, low=q4 * 0.33, high=q4 * 1.67, n=40, ceiling_kind="memory",
                      ceiling_fraction=q4 / (7 * tf / 0.9), reference="decode-b8", variant="q4_0",
                      samples=steps(q4, q4_spread))]


def test_each_reference_line_has_its_own_limit_and_interval_and_a_disturbed_side_compares_nothing(tmp_path):
    """Issue 64 (7): 'limit at this bandwidth 87.3' stood beside llama.cpp q4_0 at 89.3 tokens/s, the framework's float32
    weights at the whole ceiling; and the line's figures, without their intervals, beside a disturbed run read as
    'llama.cpp is 7x slower'. Each figure now has its interval and its own limit, and a disturbed side no verdict."""
    from tpulab.engine.card import Card, CardSuite

    def card(entries: list[CardEntry]) -> Card:
        return Card(id="a" * 32, created_at="2026-12-01T00:00:00+00:00", machine={"label": "A"}, entries=entries,
                    suite=CardSuite(name=bench.NAME, version=bench.VERSION, quick=True))

    tf, q4 = beside(620.0, 89.3, 1.2, "other processes used 1.00 of 2 cores (50%) while it ran")
    Store(tmp_path / "r.db").save_card(card([tf, q4]))
    done = run_cli("cards", "--db", str(tmp_path / "r.db"), "show", "aaaa", env={"COLUMNS": "80"})
    assert done.returncode == 0 and max(len(line) for line in done.stdout.splitlines()) <= 80, done.stderr
    shown = " ".join(done.stdout.split())
    assert "decode-b8 tokens/s, each of its limit at this bandwidth for its own weight bytes: tensorflow 620.0 " \
        "±2.0% of 688.9; llama.cpp q4_0 89.3 ±67% of 4,822; against tensorflow: not compared (disturbed)" in shown
    assert f"{620 / 89.3:.2f}x" not in shown and "slower" not in shown and "faster" not in shown

    tf.disturbed = None  # quiet: a verdict with its interval and the threshold it used
    shown = said(view.terminal(card([tf, q4])))
    assert "against tensorflow (noise threshold ±10%): q4_0 0.14x [" in shown and "] slower" in shown

    tf, q4 = beside(80.0, 89.3, 0.04, None)  # a line past its own limit says how it can be
    q4.ceiling_fraction = 1.05
    shown = said(view.terminal(card([tf, q4])))
    assert "q4_0 89.3 ±67% of 85.0 (over it)" in shown
    assert "q4_0 over its limit: the weights partly stayed in a cache, or the ceiling was measured low" in shown
    assert "q4_0 1.12x [1.11x, 1.13x] faster" in shown


def lines_of(decode: float, q4: float) -> list[CardEntry]:
    steps = [[1 / decode * (1 + 0.01 * (i % 5)) for i in range(20)]] * 2
    return [CardEntry(name=f"decode-b1 llama.cpp {v}", workload="decode", backend="llamacpp", status="ok",
                      unit="tokens/s", median=x, n=40, ceiling_kind="memory", reference="decode-b1", variant=v,
                      samples=[[s * decode / x for s in r] for r in steps]) for v, x in (("f32", decode), ("q4_0", q4))]


def test_cards_compare_the_reference_lines_across_machines_and_name_a_card_without_them():
    from tpulab.engine.card import Card, CardSuite

    def card(id: str, label: str, entries: list[CardEntry], references: dict[str, str] | None = None) -> Card:
        return Card(id=id * 32, created_at="2026-12-01T00:00:00+00:00", suite=CardSuite(name=bench.NAME,
                    version=bench.VERSION, quick=True), machine={"label": label}, entries=entries,
                    references=references or {})

    a, b = card("a", "machine A", lines_of(30.0, 60.0)), card("b", "machine B", lines_of(30.0, 120.0))
    rows = {r.name: r for r in compare([a, b]).rows}
    assert rows["decode-b1 llama.cpp f32"].cells[1].change.word == "no difference detected"
    q4 = rows["decode-b1 llama.cpp q4_0"].cells[1]
    assert q4.speedup == pytest.approx(2.0) and q4.change.word == "faster"
    c = card("c", "machine C", [], {"llamacpp": "llama.cpp is not installed: ..."})
    assert "machine C: no reference line: llama.cpp is not installed: ..." in compare([a, c]).differs
