"""Noise is not a finding, on the machine card: an entry's figures over its interleaved repeats, the drift of the
card's own ceilings, and a comparison from both cards' kept steps that ends in one word (or says it has no
interval). No run is made here: records are built by the recorder from known step times, and the bench's runs are
stood in for (the real tiny-suite bench in test_cards.py checks the same on real runs)."""

from __future__ import annotations

import io
import json
import random

import pytest
from rich.console import Console

from tpulab.base.errors import TpulabError
from tpulab.base.events import Compiled, Device, RunRecord, Started, Step, Summary, Telemetry
from tpulab.base.noise import NOISE, SAME, SLOWER
from tpulab.base.timing import Flag
from tpulab.engine import bench
from tpulab.engine.article_cards import cards as article
from tpulab.engine.bench_run import Bench, drifts, pooled
from tpulab.engine.card import KEPT, Card, CardCeiling, CardDrift, CardEntry, CardSuite, from_json, kept
from tpulab.engine.card_compare import PUBLISHED, compare
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.views import card as view
from tpulab.workloads import registry

from .helpers import fixed_machine

CONV = bench.Headline("conv", "gflops_per_s", "GFLOP/s")


def record(seconds: list[float], iterations: int = 10) -> RunRecord:
    """A conv run's record, made by the recorder from these step times (1 GFLOP a step)."""
    w = registry()["conv"]
    params = {**w.defaults(), "iterations": iterations, "device": "cpu", "backend": "tensorflow"}
    rec = RunRecorder(RunSpec(w, params, "tensorflow", "asked for", "cpu"), fixed_machine())
    for e in [Started(workload="conv", device=Device(kind="cpu", name="test CPU"), dtype="float32", flops_per_step=1e9,
                      steps_total=len(seconds), per_replica_batch=8, backend="tensorflow"), Compiled(seconds=1.0),
              *(Step(step=i, seconds=s) for i, s in enumerate(seconds, 1))]:
        rec.feed(e)
    rec.finish("finished")
    return rec.record()


def steps(seed: int, n: int = 30, scale: float = 1.0, levels: tuple[float, ...] = (1.0, 1.0),
          noise: float = 0.03) -> list[list[float]]:
    """Runs (one per level) of `n` step times of about 10 ms (x `scale`, x the run's level: a shared machine moves
    between runs), each with `noise` of spread."""
    rng = random.Random(seed)
    return [[0.01 * scale * level * rng.gauss(1, noise) for _ in range(n)] for level in levels]


def entry(name: str, samples: list[list[float]] | None, work: float = 1.0, **more: object) -> CardEntry:
    """An entry whose figure is `work` per its steps' median time (a rate, as every card figure is)."""
    flat = sorted(x for r in samples or [] for x in r)
    mid = flat[len(flat) // 2] if flat else 0.01
    kind = "memory" if name.startswith("decode") else "compute"
    return CardEntry(name=name, workload=name.split("-")[0], backend="jax", status="ok", unit="GFLOP/s",
                     median=work / mid, n=len(flat) or None, samples=samples or [], repeats=len(samples or []) or None,
                     ceiling_kind=kind, **more)  # type: ignore[arg-type]


def made(id: str, entries: list[CardEntry], drift: float | None = None, label: str = "AMD EPYC (2 threads)") -> Card:
    """A card of one machine (10 GB/s, 100 GFLOP/s); `drift`: its copy moved this much from its start to its end."""
    moved = [CardDrift(backend="jax", kind="memory", dtype="memory", unit="B/s", start=10e9, end=10e9 * (1 + drift))] \
        if drift is not None else []
    return Card(id=id * 32, created_at="2026-12-01T00:00:00+00:00", suite=CardSuite(name=bench.NAME,
                version=bench.VERSION, quick=True), machine={"label": label}, entries=entries, drift=moved,
                ceilings=[CardCeiling(device="cpu: A", kind="memory", dtype="memory", value=10e9, unit="B/s",
                                      source="x"),
                          CardCeiling(device="cpu: A", kind="compute", dtype="float32", value=100e9, unit="FLOP/s",
                                      source="x")])


def shown(renderable: object, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


# --- an entry over its repeats ----------------------------------------------------------------------------
def test_an_entrys_figures_are_taken_over_its_repeats_and_its_interval_holds_the_spread_between_them():
    a, b = record([0.010 * (1 + 0.01 * (i % 5)) for i in range(12)]), record([0.011 * (1 + 0.01 * (i % 5))
                                                                              for i in range(12)])
    one, two = pooled(CONV, [a], False), pooled(CONV, [a, b], False)
    assert one["median"] == pytest.approx(a.summary.gflops_per_s) and one["repeats"] == 1  # one run: its own figure
    assert one["high"] - one["low"] < 0.05 * one["median"]  # within one run: about 2%
    assert two["repeats"] == 2 and two["runs"] == [a.id, b.id] and two["n"] == 24 and len(two["samples"]) == 2
    assert b.summary.gflops_per_s < two["median"] < a.summary.gflops_per_s
    assert two["high"] - two["low"] > 0.08 * two["median"]  # the runs differ by 10%: so does the interval
    assert two["low"] <= two["median"] <= two["high"] and two["p10"] <= two["median"] <= two["p90"]


def test_a_disturbed_repeat_says_so_on_its_entry():
    a, b = record([0.01] * 12), record([0.01] * 12)
    b.summary.flags.append(Flag("disturbed", "the hypervisor took 30% of the CPU time for other machines (steal)"))
    assert pooled(CONV, [a], False)["disturbed"] is None
    assert pooled(CONV, [a, b], False)["disturbed"] == \
        "run 2 of 2: the hypervisor took 30% of the CPU time for other machines (steal)"
    b.summary.telemetry = Telemetry(cores=2, cpu_mean=90.0, process_mean=50.0)  # 1.3 cores besides its own 0.5
    assert pooled(CONV, [a, b], False)["disturbed"] == "run 2 of 2: other processes used 1.30 of 2 cores (65%)"


def test_the_kept_steps_are_thinned_evenly_to_a_bound_in_order():
    long = [[float(i) for i in range(1000)], [float(i) for i in range(500)]]
    thin = kept(long)
    assert sum(map(len, thin)) <= KEPT and len(thin[0]) == 2 * len(thin[1])
    assert thin[0] == sorted(thin[0]) and thin[0][0] == 0.0 and thin[0][-1] == 999.0  # first to last, in order
    assert kept([[0.0123456789, 1.0]]) == [[0.0123457, 1.0]]  # short repeats whole, in 6 digits


# --- the bench: repeats interleaved, the drift measured --------------------------------------------------------
def test_the_bench_interleaves_its_entries_repeats_and_measures_its_ceilings_at_its_start_and_end(tmp_path,
                                                                                                   monkeypatch):
    suite = bench.Suite("test", 1, ceilings=bench.Entry("roofline", {"preset": "smoke"}, {}, (), ()), entries=(
        bench.Entry("conv", {"iterations": 12}, {}, (CONV,), ("iterations",)),
        bench.Entry("conv", {"iterations": 13}, {}, (bench.Headline("conv-b", "gflops_per_s", "GFLOP/s"),),
                    ("iterations",))),
        drift=bench.Entry("roofline", {"min_size": 64, "max_size": 64}, {}, (), ()), repeats=2)
    made_runs: list[str] = []
    probes = iter([(100.0, 10.0), (95.0, 10.5)])  # GFLOP/s, GB/s at the start, then at the end

    def run(self: Bench, workload: str, values: dict, backend: str, ceilings: object, deadline: float) -> RunRecord:
        if workload == "roofline" and values.get("max_size") != 64:
            raise TpulabError("no roofline here")  # the ceilings: refused, and said why
        if workload == "roofline":
            flops, copy = next(probes)
            made_runs.append("drift")
            return RunRecord(id=f"{len(made_runs):032d}", workload="roofline", params=dict(values), status="finished",
                             started_at="2026-12-01T00:00:00", summary=Summary(gflops_per_s=flops, gbytes_per_s=copy))
        made_runs.append(f"conv {values['iterations']}")
        return record([0.01 * (1 + 0.01 * (i % 3)) for i in range(values["iterations"])], values["iterations"])

    monkeypatch.setattr(Bench, "_run", run)
    card = Bench(fixed_machine(), tmp_path / "r.db", "tensorflow", quick=True, suite=suite, budget_s=60).run()
    assert made_runs == ["drift", "conv 12", "conv 13", "conv 12", "conv 13", "drift"]  # A B, A B
    for e in card.entries:
        assert e.status == "ok" and e.repeats == 2 and len(e.samples) == 2 and len(e.runs) == 2
        assert e.low is not None and e.high is not None and e.low <= e.median <= e.high
        assert e.stopped.startswith("stable: ") and "2 alike runs, interleaved with the other entries" in e.stopped
    assert [(d.kind, d.change()) for d in card.drift] == [("compute", pytest.approx(-0.05)),
                                                          ("memory", pytest.approx(0.05))]
    assert card.drifted() == pytest.approx(1 / 0.95 - 1)  # a factor either way: 5% slower is 1.053x
    said = " ".join(shown(view.terminal(card)).split())
    assert "drift from start to end: float32 matmul -5.0%, copy +5.0%" in said
    assert " ±" in said  # each median with its interval


def test_a_drift_probe_keeps_what_it_timed_and_says_why_it_has_no_figure():
    start = RunRecord(id="a" * 32, workload="roofline", params={"dtypes": "float32"}, status="finished",
                      started_at="2026-12-01T00:00:00", summary=Summary(gflops_per_s=100.0, gbytes_per_s=10.0))
    compute, memory = drifts("jax", start, "the worker was killed by SIGKILL")
    assert compute.start == 100e9 and compute.end is None and compute.change() is None
    assert memory.words() == "copy not measured (at the end: the worker was killed by SIGKILL)"
    # a busy machine stops a roofline early: what it timed is the machine as it then was, and is kept
    busy = RunRecord(id="b" * 32, workload="roofline", params={"dtypes": "float32"}, status="cancelled",
                     started_at="2026-12-01T00:00:00", error="stopped early: other processes used 1.37 of 2 cores",
                     summary=Summary(gflops_per_s=50.0))
    compute, memory = drifts("jax", start, busy)
    assert compute.words() == "float32 matmul -50.0%" and compute.runs == ["a" * 32, "b" * 32]
    assert memory.words() == "copy not measured (at the end: stopped early: other processes used 1.37 of 2 cores)"


# --- comparing cards from their samples -----------------------------------------------------------------------
def test_two_cards_of_the_same_samples_compare_as_no_difference_detected_on_every_entry():
    a = made("a", [entry("conv", steps(1)), entry("decode-b1", steps(2))])
    b = made("b", [entry("conv", steps(3)), entry("decode-b1", steps(4))])
    result = compare([a, b])
    for row in result.rows:
        c = row.cells[1].change
        assert c is not None and c.word == SAME and c.low is not None and c.low < 1.05 and c.high > 1 / 1.05
        assert "explained by" not in row.cells[1].why and "slower" not in row.cells[1].why
        assert row.cells[1].why.startswith(f"{row.name}: ") and f"noise threshold ±{NOISE:.0%}" in row.cells[1].why


def test_steps_thirty_percent_longer_compare_as_slower_with_the_ratio_in_the_interval():
    a = made("a", [entry("conv", steps(1))])
    b = made("b", [entry("conv", steps(1, scale=1.3))])
    c = compare([a, b]).rows[0].cells[1].change
    assert c is not None and c.word == SLOWER and c.low < 1 / 1.3 < c.high and c.speedup == pytest.approx(1 / 1.3)


def test_the_issues_last_line_never_calls_noise_slower_nor_a_1x_bandwidth_an_explanation():
    """Two quick cards of one idle VM, decode-b1 20.2 against 17.9 tokens/s (0.89x) and bandwidth 1.0x: each run
    steady within 2%, the runs 12% apart (the VM's neighbours move over minutes), so the interval is wide."""
    a = made("a", [entry("decode-b1", steps(5, levels=(0.95, 1.07), noise=0.02), work=0.2)])
    b = made("b", [entry("decode-b1", steps(6, levels=(1.06, 1.18), noise=0.02), work=0.2)])
    cell = compare([a, b]).rows[0].cells[1]
    assert cell.speedup == pytest.approx(0.9, abs=0.03) and cell.change is not None and cell.change.word == SAME
    lines = " ".join(view.comparison_lines(compare([a, b])))
    assert "AMD EPYC (2 threads) [bbbbbbbb]: decode-b1: 0.91x [0.81x, 1.01x] no difference detected (noise " \
        "threshold ±10%" in lines
    assert "1.1x slower" not in lines and "explained by bandwidth" not in lines
    quiet = made("q", [entry("decode-b1", steps(6, scale=1.12, noise=0.01), work=0.2)])  # runs alike: a difference
    real = compare([made("p", [entry("decode-b1", steps(5, noise=0.01), work=0.2)]), quiet]).rows[0].cells[1]
    assert real.change is not None and real.change.word == SLOWER
    assert "memory bandwidth 1.0x" in real.why and "explained by" not in real.why  # 1.0x explains nothing


def test_a_difference_within_the_cards_own_drift_is_no_difference_and_says_so():
    a = made("a", [entry("conv", steps(1, noise=0.01))], drift=0.02)
    b = made("b", [entry("conv", steps(2, scale=1.14, noise=0.01))], drift=-0.06)
    cell = compare([a, b]).rows[0].cells[1]
    drift = 1 / 0.94 - 1  # the larger: 6% slower at the end is a factor 1.064
    assert cell.change is not None and cell.change.word == SAME
    assert cell.change.threshold == pytest.approx((1 + NOISE) * (1 + drift) - 1)
    assert "within the cards' drift (±6.4%)" in cell.why and "noise threshold ±17%" in cell.why
    steady = compare([made("a", a.entries), made("b", b.entries)]).rows[0].cells[1]  # no drift measured: slower
    assert steady.change is not None and steady.change.word == SLOWER
    lines = view.comparison_lines(compare([a, b]))
    assert "AMD EPYC (2 threads) [bbbbbbbb] drifted from its start to its end: copy -6.0%" in lines
    assert any("1 of them within the cards' drift" in line for line in lines)


def test_a_disturbed_side_says_so_beside_the_verdict():
    a = made("a", [entry("conv", steps(1))])
    b = made("b", [entry("conv", steps(2), disturbed="other processes used 1.00 of 2 cores (50%) while this ran")])
    cell = compare([a, b]).rows[0].cells[1]
    assert "no difference detected" in cell.why
    assert "; disturbed: AMD EPYC (2 threads) [bbbbbbbb]: other processes used 1.00 of 2 cores (50%)" in cell.why
    assert view.comparison_rows(compare([a, b]))[0][2].endswith(" disturbed")


def test_an_old_card_without_samples_still_imports_and_compares_with_no_interval():
    new = made("a", [entry("conv", steps(1))], drift=0.01)
    old = made("b", [entry("conv", steps(2))]).to_json()
    for e in old["entries"]:
        for key in ("low", "high", "repeats", "samples", "disturbed", "runs"):
            del e[key]
    del old["drift"]
    back = from_json(json.loads(json.dumps(old)))  # as a card written before these fields
    assert back.entries[0].samples == [] and back.drift == [] and back.drifted() is None
    cell = compare([new, back]).rows[0].cells[1]
    assert cell.change is None and cell.no_interval and cell.no_interval.startswith("no interval")
    assert "no interval" in cell.why and "no difference detected" not in cell.why
    assert view.comparison_rows(compare([new, back]))[0][2].endswith("x no interval")


def test_a_published_card_says_published_figure_no_interval():
    measured = made("a", [entry("conv", steps(1), work=1.0)])
    result = compare([measured, *article()])
    k80 = result.rows[0].cells[2]
    assert k80.no_interval == PUBLISHED and f"({PUBLISHED})" in k80.why and k80.change is None
    assert "published figure, no interval" in " ".join(view.comparison_lines(result))


@pytest.mark.parametrize("width", [80, 60])
def test_the_comparison_shows_each_verdict_word_and_interval_whole_at_a_narrow_terminal(width):
    a = made("a", [entry("conv", steps(1)), entry("decode-b1", steps(2))])
    b = made("b", [entry("conv", steps(3, scale=1.3)), entry("decode-b1", steps(4))], label="B")
    result = compare([a, b])
    text = shown(view.comparison_terminal(result), width)
    assert max(len(line) for line in text.splitlines()) <= width
    words = text.split()
    for row in view.comparison_rows(result):
        assert all(word in words for cell in row[1:] for word in cell.split()), row
    flat = " ".join(words)
    assert "slower" in flat and "no difference detected" in flat and "[0." in flat
    assert "B [bbbbbbbb] against AMD EPYC (2 threads) [aaaaaaaa]: 0 faster, 1 slower, 1 no difference detected " \
           "(noise threshold ±10%)" in flat
